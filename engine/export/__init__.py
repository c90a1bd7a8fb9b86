"""`adgrad export`: a compiled kernel as a native shared library and a C header, with no Python,
numba or libpython at run time (docs/native.md is the contract of its C ABI).

    layout.py   the kernel's arrays as C sees them (pure Python)
    objcode.py  the kernel module's point function and drivers -> cfuncs -> LLVM IR -> object code
    cwrap.py    the header and the C wrapper (checks, params, threads, metadata)
    build.py    the system C compiler and linker, and the all-or-nothing install of the directory

Importing this package loads neither numba nor numpy (the CLI reads CPUS for its --help)."""

# --cpu: a baseline x86-64 (the default: runs on any x86-64), the x86-64 microarchitecture levels
# (v3: AVX2 and FMA, most CPUs since 2013), or this machine's CPU
CPUS = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "host")


def export(*args, **kwargs):
    """engine/export/build.py export (imported on first use)."""
    from .build import export as run
    return run(*args, **kwargs)
