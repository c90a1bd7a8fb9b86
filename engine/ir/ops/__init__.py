"""The closed set of IR ops: one entry per op with its shape rule and its numpy meaning.

Derivative rules live in one table in engine/ad/rules.py and the numba lowering in
engine/codegen/emit.py; tests check that every op here has both.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...errors import ShapeError


def broadcast_shapes(opname, shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        pretty = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(f"{opname}: shapes {pretty} do not broadcast") from None


def _elementwise(name, nargs, out_dtype="f8"):
    def rule(shapes, dtypes, **_):
        if len(shapes) != nargs:
            raise ShapeError(f"{name} takes {nargs} argument(s), got {len(shapes)}")
        return broadcast_shapes(name, shapes), out_dtype
    return rule


def _reduce_rule(name):
    def rule(shapes, dtypes, axes):
        (s,) = shapes
        return tuple(d for i, d in enumerate(s) if i not in axes), "f8"
    return rule


def _getitem_shape(shape, index):
    out = []
    for d, it in zip(shape, index):
        if isinstance(it, tuple):
            out.append(len(range(*it)))
    return tuple(out)


def _getitem_rule(shapes, dtypes, index):
    return _getitem_shape(shapes[0], index), dtypes[0]


def _index_add_rule(shapes, dtypes, index):
    acc, val = shapes
    want = _getitem_shape(acc, index)
    if tuple(val) != want:
        raise ShapeError(f"index_add: value shape {tuple(val)} does not match target shape {want}")
    return tuple(acc), "f8"


def _broadcast_to_rule(shapes, dtypes, shape):
    (s,) = shapes
    got = broadcast_shapes("broadcast_to", [s, shape])
    if got != tuple(shape):
        raise ShapeError(f"broadcast_to: shape {tuple(s)} does not broadcast to {tuple(shape)}")
    return tuple(shape), dtypes[0]


def _transpose_rule(shapes, dtypes, perm):
    (s,) = shapes
    return tuple(s[p] for p in perm), dtypes[0]


def _reshape_rule(shapes, dtypes, shape):
    (s,) = shapes
    if math.prod(s) != math.prod(shape):
        raise ShapeError(f"reshape: cannot reshape {tuple(s)} (size {math.prod(s)}) to {tuple(shape)}")
    return tuple(shape), dtypes[0]


@dataclass(frozen=True)
class OpSpec:
    name: str
    kind: str                   # elementwise | reduce | view | other
    shape_rule: Callable
    numpy: Callable             # numpy implementation: numpy(*args, **attrs)


OPS: dict[str, OpSpec] = {}
COMMUTATIVE = {"add", "mul", "minimum", "maximum", "eq", "ne", "and", "or"}


def _op(name, kind, rule, impl):
    OPS[name] = OpSpec(name, kind, rule, impl)


def _sigmoid(x):
    return np.where(x >= 0, 1.0 / (1.0 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1.0 + np.exp(-np.abs(x))))


def _softplus(x):
    return np.logaddexp(0.0, x)


def _erf(x):
    return np.vectorize(math.erf, otypes=[float])(x)


UNARY = {
    "neg": np.negative, "exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1,
    "sqrt": np.sqrt, "cbrt": np.cbrt, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "arcsin": np.arcsin, "arccos": np.arccos, "arctan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "tanh": np.tanh, "abs": np.abs, "sign": np.sign, "square": np.square,
    "sigmoid": _sigmoid, "softplus": _softplus, "erf": _erf,
}
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
    "minimum": np.minimum, "maximum": np.maximum, "arctan2": np.arctan2,
}
COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
           "eq": np.equal, "ne": np.not_equal}
LOGIC = {"and": np.logical_and, "or": np.logical_or}

for _n, _f in UNARY.items():
    _op(_n, "elementwise", _elementwise(_n, 1), _f)
for _n, _f in BINARY.items():
    _op(_n, "elementwise", _elementwise(_n, 2), _f)
for _n, _f in {**COMPARE, **LOGIC}.items():
    _op(_n, "elementwise", _elementwise(_n, 2, "bool"), _f)
_op("not", "elementwise", _elementwise("not", 1, "bool"), np.logical_not)
_op("select", "elementwise", _elementwise("select", 3), lambda c, a, b: np.where(c, a, b))

_op("reduce_sum", "reduce", _reduce_rule("sum"), lambda x, axes: np.sum(x, axis=axes))
_op("reduce_max", "reduce", _reduce_rule("max"), lambda x, axes: np.max(x, axis=axes))
_op("reduce_min", "reduce", _reduce_rule("min"), lambda x, axes: np.min(x, axis=axes))
_op("reduce_prod", "reduce", _reduce_rule("prod"), lambda x, axes: np.prod(x, axis=axes))

_op("broadcast_to", "view", _broadcast_to_rule, lambda x, shape: np.broadcast_to(x, shape))
def numpy_index(index):
    """An IR index (ints and normalized (start, stop, step) ranges) as a numpy index.
    A range's stop of -1 means 'past the front' (a negative step down to 0), not 'the last'."""
    return tuple(slice(i[0], None if i[1] < 0 else i[1], i[2]) if isinstance(i, tuple) else i for i in index)


_op("getitem", "view", _getitem_rule, lambda x, index: x[numpy_index(index)])
_op("transpose", "view", _transpose_rule, lambda x, perm: np.transpose(x, perm))
_op("reshape", "view", _reshape_rule, lambda x, shape: np.reshape(x, shape))


def _index_add_np(acc, val, index):
    out = np.array(acc, dtype=float, copy=True)
    out[numpy_index(index)] += val
    return out


_op("index_add", "other", _index_add_rule, _index_add_np)
_op("const", "other", lambda shapes, dtypes, value: ((), "f8"), lambda value: np.float64(value))
_op("array", "other", lambda shapes, dtypes, data, shape: (tuple(shape), "f8"),
    lambda data, shape: np.array(data, dtype=float).reshape(shape))
# eye(shape): the identity of R^shape as an array of shape (*shape, *shape); seeds forward mode.
_op("eye", "other", lambda shapes, dtypes, shape: (tuple(shape) * 2, "f8"),
    lambda shape: np.eye(math.prod(shape)).reshape(tuple(shape) * 2))
# prod_others(x, axes): product of all other elements along `axes` (the partial of a product, safe at 0).
def _prod_others_np(x, axes):
    moved = np.moveaxis(x, axes, tuple(range(-len(axes), 0)))
    flat = moved.reshape(moved.shape[: moved.ndim - len(axes)] + (-1,))
    n = flat.shape[-1]
    ones = np.ones(flat.shape[:-1] + (1,))
    before = np.concatenate([ones, np.cumprod(flat, axis=-1)[..., : n - 1]], axis=-1)
    after = np.concatenate([np.cumprod(flat[..., ::-1], axis=-1)[..., : n - 1][..., ::-1], ones], axis=-1)
    return np.moveaxis((before * after).reshape(moved.shape), tuple(range(-len(axes), 0)), axes)


_op("prod_others", "other", lambda shapes, dtypes, axes: (tuple(shapes[0]), "f8"), _prod_others_np)


def _pack_rule(shapes, dtypes, shape):
    if len(shapes) != math.prod(shape) or any(shapes):
        raise ShapeError(f"pack: {len(shapes)} scalars cannot fill shape {tuple(shape)}")
    return tuple(shape), "f8"


# pack(*scalars, shape): the array with these elements in C order; scalarized kernels build
# their outputs with it (engine/opt/scalarize.py).
_op("pack", "other", _pack_rule, lambda *xs, shape: np.array(xs, dtype=float).reshape(shape))
