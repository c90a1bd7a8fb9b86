"""Tabulated functions: values on a uniform grid, interpolated exactly as LAMMPS's pair_eam does.

`coefficients` is PairEAM::interpolate: per node a cubic Hermite piece whose slopes come from the
5-point finite-difference formula (2- and 3-point at the two nodes of each end), stored as 7
coefficients per node: [0..2] the derivative's quadratic (already divided by dx), [3..6] the value's
cubic, both in p, the position inside the piece. `evaluate` is the reference of a table at x, the
composition of four ops (engine/ir/ops/tables.py: `segment`, `fraction`, `row` are its lookup, shared
by the tables of one grid at one x, `evaluate_at` the polynomial), and `table_*` in
engine/numeric/scalar.py their compiled forms (kept there so that the IR imports no numba); they
follow pair_eam's compute():

    p = (x - x0) / dx + 1,  m = max(1, min(int(p), n - 1)),  p = min(p - m, 1)

with 1-based nodes. So above the last node the value is held at the last node's value and the slope
at the last node's slope (LAMMPS's r tables), unless `xlin` is finite: above xlin the value grows
linearly with that slope (LAMMPS's F(rho) above rhomax). Below the first node the first piece's
cubic is extended. A NaN argument gives NaN (LAMMPS would read the last node).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_NODES = 5       # the 5-point slope formula needs five nodes


@dataclass(frozen=True, eq=False)
class TableData:
    """Tabulated functions on one grid: values (*lead, n) at x0 + k dx; `lead` axes select a table
    (species). xlin: above it the value is extended linearly (inf: held at the last node). over_x:
    the function is values(x) / x (LAMMPS's r*phi tables)."""
    values: np.ndarray
    x0: float
    dx: float
    xlin: float = math.inf
    over_x: bool = False

    @property
    def lead(self):
        return tuple(self.values.shape[:-1])

    @property
    def n(self):
        return int(self.values.shape[-1])

    def coefficients(self):
        """(T, n, 7): the spline coefficients of every table, T = prod(lead)."""
        flat = self.values.reshape(-1, self.n)
        return np.stack([coefficients(f, self.dx) for f in flat]) if flat.shape[0] else np.zeros((0, self.n, 7))


def coefficients(f, dx):
    """The (n, 7) spline coefficients of node values f (n,) on spacing dx, bit for bit as LAMMPS's
    PairEAM::interpolate computes them (the same operations in the same order)."""
    f = np.asarray(f, dtype=np.float64)
    n = f.shape[0]
    s = np.zeros((n, 7))
    s[:, 6] = f
    s[0, 5] = f[1] - f[0]
    s[1, 5] = 0.5 * (f[2] - f[0])
    s[n - 2, 5] = 0.5 * (f[n - 1] - f[n - 3])
    s[n - 1, 5] = f[n - 1] - f[n - 2]
    if n > 4:
        s[2:n - 2, 5] = ((f[0:n - 4] - f[4:n]) + 8.0 * (f[3:n - 1] - f[1:n - 3])) / 12.0
    d = f[1:] - f[:-1]
    s[:-1, 4] = 3.0 * d - 2.0 * s[:-1, 5] - s[1:, 5]
    s[:-1, 3] = s[:-1, 5] + s[1:, 5] - 2.0 * d
    s[:, 2] = s[:, 5] / dx
    s[:, 1] = 2.0 * s[:, 4] / dx
    s[:, 0] = 3.0 * s[:, 3] / dx
    return s


def evaluate(coef, x, t, x0, rdx, n, xlin, order):
    """numpy reference: derivative `order` (0 = the value) of table t (flat index into the leading
    axes of coef, shape (T, n, 7)) at x; xlin = inf where the table is held above its last node.
    Vectorized over x and t; an invalid t gives NaN. The composition of the four steps below, as the
    model language emits it (engine/ir/ops/tables.py `tabulated`)."""
    x, t = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(t, dtype=np.float64))
    m = segment(x, x0, rdx, n)
    return evaluate_at(coef, x, fraction(x, m, x0, rdx), row(t, m, n, coef.shape[0]), rdx, xlin, order)


def segment(x, x0, rdx, n):
    """The piece m of x (1-based, as a float in 1..n-1): m = max(1, min(floor(p), n - 1)) for
    p = (x - x0) * rdx + 1; a NaN x gives 1 (its fraction is then NaN)."""
    p = (np.asarray(x, dtype=np.float64) - x0) * rdx + 1.0
    with np.errstate(invalid="ignore"):
        return np.where(p >= n, n - 1.0, np.where(p >= 1.0, np.floor(np.where(np.isfinite(p), p, 1.0)), 1.0))


def fraction(x, m, x0, rdx):
    """The position of x inside piece m, before the clamp to 1: (x - x0) * rdx + 1 - m."""
    return (np.asarray(x, dtype=np.float64) - x0) * rdx + 1.0 - m


def row(t, m, n, ntab):
    """The offset of piece m of table t in the flat coefficients, 7 (t n + m - 1), as a float; NaN if t
    is not a table (0..ntab-1). (m is `segment`'s; an offset beyond the tables makes evaluate_at NaN.)"""
    t, m = np.broadcast_arrays(np.asarray(t, dtype=np.float64), np.asarray(m, dtype=np.float64))
    ok = (t >= 0) & (t < ntab) & (t == np.floor(t))
    return np.where(ok, (t * n + m - 1.0) * 7.0, np.nan)


def evaluate_at(coef, x, p, k, rdx, xlin, order):
    """Derivative `order` of the piece at flat offset k (`row`; a fractional k reads from floor(k)) at
    position p (`fraction`) of x; NaN if k is not in 0..7 (T n - 1)."""
    x, p, k = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (x, p, k)))
    flat = coef.reshape(-1)
    ok = (k >= 0) & (k <= flat.shape[0] - 7)
    c = flat[np.where(ok, k, 0).astype(np.int64)[..., None] + np.arange(7)]
    c0, c1, c2, c3, c4, c5, c6 = (c[..., j] for j in range(7))
    clamped = p > 1.0
    p = np.where(clamped, 1.0, p)
    if order == 0:
        y = ((c3 * p + c4) * p + c5) * p + c6
        y = np.where(x > xlin, y + ((c0 * p + c1) * p + c2) * (x - xlin), y)
    elif order == 1:
        y = (c0 * p + c1) * p + c2
    elif order == 2:
        y = np.where(clamped, 0.0, (2.0 * c0 * p + c1) * rdx)
    else:
        y = np.where(clamped, 0.0, 2.0 * c0 * rdx * rdx)
    return np.where(ok, y, np.nan)


def take_reference(a, t):
    """numpy reference of the `take` op: a[t] for a flat index t held in a float; NaN if invalid."""
    t = np.asarray(t, dtype=np.float64)
    ok = (t >= 0) & (t < a.shape[0]) & (t == np.floor(t))
    return np.where(ok, a[np.where(ok, t, 0).astype(np.int64)], np.nan)


def check_grid(x, where):
    """(x0, dx) of grid points x that must be uniform and increasing; a ValueError names the problem."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.shape[0] < MIN_NODES:
        raise ValueError(f"{where}: a table needs at least {MIN_NODES} grid points, got {x.size}")
    steps = np.diff(x)
    dx = (x[-1] - x[0]) / (x.shape[0] - 1)
    if not dx > 0 or np.any(np.abs(steps - dx) > 1e-9 * max(abs(x[0]), abs(x[-1]), dx)):
        bad = int(np.argmax(np.abs(steps - dx)))
        raise ValueError(f"{where}: the grid is not uniform and increasing (step {bad} is {steps[bad]!r}, "
                         f"the mean step {dx!r})")
    return float(x[0]), float(dx)
