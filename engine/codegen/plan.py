"""Storage planning: where each value of a scheduled graph lives while the point kernel runs.

Scalars are Python locals. Arrays are strided views (`Buf`) into flat storage: the point's input,
param and output rows, a module constant, or the per-thread workspace `work`. A value that a later
item reads is stored; a value only used inside its own loop nest stays a loop-local scalar. The
workspace is reused: a block is free again once the last item reading its value (or a view of it)
is done, and a first-fit allocator hands it out again.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.op import OPS, cstrides
from .schedule import Group, Single, kind


@dataclass(frozen=True)
class Buf:
    """A strided view of a flat array named `array`: element idx is array[offset + sum(idx*strides)],
    plus `b` with `lane` (a point's element in a lanes kernel's block, codegen/vector.py LANES)."""
    array: str
    offset: int
    shape: tuple
    strides: tuple
    lane: bool = False

    @classmethod
    def whole(cls, array, shape, offset=0):
        return cls(array, offset, tuple(shape), cstrides(shape))

    @property
    def contiguous(self):
        return all(s == c or d == 1 for s, d, c in zip(self.strides, self.shape, cstrides(self.shape)))

    def view(self, offset, shape, strides):
        return Buf(self.array, offset, tuple(shape), tuple(strides), self.lane)

    def at(self, idx_terms):
        """Index expression for per-axis index strings (None for axes fixed at 0)."""
        terms = [str(self.offset)] if self.offset else []
        for it, st, d in zip(idx_terms, self.strides, self.shape):
            if it is None or d == 1 or st == 0:
                continue
            terms.append(it if st == 1 else f"{it}*{st}")
        if self.lane:
            terms.append("b")
        return f"{self.array}[{' + '.join(terms) or '0'}]"


def eqns_of(item):
    return item.eqns if isinstance(item, Group) else [item.eqn]


def liveness(items, outputs):
    """(values that must be stored, {value: index of the last item that reads it or a view of it}).
    Outputs live to the end (index len(items))."""
    where = {e.out: i for i, it in enumerate(items) for e in eqns_of(it)}
    stored, last_use = set(), {}
    for i, it in enumerate(items):
        for e in eqns_of(it):
            for a in e.args:
                if where.get(a) != i or not isinstance(it, Group):
                    stored.add(a)
                last_use[a] = max(last_use.get(a, -1), i)
    for v in outputs:
        stored.add(v)
        last_use[v] = len(items)
    for it in reversed(items):                  # a view keeps the value it reads alive
        if isinstance(it, Single) and kind(it.eqn) == "view":
            a, v = it.eqn.args[0], it.eqn.out
            last_use[a] = max(last_use.get(a, -1), last_use.get(v, -1))
    return stored, last_use


class Workspace:
    """First-fit blocks of the per-thread workspace; `size` is the most the kernel ever holds."""

    def __init__(self, last_use):
        self.last_use = last_use
        self.size = 0
        self._free = []              # (offset, size) blocks
        self._owner = {}             # value -> (offset, size)

    def _release(self, i):
        for v, blk in list(self._owner.items()):
            if self.last_use.get(v, -1) < i:
                del self._owner[v]
                self._free.append(blk)

    def alloc(self, v, i):
        """A block for v, computed at item i (blocks of values dead before i are free again)."""
        self._release(i)
        n = v.size
        for off, size in sorted(self._free):
            if size >= n:
                self._free.remove((off, size))
                if size > n:
                    self._free.append((off + n, size - n))
                self._owner[v] = (off, n)
                return Buf.whole("work", v.shape, off)
        off = self.size
        self.size += n
        self._owner[v] = (off, n)
        return Buf.whole("work", v.shape, off)

    def take_over(self, old, new, i):
        """old's block for new, if old owns a block and is dead after item i (an update in place)."""
        if old not in self._owner or self.last_use.get(old, -1) > i:
            return None
        self._owner[new] = self._owner.pop(old)
        return Buf.whole("work", new.shape, self._owner[new][0])


def staged(items, outputs, last_use):
    """{value: output Var} for values stored in an output's row rather than the workspace: v of the
    output's shape, whose last reader is the loop nest that computes the output element by element, and
    there only in elementwise equations before the output's own (so element k of v is read before
    element k of the output is written over it), never through a view, a reduction, a whole-array
    argument (take's, read at any index) or a nest that libm redoes. Seed 000's gradient is -alpha
    F'(rho) exp(...) of the exps its density summed: stored in the gradient's row, the row is written
    (and its cache lines fetched) while the exps are computed instead of all at once in the last
    loop, which then rewrites it in cache."""
    producer = {e.out: i for i, it in enumerate(items) for e in eqns_of(it)}
    viewed = {it.eqn.args[0] for it in items if isinstance(it, Single) and kind(it.eqn) == "view"}
    out = {}
    for o in dict.fromkeys(outputs):
        g = producer.get(o)
        if g is None or not isinstance(items[g], Group) or items[g].space != o.shape:
            continue
        eqns = items[g].eqns
        at = next(k for k, e in enumerate(eqns) if e.out == o)
        if kind(eqns[at]) == "reduce" or any(getattr(OPS[e.op].lower, "fallback", None) for e in eqns):
            continue

        def fits(v):
            made = producer.get(v)
            return (made is not None and made < g and isinstance(items[made], Group) and v.shape == o.shape
                    and v.dtype == "f8" and v not in outputs and v not in viewed and v not in out
                    and last_use.get(v) == g and not any(v in e.args for e in eqns[at + 1:])
                    and not any(v in e.args and kind(e) == "reduce" for e in eqns)
                    and not any(e.args[k] is v for e in eqns for k in OPS[e.op].whole))
        v = next((a for e in eqns[:at + 1] for a in e.args if fits(a)), None)
        if v is not None:
            out[v] = o
    return out
