"""What an IR op is: one `Op` record per op, holding every fact about it side by side.

The records are written in engine/ir/ops/ (one module per kind) and registered in `OPS`; every
stage reads them from here: the Builder (shape rule, folding), the interpreter (numpy reference),
differentiation (the rule), scalarization (the element form), the code generator (the lowering)
and the cost model. So adding an op is one entry, and tests/test_ops.py checks every slot of every
entry. This module imports nothing of the IR, so the core and the entries can both import it.

Lowering, by kind:
- elementwise: `lower` is a Python expression template over the scalar arguments ("np.exp({0})"),
  or a function of their expressions (and the equation's attributes, as keywords) returning one;
  valid inside loop nests and straight-line code; an argument listed in `whole` is given as the
  name of its flat array instead of an element;
  `helpers` names the functions of engine/numeric/scalar.py it calls (as `__name`), or of another
  numeric module as "module.name";
- reduce: `lower` is a `Reduction` (the initial value, the update statement);
- view: `lower(offset, strides, e)` -> (offset, strides) of the result over the argument's storage,
  or None when the argument must first be copied into contiguous storage (a reshape of a strided
  view); views cost nothing, they only change how storage is indexed;
- structural: `lower(ctx, e)` writes the statements through the code generator's emit context
  (engine/codegen/emit.py documents it); `loop` optionally gives an element expression for use
  inside a loop nest (eye).
`scalar(b, e, xs)` is the element form used by engine/opt/scalarize.py (xs: object arrays of
scalar Vars); elementwise, reduce and view ops get a generic one by kind.
"""
from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import ShapeError

KINDS = ("elementwise", "reduce", "view", "structural")


@dataclass(frozen=True)
class Reduction:
    identity: float             # the value of an empty reduction; the accumulator's start
    combine: str                # the elementwise op that folds two values (scalarized form)
    update: str                 # the loop statement: "{t}" the accumulator, "{x}" the next value


@dataclass(frozen=True)
class Op:
    name: str
    kind: str                   # one of KINDS
    shape: Callable             # (shapes, dtypes, **attrs) -> (shape, dtype); raises ShapeError
    numpy: Callable             # numpy(*args, **attrs): the reference (interpreter, test oracle, folding)
    rule: object                # derivative: an ir.rules.Rule (jvp, vjp[, masks])
    lower: object               # numba lowering (see the module docstring)
    cost: Callable              # cost(e) -> scalar operations per point (scalarize's payoff, mode choice)
    scalar: Callable | None = None   # element form for opt/scalarize; None: the generic one of the kind
    loop: Callable | None = None     # structural ops computed inside a loop nest: loop(idx, space) -> expr
    helpers: tuple = ()         # functions of engine/numeric/ the lowering calls ("name": scalar.py)
    commutative: bool = False   # CSE canonicalizes argument order
    function: str | None = None  # the model language's name for it, if it is a plain function
    arity: int | None = None    # number of arguments, where fixed
    whole: tuple = ()           # elementwise: positions of arguments passed whole (a param's array,
                                # e.g. a table's coefficients), not broadcast element by element


OPS: dict[str, Op] = {}


def register(op: Op) -> Op:
    if op.name in OPS:
        raise ValueError(f"op '{op.name}' is defined twice")
    if op.kind not in KINDS:
        raise ValueError(f"op '{op.name}': unknown kind '{op.kind}'")
    OPS[op.name] = op
    return op


def literal(x):
    """A float as Python source for generated code (numba reads np.inf and np.nan)."""
    if math.isnan(x):
        return "np.nan"
    if math.isinf(x):
        return "np.inf" if x > 0 else "-np.inf"
    return repr(float(x))


def broadcast_shapes(opname, shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        pretty = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(f"{opname}: shapes {pretty} do not broadcast") from None


def numpy_index(index):
    """An IR index (ints and normalized (start, stop, step) ranges) as a numpy index.
    A range's stop of -1 means 'past the front' (a negative step down to 0), not 'the last'."""
    return tuple(slice(i[0], None if i[1] < 0 else i[1], i[2]) if isinstance(i, tuple) else i for i in index)


def index_shape(shape, index):
    """The shape of x[index] for x of `shape`: one axis per range, none per integer."""
    return tuple(len(range(*it)) for it in index if isinstance(it, tuple))


# ---- cost: scalar operations per point -------------------------------------------------------------
def per_output(weight=1):
    return lambda e: weight * e.out.size


def per_input(weight=1):
    return lambda e: weight * e.args[0].size


def free(e):
    return 0


def cstrides(shape):
    """Strides (in elements) of a C-contiguous array of `shape`."""
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return tuple(reversed(st))


# ---- element forms (engine/opt/scalarize.py): object arrays whose elements are scalar Vars ------------
def elements(shape, make):
    """An object array of `shape` whose element idx is make(idx)."""
    arr = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        arr[idx] = make(idx)
    return arr


def lanes(x, axes):
    """x with the axes `axes` moved last and flattened into one: kept shape + (n,)."""
    kept = tuple(d for k, d in enumerate(x.shape) if k not in axes)
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    return moved.reshape(kept + (-1,))


class Numerics:
    """A module of engine/numeric/ (compiled with numba) imported on first use: the IR imports no numba
    until an op's reference value is computed."""

    def __init__(self, module):
        self.module = module

    def __getattr__(self, name):
        return getattr(importlib.import_module(f"..numeric.{self.module}", __package__), name)


def opaque_elements(b, e, xs, sym=False):
    """The element form of an op computed whole by a helper (a factorization, a spectral function): the
    op itself on its arguments packed into arrays, its result read element by element. Of a result
    that is a stack of symmetric matrices (`sym`), entry (j, i) is read as (i, j), so the code after it
    computes each off-diagonal entry once."""
    packed = [x[()] if x.shape == () else b.emit("pack", *x.reshape(-1), shape=x.shape) for x in xs]
    v = b.emit(e.op, *packed, **dict(e.attrs))
    return elements(v.shape, lambda idx: b.emit("getitem", v, index=idx[:-2] + tuple(sorted(idx[-2:])) if sym else idx)
                    if idx else v)
