"""`adgrad export`: a compiled kernel as a native shared library and a C header, with no Python,
numba or libpython at run time (docs/native.md is the contract of its C ABI).

    layout.py   the kernel's arrays as C sees them (pure Python)
    objcode.py  the kernel module's point function and drivers -> cfuncs -> LLVM IR -> object code
    cwrap.py    the header and the C wrapper (checks, params, threads, metadata)
    build.py    the system C compiler and linker, and the all-or-nothing install of the directory

Importing this package loads neither numba nor numpy (the CLI reads CPUS for its --help)."""

# --cpu: any x86-64 (the default: code for a baseline x86-64, for x86-64-v3 (AVX2 and FMA, which most
# CPUs since 2013 have) and for x86-64-v4 (AVX-512), the best the CPU has chosen when the library is
# loaded), one microarchitecture level, or this machine's CPU
CPUS = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "host")


def variants(cpu):
    """[(variant tag, LLVM CPU)] the library of --cpu `cpu` holds code for; the first runs anywhere
    the library does, a later one where the CPU has its features (cwrap.py's dispatch)."""
    return [("", "x86-64"), ("v3_", "x86-64-v3"), ("v4_", "x86-64-v4")] if cpu == "x86-64" else [("", cpu)]


def export(*args, **kwargs):
    """engine/export/build.py export (imported on first use)."""
    from .build import export as run
    return run(*args, **kwargs)
