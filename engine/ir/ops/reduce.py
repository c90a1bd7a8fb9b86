"""Reductions over static axes: sum, prod, max, min.

The code generator fuses a reduction into the loop nest over its argument, so the values it reduces
are never stored; `Reduction.update` is the statement that loop runs per element."""
from __future__ import annotations

import math

import numpy as np

from ..core import current
from ..op import Op, Reduction, per_input, register
from ..rules import Rule, expand, linear, one_if, shift


def emit(op, *args, **attrs):
    return current().emit(op, *args, **attrs)


def _shape(shapes, dtypes, axes):
    (s,) = shapes
    return tuple(d for i, d in enumerate(s) if i not in axes), "f8"


def _chooser(e):
    """Weights of the elements a max/min picked: ties share equally (JAX's convention)."""
    x = e.args[0]
    axes = e.attr("axes")
    picked = one_if(emit("eq", x, expand(e.out, (), x.shape, axes)))
    count = emit("reduce_sum", picked, axes=axes)
    return picked / expand(count, (), x.shape, axes)


def _weighted(weights):
    """Rules of a reduction whose derivative is sum(weights * dx) over the reduced axes."""
    def jvp(e, ts, bs):
        if ts[0] is None:
            return None
        return emit("reduce_sum", ts[0] * weights(e), axes=shift(e.attr("axes"), bs))

    def vjp(e, ct, bs):
        return [expand(ct, bs, e.args[0].shape, e.attr("axes")) * weights(e)]
    return Rule(jvp, vjp)


def reduction(name, numpy, rule, identity, combine, update):
    return register(Op(name, "reduce", _shape, lambda x, axes: numpy(x, axis=axes), rule,
                       Reduction(identity, combine, update), per_input(1)))


reduction("reduce_sum", np.sum, linear(
    lambda e, t, bs: emit("reduce_sum", t, axes=shift(e.attr("axes"), bs)),
    lambda e, ct, bs: expand(ct, bs, e.args[0].shape, e.attr("axes"))), 0.0, "add", "{t} += {x}")
# the partial of a product is the product of the others, safe at zeros (structural.py: prod_others)
reduction("reduce_prod", np.prod, _weighted(lambda e: emit("prod_others", e.args[0], axes=e.attr("axes"))),
          1.0, "mul", "{t} *= {x}")
# max and min propagate NaN, as numpy's do
reduction("reduce_max", np.max, _weighted(_chooser), -math.inf, "maximum",
          "{t} = {x} if ({x} > {t} or {x} != {x}) else {t}")
reduction("reduce_min", np.min, _weighted(_chooser), math.inf, "minimum",
          "{t} = {x} if ({x} < {t} or {x} != {x}) else {t}")
