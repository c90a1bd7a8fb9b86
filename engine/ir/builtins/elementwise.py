"""Elementwise functions: every op whose entry names a language function (engine/ir/ops/
elementwise.py), mapped over arrays with numpy's broadcasting; and where(cond, a, b)."""
from __future__ import annotations

from ..op import OPS
from .call import builtin


def _function(op):
    def lower(call):
        return call.emit(op.name, *call.arrays(op.arity))
    return lower


for _op in OPS.values():
    if _op.function:
        builtin(_op.function)(_function(_op))


@builtin("where")
def where(call):
    c, a, b = call.arrays(3)
    if c.dtype != "bool":
        raise call.fail("where: the first argument must be a condition (a comparison)", call.args[0])
    if a.dtype == "bool" or b.dtype == "bool":
        raise call.fail("where: the branches must be numbers, not conditions")
    return call.emit("select", c, a, b)
