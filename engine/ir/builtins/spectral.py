"""Spectral functions of a symmetric 3x3 matrix (its symmetric part is what is read): eigvalsh, and
the isotropic matrix functions powm, sqrtm, logm and expm, lowered to the spectral ops
(engine/ir/ops/spectral.py says what their derivatives guarantee)."""
from __future__ import annotations

from ..ops.spectral import KINDS
from .call import builtin


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
    """A**p = U diag(lam**p) U^T for a scalar p (a number, a param or an expression)."""
    a, p = call.arrays(2)
    if p.shape != ():
        raise call.fail(f"powm: the exponent is a scalar, got shape {p.shape}", call.args[1])
    return _matfun(call, a, "pow", p)


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
