"""LU factorization with partial pivoting of one n x n matrix, and the determinant and inverse from
it: what the lu ops (engine/ir/ops/linalg.py) compute for det and inv above 4x4.

The kernels keep values in flat float64 arrays (a point's rows, the workspace), so a matrix is
`a[off + i*s0 + j*s1]` and results are written at an offset of another flat array: no allocation.
The adjugate adj(A) = det(A) inv(A) is det's gradient (transposed); it is finite where A is singular.
The factorization is LAPACK's getf2: in column k the pivot is the first row from k on with the
largest magnitude; a zero pivot (a zero column below the diagonal) is left in place and makes the
determinant 0 and the inverse inf/NaN, as numpy's are for an exactly singular matrix.
Packed result of `lu`, n*n + n + 1 values: the factors row-major (L below the diagonal with its unit
diagonal implied, U on and above it), the row permutation (row k of P A is row perm[k] of A, as
floats), the sign of the permutation.
"""
import numpy as np
from numba import njit

from . import cache  # noqa: F401  (before the cache=True functions below: they get adgrad's cache)


def packed_size(n):
    return n * n + n + 1


@njit(cache=True, nogil=True, error_model="numpy")
def lu(a, off, s0, s1, n, out, o):
    for i in range(n):
        out[o + n * n + i] = i
        for j in range(n):
            out[o + i * n + j] = a[off + i * s0 + j * s1]
    sign = 1.0
    for k in range(n):
        p, big = k, abs(out[o + k * n + k])
        for i in range(k + 1, n):
            if abs(out[o + i * n + k]) > big:
                p, big = i, abs(out[o + i * n + k])
        if p != k:
            sign = -sign
            for j in range(n):
                out[o + k * n + j], out[o + p * n + j] = out[o + p * n + j], out[o + k * n + j]
            out[o + n * n + k], out[o + n * n + p] = out[o + n * n + p], out[o + n * n + k]
        d = out[o + k * n + k]
        if d != 0.0:
            for i in range(k + 1, n):
                f = out[o + i * n + k] / d
                out[o + i * n + k] = f
                for j in range(k + 1, n):
                    out[o + i * n + j] -= f * out[o + k * n + j]
    out[o + n * n + n] = sign


@njit(cache=True, nogil=True, error_model="numpy")
def lu_det(f, o, n):
    """The sign of the permutation times the pivots, multiplied in order."""
    d = f[o + n * n + n]
    for k in range(n):
        d *= f[o + k * n + k]
    return d


@njit(cache=True, nogil=True, error_model="numpy")
def lu_inv(f, o, n, out, oo):
    """inv(A) into out[oo:] row-major: column j solves L U x = P e_j, forward then back substitution
    in place in that column."""
    for j in range(n):
        for i in range(n):
            y = 1.0 if f[o + n * n + i] == j else 0.0
            for k in range(i):
                y -= f[o + i * n + k] * out[oo + k * n + j]
            out[oo + i * n + j] = y
        for i in range(n - 1, -1, -1):
            x = out[oo + i * n + j]
            for k in range(i + 1, n):
                x -= f[o + i * n + k] * out[oo + k * n + j]
            out[oo + i * n + j] = x / f[o + i * n + i]


@njit(cache=True, nogil=True, error_model="numpy")
def lu_adj(f, o, n, out, oo):
    """adj(A) into out[oo:] row-major: det(A) inv(A), and at an exactly singular A its value there, which
    det's gradient adj(A)^T needs: with one zero pivot u_kk, adj(A) = sign c x (y^T L^-1 P) where
    U x = 0 = y^T U (x_k = y_k = 1) and c is the product of the other pivots; with more, 0."""
    zero, k = 0, 0
    for i in range(n):
        if f[o + i * n + i] == 0.0:
            zero, k = zero + 1, i
    if zero == 0:
        lu_inv(f, o, n, out, oo)
        d = lu_det(f, o, n)
        for i in range(n * n):
            out[oo + i] *= d
        return
    for i in range(n * n):
        out[oo + i] = 0.0
    if zero > 1:
        return
    x, y = np.zeros(n), np.zeros(n)      # allocated only at an exactly singular matrix
    x[k] = y[k] = 1.0
    c = f[o + n * n + n]
    for i in range(n):
        if i != k:
            c *= f[o + i * n + i]
    for i in range(k - 1, -1, -1):      # U[:k, :k] x[:k] = -U[:k, k]
        t = f[o + i * n + k]
        for j in range(i + 1, k):
            t += f[o + i * n + j] * x[j]
        x[i] = -t / f[o + i * n + i]
    for j in range(k + 1, n):           # y[k+1:]^T U[k+1:, k+1:] = -U[k, k+1:]
        t = f[o + k * n + j]
        for i in range(k + 1, j):
            t += y[i] * f[o + i * n + j]
        y[j] = -t / f[o + j * n + j]
    for i in range(n - 1, -1, -1):      # L^T z = y, in place
        for j in range(i + 1, n):
            y[i] -= f[o + j * n + i] * y[j]
    for i in range(k + 1):              # x is 0 below k; column perm[m] of adj gets z[m]
        for m in range(n):
            out[oo + i * n + int(f[o + n * n + m])] = c * x[i] * y[m]


# ---- numpy references (the interpreter's), through the same code ----------------------------------
def lu_np(a):
    a = np.ascontiguousarray(a, dtype=np.float64)
    n = a.shape[0]
    out = np.empty(packed_size(n))
    lu(a.reshape(-1), 0, n, 1, n, out, 0)
    return out


def from_factors(helper, f, n):
    """lu_inv or lu_adj of packed factors, as an n x n array."""
    out = np.empty(n * n)
    helper(np.ascontiguousarray(f, dtype=np.float64), 0, n, out, 0)
    return out.reshape(n, n)
