"""Source emission: a scheduled graph -> readable numba source for one point.

The schedule (schedule.py) orders the equations into loop nests and single statements; storage
planning (plan.py) says where each value lives. The Emitter writes each item with a line writer,
taking each op's lowering from its entry (engine/ir/op.py): an expression template for elementwise
ops, the update statement of a reduction, the stride map of a view, or, for structural ops, a
function that writes its statements through the Emitter's emit context:

    ctx.comment(e)             the equation as an IR comment
    ctx.line(text)             one statement at the current depth
    ctx.block(header)          a `with` block: statements inside are indented under `header`
    ctx.loops(shape, prefix)   a `with` block of nested loops; yields the index names
    ctx.alloc(v) -> Buf        storage for v: its output row, or a workspace block
    ctx.reuse(old, new)        old's workspace block for new if old dies here (update in place), or None
    ctx.read(v, space, idx)    the expression of element idx of v (broadcast to `space`)
    ctx.bind(v, storage)       v lives there from now on (a Buf, or an expression for a scalar)
    ctx.literal(x)             a float as Python source
    ctx.constant(v, data)      a module-level constant array holding v

Every equation appears as a comment with its IR, so the generated file reads next to
`adgrad explain`. A math function is emitted as a libm call, or, in a loop nest that LLVM will
vectorize and with math="vector", as a call of engine/numeric/vecmath.py's branch-free function
(vector.py decides, and writes what such a nest needs: its sums after the loop, the trig fallback).
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..ir.op import OPS, cstrides, literal
from ..ir.ops.elementwise import MathLowering
from ..ir.printer import canonical_names, format_eqn
from . import vector
from .plan import Buf, Workspace, liveness, staged
from .schedule import Group, kind, schedule


def elem_expr(e, xs, math="libm"):
    """The Python expression of an elementwise equation over the expressions of its arguments; a math
    function in its libm or its vector form (vector.py)."""
    lower = OPS[e.op].lower
    if isinstance(lower, MathLowering):
        return lower(*xs, math=math, **dict(e.attrs))
    return lower(*xs, **dict(e.attrs)) if callable(lower) else lower.format(*xs)


class Lines:
    """A line writer: each statement at the current depth; `block` and `loops` indent their body."""

    def __init__(self, depth=4):
        self.lines, self.depth = [], depth

    def __call__(self, text):
        self.lines.append(" " * self.depth + text)

    @contextlib.contextmanager
    def block(self, header):
        self(header)
        self.depth += 4
        try:
            yield
        finally:
            self.depth -= 4

    @contextlib.contextmanager
    def loops(self, shape, prefix="i"):
        """Nested loops over shape; an axis of extent 1 is the statement `i = 0`, not a loop (each
        loop is blocks and an iterator that numba types, lowers and LLVM then optimizes away)."""
        idx = [f"{prefix}{k}" for k in range(len(shape))]
        saved = self.depth
        for k, d in enumerate(shape):
            if d == 1:
                self(f"{idx[k]} = 0")
                continue
            self(f"for {idx[k]} in range({d}):")
            self.depth += 4
        try:
            yield idx
        finally:
            self.depth = saved


class Emitter:
    """math: "vector" (vecmath's functions in the loop nests that vectorize, vector.py) or "libm"."""

    def __init__(self, graph, input_names, param_names, output_names, math="vector", lanes=False):
        self.g = graph
        self.math = math
        # lanes (straight-line code only, vector.lanes_fit): the body runs for point b of a block,
        # its inputs and outputs at work[(row + k) * LANES_BLOCK + b], rows in argument order
        self.lanes = {}
        if lanes:
            row = 0
            for name, v in [*(("in_" + n, graph.inputs[n]) for n in input_names),
                            *(("out_" + n, graph.outputs[n]) for n in output_names)]:
                self.lanes[name] = (row, max(1, v.size))
                row += max(1, v.size)
        self.calls = []              # (function, "vector" | "libm", where and why) per math call emitted
        self.items = schedule(graph)
        # names from the equation's position, not the Var's process-wide id: the same model gives
        # the same source (and so hits the kernel cache) whatever was compiled before it
        self.vname = {e.out: f"v{i}" for i, e in enumerate(graph.eqns)}
        self.out = Lines()
        self.globals = []            # lines defining constant arrays
        self.store = {}              # Var -> Buf | str (a scalar expression)
        self.args = [f"in_{n}" for n in input_names] + [f"p_{n}" for n in param_names] + \
            [f"out_{n}" for n in output_names]
        for prefix, vs in (("in", graph.inputs), ("p", graph.params)):
            for n, v in vs.items():
                buf = self.row_buf(f"{prefix}_{n}", v.shape)
                self.store[v] = buf.at([]) if not v.shape else buf
        self.out_of = {}             # Var -> output arg it should be written to (first output only)
        for n, v in graph.outputs.items():
            self.out_of.setdefault(v, f"out_{n}")
        self.early = _early_stores(graph, self.out_of, self.row_buf)
        self.stored, last_use = liveness(self.items, graph.outputs.values())
        self.ws = Workspace(last_use)
        self.staged = {} if lanes else {v: self.out_of[o] for v, o in staged(self.items, self.out_of, last_use).items()}
        self.i = 0                   # the item being emitted

    @property
    def work_size(self):
        lanes = sum(size for _, size in self.lanes.values()) * vector.LANES_BLOCK
        return max(self.ws.size, lanes)

    def row_buf(self, name, shape):
        """Where argument `name` (in_x, p_x, out_x) of a point lives: its row, or in a lanes kernel
        (inputs and outputs) its elements of this block in the workspace."""
        if name not in self.lanes:
            return Buf.whole(name, shape)
        row, _ = self.lanes[name]
        step = vector.LANES_BLOCK
        return Buf("work", row * step, tuple(shape), tuple(s * step for s in cstrides(shape)), lane=True)

    def emit(self):
        """The body of the point function, as lines."""
        self.names = canonical_names(self.g)
        for self.i, it in enumerate(self.items):
            if isinstance(it, Group):
                self._group(it)
            else:
                self._single(it.eqn)
        for n, v in self.g.outputs.items():
            self._copy_out(v, f"out_{n}")
        return self.out.lines

    # ---- the emit context of structural ops ---------------------------------------------------------
    def comment(self, e):
        self.out("# " + format_eqn(e, self.names))

    def line(self, text):
        self.out(text)

    def block(self, header):
        return self.out.block(header)

    def loops(self, shape, prefix="i"):
        return self.out.loops(shape, prefix)

    def alloc(self, v):
        if v in self.out_of:
            return self.row_buf(self.out_of[v], v.shape)
        if v in self.staged:
            return self.row_buf(self.staged[v], v.shape)
        return self.ws.alloc(v, self.i)

    def reuse(self, old, new):
        src = self.store[old]
        if isinstance(src, Buf) and src.array == "work" and src.contiguous and old not in self.out_of \
                and new not in self.out_of:
            return self.ws.take_over(old, new, self.i)
        return None

    def read(self, a, space, idx):
        s = self.store[a]
        if isinstance(s, str):
            return s
        lead = len(space) - len(a.shape)
        x = s.at([idx[lead + k] if d != 1 else None for k, d in enumerate(a.shape)])
        return f"({x} != 0.0)" if a.dtype == "bool" else x

    def buffer(self, v):
        """The strided storage (Buf) of an array value, for a helper that reads it whole."""
        return self.store[v]

    def bind(self, v, storage):
        self.store[v] = storage

    literal = staticmethod(literal)

    def constant(self, v, data):
        name = f"__a{self.vname[v][1:]}"
        self.globals.append(f"{name} = np.array([{', '.join(literal(x) for x in data)}], dtype=np.float64)")
        return Buf.whole(name, v.shape)

    # ---- items ------------------------------------------------------------------------------------
    @staticmethod
    def _as_number(v, expr):
        return f"__select({expr}, 1.0, 0.0)" if v.dtype == "bool" else expr

    def _group(self, grp):
        """One loop nest over grp.space: elementwise values as loop locals (stored where a later item
        reads them), reductions accumulating in place; with vector math if vector.decide says so."""
        calls = [e for e in grp.eqns if kind(e) != "reduce" and vector.is_call(e, self._probe_args(e))]
        d = vector.decide(self, grp, calls)
        form = "vector" if d.vector and self.math == "vector" else "libm"
        why = "math: libm" if d.vector and form == "libm" else d.reason
        self.calls += [(vector.function(e), form, why) for e in calls]
        bufs = self._plan(grp, d.split)
        if not d.vector:
            self._nest(grp, bufs)
            return
        trig = form == "vector" and any(OPS[e.op].lower.fallback for e in calls)
        flag = f"fb{self.i}" if trig else None
        if flag:
            self.out(f"{flag} = False")
        self._nest(grp, bufs, form, d.split, flag)
        if flag:       # a lane beyond vecmath.TRIG_MAX: the nest again as math: libm writes it
            with self.out.block(f"if {flag}:"):
                self._nest(grp, bufs, "libm", d.split)
        for v, e in d.split.items():
            self.comment(e)
            src = bufs.get(e.args[0]) or self.store[e.args[0]]
            target = (lambda kidx, b=bufs[v]: b.at(kidx)) if v.shape else (lambda kidx, n=self.vname[v]: n)
            vector.reduce_tail(self, e, src, grp.space, target)
            self.store[v] = bufs.get(v, self.vname[v])

    def _plan(self, grp, split):
        """The storage a loop nest writes, allocated once (a nest redone with libm writes the same
        places): the accumulators of shaped reductions, then the values a later item or a split
        reduction reads, in order."""
        bufs = {e.out: self.alloc(e.out) for e in grp.eqns if kind(e) == "reduce" and e.out.shape}
        keep = self.stored | {e.args[0] for e in split.values()}
        for e in grp.eqns:
            if kind(e) != "reduce" and e.out in keep:
                bufs[e.out] = self.alloc(e.out)
        return bufs

    def _nest(self, grp, bufs, math="libm", split=(), flag=None):
        """The accumulators' start values, then the loop nest; `split` reductions are left to the
        caller, `flag` ORs the lanes that need libm's trigonometric functions."""
        space = grp.space
        fills = []                             # accumulators first, outside the loop
        for e in grp.eqns:
            if kind(e) == "reduce" and e.out not in split:
                start = literal(OPS[e.op].lower.identity)
                if e.out.shape:
                    self.store[e.out] = bufs[e.out]
                    fills.append((bufs[e.out], start))
                else:
                    self.store[e.out] = self.vname[e.out]
                    self.out(f"{self.vname[e.out]} = {start}")
        self._fill(fills)
        with self.out.loops(space) as idx:
            for e in grp.eqns:
                if e.out in split:              # after the loop (vector.reduce_tail)
                    continue
                self.comment(e)
                if kind(e) == "reduce":
                    kept = [t for k, t in enumerate(idx) if k not in e.attr("axes")]
                    target = self.store[e.out].at(kept) if e.out.shape else self.vname[e.out]
                    x = self.read(e.args[0], space, idx)
                    self.out(OPS[e.op].lower.update.format(t=target, x=x))
                    continue
                self._elem(e, space, idx, math, flag)
                if e.out in bufs:
                    self.out(f"{bufs[e.out].at(idx)} = {self._as_number(e.out, self.vname[e.out])}")
        for v, buf in bufs.items():
            self.store[v] = buf                 # items after the loop read the stored array

    def _fill(self, fills):
        """Set each (Buf, start value): one flat loop per run of contiguous blocks of one array with
        one start value (the accumulators of a nest are mostly adjacent workspace blocks)."""
        runs = []                              # [array, first, stop, start value]
        for buf, start in fills:
            if not buf.contiguous:
                with self.out.loops(buf.shape, "f") as idx:
                    self.out(f"{buf.at(idx)} = {start}")
                continue
            size = int(np.prod(buf.shape))
            for run in runs:
                if run[0] == buf.array and run[3] == start and buf.offset in (run[2], run[1] - size):
                    run[1], run[2] = min(run[1], buf.offset), max(run[2], buf.offset + size)
                    break
            else:
                runs.append([buf.array, buf.offset, buf.offset + size, start])
        for array, first, stop, start in runs:
            if stop - first == 1:
                self.out(f"{array}[{first}] = {start}")
                continue
            with self.out.block(f"for f0 in range({first}, {stop}):" if first else f"for f0 in range({stop}):"):
                self.out(f"{array}[f0] = {start}")

    def _elem(self, e, space, idx, math, flag):
        """An elementwise equation (or a view or loop expression) inside a loop nest, as a loop local."""
        op = OPS[e.op]
        if op.loop is not None:
            expr = op.loop(idx, space)
        elif op.kind == "view":        # a scalar broadcast or reshaped inside the loop
            expr = self.read(e.args[0], space, idx)
        else:
            xs = self._elem_args(e, space, idx)
            expr = elem_expr(e, xs, math)
            if flag and isinstance(op.lower, MathLowering) and op.lower.fallback:
                self.out(f"{flag} = {flag} | {op.lower.fallback.format(*xs)}")
        name = self.vname[e.out]
        self.out(f"{name} = {expr}")
        self.store[e.out] = name

    def _probe_args(self, e):
        """Argument expressions good enough to tell whether a lowering is a call (x**3 is not)."""
        return [s if isinstance(s := self.store.get(a), str) else f"x{k}" for k, a in enumerate(e.args)]

    def _elem_args(self, e, space, idx):
        """The expressions of an elementwise equation's arguments at idx; `whole` ones as their array."""
        whole = OPS[e.op].whole
        return [self.store[a].array if k in whole else self.read(a, space, idx) for k, a in enumerate(e.args)]

    def _single(self, e):
        op, k = OPS[e.op], kind(e)
        if e.op == "pack" and e.out in self.out_of:
            self._pack_rest(e)
            return
        if op.kind == "structural":
            op.lower(self, e)
            return
        self.comment(e)
        name = self.vname[e.out]
        if k == "scalar":
            xs = self._elem_args(e, (), [])
            math = "vector" if self.lanes else "libm"
            if vector.is_call(e, xs):
                self.calls.append((vector.function(e), math, f"straight-line code, {vector.LANES_BLOCK} points "
                                   "per vector pass" if self.lanes else "straight-line code"))
            self.out(f"{name} = {elem_expr(e, xs, math)}")
            self.store[e.out] = name
        elif k == "load":
            self.out(f"{name} = {self._view(e).at([])}")
            self.store[e.out] = name
        else:
            self.store[e.out] = self._view(e)
        for at in self.early.pop(e.out, ()) if k in ("scalar", "load") else ():
            self.out(f"{at} = {name}")

    def _pack_rest(self, e):
        """An output packed from scalars: the elements not stored as they were computed (inputs,
        params, constants)."""
        self.comment(e)
        dst = self.alloc(e.out)
        for a in dict.fromkeys(e.args):
            for at in self.early.pop(a, ()):
                self.out(f"{at} = {self.read(a, (), [])}")
        self.bind(e.out, dst)

    def _view(self, e):
        src = self.store[e.args[0]]
        lower = OPS[e.op].lower
        got = lower(src.offset, src.strides, e)
        if got is None:                        # not expressible over this storage: copy it first
            src = self._copy(e.out, e.args[0].shape, src)
            got = lower(src.offset, src.strides, e)
        return src.view(got[0], e.out.shape, got[1])

    def _copy(self, owner, shape, src):
        dst = self.alloc(owner)
        dst = Buf.whole(dst.array, shape, dst.offset)
        with self.out.loops(shape, "c") as idx:
            self.out(f"{dst.at(idx)} = {src.at(idx)}")
        return dst

    def _copy_out(self, v, out):
        s, dst = self.store[v], self.row_buf(out, v.shape)
        if isinstance(s, str):
            self.out(f"{dst.at([])} = {self._as_number(v, s)}")
        elif (s != dst) if self.lanes else (s.array != out):     # not already computed in place
            with self.out.loops(v.shape, "o") as idx:
                self.out(f"{dst.at(idx)} = {self.read(v, v.shape, idx)}")


def _early_stores(graph, out_of, row_buf):
    """{scalar Var: [output elements it is]} of the outputs packed from scalars (straight-line code).
    Each element is stored right after the statement computing it: stored together at the end, the
    values of a Hessian would all be live at once, more than the registers hold, and spill."""
    early = {}
    for e in graph.eqns:
        if e.op == "pack" and e.out in out_of:
            dst = row_buf(out_of[e.out], e.out.shape)
            for k, a in enumerate(e.args):
                idx = [str(i) for i in np.unravel_index(k, e.out.shape)]
                early.setdefault(a, []).append(dst.at(idx))
    return early
