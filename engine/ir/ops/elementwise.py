"""Elementwise ops: arithmetic, the math functions of the model language, comparisons and logic.

One line per op: name, numpy reference, partial derivatives (IR in terms of the output y and the
arguments), numba expression over the scalar arguments. Shapes broadcast as numpy's. An op whose
`function` is set is a function of the model language under that name (engine/ir/builtins/).
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ..core import current
from ..op import Op, broadcast_shapes, per_output, register
from ..rules import Rule, from_partials, lift, no_derivative, one_if, to_shape, unbroadcast


def emit(op, *args, **attrs):
    return current().emit(op, *args, **attrs)


def _shape(name, nargs, dtype="f8"):
    def rule(shapes, dtypes, **_):
        if len(shapes) != nargs:
            raise ShapeError(f"{name} takes {nargs} argument(s), got {len(shapes)}")
        return broadcast_shapes(name, shapes), dtype
    return rule


def op(name, nargs, numpy, partials, lower, *, function=None, helpers=(), commutative=False, dtype="f8"):
    rule = from_partials(partials) if partials is not None else no_derivative()
    return register(Op(name, "elementwise", _shape(name, nargs, dtype), numpy, rule, lower, per_output(1),
                       helpers=helpers, commutative=commutative, function=function, arity=nargs))


def unary(name, numpy, partial, lower, helpers=()):
    """A math function of one argument, a function of the language under its own name."""
    return op(name, 1, numpy, partial, lower, function=name, helpers=helpers)


def binary(name, numpy, partials, lower, helpers=(), commutative=False):
    return op(name, 2, numpy, partials, lower, function=name, helpers=helpers, commutative=commutative)


def _one(x):
    """The constant 1 (a partial of a linear op); scalar, so it folds away in products."""
    return current().const(1.0)


def _sq(x):
    return emit("square", x)


def _sqrt(x):
    return emit("sqrt", x)


def _sigmoid(x):
    return np.where(x >= 0, 1.0 / (1.0 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1.0 + np.exp(-np.abs(x))))


def _erf(x):
    return np.vectorize(math.erf, otypes=[float])(x)


def _hypot_partial(y, a):
    """d hypot(a, b) / da = a / y, and 0 at the origin (as abs'(0) = sign(0) = 0)."""
    return emit("select", emit("eq", y, 0.0), 0.0, a / y)


def _pow(a, b):
    """a**b; by a small integer constant as multiplications (exact for negative a, no libm call)."""
    try:
        k = float(b)
    except ValueError:
        k = 0.5                     # not a literal: a variable exponent
    if not math.isfinite(k) or k != int(k) or abs(k) > 8:
        return f"({a} ** {b})"
    k = int(k)
    if k == 0:
        return "1.0"
    prod = " * ".join([a] * abs(k))
    return f"({prod})" if k > 0 else f"(1.0 / ({prod}))"


LN2, LN10 = math.log(2.0), math.log(10.0)

# ---- arithmetic (operators, not functions) -------------------------------------------------------
op("neg", 1, np.negative, lambda y, x: (-1.0 * _one(x),), "(-{0})")
# the identity, a constant to differentiation: what a solve's iterations are seen through (engine/solve.py)
register(Op("stop", "elementwise", _shape("stop", 1, "f8"), lambda x: np.array(x, dtype=float), no_derivative(cut=True),
            "{0}", per_output(0), arity=1))
op("add", 2, np.add, lambda y, a, b: (_one(a), _one(b)), "({0} + {1})", commutative=True)
op("sub", 2, np.subtract, lambda y, a, b: (_one(a), -1.0 * _one(b)), "({0} - {1})")
op("mul", 2, np.multiply, lambda y, a, b: (b, a), "({0} * {1})", commutative=True)
op("div", 2, np.divide, lambda y, a, b: (1.0 / b, -y / b), "({0} / {1})")
op("pow", 2, np.power, lambda y, a, b: (b * a ** (b - 1.0), emit("log", a) * y), lambda a, b: _pow(a, b))

# ---- functions of one argument ---------------------------------------------------------------------
unary("exp", np.exp, lambda y, x: (y,), "np.exp({0})")
unary("exp2", np.exp2, lambda y, x: (LN2 * y,), "np.exp2({0})")
unary("expm1", np.expm1, lambda y, x: (y + 1.0,), "np.expm1({0})")
unary("log", np.log, lambda y, x: (1.0 / x,), "np.log({0})")
unary("log2", np.log2, lambda y, x: (1.0 / (LN2 * x),), "np.log2({0})")
unary("log10", np.log10, lambda y, x: (1.0 / (LN10 * x),), "np.log10({0})")
unary("log1p", np.log1p, lambda y, x: (1.0 / (1.0 + x),), "np.log1p({0})")
unary("sqrt", np.sqrt, lambda y, x: (0.5 / y,), "np.sqrt({0})")
unary("cbrt", np.cbrt, lambda y, x: (1.0 / (3.0 * _sq(y)),), "np.cbrt({0})")
unary("square", np.square, lambda y, x: (2.0 * x,), "({0} * {0})")
unary("abs", np.abs, lambda y, x: (emit("sign", x),), "abs({0})")
unary("sign", np.sign, lambda y, x: (None,), "__sign({0})", helpers=("sign",))
unary("sin", np.sin, lambda y, x: (emit("cos", x),), "np.sin({0})")
unary("cos", np.cos, lambda y, x: (-emit("sin", x),), "np.cos({0})")
unary("tan", np.tan, lambda y, x: (1.0 + _sq(y),), "np.tan({0})")
unary("arcsin", np.arcsin, lambda y, x: (1.0 / _sqrt(1.0 - _sq(x)),), "np.arcsin({0})")
unary("arccos", np.arccos, lambda y, x: (-1.0 / _sqrt(1.0 - _sq(x)),), "np.arccos({0})")
unary("arctan", np.arctan, lambda y, x: (1.0 / (1.0 + _sq(x)),), "np.arctan({0})")
unary("sinh", np.sinh, lambda y, x: (emit("cosh", x),), "np.sinh({0})")
unary("cosh", np.cosh, lambda y, x: (emit("sinh", x),), "np.cosh({0})")
unary("tanh", np.tanh, lambda y, x: (1.0 - _sq(y),), "np.tanh({0})")
# 1/hypot(x, 1) and 1/(sqrt(x-1) sqrt(x+1)): no overflow of x**2 for large |x|
unary("arcsinh", np.arcsinh, lambda y, x: (1.0 / emit("hypot", x, 1.0),), "np.arcsinh({0})")
unary("arccosh", np.arccosh, lambda y, x: (1.0 / (_sqrt(x - 1.0) * _sqrt(x + 1.0)),), "np.arccosh({0})")
unary("arctanh", np.arctanh, lambda y, x: (1.0 / (1.0 - _sq(x)),), "np.arctanh({0})")
unary("sigmoid", _sigmoid, lambda y, x: (y * (1.0 - y),), "__sigmoid({0})", helpers=("sigmoid",))
unary("softplus", lambda x: np.logaddexp(0.0, x), lambda y, x: (emit("sigmoid", x),), "__softplus({0})",
      helpers=("softplus",))
unary("erf", _erf, lambda y, x: (2.0 / math.sqrt(math.pi) * emit("exp", -_sq(x)),), "math.erf({0})")

# ---- derivative products: d * p, an exact zero d stays zero whatever p is (ir/rules.hard_product) --------
def _hardmul(d, p):
    with np.errstate(invalid="ignore"):
        return np.where((d != 0) | np.isfinite(p), d * p, d * 0.0)


def _hardmul_jvp(e, ts, bs):
    d, p = e.args
    td, tp = (None if t is None else lift(t, bs, e.out.rank) for t in ts)
    # the factor that may be a hard zero goes first: t_d (of a cotangent) and d itself
    terms = ([emit("hardmul", td, p)] if td is not None else []) + ([emit("hardmul", d, tp)] if tp is not None else [])
    if not terms:
        return None
    return to_shape(terms[0] if len(terms) == 1 else terms[0] + terms[1], bs, e.out.shape)


def _hardmul_vjp(e, ct, bs):
    d, p = e.args
    return [unbroadcast(emit("hardmul", ct, q), bs, a.shape) for q, a in ((p, d), (d, p))]


# its own derivatives are hard products too (a Hessian through a where keeps the zeros)
register(Op("hardmul", "elementwise", _shape("hardmul", 2), _hardmul, Rule(_hardmul_jvp, _hardmul_vjp),
            "__hardmul({0}, {1})", per_output(1), helpers=("hardmul",), arity=2))

# ---- functions of two arguments --------------------------------------------------------------------
binary("minimum", np.minimum, lambda y, a, b: (one_if(emit("le", a, b)), one_if(emit("gt", a, b))),
       "__minimum({0}, {1})", helpers=("minimum",), commutative=True)
binary("maximum", np.maximum, lambda y, a, b: (one_if(emit("ge", a, b)), one_if(emit("lt", a, b))),
       "__maximum({0}, {1})", helpers=("maximum",), commutative=True)
binary("arctan2", np.arctan2, lambda y, a, b: (b / (_sq(a) + _sq(b)), -a / (_sq(a) + _sq(b))),
       "np.arctan2({0}, {1})")
binary("hypot", np.hypot, lambda y, a, b: (_hypot_partial(y, a), _hypot_partial(y, b)), "np.hypot({0}, {1})",
       commutative=True)

# ---- conditions: no derivative; `select` is where(c, a, b) ------------------------------------------
for _name, _np, _lower in [("lt", np.less, "({0} < {1})"), ("le", np.less_equal, "({0} <= {1})"),
                           ("gt", np.greater, "({0} > {1})"), ("ge", np.greater_equal, "({0} >= {1})"),
                           ("eq", np.equal, "({0} == {1})"), ("ne", np.not_equal, "({0} != {1})"),
                           ("and", np.logical_and, "({0} and {1})"), ("or", np.logical_or, "({0} or {1})")]:
    op(_name, 2, _np, None, _lower, dtype="bool", commutative=_name in ("eq", "ne", "and", "or"))
op("not", 1, np.logical_not, None, "(not {0})", dtype="bool")


# ---- where(c, a, b) ------------------------------------------------------------------------------------
def _select_jvp(e, ts, bs):
    c, a, b = e.args
    ta, tb = ts[1], ts[2]
    if ta is None and tb is None:
        return None
    za = lift(ta, bs, e.out.rank) if ta is not None else 0.0
    zb = lift(tb, bs, e.out.rank) if tb is not None else 0.0
    return to_shape(emit("select", c, za, zb), bs, e.out.shape)


def _select_vjp(e, ct, bs, mask=None):
    c, a, b = e.args
    # select, not multiply by a 0/1 mask: the untaken branch gets an exact zero, never 0*inf = NaN
    return [None, unbroadcast(emit("select", c, ct, 0.0), bs, a.shape),
            unbroadcast(emit("select", c, 0.0, ct), bs, b.shape)]


def _select_masks(e, mask):
    c = e.args[0]
    taken = [c, emit("not", c)]
    if mask is not None:
        taken = [emit("and", t, mask) for t in taken]
    if c.shape != e.out.shape:
        taken = [emit("broadcast_to", t, shape=e.out.shape) for t in taken]
    return [None] + [t if a.shape == e.out.shape else None for t, a in zip(taken, e.args[1:])]


register(Op("select", "elementwise", _shape("select", 3), lambda c, a, b: np.where(c, a, b),
            Rule(_select_jvp, _select_vjp, _select_masks, zeros=True), "({1} if {0} else {2})", per_output(1),
            arity=3))
