"""Vector math in generated kernels (engine/codegen/vector.py): loop nests that call
engine/numeric/vecmath.py's branch-free functions compile to packed-double code, and `math: libm`
(engine.math, compile_model(math=...)) switches back to libm calls.

- the EAM kernel's inner loop (configs/eam_model.yaml, value + gradient) is vectorized: packed
  FMAs on ymm/zmm registers in the point kernel's assembly, which only the vectorized exp makes
  (the libm kernel has none);
- every math function's vector form, compiled in a loop nest that vectorizes, agrees with numpy
  within 4 ulp with numpy's special values; sin, cos and tan beyond vecmath.TRIG_MAX give libm's
  values exactly (the nest is redone as math: libm writes it) and still vectorize;
- the vector and libm kernels of every shipped example agree within 4 ulp of each output's
  largest magnitude (a sum that cancels magnifies a function's last-bit difference, so an ulp of
  an output near 0 is no measure); where no nest vectorizes the two kernels are the same code;
- the vector kernels give the same bits whatever the thread count and the split into calls;
- the switch: config, API, cache key, `adgrad explain`.
"""
from __future__ import annotations

import glob
import math
import re
from pathlib import Path

import numba
import numpy as np
import pytest
from llvmlite import binding as llvm

from adgrad.engine import compile_model, load_model
from adgrad.engine.codegen.emit import Emitter
from adgrad.engine.codegen.load import load, module_source
from adgrad.engine.errors import SpecError
from adgrad.engine.ir.core import Builder, Var
from adgrad.engine.kernel import input_rows
from adgrad.engine.ir.op import OPS
from adgrad.engine.ir.ops.elementwise import MathLowering
from adgrad.engine.model import build
from adgrad.engine.numeric.vecmath import TRIG_MAX
from adgrad.engine.spec import load_config_file
from adgrad.engine.tools.bench import sampled_inputs
from adgrad.engine.tools.explain import explain

ROOT = Path(__file__).resolve().parents[1]
EAM = ROOT / "configs" / "eam_model.yaml"
CONFIGS = sorted(p for p in glob.glob(str(ROOT / "configs" / "*.yaml")) if not p.endswith("_model.yaml"))
PACKED_FMA = re.compile(r"^\s*vfn?m(?:add|sub)\w*pd\s+.*%[yz]mm", re.MULTILINE)
ULPS = 4
LANES = 32                      # >= MIN_LANES: the loop nests below vectorize
TRIG = ("sin", "cos", "tan")
MATH_OPS = sorted(n for n, op in OPS.items() if isinstance(op.lower, MathLowering))

needs_avx2 = pytest.mark.skipif(not all(llvm.get_host_cpu_features().get(f) for f in ("avx2", "fma")),
                                reason="packed-double FMA needs AVX2 and FMA")


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path_factory, monkeypatch):
    """Kernels compiled in this process (numba's assembly is there only for code it compiled, not
    for code loaded from its cache)."""
    monkeypatch.setenv("ADGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "vectorize-cache"))


def point_asm(p, signature=None):
    """The assembly of numba function `p`, compiled here again: numba has none for code it loaded from
    its cache, and this process reuses a kernel an earlier test loaded from a warm cache (whose point
    function was then never compiled: `signature` gives its argument types)."""
    signature = p.signatures[0] if p.signatures else signature
    fresh = numba.njit(nogil=True, error_model="numpy")(p.py_func)
    fresh.compile(signature)
    return fresh.inspect_asm(signature)


def kernel_asm(kernel):
    """The point kernel's assembly, its arguments typed as CompiledKernel.compute passes them."""
    g = kernel.graph
    rows = [input_rows(np.zeros((1, *v.shape)), v.size)[0] for v in g.inputs.values()]
    outs = [np.zeros(max(1, v.size)) for v in g.outputs.values()]
    args = (*rows, *kernel.param_rows(), *outs, kernel.workspace(1)[0])
    return point_asm(kernel.point_kernel, tuple(numba.typeof(a) for a in args))


# ---- the EAM kernel's inner loop ------------------------------------------------------------------

@needs_avx2
def test_eam_inner_loop_is_vectorized():
    model = load_model(EAM)
    vec = compile_model(model, derivatives=[("E", "x")], mode="reverse")
    assert vec.math == "vector" and "__vexp(" in vec.source and "np.exp(" not in vec.source
    assert len(PACKED_FMA.findall(kernel_asm(vec))) >= 8, "the exp loop is not vectorized"
    lib = compile_model(model, derivatives=[("E", "x")], mode="reverse", math="libm")
    assert "np.exp(" in lib.source and "__vexp(" not in lib.source
    assert not PACKED_FMA.findall(kernel_asm(lib))
    x = np.random.default_rng(0).random((501, 100))
    a, b = vec.evaluate({"x": x}), lib.evaluate({"x": x})
    for name in ("E", "dE_dx"):
        assert_close(a[name], b[name], name)


def test_eam_gradient_reads_the_stored_exp_back():
    """The exp loop stores one value per neighbour, the exp its sum reads; the gradient's -alpha exp(...)
    is computed again in the last loop (one product) instead of stored beside it and loaded back
    (engine/codegen/schedule.py sink_inputs). The exps are stored in the gradient's own row, which the
    last loop then rewrites in place (engine/codegen/plan.py staged): no workspace at all."""
    kernel = compile_model(load_model(EAM), derivatives=[("E", "x")], mode="reverse")
    n = kernel.graph.inputs["x"].shape[0]
    assert kernel.workspace_size == 0
    assert re.search(r"out_dE_dx\[i0\] = v\d+ *\n", kernel.source)
    assert [out for _, out in kernel.in_output_rows] == ["dE_dx"]          # adgrad explain says so
    x = np.random.default_rng(1).random((64, n))
    out = kernel.evaluate({"x": x})
    rho = np.exp(-3.0 * (x + 1.0))
    d = rho.sum(axis=1)
    np.testing.assert_allclose(out["dE_dx"], (2 * d + 3 * d ** 2 + d ** 3)[:, None] * -3.0 * rho, rtol=1e-13)


STAGING = """
adgrad: 1
name: staging
inputs:
  x: [64, 32]
let:
  e: exp(x)
  t: sin(x)
  a: 2.0 * e * sum(e)
outputs:
  A: a
  B: a + e
  C: transpose(t) * sum(t)
  D: 3.0 * t
"""


def test_a_value_lives_in_an_output_row_only_when_nothing_reads_it_after(model_from_text):
    """e's last reader is the loop that writes A and then B = A + e: e cannot live in A's row (read after
    A is written there) but does in B's, read just before each element of B is written over it (and
    rewritten there by the libm redo of its own loop, whose sin may fall back). t is read transposed
    by C: it stays in the workspace, the only block there. Values against numpy, on 1 and 2 threads."""
    kernel = compile_model(model_from_text(STAGING, "staging"))
    assert kernel.workspace_size == 64 * 32
    assert re.search(r"v\d+ = __vexp\(in_x\[i0\*32 \+ i1\]\)\n *out_B\[i0\*32 \+ i1\] = v\d+", kernel.source)
    x = np.random.default_rng(2).normal(size=(3000, 64, 32))
    e, t = np.exp(x), np.sin(x)
    A = 2.0 * e * e.sum(axis=(1, 2))[:, None, None]
    want = {"A": A, "B": A + e, "C": np.swapaxes(t, 1, 2) * t.sum(axis=(1, 2))[:, None, None], "D": 3.0 * t}
    for threads in (1, 2):
        got = kernel.evaluate({"x": x}, threads=threads)
        for name, w in want.items():
            np.testing.assert_allclose(got[name], w, rtol=1e-13, atol=1e-13 * np.abs(w).max(), err_msg=name)


# ---- every math function's vector form --------------------------------------------------------------

SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, 5e-324, -5e-324,
                    2.2250738585072014e-308, 1e-300, 1e300, -1e300, 710.0, -745.5, 1.7976931348623157e308,
                    np.pi / 2, np.pi, 1.0 + 2 ** -52, 1e-9, -30.0, 40.5, 1e6, -1e9, TRIG_MAX, -TRIG_MAX])


def sample(n, rng, big=True):
    """n values of every scale and sign (about one in five special); big=False keeps |x| <= TRIG_MAX."""
    kind = rng.integers(0, 4, n)
    vals = np.where(kind == 0, rng.uniform(-3, 3, n),
                    np.where(kind == 1, rng.uniform(-1, 1, n),
                             np.where(kind == 2, np.sign(rng.uniform(-1, 1, n)) * 10.0 ** rng.uniform(-300, 300, n),
                                      rng.uniform(-30, 30, n))))
    special = rng.random(n) < 0.2
    vals[special] = rng.choice(SPECIAL, special.sum())
    if not big:
        vals[np.abs(vals) > TRIG_MAX] = rng.uniform(-1e9, 1e9, (np.abs(vals) > TRIG_MAX).sum())
    return vals


def kernel_of(names, math="vector", points=64, seed=0, big=True):
    """A kernel with one output per op of `names` on vectors of LANES (binary ops: of x and y), the
    points it ran on, its outputs and its source."""
    b = Builder()
    g = b.graph
    g.inputs.update(x=Var((LANES,)), y=Var((LANES,)))
    with b.active():
        for n in names:
            g.outputs[n] = b.emit(n, g.inputs["x"], g.inputs["y"]) if OPS[n].arity == 2 else b.emit(n, g.inputs["x"])
    em = Emitter(g, ["x", "y"], [], list(g.outputs), math)
    body = em.emit()
    source = module_source("vectorize_test", em.globals, em.args, body, [True, True] + [True] * len(names), math)
    mod = load(source)
    rng = np.random.default_rng(seed)
    x, y = (sample(points * LANES, rng, big).reshape(points, LANES) for _ in range(2))
    assert em.work_size <= 64
    return mod, (x, y), run(mod, x, y, names), source, em


def reference(name, x, y):
    with np.errstate(all="ignore"):
        return OPS[name].numpy(x, y) if OPS[name].arity == 2 else OPS[name].numpy(x)


def assert_same(got, want, what, ulps=ULPS):
    """Same NaNs, same infinities, finite values within `ulps` units in the last place."""
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaN where the reference has none, or not"
    fin = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), fin), f"{what}: infinite where the reference is not, or not"
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)]), f"{what}: infinities differ"
    with np.errstate(over="ignore"):
        diff = np.abs(got[fin] - want[fin])
        ulp = np.spacing(np.maximum(np.abs(got[fin]), np.abs(want[fin])))
    worst = np.argmax(diff / ulp) if diff.size else None
    assert not diff.size or np.all(diff <= ulps * ulp), \
        f"{what}: {got[fin][worst]!r} != {want[fin][worst]!r} ({diff[worst] / ulp[worst]:.1f} ulp)"


# three functions per kernel (a loop writing more arrays needs more alias checks than vector.MAX_CHECKS),
# sin, cos and tan on |x| <= TRIG_MAX (beyond, the nest is redone with libm: the next test)
OTHERS = [n for n in MATH_OPS if n not in TRIG]
GROUPS = [OTHERS[k:k + 3] for k in range(0, len(OTHERS), 3)] + [list(TRIG)]


def test_every_math_function_has_a_vector_form():
    assert {"exp", "log", "expm1", "log1p", "pow", "sinh", "cosh", "tanh", "sigmoid", "softplus", "sin", "cos",
            "tan", "arctan", "arctan2", "arcsin", "arccos", "cbrt", "erf"} <= set(MATH_OPS)


@needs_avx2
@pytest.mark.parametrize("names", GROUPS, ids="-".join)
def test_vector_functions_vectorize_and_match_numpy(names):
    mod, (x, y), outs, source, em = kernel_of(names, big=names != list(TRIG))
    assert sorted(f for f, form, _ in em.calls if form == "vector") == sorted(names), em.calls
    for n in names:
        assert f"__v{n}(" in source, n
        assert_same(outs[n], reference(n, x, y), n)
    asm = point_asm(mod.batch)      # the driver, where the point's body runs (codegen/direct.py translates it there)
    assert len(PACKED_FMA.findall(asm)) >= 8 * len(names), names


def test_a_loop_writing_many_arrays_keeps_libm():
    b = Builder()
    x = b.graph.inputs["x"] = Var((LANES,))
    with b.active():
        for n in MATH_OPS[:9]:
            b.graph.outputs[n] = b.emit(n, x, x) if OPS[n].arity == 2 else b.emit(n, x)
    em = Emitter(b.graph, ["x"], [], list(b.graph.outputs))
    em.emit()
    assert {form for _, form, _ in em.calls} == {"libm"} and "alias checks" in em.calls[0][2]


def run(mod, x, y, names):
    outs = {n: np.empty(x.shape) for n in names}
    mod.batch(np.zeros(1, np.int64), len(x), x, y, *outs.values(), np.zeros(64), np.empty(0, np.bool_))
    return outs


@needs_avx2
def test_trig_beyond_trig_max_equals_libm_and_still_vectorizes():
    mod, (x, y), _, source, _ = kernel_of(list(TRIG), points=96, seed=1, big=False)
    assert "__trig_fallback(" in source and "if fb" in source
    rng = np.random.default_rng(2)
    redone = np.arange(len(x)) % 2 == 1          # these points get one or two lanes beyond TRIG_MAX
    for i in np.flatnonzero(redone):
        lanes = rng.choice(LANES, rng.integers(1, 3), replace=False)
        x[i, lanes] = rng.choice([TRIG_MAX * 2, 2.0 ** 30 + 1, -3.5e15, 1e300, -1.7976931348623157e308], len(lanes))
    outs = run(mod, x, y, TRIG)
    libm = {"sin": math.sin, "cos": math.cos, "tan": math.tan}
    for n in TRIG:
        # the whole point as math: libm computes it, the huge lanes and their ordinary neighbours
        want = np.array([[libm[n](v) if np.isfinite(v) else np.nan for v in row] for row in x[redone]])
        assert outs[n][redone].tobytes() == want.tobytes(), f"{n}: a point with a lane beyond TRIG_MAX is not libm's"
        assert_same(outs[n][~redone], reference(n, x[~redone], None), n)
    asm = point_asm(mod.batch)      # the driver, where the point's body runs (codegen/direct.py translates it there)
    assert len(PACKED_FMA.findall(asm)) >= 8 * len(TRIG)


# ---- vector against libm on the shipped examples -------------------------------------------------------

def assert_close(a, b, what, ulps=ULPS):
    """|a - b| within `ulps` of the largest |b| of each output element over all points."""
    a, b = np.asarray(a), np.asarray(b)
    assert np.array_equal(np.isnan(a), np.isnan(b)), what
    fin = np.isfinite(b)
    assert np.array_equal(a[~fin], b[~fin]), what
    scale = np.spacing(np.max(np.where(fin, np.abs(b), 0.0), axis=0))
    err = np.where(fin, np.abs(a - b), 0.0) / scale
    assert err.max() <= ulps, f"{what}: {err.max():.1f} ulps of the largest magnitude"


def compiled(config, math):
    model = build(config.model).with_params(config.params)
    return model, compile_model(model, config.compute.derivatives, mode=config.mode,
                                values=list(config.compute.values), math=math)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: Path(p).stem)
def test_vector_and_libm_kernels_agree_on_examples(path):
    config = load_config_file(path)
    model, vec = compiled(config, "vector")
    if not any(form == "vector" for _, form, _ in vec.math_calls):
        # no nest vectorizes: the same code but for the header line (so no second compile here)
        assert "math: vector" in vec.source.splitlines()[0] and "__v" not in vec.source.split("def point", 1)[1]
        return
    _, lib = compiled(config, "libm")
    assert vec.source != lib.source
    inputs = sampled_inputs(model, config, 3000, 0)
    args = {n: inputs[n] for n in vec.graph.inputs}
    a, b = vec.evaluate(args), lib.evaluate(args)
    for name in a:
        assert_close(a[name], b[name], f"{Path(path).stem} {name}")


# ---- same bits ------------------------------------------------------------------------------------------

def test_vector_kernel_bits_do_not_depend_on_threads_or_calls():
    kernel = compile_model(load_model(EAM), derivatives=[("E", "x")], mode="reverse")
    x = np.random.default_rng(5).random((1003, 100))
    whole = kernel.evaluate({"x": x}, threads=numba.config.NUMBA_NUM_THREADS)
    one = kernel.evaluate({"x": x}, threads=1)
    parts = [kernel.evaluate({"x": x[s]}, threads=1) for s in (slice(0, 7), slice(7, 520), slice(520, None))]
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    for name in whole:
        assert whole[name].tobytes() == one[name].tobytes()
        assert whole[name].tobytes() == np.concatenate([p[name] for p in parts]).tobytes()


# ---- the switch ----------------------------------------------------------------------------------------

def test_math_switch_config_api_cache_key_and_explain(tmp_path):
    model = load_model(EAM)
    with pytest.raises(SpecError, match="math"):
        compile_model(model, math="fast")
    text = (ROOT / "configs" / "eam.yaml").read_text().replace("nan: propagate", "nan: propagate\n  math: libm")
    cfg = tmp_path / "eam.yaml"
    cfg.write_text(text.replace("eam_model.yaml", str(EAM)).replace("../data/", str(ROOT / "data") + "/"))
    config = load_config_file(str(cfg))
    assert config.engine.math == "libm"
    assert load_config_file(str(ROOT / "configs" / "eam.yaml")).engine.math == "vector"
    cfg.write_text(cfg.read_text().replace("math: libm", "math: fast"))
    with pytest.raises(SpecError, match="engine.math must be 'vector' or 'libm'"):
        load_config_file(str(cfg))
    vec, lib = compile_model(model), compile_model(model, math="libm")
    assert vec.source.splitlines()[0] != lib.source.splitlines()[0]      # the cache key (the source's hash)
    assert vec.module is not lib.module
    text = explain(model, parts=("cost",))
    assert "math: vector" in text and "vectorized: exp (a loop of 100 iterations)" in text
    text = explain(model, parts=("cost",), math="libm")
    assert "libm calls: exp (math: libm)" in text
