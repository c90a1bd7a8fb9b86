"""The compiled kernel as object code with no Python in it.

The kernel module's own `point`, `batch` and `strided` functions (engine/codegen/load.py, what
`adgrad run` calls) are called from three `numba.cfunc`s whose arguments are raw pointers and
integers; each wraps the pointers with `numba.carray` (a view: nothing is allocated). From the LLVM
IR of the three (`inspect_llvm()`: numba's optimized module with every callee linked in) we keep
numba's inner native function of each, `int32 f(void *ret, void **excinfo, <C args>)`, renamed
and hidden; every other symbol is made internal, so global dead-code elimination drops the cfunc
wrappers and with them every reference to Python. The rest is emitted as position-independent
object code for the CPU asked for.

The IR is the one numba optimized for this machine; LLVM legalizes its vector widths for another
CPU. No pass here reorders floating-point arithmetic (the kernels carry no fast-math flags and
llvm.fma is correctly rounded on every CPU: an instruction, or libm's fma without one), so the
library computes `kernel.evaluate`'s bits for any CPU target (a `math: libm` kernel's exp, log, ...
are the C library's, as numba's are: the same bits on the same machine).
"""
from __future__ import annotations

import re

from ..codegen.load import STRIDED_BLOCK, seal
from ..errors import JobError

# symbols the object code may leave to the C library and libm (numba calls libm's erf, exp, ... directly)
LIBM = re.compile(r"(a?(sin|cos|tan)h?f?|atan2f?|exp(m1|2)?f?|log(1p|2|10)?f?|powf?|sqrtf?|cbrtf?|erfc?f?|"
                  r"l?gammaf?|tgammaf?|fmaf?|fmodf?|hypotf?|floorf?|ceilf?|truncf?|roundf?|rintf?|"
                  r"nearbyintf?|copysignf?|fabsf?|ldexpf?|frexpf?|modff?|fminf?|fmaxf?|"
                  r"memset|memcpy|memmove)\Z")
# numba's C helpers (numba/_helperlib.c) the kernels' drivers may call, which the C wrapper defines
# (cwrap.HELPERS): a lanes kernel's batch reshapes its rows flat
HELPERS = ("numba_attempt_nocopy_reshape",)


def inner_name(prefix, entry, variant=""):
    """The object code's symbol for an entry's inner function in a CPU variant ("" or "v3_"; hidden:
    only the C wrapper calls it)."""
    return f"{prefix}__adgrad_{variant}{entry}"


def wrapper_source(lay, lanes=False):
    """Python source of the three cfuncs' bodies, calling the kernel module's point, batch and
    strided with C-contiguous carray views of the raw pointers (one workspace row each). A lanes
    kernel's strided driver moves entries without row buffers: the C ABI's buffer arguments stay (one
    signature for every kernel) and are not passed on."""
    w = lay.workspace_size

    def view(a, rows=None):
        return f"carray({a.arg}, ({rows}, {a.size}))" if rows else f"carray({a.arg}, ({a.size},))"
    flags = "carray(bad, (nbad,), np.bool_)"
    args = [a.arg for a in lay.arrays]
    point = f"    point({', '.join(view(a) for a in lay.arrays)}, carray(work, ({w},)))\n"
    batch = "    batch(carray(next_row, (1,)), block, " + ", ".join(
        view(a, "m" if a.kind != "param" else None) for a in lay.arrays) + f", carray(work, ({w},)), {flags})\n"
    sargs, scall = [], []
    for a in lay.arrays:
        if a.kind == "param":
            sargs.append(a.arg)
            scall.append(view(a))
        else:
            sargs += [a.arg, f"{a.arg}_span", f"{a.arg}_sk", f"{a.arg}_si"]
            scall.append(f"carray({a.arg}, ({a.arg}_span,)), {a.size}, {a.arg}_sk, {a.arg}_si")
    bufs = [f"b_{a.arg}" for a in lay.per_point]
    scall.append(f"carray(work, ({w},))")
    if not lanes:
        scall += [f"carray(b_{a.arg}, ({STRIDED_BLOCK}, {a.size}))" for a in lay.per_point]
        scall += [f"carray(b_{a.arg}, ({STRIDED_BLOCK}, {a.size}))" for a in lay.inputs]   # r_<input>: b_<input>
    return (f"def c_point({', '.join(args)}, work):\n{point}\n\n"
            f"def c_batch(m, next_row, block, {', '.join(args)}, work, bad, nbad):\n{batch}\n\n"
            f"def c_strided(m, next_row, block, {', '.join(sargs)}, work, {', '.join(bufs)}, bad, nbad):\n"
            f"    strided(carray(next_row, (1,)), block, m, {', '.join(scall)}, {flags})\n")


def _signatures(lay):
    from numba import types
    p, i64 = types.CPointer(types.float64), types.int64
    arrays = [p] * len(lay.arrays)
    common = (i64, types.CPointer(types.int64), i64)
    strided = [t for a in lay.arrays for t in ((p,) if a.kind == "param" else (p, i64, i64, i64))]
    return {"point": types.void(*arrays, p),
            "batch": types.void(*common, *arrays, p, types.voidptr, i64),
            "strided": types.void(*common, *strided, p, *[p] * len(lay.per_point), types.voidptr, i64)}


def kernel_ir(kernel, lay):
    """{entry: (LLVM IR text, inner function's name)} of the three cfuncs over `kernel`'s module."""
    import numpy as np
    from numba import carray, cfunc
    source = wrapper_source(lay, lanes=kernel.lanes)
    namespace = {"carray": carray, "np": np, "point": kernel.module.point, "batch": kernel.module.batch,
                 "strided": kernel.module.strided}
    exec(compile(source, f"<adgrad export of {lay.model}>", "exec"), namespace)   # our generated source only
    out = {}
    for entry, sig in _signatures(lay).items():
        fn = cfunc(sig, nogil=True)(namespace[f"c_{entry}"])
        wrapper = fn.native_name            # "cfunc." + the inner function's mangled name
        if not wrapper.startswith("cfunc."):
            raise AssertionError(f"numba named a cfunc wrapper {wrapper!r}; expected 'cfunc.<name>'")
        out[entry] = (fn.inspect_llvm(), wrapper[len("cfunc."):])
    seal(kernel.module)         # the new overloads numba cached beside the kernel (engine/codegen/load.py)
    return out


# Arrays passed to the kernel are carray views with no meminfo, and the kernel allocates nothing (an
# allocation would leave NRT_MemInfo_alloc* undefined, which `object_code` refuses): numba's
# NRT_decref calls the destructor only on a meminfo, so this definition is never reached.
NO_DTOR = """
define void @NRT_MemInfo_call_dtor(ptr %mi) noreturn nounwind {
  call void @llvm.trap()
  unreachable
}
declare void @llvm.trap() noreturn nounwind
"""


def object_code(irs, prefix, cpu, variant=""):
    """(position-independent object code, the numba helpers it calls) of the inner functions of
    `irs` (kernel_ir's), named inner_name(prefix, entry, variant), for `cpu` (an LLVM CPU name of
    x86-64, or "host")."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module, keep = None, {}
    for entry, (text, inner) in irs.items():
        m = llvm.parse_assembly(text)
        keep[inner] = inner_name(prefix, entry, variant)
        if module is None:
            module = m
        else:
            module.link_in(m)
    if any(f.name == "NRT_MemInfo_call_dtor" and f.is_declaration for f in module.functions):
        module.link_in(llvm.parse_assembly(f'target triple = "{module.triple}"\n' + NO_DTOR))
    for f in module.functions:
        if f.is_declaration:
            continue
        if f.name in keep:
            f.name, f.visibility = keep[f.name], "hidden"
        else:
            f.linkage = "internal"
    for g in module.global_variables:
        if not g.is_declaration:
            g.linkage = "internal"
    tm = _target_machine(llvm, cpu)
    pm = llvm.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.add_strip_dead_prototype_pass()
    pm.run(module, llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3)))
    module.verify()
    foreign = sorted(f.name for f in module.functions if f.is_declaration and not f.name.startswith("llvm.")
                     and not LIBM.match(f.name) and f.name not in HELPERS)
    if foreign:
        raise JobError(f"the compiled kernel of model '{prefix}' calls {', '.join(foreign)}, which a library "
                       f"without Python cannot provide")
    helpers = sorted(f.name for f in module.functions if f.is_declaration and f.name in HELPERS)
    return tm.emit_object(module), helpers


def _target_machine(llvm, cpu):
    target = llvm.Target.from_triple(llvm.get_process_triple())
    if cpu == "host":
        return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                            features=llvm.get_host_cpu_features().flatten(), opt=3, reloc="pic",
                                            codemodel="default")
    return target.create_target_machine(cpu=cpu, features="", opt=3, reloc="pic", codemodel="default")
