"""The typed IR: single-assignment equations over values with static shapes.

A `Var` is a value (float64 or bool) of a static shape. An `Eqn` defines one Var from an op, its
argument Vars and hashable static attributes. A `Graph` is an ordered list of equations plus the
named inputs, params and outputs; every pass maps a Graph to a Graph. Equations are built through
`Builder`, which checks shapes with the op's shape rule, folds trivial identities and numbers values
(hash-consing), so identical subexpressions, from the model, its derivatives or both, are one Var.
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import ShapeError
from ..limits import MAX_ELEMENTS, MAX_EQUATIONS
from .op import OPS, broadcast_shapes

_current = contextvars.ContextVar("adgrad_builder")


def current():
    """The Builder that Var arithmetic (`x * y`, `-x`) appends to; see `Builder.active`."""
    return _current.get()


def lift(x):
    """A Var for x: Vars pass through, Python numbers become scalar constants."""
    return x if isinstance(x, Var) else current().const(x)

_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class Var:
    shape: tuple
    dtype: str = "f8"          # "f8" or "bool"
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def rank(self):
        return len(self.shape)

    def __repr__(self):
        return f"v{self.id}"

    # Arithmetic builds IR in the active Builder, so derivative rules read like math.
    def __add__(self, o): return current().emit("add", self, lift(o))
    def __radd__(self, o): return current().emit("add", lift(o), self)
    def __sub__(self, o): return current().emit("sub", self, lift(o))
    def __rsub__(self, o): return current().emit("sub", lift(o), self)
    def __mul__(self, o): return current().emit("mul", self, lift(o))
    def __rmul__(self, o): return current().emit("mul", lift(o), self)
    def __truediv__(self, o): return current().emit("div", self, lift(o))
    def __rtruediv__(self, o): return current().emit("div", lift(o), self)
    def __pow__(self, o): return current().emit("pow", self, lift(o))
    def __neg__(self): return current().emit("neg", self)


@dataclass(frozen=True, eq=False)
class Eqn:
    out: Var
    op: str
    args: tuple
    attrs: tuple = ()          # sorted (name, value) pairs, values hashable

    def attr(self, name, default=None):
        for k, v in self.attrs:
            if k == name:
                return v
        return default


@dataclass
class Graph:
    inputs: dict               # name -> Var (per-point inputs)
    params: dict               # name -> Var (shared by all points)
    eqns: list
    outputs: dict              # name -> Var

    def producers(self):
        return {e.out: e for e in self.eqns}


class Builder:
    """Appends equations to a graph; the only way passes create IR."""

    def __init__(self, graph: Graph | None = None):
        self.graph = graph if graph is not None else Graph({}, {}, [], {})
        self._memo = {}
        self._prod = {}
        for e in self.graph.eqns:
            self._remember(e)

    def _remember(self, e):
        self._memo[self._key(e.op, e.args, e.attrs)] = e.out
        self._prod[e.out] = e

    @staticmethod
    def _key(op, args, attrs):
        ids = tuple(a.id for a in args)
        if OPS[op].commutative:
            ids = tuple(sorted(ids))
        return (op, ids, attrs)

    def producer(self, v):
        return self._prod.get(v)

    def const_value(self, v):
        """The Python float of a scalar constant Var, else None."""
        e = self._prod.get(v)
        if e is not None and e.op == "const" and not e.out.shape:
            return e.attr("value")
        return None

    @contextlib.contextmanager
    def active(self):
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    def emit(self, op, *args, **attrs):
        """Add `op(*args, **attrs)` (or reuse an identical earlier one) and return its Var."""
        args = tuple(a if isinstance(a, Var) else self.const(a) for a in args)
        folded = self._fold(op, args, attrs)
        if folded is not None:
            return folded
        attrs_t = tuple(sorted(attrs.items()))
        key = self._key(op, args, attrs_t)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        spec = OPS[op]
        shape, dtype = spec.shape([a.shape for a in args], [a.dtype for a in args], **attrs)
        if math.prod(shape) > MAX_ELEMENTS:
            raise ShapeError(f"{op}: a value of shape {tuple(shape)} has {math.prod(shape):,} elements per point, "
                             f"more than the limit of {MAX_ELEMENTS:,}")
        v = Var(tuple(shape), dtype)
        e = Eqn(v, op, tuple(args), attrs_t)
        if len(self.graph.eqns) >= MAX_EQUATIONS:
            raise ShapeError(f"the model and its derivatives grew beyond {MAX_EQUATIONS:,} operations, the limit")
        self.graph.eqns.append(e)
        self._remember(e)
        return v

    def const(self, value, shape=()):
        if shape:
            return self.emit("broadcast_to", self.const(value), shape=tuple(shape))
        return self.emit("const", value=float(value))

    def _fold(self, op, args, attrs):
        """Constant folding and algebraic identities that keep the result's shape and dtype."""
        spec = OPS[op]
        if spec.kind != "elementwise":
            if op == "broadcast_to" and args[0].shape == tuple(attrs["shape"]):
                return args[0]
            if op == "reshape" and args[0].shape == tuple(attrs["shape"]):
                return args[0]
            inner = self._prod.get(args[0]) if args else None
            if op == "reshape" and inner is not None and inner.op == "reshape":
                return self.emit("reshape", inner.args[0], **attrs)
            if op == "transpose" and tuple(attrs["perm"]) == tuple(range(args[0].rank)):
                return args[0]
            if op.startswith("reduce_") and not attrs["axes"]:
                return args[0]
            return None
        if spec.whole:              # an argument read whole (a table): nothing to fold
            return None
        consts = [self.const_value(a) for a in args]
        if all(c is not None for c in consts) and spec.name not in ("select", "stop") and all(not a.shape for a in args):
            with np.errstate(all="ignore"):
                val = spec.numpy(*[np.float64(c) for c in consts], **attrs)
            if np.result_type(val) == np.bool_:
                return None
            return self.const(float(val))
        shape = broadcast_shapes(op, [a.shape for a in args])     # raises ShapeError naming both shapes
        def same(i):   # argument i alone determines the result's shape
            return args[i].shape == shape and args[i].dtype == "f8"
        c = consts
        if op == "add":
            if c[1] == 0.0 and same(0): return args[0]
            if c[0] == 0.0 and same(1): return args[1]
        elif op == "sub":
            if c[1] == 0.0 and same(0): return args[0]
            if c[0] == 0.0 and same(1): return self.emit("neg", args[1])
        elif op == "mul":
            if c[1] == 1.0 and same(0): return args[0]
            if c[0] == 1.0 and same(1): return args[1]
            if c[1] == -1.0 and same(0): return self.emit("neg", args[0])
            if c[0] == -1.0 and same(1): return self.emit("neg", args[1])
        elif op == "div":
            if c[1] == 1.0 and same(0): return args[0]
        elif op == "pow" and c[1] is not None and same(0):
            if c[1] == 1.0: return args[0]
            if c[1] == 2.0: return self.emit("square", args[0])
            if c[1] == 0.5: return self.emit("sqrt", args[0])
        elif op == "neg":
            e = self._prod.get(args[0])
            if e is not None and e.op == "neg":
                return e.args[0]
        return None
