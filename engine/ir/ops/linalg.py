"""det of matrices up to 4x4 as one op with the cofactor expansion unrolled, and det and inv above
4x4 (engine/ir/builtins/linalg.py chooses) through one LU factorization with partial pivoting that
engine/numeric/linalg.py computes.

det(A) -> ()              up to 4x4: the cofactor expansion along the first row, written out. Its
                          rules give the gradient as the cofactor matrix C (d det[T] = sum(C * T)),
                          not through the expansion's products: reverse mode through the products
                          would distribute each adjoint over them (g a k - g c g' for g C_11), which
                          forward mode over it (a Hessian) then differentiates term by term, twice
                          the work of g C_11 (the neo-Hookean tangent: 365 scalar operations -> 257).

lu(A) -> (n*n + n + 1,)   the packed factorization. Only the ops below read it, and their rules
                          differentiate A itself, so it has none of its own (a constant to
                          differentiation, as pivot choices are).
lu_det(A, F) -> ()        det A.  d det[T] = tr(adj(A) T): its gradient is adj(A)^T.
lu_inv(A, F) -> (n, n)    inv A.  d inv[T] = -inv(A) T inv(A).
lu_adj(A, F) -> (n, n)    adj A = det(A) inv(A), also where A is singular (det's gradient is exact there,
                          as numpy's cofactors and JAX's det gradient are).
The rules are written with these ops and products, so derivatives of every order follow. At an exactly
singular matrix det is 0 and inv inf/NaN, and so are the derivatives that contain inv (det's second
derivative: NaN, flagged as non-finite, never a silent wrong number); the closed forms up to 4x4 stay
finite there.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..op import Numerics, Op, elements, opaque_elements, register
from ..rules import Rule, emit, lift, no_derivative

num = Numerics("linalg")
CLOSED_FORM = 4         # det up to this size is the op `det`; above, and inv above it, the lu ops


# ---- det up to 4x4: the unrolled cofactor expansion -----------------------------------------------
def expansion(m, op):
    """det of the square nested list m by cofactor expansion along the first row. `op(name, x, y)`
    combines two entries ("mul", "add", "sub"), so the IR, the element form, the lowering and the
    reference all compute it in this one order (the same bits)."""
    n = len(m)
    if n == 1:
        return m[0][0]
    if n == 2:
        return op("sub", op("mul", m[0][0], m[1][1]), op("mul", m[0][1], m[1][0]))
    total = None
    for j in range(n):
        minor = [row[:j] + row[j + 1:] for row in m[1:]]
        term = op("mul", m[0][j], expansion(minor, op))
        total = term if total is None else op("add" if j % 2 == 0 else "sub", total, term)
    return total


def entries(a, emit):
    """The entries of the matrix Var a as a nested list of scalar Vars."""
    return [[emit("getitem", a, index=(i, j)) for j in range(a.shape[1])] for i in range(a.shape[0])]


def minor(m, i, j):
    """m without row i and column j."""
    return [r[:j] + r[j + 1:] for k, r in enumerate(m) if k != i]


def cofactor(m, i, j, emit):
    """(-1)^(i+j) det(minor(m, i, j)) as IR. A 2x2 minor takes its sign by swapping its rows (cb - da is
    -(ad - bc) to the bit), so no negation is left for the sums and products after it to carry."""
    mm = minor(m, i, j)
    if (i + j) % 2 == 0:
        return expansion(mm, emit)
    return expansion(mm[::-1], emit) if len(mm) == 2 else emit("neg", expansion(mm, emit))


def _cofactors(a):
    """The cofactor matrix of the matrix Var a as IR (adj(a)^T)."""
    n = a.shape[0]
    if n == 1:
        return emit("array", data=(1.0,), shape=(1, 1))
    m = entries(a, emit)
    return emit("pack", *[cofactor(m, i, j, emit) for i in range(n) for j in range(n)], shape=(n, n))


def _closed_jvp(e, ts, bs):
    return None if ts[0] is None else emit("reduce_sum", emit("mul", ts[0], _cofactors(e.args[0])),
                                           axes=(len(bs), len(bs) + 1))


def _closed_vjp(e, ct, bs):
    return [emit("mul", lift(ct, bs, 2), _cofactors(e.args[0]))]


_SYMBOL = {"mul": "*", "add": "+", "sub": "-"}
_NUMPY = {"mul": np.multiply, "add": np.add, "sub": np.subtract}


def _closed_lower(ctx, e):
    ctx.comment(e)
    a = e.args[0]
    n = a.shape[0]
    m = [[ctx.read(a, a.shape, [str(i), str(j)]) for j in range(n)] for i in range(n)]
    ctx.line(f"{ctx.vname[e.out]} = {expansion(m, lambda o, x, y: f'({x} {_SYMBOL[o]} {y})')}")
    ctx.bind(e.out, ctx.vname[e.out])


def _closed_cost(e):
    ops = 0                 # c(n) = n c(n-1) + n products + (n - 1) sums, c(1) = 0
    for n in range(2, e.args[0].shape[0] + 1):
        ops = n * ops + 2 * n - 1
    return max(ops, 1)


def _closed_shape(shapes, dtypes):
    n = _square("det", shapes[0])
    if n > CLOSED_FORM:
        raise ShapeError(f"det: the closed form is for matrices up to {CLOSED_FORM}x{CLOSED_FORM}, got {n}x{n}")
    return (), "f8"


def _square(name, s):
    if len(s) != 2 or s[0] != s[1]:
        raise ShapeError(f"{name}: expects a square matrix, got shape {tuple(s)}")
    return s[0]


def _shape(name, out):
    def rule(shapes, dtypes):
        n = _square(name, shapes[0])
        if len(shapes) > 1 and tuple(shapes[1]) != (n * n + n + 1,):
            raise ShapeError(f"{name}: the factorization of a {n}x{n} matrix has {n * n + n + 1} values, "
                             f"got shape {tuple(shapes[1])}")
        return out(n), "f8"
    return rule


# ---- rules --------------------------------------------------------------------------------------------
def _matmul(x, y):
    """x @ y on the last two axes, leading (batch) axes broadcast: a product reduced over the inner axis."""
    p = emit("mul", emit("reshape", x, shape=x.shape + (1,)),
             emit("reshape", y, shape=y.shape[:-2] + (1,) + y.shape[-2:]))
    return emit("reduce_sum", p, axes=(p.rank - 2,))


def _t(x):
    return emit("transpose", x, perm=(1, 0))


def _trace_with(ts, x, bs):
    """tr(x T) for each tangent direction T of ts (bs + (n, n))."""
    return emit("reduce_sum", emit("mul", ts, _t(x)), axes=(len(bs), len(bs) + 1))


def _det_jvp(e, ts, bs):
    return None if ts[0] is None else _trace_with(ts[0], emit("lu_adj", *e.args), bs)


def _det_vjp(e, ct, bs):
    return [emit("mul", lift(ct, bs, 2), _t(emit("lu_adj", *e.args))), None]


def _inv_jvp(e, ts, bs):
    return None if ts[0] is None else emit("neg", _matmul(_matmul(e.out, ts[0]), e.out))


def _inv_vjp(e, ct, bs):
    inv_t = _t(e.out)
    return [emit("neg", _matmul(_matmul(inv_t, ct), inv_t)), None]


def _adj_jvp(e, ts, bs):
    """d (det inv)[T] = det (tr(inv T) inv - inv T inv)."""
    if ts[0] is None:
        return None
    inv, det = emit("lu_inv", *e.args), emit("lu_det", *e.args)
    return emit("mul", det, emit("sub", emit("mul", lift(_trace_with(ts[0], inv, bs), bs, 2), inv),
                                 _matmul(_matmul(inv, ts[0]), inv)))


def _adj_vjp(e, ct, bs):
    inv_t, det = _t(emit("lu_inv", *e.args)), emit("lu_det", *e.args)
    dot = emit("reduce_sum", emit("mul", ct, _t(inv_t)), axes=(len(bs), len(bs) + 1))
    return [emit("mul", det, emit("sub", emit("mul", lift(dot, bs, 2), inv_t), _matmul(_matmul(inv_t, ct), inv_t))),
            None]


# ---- lowering: helper calls on the flat arrays the values live in --------------------------------------
def _lu_lower(ctx, e):
    ctx.comment(e)
    a, dst = ctx.buffer(e.args[0]), ctx.alloc(e.out)
    n = e.args[0].shape[0]
    ctx.line(f"__lu({a.array}, {a.offset}, {a.strides[0]}, {a.strides[1]}, {n}, {dst.array}, {dst.offset})")
    ctx.bind(e.out, dst)


def _factors(ctx, e):
    f = ctx.buffer(e.args[1])
    assert f.contiguous, "lu's factorization is stored contiguously"
    return f"{f.array}, {f.offset}, {e.args[0].shape[0]}"


def _det_lower(ctx, e):
    ctx.comment(e)
    name = ctx.vname[e.out]
    ctx.line(f"{name} = __lu_det({_factors(ctx, e)})")
    ctx.bind(e.out, name)


def _matrix_lower(ctx, e):
    """lu_inv and lu_adj: the helper of the op's name writes the n x n result."""
    ctx.comment(e)
    dst = ctx.alloc(e.out)
    ctx.line(f"__{e.op}({_factors(ctx, e)}, {dst.array}, {dst.offset})")
    ctx.bind(e.out, dst)


def _cubic(weight):
    return lambda e: int(weight * e.args[0].shape[0] ** 3) + 1


register(Op("det", "structural", _closed_shape,
            lambda a: np.float64(expansion(np.asarray(a, dtype=np.float64).tolist(), lambda o, x, y: _NUMPY[o](x, y))),
            Rule(_closed_jvp, _closed_vjp), _closed_lower, _closed_cost,
            scalar=lambda b, e, xs: elements((), lambda idx: expansion(xs[0].tolist(), b.emit))))
register(Op("lu", "structural", _shape("lu", lambda n: (n * n + n + 1,)), lambda a: num.lu_np(a),
            no_derivative(cut=True), _lu_lower, _cubic(2 / 3), scalar=opaque_elements, helpers=("linalg.lu",)))
register(Op("lu_det", "structural", _shape("lu_det", lambda n: ()),
            lambda a, f: np.float64(num.lu_det(np.ascontiguousarray(f, dtype=np.float64), 0, a.shape[0])),
            Rule(_det_jvp, _det_vjp), _det_lower, lambda e: e.args[0].shape[0], scalar=opaque_elements,
            helpers=("linalg.lu_det",)))
for name, rule in (("lu_inv", Rule(_inv_jvp, _inv_vjp)), ("lu_adj", Rule(_adj_jvp, _adj_vjp))):
    register(Op(name, "structural", _shape(name, lambda n: (n, n)),
                lambda a, f, name=name: num.from_factors(getattr(num, name), f, a.shape[0]), rule, _matrix_lower,
                _cubic(2), scalar=opaque_elements, helpers=(f"linalg.{name}",)))
