"""Object code + C wrapper -> lib<name>.so with the system C compiler, installed all or nothing.

The export is a directory: lib<name>.so, <name>.h and adgrad-export.json (what was exported, and the
mark that lets --overwrite replace the directory, and nothing that is not an export). It is built in
a temporary directory beside it and renamed into place (exchanged with the old one, which is then
removed), under the output lock (engine/store/lock.py), so a reader sees the old export or the new
one, never a mix, and a failed export leaves the old one as it was."""
from __future__ import annotations

import ctypes
import errno
import json
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass

from ..errors import DataError, JobError, os_reason
from ..store.lock import output_lock
from . import CPUS, variants
from .cwrap import header, source
from .layout import layout
from .objcode import kernel_ir, object_code
from . import kim as kims
from . import umat as umats

MANIFEST = "adgrad-export.json"
# -z defs: a symbol left undefined (anything from Python or numba) fails the link instead of the load
FLAGS = ["-O2", "-fPIC", "-fvisibility=hidden", "-shared", "-pthread", "-Wl,-z,defs"]


@dataclass(frozen=True)
class Exported:
    directory: str
    library: str
    header: str
    name: str
    cpu: str
    seconds: float
    umat: dict | None = None    # the manifest's umat entry (engine/export/umat.py manifest)
    kim: dict | None = None     # the manifest's kim entry (engine/export/kim.py manifest)


def compiler():
    """The C compiler's argv: $CC (split as a shell would), else cc. Missing: bad input (exit 2)."""
    argv = shlex.split(os.environ.get("CC") or "cc")
    found = shutil.which(argv[0]) if argv else None
    if not found:
        what = f"CC={os.environ['CC']!r} is not a program on PATH" if os.environ.get("CC") else "no `cc` on PATH"
        raise DataError(f"adgrad export needs a C compiler and linker: {what}; install one (e.g. apt-get install "
                        f"gcc) or set CC")
    return [found, *argv[1:]]


def _probe(cc, tmp):
    """Compile and link an empty shared library: a compiler without a linker (or without libc's
    development files) is bad input, named with its own message, not a failed export."""
    src, lib = os.path.join(tmp, "probe.c"), os.path.join(tmp, "libprobe.so")
    with open(src, "w") as f:
        f.write("#include <math.h>\n#include <pthread.h>\nint adgrad_probe(void) { return 0; }\n")
    done = subprocess.run([*cc, *FLAGS, "-o", lib, src, "-lm"], capture_output=True, text=True)
    os.remove(src)
    if done.returncode != 0:
        raise DataError(f"adgrad export needs a C compiler and linker: `{shlex.join(cc)}` cannot build a shared "
                        f"library here:\n{_tail(done.stderr)}")
    os.remove(lib)


def _tail(text, lines=12):
    return "\n".join(text.strip().splitlines()[-lines:])


def export(kernel, directory, name=None, cpu="x86-64", overwrite=False, umat=None, kim=None) -> Exported:
    """Write `kernel` (a CompiledKernel) as lib<name>.so, <name>.h and adgrad-export.json into the
    directory `directory` (made, with its parents). An existing export is replaced only with
    `overwrite`; anything else there is never touched. name: the C prefix of every symbol (default:
    the model's name); cpu: engine/export CPUS; umat: an engine/export/umat.py Plan over this
    kernel, to add the Abaqus UMAT (the name then follows CalculiX's rules); kim: (engine/export/kim.py
    Plan, [compiled kernel per slot count after the first]), to add the KIM portable model <NAME>/ (whose
    first kernel is `kernel`)."""
    t0 = time.perf_counter()
    if cpu not in CPUS:
        raise DataError(f"--cpu {cpu!r}: choose one of {', '.join(CPUS)}")
    if umat is not None:
        umats.check(umat.decl, kernel)
        name = umats.library_name(name, kernel.model.name)
    lay = layout(kernel, name)
    if umat is not None and len(umats.material(lay, umat.decl)) > umats.MATERIAL_LENGTH:
        raise DataError(f"the material name {umats.material(lay, umat.decl)} is longer than CalculiX's "
                        f"{umats.MATERIAL_LENGTH} characters; give a shorter --name")
    cc = compiler()
    directory = os.path.abspath(os.fspath(directory))
    try:
        os.makedirs(os.path.dirname(directory), exist_ok=True)
    except OSError as exc:
        raise DataError(f"{directory}: cannot make its parent directory ({os_reason(exc)})") from None
    with output_lock(directory):
        _check_destination(directory, overwrite)
        # beside it (one file system: the rename), with the umask's mode (mkdtemp's is 0700)
        tmp = os.path.join(os.path.dirname(directory),
                           f".{os.path.basename(directory)}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        os.mkdir(tmp)
        try:
            _probe(cc, tmp)
            _build(kernel, lay, cc, cpu, tmp, umat, kim)
            _install(tmp, directory)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return Exported(directory, os.path.join(directory, f"lib{lay.name}.so"), os.path.join(directory, f"{lay.name}.h"),
                    lay.name, cpu, time.perf_counter() - t0, umats.manifest(lay, umat.decl) if umat else None,
                    kims.manifest(kim[0]) if kim else None)


def is_export(directory):
    return os.path.isfile(os.path.join(directory, MANIFEST))


def _check_destination(directory, overwrite):
    if not os.path.lexists(directory):
        return
    if not os.path.isdir(directory) or os.path.islink(directory):
        raise DataError(f"{directory}: exists and is not a directory; adgrad export writes a directory")
    if is_export(directory):
        if not overwrite:
            raise DataError(f"{directory}: holds an adgrad export already; pass --overwrite to replace it")
    elif os.listdir(directory):
        raise DataError(f"{directory}: is a directory that adgrad export did not write (no {MANIFEST}); choose a "
                        f"new or empty directory")


def _objects(kernel, lay, cpu, tmp, umat=None):
    """(the C wrapper's source path, the object files) of one kernel, written to tmp with its header."""
    irs, objs, helpers = kernel_ir(kernel, lay), [], set()
    for tag, target in variants(cpu):
        code, needs = object_code(irs, lay.name, target, tag)
        objs.append(os.path.join(tmp, f"{lay.name}_kernel_{target}.o"))
        helpers.update(needs)
        with open(objs[-1], "wb") as f:
            f.write(code)
    head, src = os.path.join(tmp, f"{lay.name}.h"), os.path.join(tmp, f"{lay.name}.c")
    with open(head, "w") as f:
        f.write(header(lay, umats.header(lay, umat.decl) if umat else ""))
    with open(src, "w") as f:
        f.write(source(lay, variants(cpu), sorted(helpers), umats.source(lay, umat) if umat else ""))
    return src, objs


def _build(kernel, lay, cc, cpu, tmp, umat=None, kim=None):
    """lib<name>.so, <name>.h and the manifest in tmp (and with `kim`, the KIM model's directory)."""
    src, objs = _objects(kernel, lay, cpu, tmp, umat)
    lib = f"lib{lay.name}.so"
    done = subprocess.run([*cc, *FLAGS, f"-Wl,-soname,{lib}", "-o", os.path.join(tmp, lib), src, *objs, "-lm"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise JobError(f"adgrad export: building {lib} failed (`{shlex.join(cc)}`):\n{_tail(done.stderr)}")
    scratch = [src, *objs]
    if kim is not None:
        # the first kernel's wrapper and objects again, the others' under the prefix <name>_n<slots>
        plan, more = kim
        units = [(lay, src, objs)]
        for n, k in zip(plan.slots[1:], more):
            lay_n = layout(k, f"{lay.name}_n{n}")
            src_n, objs_n = _objects(k, lay_n, cpu, tmp)
            units.append((lay_n, src_n, objs_n))
            scratch += [src_n, *objs_n, os.path.join(tmp, f"{lay_n.name}.h")]
        kims.build(plan, units, cc, tmp)
    for path in scratch:
        os.remove(path)
    manifest = {"name": lay.name, "model": lay.model, "library": lib, "header": f"{lay.name}.h", "cpu": cpu,
                "variants": [target for _, target in variants(cpu)],
                "abi_version": lay.abi_version, "adgrad_version": lay.version, "model_sha256": lay.model_sha256,
                "kernel_sha256": lay.kernel_sha256}
    if umat is not None:
        manifest["umat"] = umats.manifest(lay, umat.decl)
    if kim is not None:
        manifest["kim"] = kims.manifest(kim[0])
    with open(os.path.join(tmp, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


def _install(tmp, directory):
    """Move the export built in tmp (a directory beside `directory`) into place: into a new or
    empty directory by a rename, over an old export by an atomic exchange, after which tmp holds the
    old export (removed by the caller)."""
    try:
        if is_export(directory):
            _exchange(tmp, directory)
        else:
            os.rename(tmp, directory)           # replaces an empty directory
    except OSError as exc:
        raise DataError(f"{directory}: cannot install the export ({os_reason(exc)})") from None


def _exchange(a, b):
    """Swap the directories a and b in one step (Linux renameat2 RENAME_EXCHANGE); where that is
    not supported, b is renamed aside, a into place, and b back if that fails."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is not None:
        at_fdcwd, rename_exchange = -100, 2
        if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
            return
        if ctypes.get_errno() not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    aside = a + ".old"
    os.rename(b, aside)
    try:
        os.rename(a, b)
    except OSError:
        os.rename(aside, b)
        raise
    os.rename(aside, a)


def export_model(model, config, directory, mode=None, umat=False, kim=None, **options) -> Exported:
    """Export what `adgrad run` would compute: a config's values and derivatives (its mode and
    math), or for a model file every output and its gradient with respect to every input; with
    `umat`, what the Abaqus UMAT of the export: umat: section (the config's, else the model's)
    needs, and the UMAT; with `kim` ({"name", "species", "cutoff"}: engine/export/kim.py plan's), a
    site energy and its gradient, and the KIM portable model. `mode` overrides the config's; options:
    export's."""
    from ..compile import compile_model, default_requests
    if umat and kim:
        raise DataError("adgrad export: --umat and --kim make different libraries; give one of them")
    if kim is not None:
        plan = kims.plan(model, **kim)
        kims.toolchain()
        compiler()
        _check_destination(os.path.abspath(os.fspath(directory)), options.get("overwrite", False))
        ks = kims.kernels(model, config, plan, mode or (config.mode if config else "auto"),
                          config.engine.math if config else "vector")
        return export(ks[0][1], directory, kim=(plan, [k for _, k in ks[1:]]), **options)
    decl = umats.section(model, config) if umat else None
    if decl is not None:
        umats.library_name(options.get("name"), model.name)
    compiler()                          # bad input is refused before the compile (checked again below)
    _check_destination(os.path.abspath(os.fspath(directory)), options.get("overwrite", False))
    if decl is not None:
        values, derivatives = umats.requests(decl)
        kernel = compile_model(model, derivatives, mode=mode or (config.mode if config else "auto"), values=values,
                               math=config.engine.math if config else "vector")
        return export(kernel, directory, umat=umats.plan(decl), **options)
    if config is not None:
        kernel = compile_model(model, config.compute.derivatives, mode=mode or config.mode,
                               values=list(config.compute.values), math=config.engine.math)
    else:
        kernel = compile_model(model, default_requests(model), mode=mode or "auto")
    return export(kernel, directory, **options)
