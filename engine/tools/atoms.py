"""Atoms in, site-energy inputs out, forces back: the glue between a periodic crystal and a model of
a site energy E_i(R_i) on padded neighbour vectors (docs/model-language.md, Atoms and potentials).

neighbours()  padded neighbour arrays of every atom: R[i, k] = x_j - x_i (minimum image over
              periodic images), valid[i, k], index[i, k] = j, species of i and of each neighbour
forces()      F_j = -sum_i dE_i/dx_j from dE_dR: each neighbour vector R_ik = x_j - x_i gives
              +dE_i/dR_ik to i's force and -dE_i/dR_ik to j's (a parallel scatter in PARTS parts)
virial()      the per-atom virial W_i = -sum_k R_ik (x) dE_i/dR_ik (3x3); its sum over atoms is the
              cell's virial, and -sum / volume its stress
"""
from __future__ import annotations

import itertools

import numba
import numpy as np
from numba import njit

from ..kernel import run_threads
from ..numeric.scalar import fetch_add


def neighbours(positions, cell, cutoff, species=None, max_neighbours=None):
    """Padded neighbour arrays of atoms at `positions` (n, 3) in a periodic `cell` (3, 3; rows are the
    cell vectors): every image of every atom within `cutoff` of an atom, nearest first. Returns a dict
    of arrays: R (n, N, 3), valid (n, N), index (n, N) (padding: -1), species (n,) and
    neighbour_species (n, N) (padding: 0), with N the largest count (or `max_neighbours`, which must
    not be smaller). Orthorhombic cells at least 3 cutoffs wide use cell lists (linear time)."""
    x = np.asarray(positions, dtype=np.float64)
    cell = np.asarray(cell, dtype=np.float64)
    cutoff = float(cutoff)
    n = x.shape[0]
    species = np.zeros(n, dtype=np.int64) if species is None else np.asarray(species, dtype=np.int64)
    L = np.diag(cell)
    if np.count_nonzero(cell - np.diag(L)) == 0 and np.all(L >= 3 * cutoff):
        lists = _binned(x, L, cutoff)
    else:
        lists = _images(x, cell, cutoff)
    width = max((len(j) for _, j in lists), default=0)
    if max_neighbours is not None:
        if max_neighbours < width:
            raise ValueError(f"an atom has {width} neighbours within {cutoff}, more than max_neighbours={max_neighbours}")
        width = max_neighbours
    R = np.zeros((n, width, 3))
    valid = np.zeros((n, width))
    index = np.full((n, width), -1, dtype=np.int64)
    for i, (d, j) in enumerate(lists):
        R[i, :len(j)], valid[i, :len(j)], index[i, :len(j)] = d, 1.0, j
    return {"R": R, "valid": valid, "index": index, "species": species,
            "neighbour_species": np.where(index >= 0, species[np.maximum(index, 0)], 0)}


def _nearest_first(d, j):
    r = np.linalg.norm(d, axis=1)
    order = np.argsort(r, kind="stable")
    return d[order], j[order]


def _images(x, cell, cutoff):
    """Every periodic image within the cutoff, by brute force over enough image shifts."""
    spacing = 1.0 / np.linalg.norm(np.linalg.inv(cell), axis=0)
    reach = np.ceil(cutoff / spacing).astype(int)
    shifts = np.array(list(itertools.product(*[range(-k, k + 1) for k in reach])), dtype=np.float64) @ cell
    lists = []
    for i in range(x.shape[0]):
        d = (x[None, :, :] + shifts[:, None, :]) - x[i]             # (images, n, 3)
        r = np.linalg.norm(d, axis=2)
        img, j = np.nonzero((r < cutoff) & (r > 0.0))
        lists.append(_nearest_first(d[img, j], j))
    return lists


def _binned(x, L, cutoff):
    """Cell lists in an orthorhombic box at least 3 cutoffs wide: each atom meets the atoms of its own
    and the 26 surrounding bins, at their minimum image."""
    nb = np.floor(L / cutoff).astype(int)
    b = np.floor(np.mod(x, L) / L * nb).astype(int) % nb
    flat = (b[:, 0] * nb[1] + b[:, 1]) * nb[2] + b[:, 2]
    order = np.argsort(flat, kind="stable")
    starts = np.searchsorted(flat[order], np.arange(nb.prod() + 1))
    lists = [None] * x.shape[0]
    around = np.array(list(itertools.product((-1, 0, 1), repeat=3)))
    for cell_idx in np.ndindex(*nb):
        c = (cell_idx[0] * nb[1] + cell_idx[1]) * nb[2] + cell_idx[2]
        mine = order[starts[c]:starts[c + 1]]
        if not len(mine):
            continue
        nbr = np.mod(np.array(cell_idx) + around, nb)
        cand = np.concatenate([order[starts[k]:starts[k + 1]] for k in
                               np.unique((nbr[:, 0] * nb[1] + nbr[:, 1]) * nb[2] + nbr[:, 2])])
        d = x[cand][None, :, :] - x[mine][:, None, :]
        d -= L * np.round(d / L)
        r = np.linalg.norm(d, axis=2)
        ok = (r < cutoff) & (r > 0.0)
        for row, i in enumerate(mine):
            lists[i] = _nearest_first(d[row, ok[row]], cand[ok[row]])
    return lists


PARTS = 8       # forces() sums in this many parts whatever the thread count, so its bits do not depend on it


def forces(dE_dR, index, *, natoms=None):
    """Forces (natoms, 3) from the gradient dE_dR (n, N, 3) of site energies with respect to their
    neighbour vectors and the neighbour indices (n, N; padding -1); natoms defaults to n. The rows are
    cut into PARTS ranges, each scattered in order into a force array of its own by the next free
    thread (numba's thread count, as the kernels), and the parts are added in order: the same bits on
    any number of threads. A scatter reads dE_dR once, in order, where a gather over the partner slots
    read it twice, once in random order (4.6x slower on one thread at 32,000 Cu atoms: RESULTS.md)."""
    g = np.ascontiguousarray(dE_dR, dtype=np.float64)
    index = np.ascontiguousarray(index, dtype=np.int64)
    f = np.empty((g.shape[0] if natoms is None else natoms, 3))
    parts, next_part = np.empty((PARTS,) + f.shape), np.zeros(1, dtype=np.int64)
    run_threads(lambda w: _scatter(g, index, parts, next_part), min(PARTS, numba.get_num_threads()))
    _add_parts(parts, f)
    return f


@njit(cache=True, nogil=True)
def _scatter(g, index, parts, next_part):
    """Parts p = next_part[0], ... (taken one at a time, atomically): rows [p n / P, (p + 1) n / P)."""
    n, P = g.shape[0], parts.shape[0]
    p = fetch_add(next_part, 1)
    while p < P:
        f = parts[p]
        f[:] = 0.0
        for i in range(p * n // P, (p + 1) * n // P):
            for k in range(g.shape[1]):
                j = index[i, k]
                if j < 0:
                    continue
                for c in range(3):            # R_ik = x_j - x_i: +g on i's force, -g on j's
                    f[i, c] += g[i, k, c]
                    f[j, c] -= g[i, k, c]
        p = fetch_add(next_part, 1)


@njit(cache=True, nogil=True)
def _add_parts(parts, f):
    for i in range(f.shape[0]):
        for c in range(3):
            s = 0.0
            for p in range(parts.shape[0]):
                s += parts[p, i, c]
            f[i, c] = s


def virial(dE_dR, R):
    """Per-atom virials (n, 3, 3): W_i = -sum_k R_ik (outer) dE_i/dR_ik."""
    return -np.einsum("nka,nkb->nab", np.asarray(R, dtype=np.float64), np.asarray(dE_dR, dtype=np.float64))
