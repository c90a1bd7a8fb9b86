"""The calculator's neighbour list: engine/tools/cell_list.py's compiled, threaded cell list (memory in
proportion to the atoms and their neighbours, not to the cell's volume), in the form the calculator
keeps between steps: each pair as (i, j, S), S the cell vectors crossed, so that its vector can be made
again from new positions, x_j - x_i + S cell, while the list lasts.

Directions that are not periodic are taken as they are (no wrapping, no images), whatever the cell
says there: a free cluster needs no cell, and a slab's zero third vector is no error.
"""
from __future__ import annotations

import numpy as np
from numba import njit

import adgrad.engine.numeric.cache  # noqa: F401  (first: numba caches the cache=True functions below in adgrad's cache)

from adgrad.engine.kernel import run_threads
from adgrad.engine.tools import cell_list
from adgrad.engine.tools.cell_list import face_distances, lattice  # noqa: F401  (lattice: the calculator's)

SLACK = 1e-9        # relative room in the cell list's reach: its vectors round otherwise than x_j - x_i + S cell


def neighbour_list(positions, basis, inverse, pbc, reach):
    """Every pair (i, j, S) with |x_j - x_i + S @ basis| < reach, j != i or S != 0, sorted by i: the pairs
    of atom i are first[i] <= p < first[i + 1], nearest first. Returns (first, j, S); S counts the cell
    vectors crossed. The vector is computed as the calculator's pack computes it, so the test is the same
    to the bit (the cell list searches a little further, SLACK, and its pairs are tested again here)."""
    x = np.ascontiguousarray(positions, dtype=np.float64)
    n = len(x)
    periodic = np.asarray(pbc, dtype=bool)
    k = np.where(periodic, np.floor(x @ inverse), 0.0)
    if n and np.abs(k).max() >= 2.0 ** 31:
        i = int(np.abs(k).max(axis=1).argmax())
        raise ValueError(f"atom {i} is {np.abs(k[i]).max():.3g} cell lengths outside the periodic cell: its position "
                         f"{x[i].tolist()} cannot be wrapped into the cell to a useful precision")
    h = face_distances(inverse)
    images = np.prod(np.where(periodic, 2.0 * np.ceil(reach * (1 + 1e-6) / h) + 1, 1.0))
    if images > cell_list.MAX_IMAGES:
        raise ValueError(f"the periodic cell is too thin for the cutoff + skin of {reach:g} A: the distances between "
                         f"its faces are {', '.join(f'{v:.3g}' for v in h[periodic])} A, so each atom meets "
                         f"{images:.3g} periodic images of the cell (more than {cell_list.MAX_IMAGES:,}); make the "
                         f"cell larger or the cutoff smaller")
    found = cell_list.pairs(x, basis, periodic, reach * (1 + SLACK) + 1e-12 * (np.abs(x).max() if n else 0.0))
    # the cells each atom was moved by into the cell, and each shift code's cells (whole numbers, rounded)
    moved = np.rint((x - found.p) @ inverse).astype(np.int64)
    cells = np.rint(found.shifts @ inverse).astype(np.int64)
    total = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(found.count, out=total[1:])
    j = np.empty(total[-1], dtype=np.int64)
    S = np.empty((total[-1], 3), dtype=np.int64)
    keep = np.empty(total[-1], dtype=np.bool_)
    f, reachsq = found, reach * reach
    run_threads(lambda w: _convert(f.parts[w], f.parts[w + 1], f.start, f.count, f.u[w], f.code[w], f.order, x,
                                   basis, moved, cells, total, reachsq, j, S, keep), len(f.parts) - 1)
    if keep.all():
        return total, j, S
    kept = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(keep, out=kept[1:])
    return kept[total], j[keep], S[keep]


@njit(cache=True, nogil=True)
def _convert(t0, t1, start, count, U, C, order, x, cell, moved, cells, total, reachsq, J, S, keep):
    """The atoms of one part of the cell list: atom i's pairs into J and S at total[i]..., each kept where
    its vector made as the calculator's pack makes it is within reach."""
    for t in range(t0, t1):
        i = order[t]
        s, m, o = start[i], count[i], total[i]
        for q in range(m):
            u, code = U[s + q], C[s + q]
            a = order[u]
            s0 = cells[code, 0] - moved[a, 0] + moved[i, 0]
            s1 = cells[code, 1] - moved[a, 1] + moved[i, 1]
            s2 = cells[code, 2] - moved[a, 2] + moved[i, 2]
            dx = x[a, 0] - x[i, 0] + (s0 * cell[0, 0] + s1 * cell[1, 0] + s2 * cell[2, 0])
            dy = x[a, 1] - x[i, 1] + (s0 * cell[0, 1] + s1 * cell[1, 1] + s2 * cell[2, 1])
            dz = x[a, 2] - x[i, 2] + (s0 * cell[0, 2] + s1 * cell[1, 2] + s2 * cell[2, 2])
            J[o + q], S[o + q, 0], S[o + q, 1], S[o + q, 2] = a, s0, s1, s2
            keep[o + q] = dx * dx + dy * dy + dz * dz < reachsq
