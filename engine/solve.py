"""Local Newton solves: a let entry `{solve: RESIDUAL, init: X0, tol: T, max_iter: N}` is the x with
RESIDUAL(x) = 0 (x of any static shape, the residual of the same shape).

The kernel runs Newton's method from X0 with the Jacobian adgrad derives from the residual (forward
mode), unrolled max_iter times with no branch: once a Newton step is small (max|dx| <= T max(1,
max|x|)) the iterate is kept by a select, and the small dense solve is closed-form up to 4x4 and an
LU factorization above (engine/ir/ops/linalg.py). Convergence is judged on the final iterate alone,
never against the start (a residual scaled by r(X0) would accept a far-away iterate after a bad
start): its Newton step must be small against it, and its residual small against max(1, max|x|)
times the largest row sum of |J| there. A point that fails gives NaN, so it counts as non-finite
(engine.nan: error names its row).

Derivatives never go through the iterations: they are seen through `stop`, a constant to
differentiation. The converged iterate takes one more Newton step (quadratic convergence brings it
from the tolerance to round-off, which the second derivatives below need), giving x*; from x* two
more Newton steps are taken with the Jacobian J* frozen at x*:
    x1 = x* - J*^-1 r(x*),    x2 = x1 - J*^-1 r(x1)
Their values are x* to round-off (r(x*) is below the tolerance), and as functions of the inputs
and params they agree with the solution x(theta) to second order: x1 - x = O(d theta^2) (the first
step is the implicit function theorem's first derivative, -J^-1 dr/dtheta), and a Newton step from an
iterate with an error of O(e) leaves O(d theta e). So first and second derivatives of everything
downstream are the implicit function theorem's, in both modes.
"""
from __future__ import annotations

import math

from .ad.transform import jacobian_forward
from .ir.builtins.call import Call
from .ir.builtins.linalg import LARGEST, inverse


def _max_abs(b, r):
    a = b.emit("abs", r)
    return b.emit("reduce_max", a, axes=tuple(range(a.rank))) if a.rank else a


class _Solve:
    def __init__(self, b, lower, custom, decl, env):
        self.b, self.lower, self.custom, self.decl, self.env = b, lower, custom, decl, env
        self.call = Call("solve", None, b, None, None)     # what the linear algebra builds through

    def residual(self, x):
        r = self.lower(self.decl.residual, {**self.env, self.decl.name: x})
        if r.shape != x.shape:
            raise self.decl.residual.error(f"the residual has shape {r.shape}, but the unknown "
                                           f"'{self.decl.name}' has shape {x.shape} (from init)")
        return r

    def step(self, jac, r):
        """J^-1 r, for J of shape r.shape + r.shape."""
        b = self.b
        if not r.shape:
            return b.emit("div", r, jac)
        n = r.size
        j2 = b.emit("reshape", jac, shape=(n, n))
        inv = inverse(self.call, j2)
        dx = b.emit("reduce_sum", b.emit("mul", inv, b.emit("reshape", r, shape=(1, n))), axes=(1,))
        return b.emit("reshape", dx, shape=r.shape)

    def jacobian(self, x, r):
        jac = jacobian_forward(self.b, self.custom, x, r)
        if jac is None:
            raise self.decl.residual.error(f"the residual does not depend on '{self.decl.name}'")
        return jac


def solve(b, lower, custom, decl, env):
    """The Var of the unknown of `decl` (a spec.SolveDecl): Newton's iterations, then two frozen-
    Jacobian steps that carry the implicit function theorem's derivatives (module docstring).
    lower(expr, env) lowers an expression; custom holds the model's hand-written rules."""
    s = _Solve(b, lower, custom, decl, env)
    with b.active():
        # the start, through `stop`: never folded, so a constant start does not fold the residual away
        x = b.emit("stop", lower(decl.init, env) if decl.init is not None else b.const(0.0))
        if x.size > LARGEST:
            raise decl.init.error(f"a solve has at most {LARGEST} unknowns, got shape {x.shape}")
        done = None
        for _ in range(decl.max_iter):
            r = s.residual(x)
            dx = s.step(s.jacobian(x, r), r)
            new = b.emit("sub", x, dx)
            small = _small(b, dx, new, decl.tol)
            x, done = (new, small) if done is None else \
                (b.emit("select", done, x, new), b.emit("or", done, small))
        r = s.residual(x)
        xs = b.emit("stop", b.emit("sub", x, s.step(s.jacobian(x, r), r)))   # one more step: to round-off
        rs = s.residual(xs)
        frozen = b.emit("stop", s.jacobian(xs, rs))
        converged = _converged(b, x, xs, rs, frozen, decl.tol)
        x1 = b.emit("sub", xs, s.step(frozen, rs))
        x2 = b.emit("sub", x1, s.step(frozen, s.residual(x1)))
        # times 1, or NaN where not converged: the derivatives are NaN there too (a select's would be 0)
        return b.emit("mul", x2, b.emit("select", converged, 1.0, math.nan))


def _small(b, dx, x, tol):
    """max|dx| <= tol * max(1, max|x|): a Newton step that is small against the iterate it leads to."""
    return b.emit("le", _max_abs(b, dx), b.emit("mul", b.emit("maximum", _max_abs(b, x), 1.0), tol))


def _converged(b, x, xs, rs, jac, tol):
    """Whether the final iterate xs (one Newton step from the last iterate x) is a root, judged on xs
    alone, never against the start: the step x -> xs is small against xs (_small), and the residual
    at xs is small against what the residual's linear part can hold there, max(1, max|xs|) times the
    largest row sum of |J| (a normwise backward error of at most tol). NaN anywhere fails both."""
    scale = b.emit("mul", b.emit("maximum", _max_abs(b, xs), 1.0), tol)
    if rs.shape:
        n = rs.size
        rows = b.emit("reduce_sum", b.emit("abs", b.emit("reshape", jac, shape=(n, n))), axes=(1,))
        norm = b.emit("reduce_max", rows, axes=(0,))
    else:
        norm = b.emit("abs", jac)
    residual_ok = b.emit("le", _max_abs(b, rs), b.emit("mul", scale, norm))
    return b.emit("and", _small(b, b.emit("sub", xs, x), xs, tol), residual_ok)
