"""Fusion: order the equations into items, each one statement or one loop nest (a Group).

A Group is a loop over one index space; its members are elementwise equations of that shape, which
become loop-local scalars, and reductions of that shape, which accumulate inside the same loop. So
EAM's value is one pass over x, and its gradient a second pass: `exp` runs once per element.
Scalar equations and views that do not depend on the open group are hoisted above it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.op import OPS
from ..ir.printer import canonical_names, format_eqn


@dataclass
class Group:
    space: tuple
    eqns: list = field(default_factory=list)


@dataclass
class Single:
    eqn: object


def kind(e):
    """How an equation is lowered: const (no arguments, hoisted), scalar, load, view, elem, reduce or
    other (a structural op's own statements)."""
    op = OPS[e.op]
    if op.loop is not None:
        return "elem"
    if op.kind == "structural":
        return "other" if e.args else "const"
    if op.kind == "view":
        if not e.out.shape:
            return "load"
        return "elem" if not e.args[0].shape else "view"
    if op.kind == "elementwise":
        return "elem" if e.out.shape else "scalar"
    return "reduce"


def schedule(graph):
    """The equations of `graph` as items: loop nests (Group) and single statements (Single)."""
    return sink_inputs(_Scheduler(graph).run(list(graph.eqns)), graph)


def sink_inputs(items, graph):
    """Move an arithmetic equation (no math call, no table) from the loop nest the greedy pass put it in,
    which does not read it, to the later nest of the same space that does (all its readers): it is
    computed where it is used instead of stored in the workspace and loaded back. Its arguments must be
    inputs, or values stored anyway because another nest reads them too (EAM's 2 R of the gradient of
    |R|^2, read by the last loop only; -alpha exp(...) of seed 000's gradient, from the exp its sum
    reads)."""
    made = {e.out: i for i, it in enumerate(items) if isinstance(it, Group) for e in it.eqns}
    readers = {}
    for i, it in enumerate(items):
        for e in (it.eqns if isinstance(it, Group) else [it.eqn]):
            for a in e.args:
                readers.setdefault(a, set()).add(i)
    outputs = set(graph.outputs.values())
    for i, it in enumerate(items):
        if not isinstance(it, Group):
            continue
        for e in list(it.eqns):
            op, at = OPS[e.op], readers.get(e.out, set())
            if kind(e) != "elem" or op.kind != "elementwise" or op.helpers or e.out in outputs or len(at) != 1 \
                    or not all(_stored(a, made, readers, items) for a in e.args) or not isinstance(op.lower, str):
                continue
            j = next(iter(at))
            if j > i and isinstance(items[j], Group) and items[j].space == it.space:
                it.eqns.remove(e)
                items[j].eqns.insert(0, e)
                made[e.out] = j
    return [it for it in items if not isinstance(it, Group) or it.eqns]


def _stored(a, made, readers, items):
    """Whether a later nest can read `a` without storing it for that alone: an input or a scalar, or a
    value another nest reads, or one its own nest sums (the vectorized nest keeps what it sums in
    the workspace and adds it up after the loop, engine/codegen/vector.py)."""
    if a not in made:
        return True
    grp = items[made[a]]
    return bool(readers[a] - {made[a]}) or any(kind(r) == "reduce" and a in r.args for r in grp.eqns)


class _Scheduler:
    """Greedy fusion: keep one loop nest open and put into it every ready equation that fits; hoist
    ready scalars, constants and views that do not read it above it; when nothing more can be
    placed, close the nest and open the next one with the first ready equation."""

    def __init__(self, graph):
        self.available = set(graph.inputs.values()) | set(graph.params.values())   # complete values
        self.root = {}              # view var -> the var whose storage it reads
        self.items = []
        self.group = None           # the open loop nest
        self.at = None              # where hoisted statements go: just above the open nest
        self.produced = set()       # values the open nest computes
        self.local = set()          # ... of which loop-local scalars (elementwise values)

    def run(self, pending):
        while pending:
            e = next((e for e in pending if self._ready(e) and self._place(e)), None)
            if e is not None:
                pending.remove(e)
            elif self.group is not None:        # nothing more fits: close the loop
                self.available |= self.produced
                self.group, self.produced, self.local = None, set(), set()
            else:
                e = next(e for e in pending if all(a in self.available for a in e.args))
                pending.remove(e)
                self._open(e)
        return self.items

    def _ready(self, e):
        return all(a in self.available or a in self.produced for a in e.args)

    def _root(self, v):
        while v in self.root:
            v = self.root[v]
        return v

    def _touches_group(self, a):
        return a in self.produced or self._root(a) in self.produced

    def _place(self, e):
        """Put e into the open nest, or hoist it above it; False if it must wait."""
        k = kind(e)
        if self.group is not None and self._fits(e, k):
            self.group.eqns.append(e)
            self.produced.add(e.out)
            if k == "elem":
                self.local.add(e.out)
            return True
        if k in ("const", "scalar", "load", "view") and not any(self._touches_group(a) for a in e.args):
            if self.group is not None:
                self.items.insert(self.at, Single(e))
                self.at += 1
            else:
                self.items.append(Single(e))
            self._done(e, k)
            return True
        return False

    def _fits(self, e, k):
        space = {"elem": e.out.shape, "reduce": e.args[0].shape if e.args else None}.get(k)
        if space != self.group.space:
            return False
        for a in e.args:
            if a in self.local:
                continue                        # a loop-local value of this group
            if not a.shape and a not in self.produced:
                continue                        # a scalar computed before the loop
            if a in self.available and not self._touches_group(a):
                continue                        # a complete buffer
            return False
        return True

    def _open(self, e):
        k = kind(e)
        if k in ("elem", "reduce"):
            self.group = Group(e.out.shape if k == "elem" else e.args[0].shape, [e])
            self.at = len(self.items)
            self.items.append(self.group)
            self.produced = {e.out}
            self.local = {e.out} if k == "elem" else set()
        else:
            self.items.append(Single(e))
            self._done(e, k)

    def _done(self, e, k):
        if k == "view":
            self.root[e.out] = e.args[0]
        self.available.add(e.out)


def format_schedule(graph):
    """The schedule as text: each loop nest as `loop [space]:` with its equations indented, each
    single statement as its equation (canonical IR names, as `adgrad explain` prints the IR)."""
    names = canonical_names(graph)
    lines = []
    for it in schedule(graph):
        if isinstance(it, Group):
            lines.append(f"loop [{', '.join(map(str, it.space))}]:")
            lines += ["    " + format_eqn(e, names) for e in it.eqns]
        else:
            lines.append(format_eqn(it.eqn, names))
    return "\n".join(lines)
