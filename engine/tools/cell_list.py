"""A compiled cell list: every neighbour (periodic images included) of every atom within a cutoff, for
cells of any shape and periodicity, in time linear in the atoms (atoms.neighbours' engine).

The atoms are wrapped into the cell and binned in fractional coordinates: along a periodic direction
into nb = floor(SPLIT h / cutoff) bins (h: the distance between the cell's faces, so a bin is at least
cutoff / SPLIT thick), along a free one into bins cutoff / SPLIT wide over the atoms' extent (_grid;
wider where there are few atoms). Two atoms closer than the cutoff differ by at most cutoff / h in a
fractional coordinate, so an atom's neighbours lie in the bins within K = ceil(cutoff nb / h) of its own
(K = SPLIT in a cell at least a cutoff thick; more where it is thinner or the bins were widened); a bin
offset that leaves a periodic cell comes back on the other side with an image shift, and each (atom,
image) is met once. The bins are a counting sort of the atoms (positions copied in bin order, read in
sequence), their number at most a few per atom, so memory follows the atoms, not the cell's volume. Each
atom's neighbours are sorted nearest first (a stable sort, ties in bin order). pairs searches the atoms in
bin order (atoms.neighbours pads the lists from there); atom_pairs in atom order, so that the lists, the
same bits, come out in atom order as the ASE calculator keeps them.
"""
from __future__ import annotations

import itertools
from typing import NamedTuple

import numba
import numpy as np
from numba import njit

import adgrad.engine.numeric.cache  # noqa: F401  (first: numba caches the cache=True functions below in adgrad's cache)

from ..kernel import run_threads

SLACK = 1e-9            # relative room for rounding in the bin widths: a pair at the cutoff is never missed
SPLIT = 2               # bins per cutoff: 5^3 half-cutoff bins hold 42% fewer candidates than 3^3 whole ones
PART = 1024             # atoms at least in each thread's part of the search (a hand-off: 0.04-0.1 ms)
MAX_IMAGES = 1 << 20    # bins an atom meets (and image shifts tabulated): a cell far thinner than the cutoff is refused
FLAT = 1e-12            # cell vectors whose smallest singular value is below this fraction of the largest: dependent


def lattice(cell, pbc):
    """The cell with its non-periodic rows replaced by unit vectors orthogonal to the periodic ones, and its
    inverse: fractional coordinates f = x @ inverse, wrapped along periodic directions only. The periodic
    rows must be finite and independent (the caller checks)."""
    basis = np.array(cell, dtype=np.float64)
    periodic = np.asarray(pbc, dtype=bool)
    if not periodic.all():
        rows = basis[periodic]
        # the right singular vectors after the first len(rows) span the orthogonal complement of the rows
        complement = np.linalg.svd(rows if len(rows) else np.zeros((1, 3)))[2][len(rows):]
        basis[~periodic] = complement
    return basis, np.linalg.inv(basis)


def independent(rows):
    """Whether the cell vectors `rows` (k, 3; finite) are linearly independent, to within FLAT (no rows: they are)."""
    singular = np.linalg.svd(rows, compute_uv=False) if len(rows) else np.ones(1)
    return bool(singular.min() > FLAT * singular.max())


def face_distances(inverse):
    """The distance between neighbouring lattice planes along each direction: 1 / |reciprocal vector|."""
    with np.errstate(divide="ignore"):
        return 1.0 / np.linalg.norm(inverse, axis=0)


class Pairs(NamedTuple):
    """Each atom's neighbours, nearest first. The atoms are searched in parts (a range of atoms in bin
    order each, parts[w] <= t < parts[w + 1], atom order[t]), one per thread; the neighbours of atom i
    of part w are entries start[i] .. start[i] + count[i] - 1 of u[w] (the neighbour's position in bin
    order: atom order[u], at ps[u]) and code[w] (its image shift: the vector shifts[code] = S cell). The
    pair vector is (shifts[code] - p[i]) + ps[u], p the atoms' positions wrapped into the cell. 8 bytes a
    pair: the vectors are made once, in the padded arrays. Each atom's list is the same whatever the parts."""
    start: np.ndarray
    count: np.ndarray
    u: tuple
    code: tuple
    parts: np.ndarray
    order: np.ndarray
    ps: np.ndarray
    p: np.ndarray
    shifts: np.ndarray


def pairs(positions, cell, pbc, cutoff) -> Pairs:
    """Every pair (i, j, image S) with |x_j - x_i + S cell| < cutoff, j != i or S != 0 (x wrapped into the
    cell along periodic directions). `cell` rows along periodic directions must be independent."""
    b = _binned(positions, cell, pbc, cutoff)
    parts, start, count, found = _searched(b, cutoff, False)
    return Pairs(start, count, tuple(f[0] for f in found), tuple(f[1] for f in found), parts, b.order, b.ps, b.p,
                 b.shifts)


class AtomPairs(NamedTuple):
    """pairs' lists in atom order: the neighbours of atom i are j[p] (int32, an atom) through the image
    code[p] (int32: its shift shifts[code] = S cell), first[i] <= p < first[i + 1], nearest first; the pair
    vector is (shifts[code] - p[i]) + p[j]. The same lists as pairs', bit for bit."""
    first: np.ndarray
    j: np.ndarray
    code: np.ndarray
    p: np.ndarray
    shifts: np.ndarray


def atom_pairs(positions, cell, pbc, cutoff) -> AtomPairs:
    """pairs, searched in atom order (each thread a range of atoms) so that the lists come out in atom order,
    neighbours as atoms: no pass reordering them afterwards (one took 5-9 ns a pair, 10-20% of the search,
    its writes scattered over the list). Searched in bin order or in atom order, the search takes the same
    time (atoms out of order too, 32,000 of them: their positions stay in the L2 cache)."""
    b = _binned(positions, cell, pbc, cutoff)
    parts, start, count, found = _searched(b, cutoff, True)
    first = np.zeros(len(count) + 1, dtype=np.int64)
    np.cumsum(count, out=first[1:])
    if len(found) == 1:
        j, code = found[0]
    else:
        j, code = np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found])
    return AtomPairs(first, j, code, b.p, b.shifts)


def _searched(b, cutoff, in_atom_order):
    """_search of the binned atoms b in parts, one per thread (PART atoms at least), each part writing start
    and count at its own atoms: (parts, start, count, each part's (u or j, code)); in atom order, the
    neighbours as atoms (atom_pairs), else in bin order as positions in bin order (pairs)."""
    n = len(b.order)
    P = max(1, min(numba.get_num_threads(), n // PART))
    parts = np.arange(P + 1) * n // P
    start, count = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    found = [None] * P
    where = b.where if in_atom_order else b.order

    def search(w):
        found[w] = _search(b.ps, b.order, where, in_atom_order, b.starts, b.cells, b.nb, b.K, b.periodic, b.shifts,
                           cutoff * cutoff, min((parts[w + 1] - parts[w]) * b.expected, 1 << 27), parts[w],
                           parts[w + 1], start, count)
    run_threads(search, P)
    return parts, start, count, found


class _Bins(NamedTuple):
    """The atoms binned for _search: positions wrapped (p) and in bin order (ps; atom order[t], atom i at
    where[i]), each bin's first position in bin order (starts), each atom's bin (cells), the bins per
    direction (nb), the bins searched either side (K), the image shifts (shifts[code] = S cell) and the pairs
    expected per atom."""
    p: np.ndarray
    ps: np.ndarray
    order: np.ndarray
    where: np.ndarray
    starts: np.ndarray
    cells: np.ndarray
    nb: np.ndarray
    K: np.ndarray
    periodic: np.ndarray
    shifts: np.ndarray
    expected: int


def _binned(positions, cell, pbc, cutoff) -> _Bins:
    x = np.ascontiguousarray(positions, dtype=np.float64)
    n = len(x)
    if n >= 1 << 31:
        raise ValueError(f"{n:,} atoms: at most 2^31 - 1")
    periodic = np.asarray(pbc, dtype=bool)
    basis, inverse = lattice(cell, periodic)
    f = x @ inverse
    k = np.where(periodic, np.floor(f), 0.0)               # the cells to move each atom by, into the cell
    f -= k
    p = x - k @ basis           # the wrapped positions (an atom inside the cell keeps its bits)
    h = face_distances(inverse)
    reach = cutoff * (1 + SLACK) + 1e-12 * (np.abs(p).max() if n else 0.0)
    nb, low, width = _grid(f, periodic, h, reach)
    K = np.ceil(reach / (h * width) * (1 - 1e-12)).astype(np.int64)     # reach's slack covers the 1e-12
    if np.prod(2.0 * K + 1) > MAX_IMAGES:
        raise ValueError(f"the periodic cell is too thin for the cutoff of {cutoff:g}: the distances between its "
                         f"faces are {', '.join(f'{v:.3g}' for v in h[periodic])}, so each atom meets "
                         f"{np.prod(2.0 * K + 1):.3g} periodic images of the cell (more than {MAX_IMAGES:,})")
    shifts = np.array(list(itertools.product(*[range(-k, k + 1) for k in K[::-1]])), dtype=np.float64)[:, ::-1]
    shifts = np.ascontiguousarray(shifts @ basis)           # code ((sz + Kz) (2Ky + 1) + sy + Ky) (2Kx + 1) + sx + Kx
    expected = 64
    if periodic.all():          # pairs in a sphere of the cutoff at the mean density, with room: few regrowths
        # (and little room: atom_pairs' lists are kept in these arrays, 0.8 of them used in a crystal)
        expected = 8 + int(1.25 * 4.19 * cutoff ** 3 * n / abs(np.linalg.det(basis)))
    cells, order, where, starts, ps = _bin(f, low, width, nb, p)
    return _Bins(p, ps, order, where, starts, cells, nb, K, periodic, shifts, expected)


@njit(cache=True, nogil=True)
def _bin(f, low, width, nb, p):
    """Each atom's bin (cells: per direction, the last bin taking what rounds beyond it), the atoms in bin
    order (order; where: each atom's position in it) by a counting sort (np.argsort(kind="stable") of the
    flat bin, and numpy's passes around it, took 4.6 ms for 32,000 atoms), each bin's first position
    (starts) and the positions in bin order (ps)."""
    n = f.shape[0]
    cells = np.empty((n, 3), dtype=np.int64)
    flat = np.empty(n, dtype=np.int64)
    starts = np.zeros(nb[0] * nb[1] * nb[2] + 1, dtype=np.int64)
    for i in range(n):
        for c in range(3):
            v = min(np.floor((f[i, c] - low[c]) / width[c]), nb[c] - 1.0)
            cells[i, c] = max(int(v), 0)
        flat[i] = (cells[i, 2] * nb[1] + cells[i, 1]) * nb[0] + cells[i, 0]
        starts[flat[i] + 1] += 1
    for b in range(len(starts) - 1):
        starts[b + 1] += starts[b]
    order, where, ps = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty((n, 3))
    fill = starts[:-1].copy()
    for i in range(n):          # in atom order: ties (a bin's atoms) in atom order, a stable sort
        t = fill[flat[i]]
        fill[flat[i]] = t + 1
        order[t], where[i] = i, t
        ps[t, 0], ps[t, 1], ps[t, 2] = p[i, 0], p[i, 1], p[i, 2]
    return cells, order, where, starts, ps


def _grid(f, periodic, h, reach):
    """(bins per direction, fractional coordinate of the first bin's start, fractional bin width): SPLIT bins
    a reach thick along periodic directions, over the atoms' extent along free ones; at most a few bins per
    atom (a few atoms in a large cell get larger bins)."""
    n = len(f)
    nb = np.ones(3, dtype=np.int64)
    low, width = np.zeros(3), np.ones(3)
    for c in range(3):
        if periodic[c]:
            nb[c] = max(1, min(int(h[c] * SPLIT / reach), n + 1))
            width[c] = 1.0 / nb[c]
        elif n:
            low[c] = f[:, c].min()
            span = f[:, c].max() - low[c]
            width[c] = max(reach / (SPLIT * h[c]), span / (n + 1), 1e-300)   # at most n + 1 bins a direction
            nb[c] = int(span / width[c]) + 1
    while nb.prod() > 8 * n + 64:
        c = int(np.argmax(nb))
        nb[c] = max(1, nb[c] // 2)
        width[c] = 1.0 / nb[c] if periodic[c] else width[c] * 2
    return nb, low, width


@njit(cache=True, nogil=True)
def _search(ps, order, where, by_atom, starts, cells, nb, K, periodic, shifts, cutsq, capacity, t0, t1, start,
            count):
    """Each atom's neighbours, sorted nearest first, into flat arrays that grow between atoms: an atom's
    search (_atom) works in buffers sized for its most candidates, so its inner loops hold no array that
    may be reallocated (a reallocation there made them 4x slower). The atoms at positions t0 <= t < t1 in
    bin order, neighbours as positions in bin order; by_atom: atoms t0 <= i < t1 (at where[i] in bin order),
    neighbours as atoms."""
    xs, ys, zs = ps[:, 0].copy(), ps[:, 1].copy(), ps[:, 2].copy()    # one array per coordinate: short loops
    most = 0
    for b in range(starts.shape[0] - 1):
        most = max(most, starts[b + 1] - starts[b])
    bound = most * (2 * K[0] + 1) * (2 * K[1] + 1) * (2 * K[2] + 1) + 1    # candidates of one atom, at most
    cu = np.empty(bound, dtype=np.int32)        # a candidate's position in bin order, and its shift's code
    cc = np.empty(bound, dtype=np.int32)
    cr = np.empty(bound)                        # its squared distance
    rank = np.empty(bound, dtype=np.int64)
    key = np.empty(bound)
    bucket = np.empty(2 * bound + 1, dtype=np.int64)
    slot = np.empty(bound, dtype=np.int64)
    U = np.empty(capacity, dtype=np.int32)
    C = np.empty(capacity, dtype=np.int32)
    # the bins within K of each bin along each direction, and their image shifts (no division per atom)
    around = _around(nb[0], K[0], periodic[0]) + _around(nb[1], K[1], periodic[1]) + _around(nb[2], K[2], periodic[2])
    total = 0
    for s in range(t0, t1):
        if by_atom:
            i, t = s, where[s]
        else:
            t, i = s, order[s]
        m = _atom(t, xs, ys, zs, starts, cells[i], nb, K, around, shifts, cutsq, cu, cc, cr)
        _sort(cr, m, cutsq, rank, key, bucket, slot)
        if total + m > capacity:
            while total + m > capacity:
                capacity *= 2
            U2 = np.empty(capacity, dtype=np.int32)
            C2 = np.empty(capacity, dtype=np.int32)
            U2[:total] = U[:total]
            C2[:total] = C[:total]
            U, C = U2, C2
        start[i], count[i] = total, m
        if by_atom:
            for q in range(m):
                U[total + q], C[total + q] = order[cu[rank[q]]], cc[rank[q]]
        else:
            for q in range(m):
                U[total + q], C[total + q] = cu[rank[q]], cc[rank[q]]
        total += m
    return U[:total], C[:total]


@njit(cache=True, nogil=True)
def _atom(t, xs, ys, zs, starts, cell, nb, K, around, shifts, cutsq, cu, cc, cr):
    """The candidates within the cutoff of the atom at position t in bin order (cu, cc: position and shift
    code, cr: squared distance); returns their count. Along x the bins within K of the atom's form runs of
    consecutive bins (one per image shift): a run's atoms are consecutive in bin order, one loop without a
    branch (a loop of distances that vectorized, then one keeping them, took 1.5x as long: runs are short)."""
    xbin, xshift, ybin, yshift, zbin, zshift = around
    px, py, pz = xs[t], ys[t], zs[t]
    m = 0
    for dz in range(-K[2], K[2] + 1):
        z, sz = zbin[cell[2], dz + K[2]], zshift[cell[2], dz + K[2]]
        if z < 0:
            continue
        for dy in range(-K[1], K[1] + 1):
            y, sy = ybin[cell[1], dy + K[1]], yshift[cell[1], dy + K[1]]
            if y < 0:
                continue
            row = (z * nb[1] + y) * nb[0]
            d = -K[0]
            while d <= K[0]:
                x, sx = xbin[cell[0], d + K[0]], xshift[cell[0], d + K[0]]
                if x < 0:
                    d += 1
                    continue
                last = min(K[0], d + nb[0] - 1 - x)          # the run: bins x .. x + last - d, one shift
                lo, hi = starts[row + x], starts[row + x + last - d + 1]
                code = ((sz + K[2]) * (2 * K[1] + 1) + sy + K[1]) * (2 * K[0] + 1) + sx + K[0]
                ox, oy, oz = shifts[code, 0] - px, shifts[code, 1] - py, shifts[code, 2] - pz
                me = t if sx == 0 and sy == 0 and sz == 0 else -1      # the atom itself, in this run
                for u in range(lo, hi):     # each candidate written, kept (m advanced) or not: no branch
                    ex, ey, ez = xs[u] + ox, ys[u] + oy, zs[u] + oz
                    r2 = ex * ex + ey * ey + ez * ez
                    cr[m], cu[m], cc[m] = r2, u, code
                    m += (r2 < cutsq) & (u != me)
                d = last + 1
    return m


@njit(cache=True, nogil=True)
def _around(nb, K, periodic):
    """Along one direction of nb bins: bins[b, d + K] and shifts[b, d + K], the bin and the image shift of
    bin b + d (-K <= d <= K); bin -1 where b + d lies beyond a free direction's bins."""
    bins = np.full((nb, 2 * K + 1), -1, dtype=np.int64)
    shifts = np.zeros((nb, 2 * K + 1), dtype=np.int64)
    for b in range(nb):
        for d in range(-K, K + 1):
            u = b + d
            if periodic:
                s = u // nb                 # floor division: the cells crossed
                bins[b, d + K], shifts[b, d + K] = u - s * nb, s
            elif 0 <= u < nb:
                bins[b, d + K] = u
    return bins, shifts


@njit(cache=True, nogil=True)
def _sort(cr, m, cutsq, rank, key, bucket, slot):
    """rank[:m]: the candidates in order of squared distance, ties in their order (a stable sort, as
    np.argsort(kind="stable")): a counting sort into 2m buckets of equal width, then an insertion sort, which
    has little left to do (0.6 us for 42 candidates, 0.8 for 78; m buckets took 0.75 and 1.05, np.argsort's
    mergesort 5 us for 78). cr is in [0, cutsq)."""
    nk = 2 * m
    for b in range(nk + 1):
        bucket[b] = 0
    scale = nk / cutsq
    for q in range(m):
        b = min(int(cr[q] * scale), nk - 1)
        slot[q] = b
        bucket[b + 1] += 1
    for b in range(nk):
        bucket[b + 1] += bucket[b]
    for q in range(m):
        b = slot[q]
        rank[bucket[b]], key[bucket[b]] = q, cr[q]
        bucket[b] += 1
    for q in range(1, m):
        v = key[q]
        if key[q - 1] <= v:
            continue
        r, p = rank[q], q - 1
        while p >= 0 and key[p] > v:
            key[p + 1], rank[p + 1] = key[p], rank[p]
            p -= 1
        key[p + 1], rank[p + 1] = v, r


def padded(found: Pairs, species, width):
    """The padded arrays of atoms.neighbours: R (n, width, 3), valid, index (padding -1) and
    neighbour_species (padding 0), each part's rows filled by its own thread."""
    n = len(found.start)
    R = np.empty((n, width, 3))
    valid = np.empty((n, width))
    index = np.empty((n, width), dtype=np.int64)
    sn = np.empty((n, width), dtype=np.int64)
    f = found
    run_threads(lambda w: _pad(f.parts[w], f.parts[w + 1], f.start, f.count, f.u[w], f.code[w], f.order, f.ps, f.p,
                               f.shifts, species, R, valid, index, sn), len(f.parts) - 1)
    return R, valid, index, sn


@njit(cache=True, nogil=True)
def _pad(t0, t1, start, count, U, C, order, ps, p, shifts, species, R, valid, index, sn):
    for t in range(t0, t1):
        i = order[t]
        s, m = start[i], count[i]
        for k in range(m):
            u, code = U[s + k], C[s + k]
            j = order[u]
            for c in range(3):      # as _atom computes it: the vector whose length passed the cutoff
                R[i, k, c] = ps[u, c] + (shifts[code, c] - p[i, c])
            valid[i, k], index[i, k], sn[i, k] = 1.0, j, species[j]
        for k in range(m, R.shape[1]):
            R[i, k, 0], R[i, k, 1], R[i, k, 2] = 0.0, 0.0, 0.0
            valid[i, k], index[i, k], sn[i, k] = 0.0, -1, 0


__all__ = ["AtomPairs", "Pairs", "atom_pairs", "face_distances", "independent", "lattice", "padded", "pairs"]
