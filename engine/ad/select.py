"""Mode selection for `mode: auto`: a cost estimate over the IR.

Forward vector mode pushes size(wrt) tangent directions through every operation; reverse mode runs
the forward sweep, then pulls size(of) cotangents back, at roughly twice the work per direction
(partials plus accumulation). So forward costs about W * size(wrt) and reverse about
W + 2 W * size(of), where W is the work (elements touched) of the equations between wrt and of.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Choice:
    mode: str
    forward_cost: int
    reverse_cost: int
    reason: str


def work(graph, custom, of, wrt):
    """Elements touched by the equations that `of` needs and that depend on `wrt`."""
    from .transform import _depends
    live = _depends(graph, [wrt])
    needed = {of}
    total = 0
    for e in reversed(graph.eqns):
        if e.out in needed:
            needed.update(e.args)
            if e.out in live:
                total += max(1, e.out.size, *(a.size for a in e.args))
    return max(total, 1)


def choose(graph, custom, of, wrt, requested, has_manual):
    w = work(graph, custom, of, wrt)
    fwd = w * max(1, wrt.size)
    rev = w + 2 * w * max(1, of.size)
    if requested in ("forward", "reverse"):
        return Choice(requested, fwd, rev, "requested")
    if requested == "manual":
        return Choice("manual", fwd, rev, "requested (the model's hand-written derivative)")
    if fwd <= rev:
        why = f"forward: {wrt.size} tangent direction(s) cost {fwd} <= reverse {rev} for an output of size {of.size}"
        return Choice("forward", fwd, rev, why)
    why = f"reverse: output of size {of.size} costs {rev} < forward {fwd} for {wrt.size} input directions"
    return Choice("reverse", fwd, rev, why)
