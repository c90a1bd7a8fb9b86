"""The calculator's neighbour list, in memory that follows the atoms and their neighbours.

matscipy's neighbour_list bins the whole cell: 4 atoms in a periodic cube of 10^4 A took 1.7 GiB and
4.7 s there (bins of the cutoff's size over the box). Here the atoms are wrapped into the cell, the
periodic images that lie within reach of it are added as ghosts (a parallelepiped's margin: per atom a
product of index ranges, counted before anything is allocated), and the points are binned on a grid
of cells no smaller than the reach that is never stored: each point's bin is a 64-bit key, the keys
are sorted, and an atom's neighbours are found in the 3 x 3 runs of 3 consecutive keys around its own
bin by binary search. Memory: a few words per atom and ghost, and the pairs found.

Directions that are not periodic are taken as they are (no wrapping, no images), whatever the cell
says there: a free cluster needs no cell, and a slab's zero third vector is no error.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

import adgrad.engine.numeric.cache  # noqa: F401  (first: numba caches the cache=True functions below in adgrad's cache)

from adgrad.engine.tools.cell_list import face_distances, lattice  # noqa: F401  (lattice: the calculator's)

MAX_GHOSTS = 1 << 24        # periodic images beyond 26 per atom (a cell thinner than the reach needs more)
MAX_BINS = 1 << 20          # bins along one direction (a 64-bit key for three), the bins growing past the reach


def neighbour_list(positions, basis, inverse, pbc, reach):
    """Every pair (i, j, S) with |x_j - x_i + S @ basis| < reach, j != i or S != 0, sorted by i: the pairs
    of atom i are first[i] <= p < first[i + 1]. Returns (first, j, S); S counts the cell vectors crossed.
    The vector is computed as the calculator's pack computes it, so the test is the same to the bit."""
    x = np.ascontiguousarray(positions, dtype=np.float64)
    n = len(x)
    periodic = np.asarray(pbc, dtype=bool)
    f = x @ inverse
    k = np.where(periodic, np.floor(f), 0.0)
    f -= k
    if n and np.abs(k).max() >= 2.0 ** 31:
        i = int(np.abs(k).max(axis=1).argmax())
        raise ValueError(f"atom {i} is {np.abs(k[i]).max():.3g} cell lengths outside the periodic cell: its position "
                         f"{x[i].tolist()} cannot be wrapped into the cell to a useful precision")
    # a point within reach of the (wrapped) atoms lies within reach / h_c of the cell's faces, h_c their
    # distance; the margin's slack covers the rounding of f and of the wrapped positions (ulps of |f|)
    slack = 1e-9 + 1e-14 * (np.abs(f).max() + np.abs(k).max() if n else 0.0)
    margin = np.where(periodic, reach / face_distances(inverse) * (1 + 1e-9) + slack, 0.0)
    lo = np.where(periodic, np.ceil(-margin - f), 0.0)
    hi = np.where(periodic, np.floor(1.0 + margin - f), 0.0)
    images = np.prod(hi - lo + 1.0, axis=1).sum() - n if n else 0.0
    if images > MAX_GHOSTS + 26.0 * n:
        h = ", ".join(f"{v:.3g}" for v in face_distances(inverse)[periodic])
        raise ValueError(f"the periodic cell is too thin for the cutoff + skin of {reach:g} A: the distances between "
                         f"its faces are {h} A, so its {n} atoms have {images:.3g} periodic images within reach "
                         f"(more than {MAX_GHOSTS + 26 * n:,}); make the cell larger or the cutoff smaller")
    k = k.astype(np.int64)
    p, origin, S0 = _points(x, basis, k, lo.astype(np.int64), hi.astype(np.int64), int(images))
    cells, key, nb, wide = _bins(x, p, reach)
    # sorted by numpy: numba's argsort and searchsorted were 3 of the 11 s of a first compile of this list
    order = np.argsort(key, kind="stable")
    return _pairs(x, basis, k, p, np.ascontiguousarray(p[order]), order, key[order], origin, S0, cells, nb, reach, wide)


@njit(cache=True, nogil=True)
def _points(x, basis, k, lo, hi, images):
    """The atoms wrapped into the cell (points 0..n-1), then their periodic images within reach of it; each
    point's atom (origin) and S0, the cell vectors from the atom's x to the point."""
    n = x.shape[0]
    m = n + images
    p = np.empty((m, 3))
    origin = np.empty(m, dtype=np.int64)
    S0 = np.empty((m, 3), dtype=np.int64)
    for a in range(n):          # point a is atom a, wrapped into the cell
        for c in range(3):
            p[a, c] = x[a, c] - (k[a, 0] * basis[0, c] + k[a, 1] * basis[1, c] + k[a, 2] * basis[2, c])
            S0[a, c] = -k[a, c]
        origin[a] = a
    q = n
    for a in range(n):          # then its images within reach of the cell
        for i0 in range(lo[a, 0], hi[a, 0] + 1):
            for i1 in range(lo[a, 1], hi[a, 1] + 1):
                for i2 in range(lo[a, 2], hi[a, 2] + 1):
                    if i0 == 0 and i1 == 0 and i2 == 0:
                        continue
                    s0, s1, s2 = i0 - k[a, 0], i1 - k[a, 1], i2 - k[a, 2]
                    for c in range(3):
                        p[q, c] = x[a, c] + (s0 * basis[0, c] + s1 * basis[1, c] + s2 * basis[2, c])
                    origin[q], S0[q, 0], S0[q, 1], S0[q, 2] = a, s0, s1, s2
                    q += 1
    return p, origin, S0


@njit(cache=True, nogil=True)
def _bins(x, p, reach):
    """(each point's bin, its 64-bit key, bins per direction, the reach with room for rounding): bins of at
    least the reach (a pair within reach is in neighbouring bins), at most MAX_BINS a direction. A point's
    coordinates round differently from the vector tested in _pairs, x_j - x_i + S cell: `wide` is the reach
    with room for that, a few ulps of the largest coordinate of a point, an atom and S cell."""
    n, m = x.shape[0], p.shape[0]
    largest = 0.0
    for q in range(m):
        largest = max(largest, abs(p[q, 0]), abs(p[q, 1]), abs(p[q, 2]))
    unwrapped = 0.0
    for a in range(n):
        unwrapped = max(unwrapped, abs(x[a, 0]), abs(x[a, 1]), abs(x[a, 2]))
    wide = reach * (1 + 1e-9) + 1e-13 * (largest + 2 * unwrapped)
    low = np.zeros(3)
    size = np.empty(3)
    nb = np.ones(3, dtype=np.int64)
    for c in range(3):
        most = -math.inf
        for q in range(m):
            low[c], most = min(low[c], p[q, c]) if q else p[q, c], max(most, p[q, c])
        span = most - low[c] if m else 0.0
        size[c] = max(wide, span / (MAX_BINS - 1))
        if span < math.inf:
            nb[c] = int(span / size[c]) + 1
    cells = np.empty((m, 3), dtype=np.int64)
    key = np.empty(m, dtype=np.int64)
    for q in range(m):
        for c in range(3):
            t = (p[q, c] - low[c]) / size[c]
            cells[q, c] = min(int(t), nb[c] - 1) if t > 0 else 0
        key[q] = cells[q, 0] + nb[0] * (cells[q, 1] + nb[1] * cells[q, 2])
    return cells, key, nb, wide


@njit(cache=True, nogil=True)
def _first_at_least(a, value):
    """The first index of sorted `a` whose entry is >= value (len(a) if none)."""
    lo, hi = 0, a.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _pairs(x, basis, k, p, ps, order, sorted_keys, origin, S0, cells, nb, reach, wide):
    """Each atom's pairs among the points of the 3 x 3 x 3 bins around its own (ps: the points in key order,
    so an atom's candidates are read in sequence)."""
    n = x.shape[0]
    reachsq, loose = reach * reach, wide * wide
    first = np.zeros(n + 1, dtype=np.int64)
    capacity = 16 * (n + 1)
    J = np.empty(capacity, dtype=np.int64)
    S = np.empty((capacity, 3), dtype=np.int64)
    count = 0
    for i in range(n):
        bx, by, bz = cells[i, 0], cells[i, 1], cells[i, 2]
        x0, x1 = max(bx - 1, 0), min(bx + 1, nb[0] - 1)
        for cz in range(max(bz - 1, 0), min(bz + 1, nb[2] - 1) + 1):
            for cy in range(max(by - 1, 0), min(by + 1, nb[1] - 1) + 1):
                row = nb[0] * (cy + nb[1] * cz)
                start = _first_at_least(sorted_keys, x0 + row)
                stop = _first_at_least(sorted_keys, x1 + row + 1)
                for r in range(start, stop):
                    ex, ey, ez = ps[r, 0] - p[i, 0], ps[r, 1] - p[i, 1], ps[r, 2] - p[i, 2]
                    if ex * ex + ey * ey + ez * ez >= loose:
                        continue
                    q = order[r]
                    a = origin[q]
                    s0, s1, s2 = S0[q, 0] + k[i, 0], S0[q, 1] + k[i, 1], S0[q, 2] + k[i, 2]
                    if a == i and s0 == 0 and s1 == 0 and s2 == 0:
                        continue
                    dx = x[a, 0] - x[i, 0] + (s0 * basis[0, 0] + s1 * basis[1, 0] + s2 * basis[2, 0])
                    dy = x[a, 1] - x[i, 1] + (s0 * basis[0, 1] + s1 * basis[1, 1] + s2 * basis[2, 1])
                    dz = x[a, 2] - x[i, 2] + (s0 * basis[0, 2] + s1 * basis[1, 2] + s2 * basis[2, 2])
                    if dx * dx + dy * dy + dz * dz < reachsq:
                        if count == capacity:
                            capacity *= 2
                            J2 = np.empty(capacity, dtype=np.int64)
                            S2 = np.empty((capacity, 3), dtype=np.int64)
                            for c in range(count):  # (a slice assignment compiled 5 s of shape-error messages)
                                J2[c], S2[c, 0], S2[c, 1], S2[c, 2] = J[c], S[c, 0], S[c, 1], S[c, 2]
                            J, S = J2, S2
                        J[count], S[count, 0], S[count, 1], S[count, 2] = a, s0, s1, s2
                        count += 1
        first[i + 1] = count
    return first, J[:count].copy(), S[:count].copy()
