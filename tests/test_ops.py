"""Every IR op, one entry each (engine/ir/op.py): every slot of every entry is filled, and the
compiled lowering agrees with the entry's numpy reference on random values with inf, -inf, NaN,
signed zeros, subnormals and huge magnitudes among them, in both code forms: loop nests (and scalar
statements) as emitted from the graph, and the straight-line code of the scalarized graph.

Elementwise ops need no case here: they are tested on vectors of such values automatically (so a
new elementwise function is covered by its one entry). Every other op names its case in CASES; an op
without one fails. Ops are compiled a family at a time (one kernel per family and form) to keep the
number of numba compilations small; each op is still its own test.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from adgrad.engine.codegen.emit import Emitter, literal
from adgrad.engine.codegen.load import load, module_source
from adgrad.engine.ir.core import Builder, Var, current
from adgrad.engine.ir.interp import interpret
from adgrad.engine.ir.op import KINDS, OPS, Reduction
from adgrad.engine.ir.ops.tables import tabulated
from adgrad.engine.ir.rules import Rule
from adgrad.engine.numeric.tables import TableData
from adgrad.engine.opt.scalarize import scalarize

SHAPES = {"x": (8,), "y": (8,), "s": (), "X": (3, 4), "P": (4,), "T": (8,), "S": (3, 3), "B": (2, 3, 3),
          "Q": (5, 5)}
# params: two tables of 7 nodes on [-1, 2] (the table op reads its coefficients whole)
TABLE = TableData(np.array([[0.3, -1.0, 2.0, 0.5, 0.5, 4.0, -2.0], [1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0]]),
                  x0=-1.0, dx=0.5, xlin=1.5)
PARAMS = {"C": TABLE.coefficients(), "A": np.array([2.5, -np.inf])}
POINTS = 48
ULPS = 4            # numba calls libm; numpy has SIMD loops of its own for some functions


# ---- the special values and the random ones ------------------------------------------------------
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, 5e-324, -5e-324,
                    2.2250738585072014e-308, 1e-300, 1e300, -1e300, 710.0, -745.5, 1.7976931348623157e308,
                    np.pi / 2, np.pi, 1.0 + 2 ** -52])


def sample(shape, rng):
    """Values of every scale and sign; about one in five is special."""
    n = int(np.prod(shape, dtype=int))
    kind = rng.integers(0, 4, n)
    vals = np.where(kind == 0, rng.uniform(-3, 3, n),
                    np.where(kind == 1, rng.uniform(-1, 1, n),
                             np.where(kind == 2, np.sign(rng.uniform(-1, 1, n)) * 10.0 ** rng.uniform(-300, 300, n),
                                      rng.uniform(-30, 30, n))))
    special = rng.random(n) < 0.2
    vals[special] = rng.choice(SPECIAL, special.sum())
    return vals.reshape(shape)


def points(seed=0):
    rng = np.random.default_rng(seed)
    pts = {n: sample((POINTS,) + s, rng) for n, s in SHAPES.items()}
    pts["P"] = rng.uniform(0.5, 2.0, (POINTS, 4)) * rng.choice([1, -1, 0, np.inf, np.nan], (POINTS, 4),
                                                                 p=[0.5, 0.3, 0.1, 0.05, 0.05])
    # table indices: mostly valid, some out of range, fractional or NaN (which give NaN)
    pts["T"] = rng.choice([0.0, 1.0, -1.0, 2.0, 0.5, np.nan], (POINTS, 8), p=[0.4, 0.4, 0.05, 0.05, 0.05, 0.05])
    pts["x"][: POINTS // 2] = rng.uniform(-2.0, 3.0, (POINTS // 2, 8))     # around and beyond the grid
    return pts


GRID = dict(x0=TABLE.x0, rdx=1.0 / TABLE.dx)


def _table(order, xlin=TABLE.xlin):
    """A table at x as the model language emits it (engine/ir/ops/tables.py tabulated)."""
    def case(b, v):
        return tabulated(b.emit, v["C"], v["x"], v["T"], **GRID, n=TABLE.n, ntab=2, xlin=xlin, order=order)
    return case


def _table_at(order):
    """The table op at any position and offset (fractional, negative, beyond the tables, NaN)."""
    def case(b, v):
        return b.emit("table", v["C"], v["x"], v["y"], b.emit("mul", v["x"], 10.0), rdx=GRID["rdx"], n=TABLE.n,
                      ntab=2, xlin=TABLE.xlin, order=order)
    return case


# ---- cases: op name -> build(b, v) -> the Var to compare (v: the inputs by name) ----------------------
def _cmp(op):
    return lambda b, v: b.emit("select", b.emit(op, v["x"], v["y"]), v["x"], v["y"])


CASES = {
    "const": lambda b, v: v["x"] * b.const(-2.5),
    "array": lambda b, v: v["P"] + b.emit("array", data=(1.0, -0.0, np.inf, 3.0), shape=(4,)),
    # added, not multiplied: scalarized code folds eye's zeros as structural zeros (0 * inf is 0 there)
    "eye": lambda b, v: b.emit("add", b.emit("eye", shape=(2, 2)), b.emit("reshape", v["P"], shape=(2, 2))),
    "index_add": lambda b, v: b.emit("index_add", v["X"], v["P"], index=(1, (0, 4, 1))),
    "prod_others": lambda b, v: b.emit("prod_others", v["X"], axes=(1,)),
    "pack": lambda b, v: b.emit("pack", v["s"], b.emit("neg", v["s"]), b.emit("exp", v["s"]), shape=(3,)),
    "reduce_sum": lambda b, v: b.emit("reduce_sum", v["X"], axes=(1,)),
    "reduce_prod": lambda b, v: b.emit("reduce_prod", v["X"], axes=(0,)),
    "reduce_max": lambda b, v: b.emit("reduce_max", v["X"], axes=(0, 1)),
    "reduce_min": lambda b, v: b.emit("reduce_min", v["X"], axes=(1,)),
    "getitem": lambda b, v: b.emit("exp", b.emit("getitem", v["X"], index=((2, -1, -1), (1, 4, 2)))),
    "transpose": lambda b, v: b.emit("neg", b.emit("transpose", v["X"], perm=(1, 0))),
    "reshape": lambda b, v: b.emit("reshape", b.emit("transpose", v["X"], perm=(1, 0)), shape=(2, 6)),
    "broadcast_to": lambda b, v: b.emit("mul", b.emit("broadcast_to", v["P"], shape=(3, 4)), v["X"]),
    "and": lambda b, v: b.emit("select", b.emit("and", b.emit("lt", v["x"], v["y"]), b.emit("gt", v["x"], 0.0)),
                               v["x"], v["y"]),
    "or": lambda b, v: b.emit("select", b.emit("or", b.emit("lt", v["x"], v["y"]), b.emit("gt", v["x"], 0.0)),
                              v["x"], v["y"]),
    "not": lambda b, v: b.emit("select", b.emit("not", b.emit("le", v["x"], v["y"])), v["x"], v["y"]),
    "select": lambda b, v: b.emit("select", b.emit("ge", v["x"], 0.0), v["x"], v["y"]),
    **{op: _cmp(op) for op in ("lt", "le", "gt", "ge", "eq", "ne")},
}
TABLE_CASES = [_table(0), _table(0, xlin=np.inf), _table(1), _table(2), _table(3), _table_at(0), _table_at(2),
               _table_at(3)]
CASES["take"] = lambda b, v: b.emit("take", v["A"], v["T"])
# a table's lookup, also on arguments it is never given by `tabulated` (any piece m, any table t)
CASES["table_segment"] = lambda b, v: b.emit("table_segment", v["x"], **GRID, n=TABLE.n)
CASES["table_fraction"] = lambda b, v: b.emit("table_fraction", v["x"], v["y"], **GRID)
CASES["table_row"] = lambda b, v: b.emit("table_row", v["T"], v["y"], n=TABLE.n, ntab=2)


def _spectral(op, *rest, **attrs):
    """A spectral op of S (engine/ir/ops/spectral.py): S, its decomposition, then `rest` by name."""
    def case(b, v):
        args = [v["S"], b.emit("eigh3", v["S"])] + [v[n] if isinstance(n, str) else n(b, v) for n in rest]
        return b.emit(op, *args, **attrs)
    return case


CASES.update({
    "eigh3": lambda b, v: b.emit("eigh3", v["S"]),
    "eigvalsh": _spectral("eigvalsh"),
    "eigvalsh_d": lambda b, v: b.emit("add", _spectral("eigvalsh_d", "B", adjoint=False)(b, v), b.emit(
        "reduce_sum", _spectral("eigvalsh_d", "S", adjoint=True)(b, v), axes=(0, 1))),
    "matfun": lambda b, v: b.emit("add", _spectral("matfun", "s", kind=0)(b, v),
                                  b.emit("add", _spectral("matfun", "s", kind=1)(b, v),
                                         _spectral("matfun", "s", kind=2)(b, v))),
    "matfun_d1": _spectral("matfun_d1", "s", "B", kind=1),
    "trfun": lambda b, v: b.emit("add", _spectral("trfun", "s", kind=0)(b, v), _spectral("trfun", "s", kind=2)(b, v)),
    "matfun_d2": _spectral("matfun_d2", lambda b, v: b.const(0.5), "B", "S", kind=0),
    # formed by engine/opt/spectral.py: divided differences as a value, and matfun_d1 taking them
    "divdiff": lambda b, v: b.emit("add", _spectral("divdiff", "s", kind=0)(b, v), _shared_divdiff(b, v)),
    "eig_d1": _spectral("eig_d1", lambda b, v: b.emit("getitem", v["x"], index=((0, 6, 1),)), "B"),
    # det up to 4x4, closed: 1x1 to 4x4 blocks of Q, the 4x4 one a strided (transposed) view, each an output
    "det": lambda b, v: b.emit("pack", *[b.emit("det", b.emit("getitem", q, index=((0, n, 1), (1, n + 1, 1))))
                                         for n, q in ((1, v["Q"]), (2, v["Q"]), (3, v["Q"]),
                                                      (4, b.emit("transpose", v["Q"], perm=(1, 0))))], shape=(4,)),
    # det and inv above 4x4 (engine/ir/ops/linalg.py): Q transposed, so the factorization reads a strided view
    "lu": lambda b, v: b.emit("lu", b.emit("transpose", v["Q"], perm=(1, 0))),
    "lu_det": lambda b, v: b.emit("lu_det", v["Q"], b.emit("lu", v["Q"])),
    "lu_inv": lambda b, v: b.emit("lu_inv", v["Q"], b.emit("lu", v["Q"])),
    "lu_adj": lambda b, v: b.emit("add", _adj(v["Q"]), _adj(b.emit("select", b.emit(
        "eq", b.emit("array", data=tuple(float(k % 5 == 2) for k in range(25)), shape=(5, 5)), 1.0), 0.0, v["Q"]))),
})


def _shared_divdiff(b, v):
    """divdiff of x**s with the powers and the log1p of the eigenvalue gaps given, as engine/opt/spectral.py
    forms it."""
    s, e = v["S"], b.emit("eigh3", v["S"])
    lam = b.emit("eigvalsh", s, e)
    x = [b.emit("getitem", lam, index=(k,)) for k in range(3)]
    lo, hi = b.emit("pack", x[0], x[0], x[1], shape=(3,)), b.emit("pack", x[1], x[2], x[2], shape=(3,))
    gaps = b.emit("log1p", b.emit("div", b.emit("sub", lo, hi), hi))
    return b.emit("divdiff", s, e, v["s"], b.emit("pow", lam, v["s"]), gaps, kind=0)


def _adj(q):
    """lu_adj of q (with a zero column: the exactly singular path)."""
    return current().emit("lu_adj", q, current().emit("lu", q))


def elementwise_case(name):
    """A float elementwise op of arity n on vectors, and once broadcast against the scalar s."""
    op = OPS[name]
    if op.arity == 1:
        return [lambda b, v: b.emit(name, v["x"]), lambda b, v: b.emit(name, v["s"])]
    return [lambda b, v: b.emit(name, v["x"], v["y"]), lambda b, v: b.emit(name, v["s"], v["x"])]


def cases(name):
    if name == "table":
        return TABLE_CASES
    if name in CASES:
        return [CASES[name]]
    op = OPS[name]
    assert op.kind == "elementwise" and OPS[name].arity in (1, 2), f"op '{name}' has no case in tests/test_ops.py"
    return elementwise_case(name)


def family(name):
    op = OPS[name]
    if name in CASES or name == "table":
        return "other"
    return f"elementwise{op.arity}"


FAMILIES = sorted({family(n) for n in OPS})


# ---- every slot of every entry --------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(OPS))
def test_every_slot_is_filled(name):
    op = OPS[name]
    assert op.name == name and op.kind in KINDS
    assert callable(op.shape) and callable(op.numpy) and callable(op.cost)
    assert isinstance(op.rule, Rule) and callable(op.rule.jvp) and callable(op.rule.vjp)
    if op.kind == "elementwise":
        assert isinstance(op.lower, str) or callable(op.lower), "elementwise ops lower to an expression"
        assert op.arity is not None
    elif op.kind == "reduce":
        assert isinstance(op.lower, Reduction) and op.lower.combine in OPS
        assert "{t}" in op.lower.update and "{x}" in op.lower.update
    elif op.kind == "view":
        assert callable(op.lower)
    else:
        assert callable(op.lower) or callable(op.loop), "a structural op lowers to statements or a loop expression"
        assert callable(op.scalar), "a structural op gives its scalarized form"
    for h in op.helpers:
        module, _, fn = h.rpartition(".")
        where = importlib.import_module(f"adgrad.engine.numeric.{module or 'scalar'}")
        assert hasattr(where, fn), f"helper '{h}' is not in engine/numeric/{module or 'scalar'}.py"
    if op.function is not None:
        assert [o.name for o in OPS.values() if o.function == op.function] == [name]


def test_cost_is_scalar_operations_per_point():
    b = Builder()
    with b.active():
        x = Var((3, 4))
        e = b.graph.eqns
        b.emit("exp", x)
        b.emit("reduce_sum", x, axes=(1,))
        b.emit("transpose", x, perm=(1, 0))
    assert [OPS[q.op].cost(q) for q in e] == [12, 12, 0]


# ---- compiled lowering == numpy reference ------------------------------------------------------------
def _graph(names):
    """One graph with an output per case of every op in `names`: output '<op>_<k>'."""
    b = Builder()
    g = b.graph
    v = {n: Var(s) for n, s in SHAPES.items()}
    g.inputs.update(v)
    g.params.update({n: Var(a.shape) for n, a in PARAMS.items()})
    v.update(g.params)
    with b.active():
        for name in names:
            for k, case in enumerate(cases(name)):
                g.outputs[f"{name}_{k}"] = case(b, v)
    return g


def _compile(graph, form):
    if form == "scalar":
        graph = scalarize(graph, limit=10 ** 6)
        assert graph is not None
    em = Emitter(graph, list(graph.inputs), list(graph.params), list(graph.outputs))
    body = em.emit()
    per_point = [True] * len(graph.inputs) + [False] * len(graph.params) + [True] * len(graph.outputs)
    return load(module_source("ops_test", em.globals, em.args, body, per_point)), graph, em.work_size


@pytest.fixture(scope="module")
def results():
    """(family, form) -> (outputs computed by the kernel, outputs of the interpreter) at every point."""
    pts = points()
    cache = {}

    def get(fam, form):
        if (fam, form) not in cache:
            names = [n for n in OPS if family(n) == fam]
            graph = _graph(names)
            mod, compiled_graph, work = _compile(graph, form)
            outs = {n: np.empty((POINTS, max(1, v.size))) for n, v in compiled_graph.outputs.items()}
            rows = [np.ascontiguousarray(pts[n].reshape(POINTS, -1)) for n in compiled_graph.inputs]
            params = [np.ascontiguousarray(PARAMS[n].ravel()) for n in compiled_graph.params]
            mod.batch(np.zeros(1, np.int64), POINTS, *rows, *params, *outs.values(), np.zeros(max(1, work)),
                      np.empty(0, np.bool_))
            with np.errstate(all="ignore"):
                want = [interpret(graph, {n: p[i] for n, p in pts.items()}, PARAMS) for i in range(POINTS)]
            cache[fam, form] = ({n: o.reshape((POINTS,) + graph.outputs[n].shape) for n, o in outs.items()},
                                {n: np.array([w[n] for w in want]) for n in graph.outputs})
        return cache[fam, form]
    return get


def assert_same(got, want, what):
    """Same NaNs, same infinities, finite values within ULPS units in the last place."""
    assert got.shape == want.shape, what
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaN where the reference has none, or not"
    fin = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), fin), f"{what}: infinite where the reference is not, or not"
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)]), f"{what}: infinities differ"
    with np.errstate(over="ignore"):
        diff = np.abs(got[fin] - want[fin])
        ulp = np.spacing(np.maximum(np.abs(got[fin]), np.abs(want[fin])))
    worst = np.argmax(diff / ulp) if diff.size else None
    assert not diff.size or np.all(diff <= ULPS * ulp), \
        f"{what}: {got[fin][worst]!r} != {want[fin][worst]!r} ({diff[worst] / ulp[worst]:.1f} ulp)"


@pytest.mark.parametrize("form", ["loop", "scalar"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_compiled_lowering_matches_numpy(results, name, form):
    got, want = results(family(name), form)
    for k in range(len(cases(name))):
        out = f"{name}_{k}"
        assert_same(got[out], want[out], f"{name} ({form} form, case {k})")


def test_literals_round_trip():
    named = {"np.nan": np.nan, "np.inf": np.inf, "-np.inf": -np.inf}
    for x in (0.1, -0.0, 1e-320, np.inf, -np.inf, 1.7976931348623157e308):
        text = literal(x)
        assert (named[text] if text in named else float(text)) == x
    assert literal(np.nan) == "np.nan"
