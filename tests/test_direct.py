"""engine/codegen/direct.py: a generated body translated to LLVM IR computes numba's bits.

Every op of tests/test_ops.py (both code forms: loop nests with the vector math, and the straight-line
code of the scalarized graph), the helpers of engine/numeric they call (vecmath's functions, the spectral
ones with each scalar function) and a library W+P+A kernel are compiled twice, by numba's front end and
translated, and their results compared bit for bit on values with inf, NaN, signed zeros, subnormals
and huge magnitudes among them (a NaN's sign and payload aside: see same_bits). Then what the translator
refuses: a body outside its subset is left to numba when the module is written, and an exception raised
inside a translated helper reaches the caller.
"""
from __future__ import annotations

import ast
import textwrap

import numpy as np
import pytest
from numba import njit

import test_ops as ops
from adgrad.engine import compile_model, load_model
from adgrad.engine.codegen import direct
from adgrad.engine.codegen import load as loader
from adgrad.engine.codegen.direct import Unsupported, supported
from adgrad.engine.codegen.load import module_source
from adgrad.engine.numeric import spectral

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.fixture
def numba_front_end(monkeypatch):
    """Compile the kernels of the test with numba's front end (no body translated)."""
    def compile_with(flag, fn, *args):
        monkeypatch.setattr(loader, "DIRECT", bool(flag))
        return fn(*args)
    return compile_with


def same_bits(a, b):
    """The same bits, NaN for NaN: which of two NaN operands an add or multiply passes on (its sign and
    payload) depends on the operand order LLVM picks for a commutative instruction, in either compile."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    nan = np.isnan(a)
    return a.shape == b.shape and np.array_equal(nan, np.isnan(b)) and \
        np.array_equal(a[~nan].view(np.int64), b[~nan].view(np.int64))


def run_ops(graph, form):
    mod, compiled, work = ops._compile(graph, form)
    pts = ops.points()
    outs = {n: np.empty((ops.POINTS, max(1, v.size))) for n, v in compiled.outputs.items()}
    rows = [np.ascontiguousarray(pts[n].reshape(ops.POINTS, -1)) for n in compiled.inputs]
    params = [np.ascontiguousarray(ops.PARAMS[n].ravel()) for n in compiled.params]
    with np.errstate(all="ignore"):
        mod.batch(np.zeros(1, np.int64), ops.POINTS, *rows, *params, *outs.values(), np.zeros(max(1, work)),
                  np.empty(0, np.bool_))
    return mod, outs


@pytest.mark.parametrize("form", ["loop", "scalar"])
@pytest.mark.parametrize("fam", ops.FAMILIES)
def test_every_op_gives_numbas_bits(numba_front_end, fam, form):
    graph = ops._graph([n for n in ops.OPS if ops.family(n) == fam])
    mod, translated = numba_front_end(True, run_ops, graph, form)
    assert "= __direct(point_body)" in open(mod.__file__).read(), "the body was not translated"
    _, compiled = numba_front_end(False, run_ops, graph, form)
    for name in compiled:
        assert same_bits(translated[name], compiled[name]), f"{name} ({form} form)"


def test_library_kernel_gives_numbas_bits(numba_front_end):
    """Ogden's W, P and A: the spectral helpers (eigh3, the divided differences, their Taylor series at
    coinciding eigenvalues) translated in place and as functions of their own."""
    model = load_model(ROOT / "configs/models/ogden.yaml")
    rng = np.random.default_rng(3)
    F = np.eye(3) + 0.1 * rng.standard_normal((300, 3, 3))
    F[:20] = np.eye(3)                                   # three equal eigenvalues
    F[20:40] = np.diag([1.2, 1.2, 0.9])                  # two
    F[40:60] = np.diag([1.0, 1.0 + 1e-9, 1.0 - 1e-9])    # nearly equal: the series
    kernels = {flag: numba_front_end(flag, compile_model, model, [("W", "F"), ("W", ["F", "F"])]) for flag in (0, 1)}
    assert "__direct(" in kernels[1].source and "__direct(" not in kernels[0].source
    got = {flag: k.evaluate({"F": F}) for flag, k in kernels.items()}
    for name in got[0]:
        assert same_bits(got[1][name], got[0][name]), name


def body_of(text):
    return ast.parse(textwrap.dedent(text)).body[0]


@pytest.mark.parametrize("text", [
    "def f(x):\n    while x[0] > 0:\n        x[0] -= 1\n",
    "def f(x):\n    return x[0]\n",
    "def f(x):\n    y = x[0]\n    return\n    y = 1.0\n",
    "def f(x):\n    a, b = x[0], x[1]\n",
    "def f(x):\n    x.flags = 1.0\n",
    "def f(x):\n    x[0:2] = 1.0\n",
    "def f(x):\n    x[0] = 0.0 < x[1] is None\n",
    "def f(x):\n    for i in x:\n        x[0] = i\n",
    "def f(x, *rest):\n    x[0] = 1.0\n",
    "def f(x):\n    x[0] = [1.0][0]\n",
    "def f(x):\n    x[0] = sum(a for a in (1.0, 2.0))\n",
])
def test_bodies_outside_the_subset_are_refused(text):
    with pytest.raises(Unsupported):
        supported(body_of(text))


def test_a_body_outside_the_subset_is_left_to_numba(monkeypatch):
    monkeypatch.setattr(loader, "DIRECT", True)
    body = ["    n = 0", "    while n < 3:", "        n += 1", "    out_y[0] = in_x[0] * n"]
    src = module_source("refused", [], ["in_x", "out_y"], body, [True, True])
    assert "__direct(" not in src and "def point(in_x, out_y, work):\n    n = 0" in src
    mod = loader.load(src)
    out = np.empty((2, 1))
    mod.batch(np.zeros(1, np.int64), 2, np.array([[1.5], [2.0]]), out, np.zeros(1), np.empty(0, np.bool_))
    assert out.ravel().tolist() == [4.5, 6.0]


def pick(t, k):
    """A helper the tests translate (they add this module to the helper modules)."""
    return t[k] * 2.0


pick_jit = njit(error_model="numpy")(pick)


def body(x, k, out):
    out[0] = pick_jit((x[0], x[1]), k)


def test_an_exception_in_a_translated_helper_reaches_the_caller(monkeypatch):
    """numba's own tuple lookup raises IndexError for an index out of range; raised inside a helper
    translated as a function of its own, it reaches Python as numba's does."""
    monkeypatch.setattr(direct, "HELPER_MODULES", direct.HELPER_MODULES + (__name__,))
    translated = direct.direct(body)

    @njit(error_model="numpy")
    def call(x, k, out):
        translated(x, k, out)

    out = np.zeros(1)
    call(np.array([1.5, 2.5]), 1, out)
    assert out[0] == 5.0
    with pytest.raises(IndexError, match="tuple index out of range"):
        call(np.array([1.5, 2.5]), 2, out)


def helper_calls(x, out):
    """Every kind of spectral helper, on one matrix (x: 9 entries) and two directions."""
    a = (x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8])
    e = spectral.eigh3(a)
    out[0] = e[0]
    out[1] = e[11]
    g = spectral.matfun_dd1(e, 0, 0.7)
    out[2] = g[3]
    t = spectral.matfun_dd2(e, 1, 0.0)
    out[3] = t[9]
    u = spectral.matfun_dd1(e, 2, 0.0)
    out[4] = u[5]
    d = spectral.matfun_d2(e, t, a, (x[8], x[7], x[6], x[5], x[4], x[3], x[2], x[1], x[0]))
    out[5] = d[4]
    out[6] = spectral.trfun(e, 0, -1.5)
    out[7] = spectral.dd2(1, 0.0, x[0], x[0], x[0] * (1.0 + 1e-4))


def test_spectral_helpers_give_numbas_bits():
    """The spectral helpers, translated where a kernel calls them, against numba's compile of the same
    calls (matrices with equal, nearly equal and distinct eigenvalues)."""
    translated = direct.direct(helper_calls)

    @njit(error_model="numpy")
    def by_translation(xs, out):
        for i in range(xs.shape[0]):
            translated(xs[i], out[i])

    @njit(error_model="numpy")
    def by_numba(xs, out):
        for i in range(xs.shape[0]):
            helper_calls_jit(xs[i], out[i])

    rng = np.random.default_rng(7)
    xs = np.eye(3).reshape(1, 9) + 0.2 * rng.standard_normal((200, 9))
    xs[:10] = np.eye(3).reshape(9)
    xs[10:20] = np.diag([2.0, 2.0, 0.5]).reshape(9)
    xs[20:30] = np.diag([1.0, 1.0 + 1e-7, 1.0 - 1e-7]).reshape(9)
    got, want = np.empty((200, 8)), np.empty((200, 8))
    by_translation(xs, got)
    by_numba(xs, want)
    assert same_bits(got, want)


helper_calls_jit = njit(error_model="numpy")(helper_calls)


def test_a_body_the_translator_refuses_after_all_is_compiled_by_numba(monkeypatch, capsys, tmp_path):
    """A refusal while the kernel compiles (a gap in the translator the syntax check let through): one warning
    line, and the kernel compiled by numba's front end, with the same results."""
    def refuse(self, *args):
        raise Unsupported("a construct made up by the test")
    monkeypatch.setenv("ADGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(direct._Translator, "define", refuse)
    # a name of its own: a kernel of the same source compiled earlier in this process would be reused as it is
    path = tmp_path / "refused.yaml"
    path.write_text((ROOT / "configs/models/neo_hooke.yaml").read_text().replace("name: neo_hooke", "name: refused"))
    model = load_model(path)
    kernel = compile_model(model, [("W", "F")])
    err = capsys.readouterr().err
    assert "cannot translate its body (a construct made up by the test)" in err and err.count("\n") == 1
    assert "__direct(" not in kernel.source
    F = np.eye(3) + 0.1 * np.random.default_rng(0).standard_normal((5, 3, 3))
    monkeypatch.undo()
    assert same_bits(kernel.evaluate({"F": F})["dW_dF"], compile_model(model, [("W", "F")]).evaluate({"F": F})["dW_dF"])
