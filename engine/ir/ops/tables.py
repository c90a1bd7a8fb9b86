"""Lookups into a param read whole: `table`, a tabulated function of one argument interpolated as
LAMMPS's pair_eam does, and `take`, an entry of a constant array selected by a runtime index.

A table at x is four ops (`tabulated` emits them), so that tables on one grid at the same x share the
lookup, as a hand-written EAM kernel does (rho and phi, their derivatives: one piece index per pair):
    m = table_segment(x)            the piece of x, 1..n-1 (attributes x0, rdx = 1/dx, n)
    p = table_fraction(x, m)        the position of x in it, before the clamp to 1 (x0, rdx)
    k = table_row(t, m)             piece m of table t: its offset in the flat coefficients, or NaN for
                                    an invalid t (a float holding an integer, from species indices) (n, ntab)
    table(coef, x, p, k)            derivative `order` of the piece at p (rdx, xlin, order; n, ntab)
coef is a param holding the spline coefficients of T = ntab tables, shape (T, n, 7)
(engine/numeric/tables.py builds them and documents the interpolation); it is read whole, not element
by element. xlin: the value is extended linearly above it (inf: held). The derivative in x is the
same table one order up at the same p and k (the third is the last nonzero); m, p and k are constants
to differentiation (cut), so the derivative flows through table's x alone.

take(a, t): a[t] for a flat param a (the per-species constants of a potential file) and t a float
holding an integer (NaN if it is not a valid index). Constants of a potential are not differentiated.
"""
from __future__ import annotations

from ...errors import ShapeError
from ...numeric import tables
from ..core import current
from ..op import Op, broadcast_shapes, literal, per_output, register
from ..rules import from_partials, no_derivative

MAX_ORDER = 3        # the interpolant is a cubic per piece


def tabulated(emit, coef, x, t, x0, rdx, n, ntab, xlin, order=0):
    """Derivative `order` of table t of coef at x, as the four ops; emit(op, *args, **attrs) adds one."""
    m = emit("table_segment", x, x0=x0, rdx=rdx, n=n)
    p = emit("table_fraction", x, m, x0=x0, rdx=rdx)
    k = emit("table_row", t, m, n=n, ntab=ntab)
    return emit("table", coef, x, p, k, rdx=rdx, n=n, ntab=ntab, xlin=xlin, order=order)


def _shape(shapes, dtypes, **attrs):
    if len(shapes) != 4:
        raise ShapeError(f"table takes a coefficient array, an argument, its position and its row, got {len(shapes)}")
    coef = shapes[0]
    if len(coef) != 3 or coef[1:] != (attrs["n"], 7) or coef[0] != attrs["ntab"]:
        raise ShapeError(f"table: coefficients of shape {coef}, expected ({attrs['ntab']}, {attrs['n']}, 7)")
    return broadcast_shapes("table", shapes[1:]), "f8"


def _numpy(coef, x, p, k, rdx, n, ntab, xlin, order):
    return tables.evaluate_at(coef, x, p, k, rdx, xlin, order)


def _partials(y, coef, x, p, k, order, **attrs):
    if order >= MAX_ORDER:
        return (None, None, None, None)
    return (None, current().emit("table", coef, x, p, k, order=order + 1, **attrs), None, None)


def _lower(c, x, p, k, rdx, n, ntab, xlin, order):
    last = float((ntab * n - 1) * 7)      # the last piece's offset: the shape rule checked coef's shape
    return f"__table_at({c}, {x}, {p}, {k}, {literal(last)}, {literal(rdx)}, {literal(xlin)}, {order})"


register(Op("table", "elementwise", _shape, _numpy, from_partials(_partials), _lower, per_output(9),
            helpers=("table_at",), arity=4, whole=(0,)))


def _lookup_shape(name, arity):
    def shape(shapes, dtypes, **attrs):
        if len(shapes) != arity:
            raise ShapeError(f"{name} takes {arity} argument(s), got {len(shapes)}")
        return broadcast_shapes(name, shapes), "f8"
    return shape


# the lookup: constants to differentiation (cut), shared by the tables of one grid at one x
register(Op("table_segment", "elementwise", _lookup_shape("table_segment", 1), tables.segment,
            no_derivative(cut=True), lambda x, x0, rdx, n: f"__table_segment({x}, {literal(x0)}, {literal(rdx)}, {n})",
            per_output(4), helpers=("table_segment",), arity=1))
register(Op("table_fraction", "elementwise", _lookup_shape("table_fraction", 2), tables.fraction,
            no_derivative(cut=True), lambda x, m, x0, rdx: f"__table_fraction({x}, {m}, {literal(x0)}, {literal(rdx)})",
            per_output(3), helpers=("table_fraction",), arity=2))
register(Op("table_row", "elementwise", _lookup_shape("table_row", 2), tables.row,
            no_derivative(cut=True), lambda t, m, n, ntab: f"__table_row({t}, {m}, {ntab}, {n})",
            per_output(6), helpers=("table_row",), arity=2))


def _take_shape(shapes, dtypes, **attrs):
    if len(shapes) != 2 or len(shapes[0]) != 1:
        raise ShapeError("take takes a flat array and an index")
    return tuple(shapes[1]), "f8"


register(Op("take", "elementwise", _take_shape, lambda a, t: tables.take_reference(a, t), no_derivative(),
            lambda a, t: f"__take({a}, {t}, {a}.shape[0])", per_output(1), helpers=("take",), arity=2, whole=(0,)))
