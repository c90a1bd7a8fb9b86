"""Scalar helpers the generated kernels call; numba inlines them. Each matches numpy's semantics
(NaN propagation included) for one float64."""
import numpy as np
from numba import njit


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
