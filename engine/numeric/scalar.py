"""Helpers the generated kernels call; numba inlines them. The scalar ones match numpy's semantics
(NaN propagation included) for one float64."""
import numpy as np
from numba import njit, types
from numba.extending import intrinsic


@njit(inline="always", error_model="numpy")
def sign(x):
    return 1.0 if x > 0.0 else (-1.0 if x < 0.0 else x * 0.0)


@njit(inline="always", error_model="numpy")
def sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + np.exp(-x))
    z = np.exp(x)
    return z / (1.0 + z)


@njit(inline="always", error_model="numpy")
def softplus(x):
    return max(x, 0.0) + np.log1p(np.exp(-abs(x)))


@njit(inline="always", error_model="numpy")
def minimum(a, b):
    return a if (a <= b or a != a) else b


@njit(inline="always", error_model="numpy")
def maximum(a, b):
    return a if (a >= b or a != a) else b


EXPONENT = 0x7FF0000000000000      # a float64 whose exponent bits are all ones is an infinity or a NaN


@njit(inline="always")
def nonfinite(row):
    """Whether a contiguous float64 row holds a NaN or an infinity: an integer max reduction over
    the exponent bits, which vectorizes (a float test with an early exit does not)."""
    top = 0
    for b in row.view(np.int64):
        top = max(top, b & EXPONENT)
    return top == EXPONENT


@intrinsic
def fetch_add(typingctx, counter, value):
    """counter[0] += value as one atomic step (int64 counter); returns the value before. What the
    batch drivers' workers take their blocks of rows with."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64 and isinstance(value, types.Integer)):
        return None
    sig = types.int64(counter, types.int64)

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.atomic_rmw("add", array.data, args[1], "monotonic")
    return sig, codegen
