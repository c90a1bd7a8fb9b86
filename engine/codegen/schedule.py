"""Fusion: order the equations into items, each one statement or one loop nest (a Group).

A Group is a loop over one index space; its members are elementwise equations of that shape, which
become loop-local scalars, and reductions of that shape, which accumulate inside the same loop. So
EAM's value is one pass over x, and its gradient a second pass: `exp` runs once per element.
Scalar equations and views that do not depend on the open group are hoisted above it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.ops import OPS


@dataclass
class Group:
    space: tuple
    eqns: list = field(default_factory=list)


@dataclass
class Single:
    eqn: object


def kind(e):
    """How an equation is lowered: const, array, scalar, load, view, elem, reduce or other."""
    spec = OPS[e.op]
    if e.op in ("const", "array"):
        return e.op
    if e.op == "eye":
        return "elem"
    if spec.kind == "view":
        if not e.out.shape:
            return "load"
        return "elem" if not e.args[0].shape else "view"
    if spec.kind == "elementwise":
        return "elem" if e.out.shape else "scalar"
    if spec.kind == "reduce":
        return "reduce"
    return "other"


def schedule(graph):
    available = set(graph.inputs.values()) | set(graph.params.values())
    root = {}                       # view var -> the var whose storage it reads
    items = []
    group, group_pos, produced, local = None, None, set(), set()

    def root_of(v):
        while v in root:
            v = root[v]
        return v

    def touches_group(a):
        return a in produced or root_of(a) in produced

    def fits(e, k):
        if k == "elem":
            space = e.out.shape
        elif k == "reduce":
            space = e.args[0].shape
        else:
            return False
        if space != group.space:
            return False
        for a in e.args:
            if a in local:
                continue                        # a loop-local value of this group
            if not a.shape and a not in produced:
                continue                        # a scalar computed before the loop
            if a in available and not touches_group(a):
                continue                        # a complete buffer
            return False
        return True

    pending = list(graph.eqns)
    while pending:
        placed = False
        for i, e in enumerate(pending):
            if not all(a in available or a in produced for a in e.args):
                continue
            k = kind(e)
            if group is not None and fits(e, k):
                group.eqns.append(e)
                produced.add(e.out)
                if k == "elem":
                    local.add(e.out)
            elif k in ("const", "array", "scalar", "load", "view") and not any(touches_group(a) for a in e.args):
                if k == "view":
                    root[e.out] = e.args[0]
                if group is not None:
                    items.insert(group_pos, Single(e))
                    group_pos += 1
                else:
                    items.append(Single(e))
                available.add(e.out)
            else:
                continue
            pending.pop(i)
            placed = True
            break
        if placed:
            continue
        if group is not None:                   # nothing more fits: close the loop
            available |= produced
            group, produced, local = None, set(), set()
            continue
        e = next(e for e in pending if all(a in available for a in e.args))
        pending.remove(e)
        k = kind(e)
        if k in ("elem", "reduce"):
            group = Group(e.out.shape if k == "elem" else e.args[0].shape, [e])
            group_pos = len(items)
            items.append(group)
            produced = {e.out}
            local = {e.out} if k == "elem" else set()
        else:
            if k == "view":
                root[e.out] = e.args[0]
            items.append(Single(e))
            available.add(e.out)
    return items
