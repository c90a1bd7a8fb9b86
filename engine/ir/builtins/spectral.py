"""Spectral functions of a symmetric 3x3 matrix (its symmetric part is what is read): eigvalsh, and
the isotropic matrix functions powm, sqrtm, logm and expm, lowered to the spectral ops
(engine/ir/ops/spectral.py says what their derivatives guarantee)."""
from __future__ import annotations

import weakref

import numpy as np

from ..ops.spectral import KINDS
from .call import builtin

# powm(A, p) with an array p: the stack -> its matrix functions, one per entry of p in C order, so that
# trace(stack, axis1=-2, axis2=-1) takes each one's trace as trfun (linalg.py), as trace(powm(A, p)) does
STACKS = weakref.WeakKeyDictionary()


def _matrix(call, x):
    if x.shape != (3, 3):
        raise call.fail(f"{call.name}: a symmetric 3x3 matrix, got shape {x.shape}")
    return x


@builtin("eigvalsh")
def eigvalsh(call):
    """The eigenvalues, ascending, as numpy's eigvalsh gives them."""
    (a,) = call.arrays(1)
    a = _matrix(call, a)
    return call.emit("eigvalsh", a, call.emit("eigh3", a))


def _matfun(call, a, kind, p=0.0):
    a = _matrix(call, a)
    p = call.const(p) if isinstance(p, float) else p
    return call.emit("matfun", a, call.emit("eigh3", a), p, kind=KINDS[kind])


@builtin("powm")
def powm(call):
    """A**p = U diag(lam**p) U^T for a scalar p (a number, a param or an expression); for an array p
    (an Ogden law's exponents, one a term) the stack of shape p.shape + (3, 3) of A**p[i], numpy's
    broadcasting of p[..., None, None]: one eigendecomposition, a matrix function per entry."""
    a, p = call.arrays(2)
    if p.rank == 0:
        return _matfun(call, a, "pow", p)
    parts = [_matfun(call, a, "pow", call.emit("getitem", p, index=i)) for i in np.ndindex(*p.shape)]
    out = call.const(0.0, p.shape + (3, 3))
    for i, part in zip(np.ndindex(*p.shape), parts):
        out = call.emit("index_add", out, part, index=i + ((0, 3, 1), (0, 3, 1)))
    STACKS[out] = tuple(parts)
    return out


@builtin("sqrtm")
def sqrtm(call):
    (a,) = call.arrays(1)
    return _matfun(call, a, "pow", 0.5)


@builtin("logm")
def logm(call):
    (a,) = call.arrays(1)
    return _matfun(call, a, "log")


@builtin("expm")
def expm(call):
    (a,) = call.arrays(1)
    return _matfun(call, a, "exp")
