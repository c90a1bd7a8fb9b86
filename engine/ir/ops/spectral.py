"""Spectral ops on symmetric 3x3 matrices: eigenvalues and isotropic matrix functions, with
derivatives that are finite and accurate where eigenvalues coincide (engine/numeric/spectral.py
computes them and says how). A matrix A is read through its symmetric part.

eigh3(A) -> (12,)               eigenvalues (ascending) and eigenvectors, packed. Only the ops below
                                read it, and their rules differentiate through it, so it has none of
                                its own (a constant to differentiation, as det's pivot choices are).
matfun(A, E, p; kind) -> (3,3)  F(A) = U diag(f(lam)) U^T, f one of numeric.spectral.KINDS (p: the
                                exponent of x**p, a scalar; unused by log and exp).
trfun(A, E, p; kind) -> ()      tr F(A), what trace(matfun(...)) becomes: its gradient is the matrix
                                function of f' (x**p -> p x**(p-1), log -> x**-1, exp -> exp), so its
                                second derivative needs first divided differences only.
matfun_d1(A, E, p, B; kind)     dF[B] for each leading index of B (any leading axes, as tangents and
                                cotangents have): its own transpose, so both modes use it.
matfun_d2(A, E, p, B, C; kind)  d2F[B, C], B's and C's leading axes broadcast; the last derivative
                                given (a third one of a spectral function is refused).
divdiff(A, E, p[, T, G]; kind)  the divided differences f[lam_i, lam_j] (6,) matfun_d1 multiplies by. Given
                                T = f(lam) and G = log1p((lam_i - lam_j)/lam_j) for ij = 01, 02, 12 (both (3,)),
                                they are formed from them, without a pow, log, exp or log1p of their own.
eig_d1(A, E, g, B)              matfun_d1 with the divided differences g given: sum_t s_t matfun_d1(.., p_t, B)
                                is eig_d1(.., sum_t s_t divdiff(.., p_t), B). engine/opt/spectral.py forms
                                both after differentiation (neither is differentiated).
eigvalsh(A, E) -> (3,)          the eigenvalues, ascending.
eigvalsh_d(A, E, X; adjoint)    d lam[X] = diag(U^T X U), or its transpose U diag(X) U^T. The second
                                derivative of a single eigenvalue does not exist where eigenvalues
                                coincide (F = I), so it is refused with a pointer to matrix functions,
                                whose second derivatives do exist everywhere.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError, SpecError
from ..core import current
from ..op import Numerics, Op, opaque_elements, register
from ..rules import Rule, Unsupported, lift, no_derivative

# the scalar functions of matfun, coded as engine/numeric/spectral.py codes them (that module compiles
# with numba, which the IR does not import until a reference value is computed)
KINDS = {"pow": 0, "log": 1, "exp": 2}
POW = KINDS["pow"]

EIG2 = ("second derivatives of eigvalsh are not defined where eigenvalues coincide (as at F = I); write the "
        "model with matrix functions (trace(powm(C, a)), logm, sqrtm, expm), whose second derivatives are exact "
        "everywhere")
THIRD = "third derivatives of spectral functions (powm, logm, sqrtm, expm) are not supported"
EXPONENT2 = "second derivatives of powm with respect to its exponent are not supported"
MERGED = "divdiff and eig_d1 are formed after differentiation (engine/opt/spectral.py), never differentiated"


def emit(op, *args, **attrs):
    return current().emit(op, *args, **attrs)


num = Numerics("spectral")


def _matrix(name, s):
    if tuple(s[-2:]) != (3, 3):
        raise ShapeError(f"{name}: a 3x3 matrix (or a stack of them) is needed, got shape {tuple(s)}")


def _shape(name, out):
    """The shape rule of a spectral op: A is (3, 3), E (12,), p a scalar, then batched matrices."""
    def rule(shapes, dtypes, **attrs):
        _matrix(name, shapes[0])
        if len(shapes[0]) != 2 or (len(shapes) > 1 and tuple(shapes[1]) != (12,)):
            raise ShapeError(f"{name}: one symmetric 3x3 matrix, got shape {tuple(shapes[0])}")
        for s in shapes[3 if name.startswith(("matfun", "trfun", "divdiff")) else 2:]:
            _matrix(name, s)
        return out(shapes, **attrs), "f8"
    return rule


def _batch(*shapes):
    return tuple(np.broadcast_shapes(*(tuple(s[:-2]) for s in shapes)))


def _each(fn, batch, tail, *mats):
    """fn(*9-tuples) -> values of shape `tail`, for every index of `batch` (the mats broadcast to it)."""
    mats = [np.broadcast_to(m, tuple(batch) + m.shape[-2:]) for m in mats]
    out = np.empty(tuple(batch) + tail)
    for idx in np.ndindex(*batch):
        out[idx] = np.reshape(fn(*(tuple(m[idx].reshape(-1)) for m in mats)), tail)
    return out


def _eigvals_d_np(a, e, x, adjoint):
    e = tuple(e)
    if not adjoint:
        return _each(lambda b: num.eigvals_d(e, b), x.shape[:-2], (3,), x)
    out = np.empty(x.shape + (3,))
    for idx in np.ndindex(*x.shape[:-1]):
        out[idx] = np.reshape(num.eigvals_dt(e, tuple(x[idx])), (3, 3))
    return out


# ---- numpy references, through the same numerics ---------------------------------------------------
def _matfun_np(a, e, p, kind):
    return np.reshape(num.matfun(tuple(e), kind, float(p)), (3, 3))


def _d1_np(a, e, p, b, kind):
    g = num.matfun_dd1(tuple(e), kind, float(p))
    return _each(lambda x: num.matfun_d1(tuple(e), g, x), b.shape[:-2], (3, 3), b)


def _d2_np(a, e, p, b, c, kind):
    t = num.matfun_dd2(tuple(e), kind, float(p))
    return _each(lambda x, y: num.matfun_d2(tuple(e), t, x, y), _batch(b.shape, c.shape), (3, 3), b, c)


def _eig_d1_np(a, e, g, b):
    return _each(lambda x: num.matfun_d1(tuple(e), tuple(g), x), b.shape[:-2], (3, 3), b)


def _divdiff_shape(shapes, dtypes, kind):
    _shape("divdiff", lambda s: ())(shapes[:3], dtypes[:3])
    if len(shapes) not in (3, 5) or any(tuple(s) != (3,) for s in shapes[3:]):
        raise ShapeError(f"divdiff: f of the 3 eigenvalues and the 3 log1p of their gaps, or neither, got shapes "
                         f"{[tuple(s) for s in shapes[3:]]}")
    return (6,), "f8"


def _divdiff_np(a, e, p, *t, kind):
    return np.array(num.matfun_dd1(tuple(e), kind, float(p), *(tuple(x) for x in t)))


def _eig_d1_shape(shapes, dtypes):
    _shape("eig_d1", lambda s: ())(shapes[:2], dtypes[:2])
    if tuple(shapes[2]) != (6,):
        raise ShapeError(f"eig_d1: 6 divided differences, got shape {tuple(shapes[2])}")
    _matrix("eig_d1", shapes[3])
    return tuple(shapes[3]), "f8"


# ---- rules --------------------------------------------------------------------------------------
def _exponent_weights(e):
    """d f(lam)/dp = lam**p log(lam) for f = x**p: how F moves with its exponent."""
    a, ev, p = e.args[:3]
    lam = emit("eigvalsh", a, ev)
    return emit("pow", lam, p) * emit("log", lam)


def _matfun_jvp(e, ts, bs):
    a, ev, p = e.args
    ta, _, tp = ts
    out = None if ta is None else emit("matfun_d1", a, ev, p, ta, **dict(e.attrs))
    if tp is not None:
        term = emit("eigvalsh_d", a, ev, lift(tp, bs, 1) * _exponent_weights(e), adjoint=True)
        out = term if out is None else out + term
    return out


def _exponent_varies(e):
    """Whether the exponent of x**p is a value (a param, an expression), not a constant."""
    return e.attr("kind") == POW and current().const_value(e.args[2]) is None


def _matfun_vjp(e, ct, bs):
    a, ev, p = e.args
    ct_p = None
    if _exponent_varies(e):
        d = emit("eigvalsh_d", a, ev, ct, adjoint=False)
        ct_p = emit("reduce_sum", d * _exponent_weights(e), axes=(len(bs),))
    return [emit("matfun_d1", a, ev, p, ct, **dict(e.attrs)), None, ct_p]


def _derivative_fn(e):
    """f'(A) of the trfun equation e as (c, M): c a scalar factor (None for 1) and M a matfun; the
    rules multiply c into a scalar first, so a tangent of the gradient scales each entry once."""
    a, ev, p = e.args
    kind = e.attr("kind")
    if kind == KINDS["exp"]:
        return None, emit("matfun", a, ev, p, kind=kind)
    if kind == KINDS["log"]:
        return None, emit("matfun", a, ev, current().const(-1.0), kind=POW)
    return p, emit("matfun", a, ev, p - 1.0, kind=POW)


def _trfun_jvp(e, ts, bs):
    ta, _, tp = ts
    out = None
    if ta is not None:
        c, m = _derivative_fn(e)
        out = emit("reduce_sum", ta * m, axes=(len(bs), len(bs) + 1))
        out = out if c is None else out * c
    if tp is not None:
        term = tp * emit("reduce_sum", _exponent_weights(e), axes=(0,))
        out = term if out is None else out + term
    return out


def _trfun_vjp(e, ct, bs):
    ct_p = ct * emit("reduce_sum", _exponent_weights(e), axes=(0,)) if _exponent_varies(e) else None
    c, m = _derivative_fn(e)
    return [lift(ct if c is None else ct * c, bs, 2) * m, None, ct_p]


def _d1_jvp(e, ts, bs):
    a, ev, p, b = e.args
    ta, _, tp, tb = ts
    if tp is not None:
        raise SpecError(EXPONENT2)
    out = None if tb is None else emit("matfun_d1", a, ev, p, tb, **dict(e.attrs))
    if ta is not None:
        inner = b.shape[:-2]
        b_r = emit("reshape", b, shape=(1,) * len(bs) + b.shape) if bs else b
        ta_r = emit("reshape", ta, shape=tuple(bs) + (1,) * len(inner) + (3, 3)) if inner else ta
        term = emit("matfun_d2", a, ev, p, b_r, ta_r, **dict(e.attrs))
        out = term if out is None else out + term
    return out


def _d1_vjp(e, ct, bs):
    a, ev, p, b = e.args
    inner = b.shape[:-2]
    b_r = emit("reshape", b, shape=(1,) * len(bs) + b.shape) if bs else b
    ct_a = emit("matfun_d2", a, ev, p, b_r, ct, **dict(e.attrs))
    if inner:
        ct_a = emit("reduce_sum", ct_a, axes=tuple(range(len(bs), len(bs) + len(inner))))
    return [ct_a, None, Unsupported(EXPONENT2), emit("matfun_d1", a, ev, p, ct, **dict(e.attrs))]


def _refused(message):
    """The rule of an op whose derivative is not given: an error if one is needed."""
    def jvp(e, ts, bs):
        if any(t is not None for t in ts):
            raise SpecError(message)
        return None
    return Rule(jvp, lambda e, ct, bs: [Unsupported(message)] * len(e.args))


def _eigvals_d_jvp(e, ts, bs):
    a, ev, x = e.args
    if ts[0] is not None:
        raise SpecError(EIG2)
    return None if ts[2] is None else emit("eigvalsh_d", a, ev, ts[2], **dict(e.attrs))


def _eigvals_d_vjp(e, ct, bs):
    a, ev, x = e.args
    return [Unsupported(EIG2), None, emit("eigvalsh_d", a, ev, ct, adjoint=not e.attr("adjoint"))]


# ---- lowering -------------------------------------------------------------------------------------
def _tuple(ctx, v, lead_shape, lead, n):
    """The expression of the tuple of v's n trailing elements (3, 6, 12: a vector; 9: a 3x3 matrix) at
    the leading index `lead` of a loop over `lead_shape` (v broadcasts to it)."""
    trail = [[str(k)] for k in range(n)] if n != 9 else [[str(k // 3), str(k % 3)] for k in range(9)]
    space = tuple(lead_shape) + ((n,) if n != 9 else (3, 3))
    return "(" + ", ".join(ctx.read(v, space, list(lead) + t) for t in trail) + ")"


def _lower(call, n_out, setup=None):
    """A spectral op's statements: the packed decomposition as a tuple, `setup` once (the divided
    differences), then call(ctx, e, setup, lead, lead_shape) -> the helper call for every leading
    index of the result, whose n_out values are written out."""
    def lower(ctx, e):
        ctx.comment(e)
        dst = ctx.alloc(e.out)
        name = ctx.vname[e.out]
        ev = _tuple(ctx, e.args[0], (), [], 9) if e.op == "eigh3" else _tuple(ctx, e.args[1], (), [], 12)
        ctx.line(f"{name}_e = {ev}")
        pre = None
        if setup is not None:
            ctx.line(f"{name}_s = {setup(ctx, e, name + '_e')}")
            pre = name + "_s"
        lead_shape = e.out.shape[:e.out.rank - (2 if n_out == 9 else 1)]
        with ctx.loops(lead_shape, "s") as lead:
            ctx.line(f"{name}_r = {call(ctx, e, name + '_e', pre, lead, lead_shape)}")
            tail = [[str(k)] for k in range(n_out)] if n_out != 9 else [[str(k // 3), str(k % 3)] for k in range(9)]
            for k, t in enumerate(tail):
                ctx.line(f"{dst.at(list(lead) + t)} = {name}_r[{k}]")
        ctx.bind(e.out, dst)
    return lower


def _p(ctx, e):
    return ctx.read(e.args[2], (), [])


def _symmetric(b, e, xs):
    return opaque_elements(b, e, xs, sym=True)


def _cost(per_batch, fixed):
    return lambda e: fixed + per_batch * (e.out.size // (3 if e.out.shape[-1:] == (3,) else 9))


register(Op("eigh3", "structural", _shape("eigh3", lambda s: (12,)),
            lambda a: np.array(num.eigh3(tuple(np.reshape(a, -1)))),
            no_derivative(cut=True),
            _lower(lambda ctx, e, ev, pre, lead, ls: f"__eigh3({ev})", 12), lambda e: 400, scalar=opaque_elements,
            helpers=("spectral.eigh3",)))
register(Op("matfun", "structural", _shape("matfun", lambda s, kind: (3, 3)), _matfun_np,
            Rule(_matfun_jvp, _matfun_vjp),
            _lower(lambda ctx, e, ev, pre, lead, ls: f"__matfun({ev}, {e.attr('kind')}, {_p(ctx, e)})", 9),
            _cost(60, 60), scalar=_symmetric, helpers=("spectral.matfun",)))
def _trfun_lower(ctx, e):
    ctx.comment(e)
    name = ctx.vname[e.out]
    ctx.line(f"{name} = __trfun({_tuple(ctx, e.args[1], (), [], 12)}, {e.attr('kind')}, {_p(ctx, e)})")
    ctx.bind(e.out, name)


register(Op("trfun", "structural", _shape("trfun", lambda s, kind: ()),
            lambda a, e, p, kind: np.float64(num.trfun(tuple(e), kind, float(p))),
            Rule(_trfun_jvp, _trfun_vjp), _trfun_lower, lambda e: 30, scalar=opaque_elements,
            helpers=("spectral.trfun",)))


def _d1_lower(dd):
    """The lowering of matfun_d1 or eig_d1, dd(ctx, e, ev) the expression of their divided differences:
    each direction is rotated into the eigenbasis and back on its own (a 6x6 map built once and applied
    to every direction costs a third of the arithmetic, but loses digits where the divided differences
    span orders of magnitude: 2e-12 instead of 4e-14 on a stretch ratio of 1000)."""
    return _lower(lambda ctx, e, ev, pre, lead, ls: f"__matfun_d1({ev}, {pre}, {_tuple(ctx, e.args[3], ls, lead, 9)})",
                  9, setup=dd)


def _dd1_call(ctx, e, ev):
    t = "".join(f", {_tuple(ctx, x, (), [], 3)}" for x in e.args[3:]) if e.op == "divdiff" else ""
    return f"__matfun_dd1({ev}, {e.attr('kind')}, {_p(ctx, e)}{t})"


register(Op("matfun_d1", "structural", _shape("matfun_d1", lambda s, kind: tuple(s[3])), _d1_np,
            Rule(_d1_jvp, _d1_vjp), _d1_lower(_dd1_call), _cost(70, 60), scalar=_symmetric,
            helpers=("spectral.matfun_dd1", "spectral.matfun_d1")))
# formed after differentiation by engine/opt/spectral.py, which merges linear combinations of matfun_d1
register(Op("divdiff", "structural", _divdiff_shape, _divdiff_np, _refused(MERGED),
            _lower(lambda ctx, e, ev, pre, lead, ls: _dd1_call(ctx, e, ev), 6), lambda e: 30, scalar=opaque_elements,
            helpers=("spectral.matfun_dd1",)))
register(Op("eig_d1", "structural", _eig_d1_shape, _eig_d1_np, _refused(MERGED),
            _d1_lower(lambda ctx, e, ev: _tuple(ctx, e.args[2], (), [], 6)), _cost(70, 0), scalar=_symmetric,
            helpers=("spectral.matfun_d1",)))
register(Op("matfun_d2", "structural", _shape("matfun_d2", lambda s, kind: _batch(s[3], s[4]) + (3, 3)), _d2_np,
            _refused(THIRD),
            _lower(lambda ctx, e, ev, pre, lead, ls:
                   f"__matfun_d2({ev}, {pre}, {_tuple(ctx, e.args[3], ls, lead, 9)}, "
                   f"{_tuple(ctx, e.args[4], ls, lead, 9)})", 9,
                   setup=lambda ctx, e, ev: f"__matfun_dd2({ev}, {e.attr('kind')}, {_p(ctx, e)})"),
            _cost(140, 200), scalar=_symmetric, helpers=("spectral.matfun_dd2", "spectral.matfun_d2")))
register(Op("eigvalsh", "structural", _shape("eigvalsh", lambda s: (3,)), lambda a, e: np.array(e[:3]),
            Rule(lambda e, ts, bs: None if ts[0] is None else emit("eigvalsh_d", *e.args, ts[0], adjoint=False),
                 lambda e, ct, bs: [emit("eigvalsh_d", *e.args, ct, adjoint=True), None]),
            _lower(lambda ctx, e, ev, pre, lead, ls: f"{ev}[:3]", 3), lambda e: 3, scalar=opaque_elements))


def _eigvals_d_shape(shapes, dtypes, adjoint):
    _shape("eigvalsh_d", lambda s: ())(shapes[:2], dtypes[:2])
    x = tuple(shapes[2])
    if adjoint:
        if x[-1:] != (3,):
            raise ShapeError(f"eigvalsh_d: eigenvalue cotangents end in 3, got shape {x}")
        return x + (3,), "f8"
    _matrix("eigvalsh_d", x)
    return x[:-1], "f8"


def _eigvals_d_call(ctx, e, ev, pre, lead, ls):
    if e.attr("adjoint"):
        return f"__eigvals_dt({ev}, {_tuple(ctx, e.args[2], ls, lead, 3)})"
    return f"__eigvals_d({ev}, {_tuple(ctx, e.args[2], ls, lead, 9)})"


def _eigvals_d_lower(ctx, e):
    _lower(_eigvals_d_call, 9 if e.attr("adjoint") else 3)(ctx, e)


register(Op("eigvalsh_d", "structural", _eigvals_d_shape, _eigvals_d_np, Rule(_eigvals_d_jvp, _eigvals_d_vjp),
            _eigvals_d_lower, lambda e: 40 * e.args[2].size // 3,
            scalar=lambda b, e, xs: opaque_elements(b, e, xs, sym=e.attr("adjoint")),
            helpers=("spectral.eigvals_d", "spectral.eigvals_dt")))
