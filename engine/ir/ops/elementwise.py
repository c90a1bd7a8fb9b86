"""Elementwise ops: arithmetic, the math functions of the model language, comparisons and logic.

One line per op: name, numpy reference, partial derivatives (IR in terms of the output y and the
arguments), numba expression over the scalar arguments. Shapes broadcast as numpy's. An op whose
`function` is set is a function of the model language under that name (engine/ir/builtins/).

Two kinds of lowering say how a loop of them vectorizes (engine/codegen/vector.py reads them):
`inline(...)` marks a template of plain arithmetic, comparisons, selects and sqrt, which LLVM
vectorizes as it is; a `MathLowering` (`vunary(...)`) is a math function with two forms, the scalar
libm call (numpy's bits) and engine/numeric/vecmath.py's branch-free function, which LLVM vectorizes
when numba inlines it into a loop. Any other lowering (a libm call such as np.log2, a helper with
loops) keeps a loop nest scalar.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...errors import ShapeError
from ..core import current
from ..op import Op, broadcast_shapes, per_output, register
from ..rules import Rule, from_partials, lift, no_derivative, one_if, to_shape, unbroadcast


def emit(op, *args, **attrs):
    return current().emit(op, *args, **attrs)


class Inline(str):
    """A lowering template of plain arithmetic, comparisons, selects and sqrt: no call survives
    inlining (the helpers it calls are inlined or intrinsics), so a loop of these vectorizes (a str:
    every use of a template works as is)."""


inline = Inline


@dataclass(frozen=True)
class MathLowering:
    """A math function's two lowerings: `libm`, the scalar libm call (numpy's bits), and `vector`, a
    call of engine/numeric/vecmath.py's branch-free function (within 0.75 ulp), which LLVM
    vectorizes in a loop. Each is a template or a function of the argument expressions, as
    Op.lower. `fallback`: a template of the condition under which the vector form returned a NaN
    marker and the lane needs libm (sin, cos, tan beyond vecmath.TRIG_MAX); the code generator then
    redoes such a loop nest with libm (engine/codegen/vector.py)."""
    libm: str | Callable
    vector: str | Callable
    fallback: str | None = None

    def __call__(self, *xs, math="libm", **attrs):
        form = self.vector if math == "vector" else self.libm
        return form(*xs, **attrs) if callable(form) else form.format(*xs)


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


TRIG_FALLBACK = "__trig_fallback({0})"      # vecmath: a finite |x| > TRIG_MAX, where vsin/vcos/vtan give NaN


def vunary(name, numpy, partial, libm, fn, helpers=(), fallback=None):
    """A math function of one argument whose vector form is engine/numeric/vecmath.py's `fn`."""
    more = ("vecmath.trig_fallback",) if fallback else ()
    return unary(name, numpy, partial, MathLowering(libm, f"__{fn}({{0}})", fallback),
                 helpers=(*helpers, f"vecmath.{fn}", *more))


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


def _pow(a, b, call="({0} ** {1})"):
    """a**b; by a small integer constant as multiplications (exact for negative a, no libm call), else
    `call` (libm's pow, or vecmath's vpow)."""
    try:
        k = float(b)
    except ValueError:
        k = 0.5                     # not a literal: a variable exponent
    if not math.isfinite(k) or k != int(k) or abs(k) > 8:
        return call.format(a, b)
    k = int(k)
    if k == 0:
        return "1.0"
    prod = " * ".join([a] * abs(k))
    return f"({prod})" if k > 0 else f"(1.0 / ({prod}))"


LN2, LN10 = math.log(2.0), math.log(10.0)

# ---- arithmetic (operators, not functions) -------------------------------------------------------
op("neg", 1, np.negative, lambda y, x: (-1.0 * _one(x),), inline("(-{0})"))
# the identity, a constant to differentiation: what a solve's iterations are seen through (engine/solve.py)
register(Op("stop", "elementwise", _shape("stop", 1, "f8"), lambda x: np.array(x, dtype=float), no_derivative(cut=True),
            inline("{0}"), per_output(0), arity=1))
op("add", 2, np.add, lambda y, a, b: (_one(a), _one(b)), inline("({0} + {1})"), commutative=True)
op("sub", 2, np.subtract, lambda y, a, b: (_one(a), -1.0 * _one(b)), inline("({0} - {1})"))
op("mul", 2, np.multiply, lambda y, a, b: (b, a), inline("({0} * {1})"), commutative=True)
# the partials share one reciprocal: -y / b costs a division, -y * (1 / b) a product (a division is
# 4-5 multiplications' time, and a pair's gradient in a potential had four of them by r)
op("div", 2, np.divide, lambda y, a, b: (1.0 / b, -y * (1.0 / b)), inline("({0} / {1})"))
op("pow", 2, np.power, lambda y, a, b: (b * a ** (b - 1.0), emit("log", a) * y),
   MathLowering(_pow, lambda a, b: _pow(a, b, "__vpow({0}, {1})")), helpers=("vecmath.vpow",))

# ---- functions of one argument ---------------------------------------------------------------------
vunary("exp", np.exp, lambda y, x: (y,), "np.exp({0})", "vexp")
unary("exp2", np.exp2, lambda y, x: (LN2 * y,), "np.exp2({0})")
vunary("expm1", np.expm1, lambda y, x: (y + 1.0,), "np.expm1({0})", "vexpm1")
vunary("log", np.log, lambda y, x: (1.0 / x,), "np.log({0})", "vlog")
unary("log2", np.log2, lambda y, x: (1.0 / (LN2 * x),), "np.log2({0})")
unary("log10", np.log10, lambda y, x: (1.0 / (LN10 * x),), "np.log10({0})")
vunary("log1p", np.log1p, lambda y, x: (1.0 / (1.0 + x),), "np.log1p({0})", "vlog1p")
unary("sqrt", np.sqrt, lambda y, x: (0.5 * (1.0 / y),), inline("np.sqrt({0})"))   # 0.5 / y to the bit
vunary("cbrt", np.cbrt, lambda y, x: (1.0 / (3.0 * _sq(y)),), "np.cbrt({0})", "vcbrt")
unary("square", np.square, lambda y, x: (2.0 * x,), inline("({0} * {0})"))
unary("abs", np.abs, lambda y, x: (emit("sign", x),), inline("abs({0})"))
unary("sign", np.sign, lambda y, x: (None,), inline("__sign({0})"), helpers=("sign",))
vunary("sin", np.sin, lambda y, x: (emit("cos", x),), "np.sin({0})", "vsin", fallback=TRIG_FALLBACK)
vunary("cos", np.cos, lambda y, x: (-emit("sin", x),), "np.cos({0})", "vcos", fallback=TRIG_FALLBACK)
vunary("tan", np.tan, lambda y, x: (1.0 + _sq(y),), "np.tan({0})", "vtan", fallback=TRIG_FALLBACK)
vunary("arcsin", np.arcsin, lambda y, x: (1.0 / _sqrt(1.0 - _sq(x)),), "np.arcsin({0})", "varcsin")
vunary("arccos", np.arccos, lambda y, x: (-1.0 / _sqrt(1.0 - _sq(x)),), "np.arccos({0})", "varccos")
vunary("arctan", np.arctan, lambda y, x: (1.0 / (1.0 + _sq(x)),), "np.arctan({0})", "varctan")
vunary("sinh", np.sinh, lambda y, x: (emit("cosh", x),), "np.sinh({0})", "vsinh")
vunary("cosh", np.cosh, lambda y, x: (emit("sinh", x),), "np.cosh({0})", "vcosh")
vunary("tanh", np.tanh, lambda y, x: (1.0 - _sq(y),), "np.tanh({0})", "vtanh")
# 1/hypot(x, 1) and 1/(sqrt(x-1) sqrt(x+1)): no overflow of x**2 for large |x|
unary("arcsinh", np.arcsinh, lambda y, x: (1.0 / emit("hypot", x, 1.0),), "np.arcsinh({0})")
unary("arccosh", np.arccosh, lambda y, x: (1.0 / (_sqrt(x - 1.0) * _sqrt(x + 1.0)),), "np.arccosh({0})")
unary("arctanh", np.arctanh, lambda y, x: (1.0 / (1.0 - _sq(x)),), "np.arctanh({0})")
vunary("sigmoid", _sigmoid, lambda y, x: (y * (1.0 - y),), "__sigmoid({0})", "vsigmoid", helpers=("sigmoid",))
vunary("softplus", lambda x: np.logaddexp(0.0, x), lambda y, x: (emit("sigmoid", x),), "__softplus({0})",
       "vsoftplus", helpers=("softplus",))
vunary("erf", _erf, lambda y, x: (2.0 / math.sqrt(math.pi) * emit("exp", -_sq(x)),), "math.erf({0})", "verf")

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
            inline("__hardmul({0}, {1})"), per_output(1), helpers=("hardmul",), arity=2))

# ---- functions of two arguments --------------------------------------------------------------------
binary("minimum", np.minimum, lambda y, a, b: (one_if(emit("le", a, b)), one_if(emit("gt", a, b))),
       inline("__minimum({0}, {1})"), helpers=("minimum",), commutative=True)
binary("maximum", np.maximum, lambda y, a, b: (one_if(emit("ge", a, b)), one_if(emit("lt", a, b))),
       inline("__maximum({0}, {1})"), helpers=("maximum",), commutative=True)
binary("arctan2", np.arctan2, lambda y, a, b: (b / (_sq(a) + _sq(b)), -a / (_sq(a) + _sq(b))),
       MathLowering("np.arctan2({0}, {1})", "__varctan2({0}, {1})"), helpers=("vecmath.varctan2",))
binary("hypot", np.hypot, lambda y, a, b: (_hypot_partial(y, a), _hypot_partial(y, b)), "np.hypot({0}, {1})",
       commutative=True)

# ---- conditions: no derivative; `select` is where(c, a, b) ------------------------------------------
for _name, _np, _lower in [("lt", np.less, "({0} < {1})"), ("le", np.less_equal, "({0} <= {1})"),
                           ("gt", np.greater, "({0} > {1})"), ("ge", np.greater_equal, "({0} >= {1})"),
                           ("eq", np.equal, "({0} == {1})"), ("ne", np.not_equal, "({0} != {1})"),
                           ("and", np.logical_and, "({0} and {1})"), ("or", np.logical_or, "({0} or {1})")]:
    op(_name, 2, _np, None, inline(_lower), dtype="bool", commutative=_name in ("eq", "ne", "and", "or"))
op("not", 1, np.logical_not, None, inline("(not {0})"), dtype="bool")


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
            Rule(_select_jvp, _select_vjp, _select_masks, zeros=True), inline("__select({0}, {1}, {2})"), per_output(1),
            helpers=("select",), arity=3))
