"""Scheduled IR -> readable numba source for one point, plus the parallel batch driver.

Storage: scalars are Python locals; arrays are strided views (Buf) into the point's input, param or
output rows or the per-thread workspace `work`. Views (slices, transposes, broadcasts, reshapes)
cost nothing: they only change offsets and strides. Every equation appears as a comment with its
IR, so the generated file reads next to `adgrad explain`.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..ir.printer import canonical_names, format_eqn
from .schedule import Group, Single, kind, schedule


def cstrides(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return tuple(reversed(st))


@dataclass(frozen=True)
class Buf:
    array: str
    offset: int
    shape: tuple
    strides: tuple

    @property
    def contiguous(self):
        return all(s == c or d == 1 for s, d, c in zip(self.strides, self.shape, cstrides(self.shape)))

    def at(self, idx_terms):
        """Index expression for per-axis index strings (None for axes fixed at 0)."""
        terms = [str(self.offset)] if self.offset else []
        for it, st, d in zip(idx_terms, self.strides, self.shape):
            if it is None or d == 1 or st == 0:
                continue
            terms.append(it if st == 1 else f"{it}*{st}")
        return f"{self.array}[{' + '.join(terms) or '0'}]"


def _lit(x):
    if math.isnan(x):
        return "np.nan"
    if math.isinf(x):
        return "np.inf" if x > 0 else "-np.inf"
    return repr(float(x))


UNARY = {
    "neg": "(-{0})", "exp": "np.exp({0})", "log": "np.log({0})", "log1p": "np.log1p({0})",
    "expm1": "np.expm1({0})", "sqrt": "np.sqrt({0})", "cbrt": "np.cbrt({0})", "sin": "np.sin({0})",
    "cos": "np.cos({0})", "tan": "np.tan({0})", "arcsin": "np.arcsin({0})", "arccos": "np.arccos({0})",
    "arctan": "np.arctan({0})", "sinh": "np.sinh({0})", "cosh": "np.cosh({0})", "tanh": "np.tanh({0})",
    "abs": "abs({0})", "sign": "__sign({0})", "square": "({0} * {0})", "sigmoid": "__sigmoid({0})",
    "softplus": "__softplus({0})", "erf": "math.erf({0})", "not": "(not {0})",
}
BINARY = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "minimum": "__minimum({0}, {1})", "maximum": "__maximum({0}, {1})", "arctan2": "np.arctan2({0}, {1})",
    "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})", "and": "({0} and {1})", "or": "({0} or {1})",
}
REDUCE_INIT = {"reduce_sum": "0.0", "reduce_prod": "1.0", "reduce_max": "-np.inf", "reduce_min": "np.inf"}


def _pow(a, b_lit):
    """x**k for a small integer constant k as multiplications (exact for negative x, no libm call)."""
    try:
        k = float(b_lit)
    except ValueError:
        return None
    if k != int(k) or abs(k) > 8:
        return None
    k = int(k)
    if k == 0:
        return "1.0"
    prod = " * ".join([a] * abs(k))
    return f"({prod})" if k > 0 else f"(1.0 / ({prod}))"


def elem_expr(e, xs):
    if e.op in UNARY:
        return UNARY[e.op].format(*xs)
    if e.op in BINARY:
        return BINARY[e.op].format(*xs)
    if e.op == "pow":
        return _pow(xs[0], xs[1]) or f"({xs[0]} ** {xs[1]})"
    if e.op == "select":
        return f"({xs[1]} if {xs[0]} else {xs[2]})"
    raise KeyError(e.op)


class Emitter:
    def __init__(self, graph, input_names, param_names, output_names):
        self.g = graph
        self.items = schedule(graph)
        # names from the equation's position, not the Var's process-wide id: the same model gives
        # the same source (and so hits the kernel cache) whatever was compiled before it
        self.vname = {e.out: f"v{i}" for i, e in enumerate(graph.eqns)}
        self.lines = []
        self.globals = []            # lines defining constant arrays
        self.store = {}              # Var -> Buf | str (a scalar expression)
        self.args = [f"in_{n}" for n in input_names] + [f"p_{n}" for n in param_names] + \
            [f"out_{n}" for n in output_names]
        for n, v in list(graph.inputs.items()):
            self.store[v] = self._arg_storage(f"in_{n}", v)
        for n, v in list(graph.params.items()):
            self.store[v] = self._arg_storage(f"p_{n}", v)
        self.out_of = {}             # Var -> output arg it should be written to (first output only)
        for n, v in graph.outputs.items():
            self.out_of.setdefault(v, f"out_{n}")
        self._plan()
        self.work_size = 0
        self._free = []              # (offset, size) blocks
        self._owner = {}             # var -> (offset, size)

    @staticmethod
    def _arg_storage(name, v):
        return f"{name}[0]" if not v.shape else Buf(name, 0, v.shape, cstrides(v.shape))

    # ---- analysis ---------------------------------------------------------------------------
    def _plan(self):
        """Which group-local values must be stored, and the last item that reads each value or
        any view of it (a workspace block lives until then)."""
        where = {}
        for i, it in enumerate(self.items):
            for e in (it.eqns if isinstance(it, Group) else [it.eqn]):
                where[e.out] = i
        self.materialize = set()
        self.last_use = {}
        for i, it in enumerate(self.items):
            for e in (it.eqns if isinstance(it, Group) else [it.eqn]):
                for a in e.args:
                    if where.get(a) != i or not isinstance(it, Group):
                        self.materialize.add(a)
                    self.last_use[a] = max(self.last_use.get(a, -1), i)
        for v in self.g.outputs.values():
            self.materialize.add(v)
            self.last_use[v] = len(self.items)
        for it in reversed(self.items):            # a view keeps the value it reads alive
            if isinstance(it, Single) and kind(it.eqn) == "view":
                a, v = it.eqn.args[0], it.eqn.out
                self.last_use[a] = max(self.last_use.get(a, -1), self.last_use.get(v, -1))

    # ---- workspace ----------------------------------------------------------------------------
    def _release(self, i):
        for v, blk in list(self._owner.items()):
            if self.last_use.get(v, -1) < i:
                del self._owner[v]
                self._free.append(blk)

    def _alloc(self, v, i):
        """Storage for a materialized array value: its output row, or a workspace block."""
        if v in self.out_of:
            name = self.out_of[v]
            return Buf(name, 0, v.shape, cstrides(v.shape))
        self._release(i)
        n = v.size
        for j, (off, size) in enumerate(sorted(self._free)):
            if size >= n:
                self._free.remove((off, size))
                if size > n:
                    self._free.append((off + n, size - n))
                self._owner[v] = (off, n)
                return Buf("work", off, v.shape, cstrides(v.shape))
        off = self.work_size
        self.work_size += n
        self._owner[v] = (off, n)
        return Buf("work", off, v.shape, cstrides(v.shape))

    # ---- expressions ----------------------------------------------------------------------------
    def read(self, a, space, idx):
        """Expression for element `idx` (index names over `space`) of a, broadcasting a to space."""
        s = self.store[a]
        if isinstance(s, str):
            return s
        lead = len(space) - len(a.shape)
        terms = [idx[lead + k] if d != 1 else None for k, d in enumerate(a.shape)]
        x = s.at(terms)
        return f"({x} != 0.0)" if a.dtype == "bool" else x

    def write_value(self, v, expr):
        return f"(1.0 if {expr} else 0.0)" if v.dtype == "bool" else expr

    # ---- items -------------------------------------------------------------------------------
    def emit(self):
        self.names = canonical_names(self.g)
        for i, it in enumerate(self.items):
            if isinstance(it, Group):
                self._group(it, i)
            else:
                self._single(it.eqn, i)
        for n, v in self.g.outputs.items():
            self._copy_out(v, f"out_{n}")
        return self.lines

    def _comment(self, e, indent):
        self.lines.append(" " * indent + "# " + format_eqn(e, self.names))

    def _loops(self, space, indent, prefix="i"):
        idx = [f"{prefix}{k}" for k in range(len(space))]
        for k, d in enumerate(space):
            self.lines.append(" " * (indent + 4 * k) + f"for {idx[k]} in range({d}):")
        return idx, indent + 4 * len(space)

    def _group(self, grp, i):
        space = grp.space
        for e in grp.eqns:                     # storage first: outputs of this loop and accumulators
            if kind(e) == "reduce":
                if e.out.shape:
                    self.store[e.out] = self._alloc(e.out, i)
                    self._fill(self.store[e.out], REDUCE_INIT[e.op], 4)
                else:
                    self.store[e.out] = self.vname[e.out]
                    self.lines.append(f"    {self.vname[e.out]} = {REDUCE_INIT[e.op]}")
        idx, ind = self._loops(space, 4)
        pad = " " * ind
        stored = []
        for e in grp.eqns:
            self._comment(e, ind)
            if kind(e) == "reduce":
                x = self.read(e.args[0], space, idx)
                axes = e.attr("axes")
                if e.out.shape:
                    target = self.store[e.out].at([t for k, t in enumerate(idx) if k not in axes])
                else:
                    target = self.vname[e.out]
                self.lines.append(pad + _accumulate(e.op, target, x))
                continue
            if e.op == "eye":
                half = len(space) // 2
                st = cstrides(space[:half])
                flat = lambda ks: " + ".join(f"{k}*{s}" if s != 1 else k for k, s in zip(ks, st))
                expr = f"(1.0 if {flat(idx[:half])} == {flat(idx[half:])} else 0.0)"
            elif e.op in ("broadcast_to", "reshape"):
                expr = self.read(e.args[0], space, idx)
            else:
                expr = elem_expr(e, [self.read(a, space, idx) for a in e.args])
            name = self.vname[e.out]
            self.lines.append(f"{pad}{name} = {expr}")
            self.store[e.out] = name
            if e.out in self.materialize:
                buf = self._alloc(e.out, i)
                self.lines.append(f"{pad}{buf.at(idx)} = {self.write_value(e.out, name)}")
                stored.append((e.out, buf))
        for v, buf in stored:
            self.store[v] = buf                 # items after the loop read the stored array

    def _fill(self, buf, value, indent):
        idx, ind = self._loops(buf.shape, indent, prefix="f")
        self.lines.append(" " * ind + f"{buf.at(idx)} = {value}")

    def _single(self, e, i):
        k = kind(e)
        if k == "const":
            self.store[e.out] = _lit(e.attr("value"))
            return
        if k == "array":
            name = f"__a{self.vname[e.out][1:]}"
            data = ", ".join(_lit(x) for x in e.attr("data"))
            self.globals.append(f"{name} = np.array([{data}], dtype=np.float64)")
            self.store[e.out] = Buf(name, 0, e.out.shape, cstrides(e.out.shape))
            return
        self._comment(e, 4)
        if k == "scalar":
            expr = elem_expr(e, [self.read(a, (), []) for a in e.args])
            self.lines.append(f"    {self.vname[e.out]} = {expr}")
            self.store[e.out] = self.vname[e.out]
        elif k in ("view", "load"):
            view = self._view(e, i)
            if k == "load":
                self.lines.append(f"    {self.vname[e.out]} = {view.at([])}")
                self.store[e.out] = self.vname[e.out]
            else:
                self.store[e.out] = view
        elif e.op == "index_add":
            self._index_add(e, i)
        elif e.op == "prod_others":
            self._prod_others(e, i)
        elif e.op == "pack":
            dst = self._alloc(e.out, i)
            for k, idx in enumerate(_flat_indices(e.out.shape)):
                self.lines.append(f"    {dst.at(idx)} = {self.read(e.args[k], (), [])}")
            self.store[e.out] = dst
        else:
            raise NotImplementedError(f"no lowering for op {e.op}")

    def _view(self, e, i):
        src = self.store[e.args[0]]
        x = e.args[0]
        if e.op == "getitem":
            off, shape, strides = src.offset, [], []
            for it, st in zip(e.attr("index"), src.strides):
                if isinstance(it, tuple):
                    start, stop, step = it
                    off += start * st
                    shape.append(len(range(start, stop, step)))
                    strides.append(st * step)
                else:
                    off += it * st
            return Buf(src.array, off, tuple(shape), tuple(strides))
        if e.op == "transpose":
            perm = e.attr("perm")
            return Buf(src.array, src.offset, e.out.shape, tuple(src.strides[p] for p in perm))
        if e.op == "broadcast_to":
            shape = e.attr("shape")
            lead = len(shape) - x.rank
            strides = [0] * lead + [0 if d == 1 else s for d, s in zip(x.shape, src.strides)]
            return Buf(src.array, src.offset, tuple(shape), tuple(strides))
        if e.op == "reshape":
            kept = [s for d, s in zip(x.shape, src.strides) if d != 1]
            if [d for d in x.shape if d != 1] == [d for d in e.out.shape if d != 1]:
                # only unit axes come or go: still a view of the same (maybe strided) storage
                it = iter(kept)
                return Buf(src.array, src.offset, e.out.shape, tuple(0 if d == 1 else next(it) for d in e.out.shape))
            if not src.contiguous:            # a reshape of a strided view reads a contiguous copy
                src = self._copy(e.out, x.shape, src, i)
            return Buf(src.array, src.offset, e.out.shape, cstrides(e.out.shape))
        raise NotImplementedError(e.op)

    def _copy(self, owner, shape, src, i):
        dst = self._alloc(owner, i)
        dst = Buf(dst.array, dst.offset, shape, cstrides(shape))
        idx, ind = self._loops(shape, 4, prefix="c")
        self.lines.append(" " * ind + f"{dst.at(idx)} = {src.at(idx)}")
        return dst

    def _index_add(self, e, i):
        acc, val = e.args
        src = self.store[acc]
        if isinstance(src, Buf) and src.array == "work" and acc in self._owner and src.contiguous \
                and self.last_use.get(acc, -1) <= i and acc not in self.out_of and e.out not in self.out_of:
            self._owner[e.out] = self._owner.pop(acc)     # update in place: acc is dead after this
            dst = Buf("work", src.offset, e.out.shape, cstrides(e.out.shape))
        else:
            dst = self._alloc(e.out, i)
            idx, ind = self._loops(acc.shape, 4, prefix="c")
            self.lines.append(" " * ind + f"{dst.at(idx)} = {self.read(acc, acc.shape, idx)}")
        off, strides = dst.offset, []
        for it, st in zip(e.attr("index"), dst.strides):
            if isinstance(it, tuple):
                off += it[0] * st
                strides.append(st * it[2])
            else:
                off += it * st
        target = Buf(dst.array, off, val.shape, tuple(strides))
        idx, ind = self._loops(val.shape, 4, prefix="k")
        self.lines.append(" " * ind + f"{target.at(idx)} += {self.read(val, val.shape, idx)}")
        self.store[e.out] = dst

    def _prod_others(self, e, i):
        x = e.args[0]
        axes = e.attr("axes")
        dst = self._alloc(e.out, i)
        kept = [k for k in range(x.rank) if k not in axes]
        red = [k for k in range(x.rank) if k in axes]
        n = math.prod(x.shape[k] for k in red)
        kidx, ind = self._loops(tuple(x.shape[k] for k in kept), 4, prefix="q")
        pad = " " * ind
        red_shape = tuple(x.shape[k] for k in red)
        rst = cstrides(red_shape)

        def full_idx(r):
            parts = {}
            for k, s, d in zip(red, rst, red_shape):
                parts[k] = f"(({r} // {s}) % {d})"
            for k, q in zip(kept, kidx):
                parts[k] = q
            return [parts[k] for k in range(x.rank)]
        self.lines.append(f"{pad}run = 1.0")
        self.lines.append(f"{pad}for r in range({n}):")
        self.lines.append(f"{pad}    {dst.at(full_idx('r'))} = run")
        self.lines.append(f"{pad}    run *= {self.read(x, x.shape, full_idx('r'))}")
        self.lines.append(f"{pad}run = 1.0")
        self.lines.append(f"{pad}for r in range({n - 1}, -1, -1):")
        self.lines.append(f"{pad}    {dst.at(full_idx('r'))} *= run")
        self.lines.append(f"{pad}    run *= {self.read(x, x.shape, full_idx('r'))}")
        self.store[e.out] = dst

    def _copy_out(self, v, out):
        s = self.store[v]
        if isinstance(s, str):
            self.lines.append(f"    {out}[0] = {self.write_value(v, s)}")
        elif s.array != out:
            idx, ind = self._loops(v.shape, 4, prefix="o")
            dst = Buf(out, 0, v.shape, cstrides(v.shape))
            self.lines.append(" " * ind + f"{dst.at(idx)} = {self.read(v, v.shape, idx)}")


def _flat_indices(shape):
    """Literal per-axis indices of every element of `shape`, in C order."""
    return [[str(k) for k in idx] for idx in itertools.product(*map(range, shape))]


def _accumulate(op, target, x):
    if op == "reduce_sum":
        return f"{target} += {x}"
    if op == "reduce_prod":
        return f"{target} *= {x}"
    cmp = ">" if op == "reduce_max" else "<"
    return f"{target} = {x} if ({x} {cmp} {target} or {x} != {x}) else {target}"
