"""Atoms in, site-energy inputs out, forces back: the glue between a periodic crystal and a model of
a site energy E_i(R_i) on padded neighbour vectors (docs/model-language.md, Atoms and potentials).

neighbours()  padded neighbour arrays of every atom: R[i, k] = x_j - x_i + S cell (every periodic
              image within the cutoff, nearest first), valid[i, k], index[i, k] = j, species of i and of
              each neighbour (a compiled cell list, cell_list.py)
forces()      F_j = -sum_i dE_i/dx_j from dE_dR: each neighbour vector R_ik = x_j - x_i gives
              +dE_i/dR_ik to i's force and -dE_i/dR_ik to j's (a parallel scatter in PARTS parts)
virial()      the per-atom virial W_i = -sum_k R_ik (x) dE_i/dR_ik (3x3); its sum over atoms is the
              cell's virial, and -sum / volume its stress
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit

import adgrad.engine.numeric.cache  # noqa: F401  (first: numba caches the cache=True functions below in adgrad's cache)

from ..kernel import run_threads
from ..numeric.scalar import fetch_add
from . import cell_list


def neighbours(positions, cell, cutoff, species=None, max_neighbours=None, pbc=True):
    """Padded neighbour arrays of atoms at `positions` (n, 3) in a `cell` (3, 3; rows are the cell
    vectors) periodic along `pbc` (True, False or three of them; a free direction's row is not read):
    every image of every other atom closer than `cutoff`, nearest first. Returns a dict of arrays:
    R (n, N, 3) (R[i, k] = x_j - x_i + S cell), valid (n, N), index (n, N) (padding: -1), species (n,)
    and neighbour_species (n, N) (padding: 0), with N the largest count (or `max_neighbours`, which must
    not be smaller). A compiled cell list (cell_list.py): linear time, any cell shape, memory in
    proportion to the atoms and their pairs; two atoms on one spot are neighbours at distance 0."""
    x = np.asarray(positions, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 3 or not np.isfinite(x).all():
        raise ValueError(f"positions: an (n, 3) array of finite numbers, got shape {x.shape}"
                         + ("" if x.ndim != 2 or x.shape[1] != 3 else " with NaN or infinity"))
    cell = np.asarray(cell, dtype=np.float64)
    periodic = np.broadcast_to(np.asarray(pbc, dtype=bool), (3,))
    if cell.shape != (3, 3) or not np.isfinite(cell[periodic]).all():
        raise ValueError(f"cell: a (3, 3) array of cell vectors (rows), finite along periodic directions; got {cell}")
    if not cell_list.independent(cell[periodic]):
        raise ValueError(f"cell: the vectors of the periodic directions (pbc {periodic.tolist()}) are zero or "
                         f"linearly dependent: {cell.tolist()}")
    cutoff = float(cutoff)
    if not (math.isfinite(cutoff) and cutoff > 0):
        raise ValueError(f"cutoff: a finite distance > 0, got {cutoff}")
    n = x.shape[0]
    species = np.zeros(n, dtype=np.int64) if species is None else np.asarray(species, dtype=np.int64)
    if species.shape != (n,):
        raise ValueError(f"species: one index per atom, shape ({n},), got shape {species.shape}")
    found = cell_list.pairs(x, np.where(periodic[:, None], cell, 0.0), periodic, cutoff)
    width = int(found.count.max(initial=0))
    if max_neighbours is not None:
        if max_neighbours < width:
            raise ValueError(f"an atom has {width} neighbours within {cutoff}, more than "
                             f"max_neighbours={max_neighbours}")
        width = max_neighbours
    R, valid, index, sn = cell_list.padded(found, species, width)
    return {"R": R, "valid": valid, "index": index, "species": species, "neighbour_species": sn}


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
