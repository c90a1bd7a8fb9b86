"""The calculator's neighbour list: engine/tools/cell_list.py's compiled, threaded cell list (memory in
proportion to the atoms and their neighbours, not to the cell's volume), in the form the calculator
keeps between steps (image_list): each pair as (i, j, code), 12 bytes, code naming the periodic image's
shift, so that its vector can be made again from new positions while the list lasts:
p_j - p_i + shifts[code], p = x - moved cell the positions wrapped by the cells each atom was moved by
into the cell when the list was built. A step reads 12 bytes a pair of the list, where (j, S) in 64-bit
integers took 32: on a 2-core machine a step's passes over the pairs are bound by memory bandwidth.

Directions that are not periodic are taken as they are (no wrapping, no images), whatever the cell
says there: a free cluster needs no cell, and a slab's zero third vector is no error.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

import adgrad.engine.numeric.cache  # noqa: F401  (first: numba caches the cache=True functions below in adgrad's cache)

from adgrad.engine.tools import cell_list
from adgrad.engine.tools.cell_list import face_distances

SLACK = 1e-9        # relative room in the cell list's reach: a pair at the reach is never missed


class Images(NamedTuple):
    """Each atom's pairs within reach (and a few within reach (1 + SLACK)), sorted by atom: the pairs of
    atom i (i[p], int32) are first[i] <= p < first[i + 1], nearest first; pair p joins atom j[p] (int32) through the
    periodic image code[p] (int32): its vector is p_j - p_i + shifts[code[p]] with p = x - moved @ basis
    (wrap). cells[code] is the image's shift in cell vectors (integers), so that the cell vectors the pair
    crosses, as x_j - x_i + S @ basis, are S = cells[code] - moved[j] + moved[i]."""
    first: np.ndarray
    i: np.ndarray
    j: np.ndarray
    code: np.ndarray
    shifts: np.ndarray
    cells: np.ndarray
    moved: np.ndarray


def image_list(positions, basis, inverse, pbc, reach) -> Images:
    """The pairs within `reach` of atoms at `positions` (Images)."""
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
    found = cell_list.atom_pairs(x, basis, periodic, reach * (1 + SLACK) + 1e-12 * (np.abs(x).max() if n else 0.0))
    # the cells each atom was moved by into the cell, and each shift code's cells (whole numbers, rounded)
    moved = np.rint((x - found.p) @ inverse).astype(np.int64)
    cells = np.rint(found.shifts @ inverse).astype(np.int64)
    i = np.repeat(np.arange(n, dtype=np.int32), np.diff(found.first))  # for loops over the pairs (flat: 2-3x faster)
    return Images(found.first, i, found.j, found.code, found.shifts, cells, moved)


def neighbour_list(positions, basis, inverse, pbc, reach):
    """Every pair (i, j, S) with |x_j - x_i + S @ basis| < reach, j != i or S != 0, sorted by i: the pairs
    of atom i are first[i] <= p < first[i + 1], nearest first. Returns (first, j, S); S counts the cell
    vectors crossed (image_list's pairs, those beyond the reach by its SLACK left out)."""
    x = np.ascontiguousarray(positions, dtype=np.float64)
    im = image_list(x, basis, inverse, pbc, reach)
    S, keep = np.empty((len(im.i), 3), dtype=np.int64), np.empty(len(im.i), dtype=np.bool_)
    _within(x, im.i, im.j, im.code, im.cells, im.moved, basis, reach * reach, S, keep)
    j = im.j.astype(np.int64)
    if keep.all():
        return im.first, j, S
    kept = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(keep, out=kept[1:])
    return kept[im.first], j[keep], S[keep]


def wrap(x, moved, basis, p):
    """p = x - moved @ basis: the positions wrapped as when the list was built (Images)."""
    _wrap(np.ascontiguousarray(x, dtype=np.float64), moved, basis, p)
    return p


@njit(cache=True, nogil=True)
def _wrap(x, moved, basis, p):
    for i in range(x.shape[0]):
        m0, m1, m2 = moved[i, 0], moved[i, 1], moved[i, 2]
        for c in range(3):
            p[i, c] = x[i, c] - (m0 * basis[0, c] + m1 * basis[1, c] + m2 * basis[2, c])


@njit(cache=True, nogil=True)
def _within(x, I, J, code, cells, moved, cell, reachsq, S, keep):
    """S[p]: the cell vectors pair p crosses, cells[code] - moved[j] + moved[i]; keep[p]: whether
    x_j - x_i + S_p cell is shorter than the reach (one pass: numpy's gathers took 2x image_list)."""
    for p in range(len(I)):
        i, a, c = I[p], J[p], code[p]
        s0 = cells[c, 0] - moved[a, 0] + moved[i, 0]
        s1 = cells[c, 1] - moved[a, 1] + moved[i, 1]
        s2 = cells[c, 2] - moved[a, 2] + moved[i, 2]
        S[p, 0], S[p, 1], S[p, 2] = s0, s1, s2
        dx = x[a, 0] - x[i, 0] + (s0 * cell[0, 0] + s1 * cell[1, 0] + s2 * cell[2, 0])
        dy = x[a, 1] - x[i, 1] + (s0 * cell[0, 1] + s1 * cell[1, 1] + s2 * cell[2, 1])
        dz = x[a, 2] - x[i, 2] + (s0 * cell[0, 2] + s1 * cell[1, 2] + s2 * cell[2, 2])
        keep[p] = dx * dx + dy * dy + dz * dz < reachsq
