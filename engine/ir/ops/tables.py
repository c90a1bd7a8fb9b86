"""Lookups into a param read whole: `table`, a tabulated function of one argument interpolated as
LAMMPS's pair_eam does, and `take`, an entry of a constant array selected by a runtime index.

table(coef, x, t): derivative `order` of table t at x. coef is a param holding the spline
coefficients of T tables, shape (T, n, 7) (engine/numeric/tables.py builds them and documents the
interpolation); it is read whole, not element by element. x and t broadcast like any elementwise
arguments; t (a float holding an integer, from species indices) selects the table, and an invalid t
gives NaN. Attributes: x0, rdx (1/dx), n (nodes), ntab (T), xlin (linear extension above it; inf:
held) and order. The derivative in x is the same table one order up; the third is the last nonzero.

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


def _shape(shapes, dtypes, **attrs):
    if len(shapes) != 3:
        raise ShapeError(f"table takes a coefficient array, an argument and a table index, got {len(shapes)}")
    coef = shapes[0]
    if len(coef) != 3 or coef[1:] != (attrs["n"], 7) or coef[0] != attrs["ntab"]:
        raise ShapeError(f"table: coefficients of shape {coef}, expected ({attrs['ntab']}, {attrs['n']}, 7)")
    return broadcast_shapes("table", shapes[1:]), "f8"


def _numpy(coef, x, t, x0, rdx, n, ntab, xlin, order):
    return tables.evaluate(coef, x, t, x0, rdx, n, xlin, order)


def _partials(y, coef, x, t, order, **attrs):
    if order >= MAX_ORDER:
        return (None, None, None)
    return (None, current().emit("table", coef, x, t, order=order + 1, **attrs), None)


def _lower(c, x, t, x0, rdx, n, ntab, xlin, order):
    return f"__table({c}, {t}, {ntab}, {x}, {literal(x0)}, {literal(rdx)}, {n}, {literal(xlin)}, {order})"


register(Op("table", "elementwise", _shape, _numpy, from_partials(_partials), _lower, per_output(12),
            helpers=("table",), arity=3, whole=(0,)))


def _take_shape(shapes, dtypes, **attrs):
    if len(shapes) != 2 or len(shapes[0]) != 1:
        raise ShapeError("take takes a flat array and an index")
    return tuple(shapes[1]), "f8"


register(Op("take", "elementwise", _take_shape, lambda a, t: tables.take_reference(a, t), no_derivative(),
            lambda a, t: f"__take({a}, {t}, {a}.shape[0])", per_output(1), helpers=("take",), arity=2, whole=(0,)))
