"""engine/opt/selects.py: selects inside a select on the same condition are decided, with the same bits
(NaN, infinities and signed zeros included), and nothing is computed twice."""
from __future__ import annotations

import numpy as np

from adgrad.engine.ir.core import Builder, Var
from adgrad.engine.ir.interp import interpret
from adgrad.engine.opt.selects import simplify_selects

VALUES = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 5e-324, 1e308, 3.0])


def _graph():
    """The shape of where's gradient: select(c, select(c, a, 0) * y + select(c, b, z) / y, 0), a select
    in the false branch, a value read twice, and a select of another shape."""
    b = Builder()
    g = b.graph
    x, y, z = Var((10,)), Var((10,)), Var((10,))
    g.inputs.update(x=x, y=y, z=z)
    with b.active():
        c = b.emit("lt", x, y)
        inner = b.emit("select", c, x, 0.0)
        shared = b.emit("mul", inner, z)             # read twice: kept, not rewritten
        t = b.emit("add", b.emit("mul", inner, y), b.emit("div", b.emit("select", c, z, x), y))
        g.outputs["t"] = b.emit("select", c, t, 0.0)
        g.outputs["f"] = b.emit("select", c, -0.0, b.emit("exp", b.emit("select", c, y, z)))
        g.outputs["s"] = b.emit("add", shared, b.emit("select", c, shared, 1.0))
        g.outputs["r"] = b.emit("reduce_sum", b.emit("select", c, b.emit("neg", inner), 0.0), axes=(0,))
    return g


def test_selects_are_decided_with_the_same_bits():
    g = _graph()
    s = simplify_selects(g)
    ops = [e.op for e in s.eqns]
    assert ops.count("select") < [e.op for e in g.eqns].count("select")
    assert ops.count("mul") <= [e.op for e in g.eqns].count("mul")      # nothing computed twice
    rng = np.random.default_rng(0)
    for _ in range(20):
        pt = {n: rng.choice(VALUES, 10) for n in ("x", "y", "z")}
        want, got = interpret(g, pt, {}), interpret(s, pt, {})
        for n in want:
            assert np.array_equal(want[n].view(np.int64), got[n].view(np.int64)) or \
                np.array_equal(want[n], got[n], equal_nan=True), n


def test_the_where_gradient_keeps_one_select_per_mask():
    g = _graph()
    s = simplify_selects(g)
    t = s.producers()[s.outputs["t"]]
    inside = {a for a in t.args[1:]}
    seen, stack = set(), list(inside)
    while stack:                                  # no select on c below the outer one of t
        v = stack.pop()
        e = s.producers().get(v)
        if e is None or v in seen:
            continue
        seen.add(v)
        assert not (e.op == "select" and e.args[0] is t.args[0]), "a select on the same mask is left inside"
        stack.extend(e.args)
