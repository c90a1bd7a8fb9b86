"""Atoms in, site-energy inputs out, forces back: the glue between a periodic crystal and a model of
a site energy E_i(R_i) on padded neighbour vectors (docs/model-language.md, Atoms and potentials).

neighbours()  padded neighbour arrays of every atom: R[i, k] = x_j - x_i (minimum image over
              periodic images), valid[i, k], index[i, k] = j, species of i and of each neighbour,
              and partner[i, k]: the slot in which j sees i (for a parallel force sum)
forces()      F_j = -sum_i dE_i/dx_j from dE_dR: each neighbour vector R_ik = x_j - x_i gives
              +dE_i/dR_ik to j and -dE_i/dR_ik to i
virial()      the per-atom virial W_i = -sum_k R_ik (x) dE_i/dR_ik (3x3); its sum over atoms is the
              cell's virial, and -sum / volume its stress
"""
from __future__ import annotations

import itertools

import numpy as np
from numba import njit, prange


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
            "neighbour_species": np.where(index >= 0, species[np.maximum(index, 0)], 0),
            "partner": partners(R, index)}


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


def forces(dE_dR, index, partner=None, natoms=None):
    """Forces (natoms, 3) from the gradient dE_dR (n, N, 3) of site energies with respect to their
    neighbour vectors and the neighbour indices (n, N; padding -1). With `partner` (from
    neighbours(): the slot in which each neighbour sees the atom back) the sum is a parallel gather,
    f_i = sum_k dE_i/dR_ik - dE_j/dR_j,partner; without, a serial scatter."""
    g = np.ascontiguousarray(dE_dR, dtype=np.float64)
    index = np.ascontiguousarray(index, dtype=np.int64)
    f = np.zeros((g.shape[0] if natoms is None else natoms, 3))
    partner = None if partner is None else np.ascontiguousarray(partner, dtype=np.int64)
    if partner is not None and natoms in (None, g.shape[0]) and not np.any((index >= 0) & (partner < 0)):
        _gather(g, index, partner, f)
    else:
        _scatter(g, index, f)
    return f


def partners(R, index):
    """partner[i, k] = the slot k' in which neighbour j = index[i, k] has i, at the opposite vector
    (-1 for padding, or where j's list lacks i: a list that is not symmetric)."""
    return _partners(np.ascontiguousarray(R, dtype=np.float64), np.ascontiguousarray(index, dtype=np.int64))


@njit(cache=True, nogil=True, parallel=True)
def _partners(R, index):
    out = np.full(index.shape, -1, dtype=np.int64)
    for i in prange(index.shape[0]):
        for k in range(index.shape[1]):
            j = index[i, k]
            if j < 0 or j >= index.shape[0]:
                continue
            for q in range(index.shape[1]):
                if index[j, q] == i and abs(R[j, q, 0] + R[i, k, 0]) + abs(R[j, q, 1] + R[i, k, 1]) \
                        + abs(R[j, q, 2] + R[i, k, 2]) < 1e-9:
                    out[i, k] = q
                    break
    return out


@njit(cache=True, nogil=True, parallel=True)
def _gather(g, index, partner, f):
    for i in prange(g.shape[0]):
        fx, fy, fz = 0.0, 0.0, 0.0
        for k in range(g.shape[1]):
            j = index[i, k]
            if j < 0:
                continue
            fx += g[i, k, 0]
            fy += g[i, k, 1]
            fz += g[i, k, 2]
            q = partner[i, k]
            if q >= 0:
                fx -= g[j, q, 0]
                fy -= g[j, q, 1]
                fz -= g[j, q, 2]
        f[i, 0], f[i, 1], f[i, 2] = fx, fy, fz


@njit(cache=True, nogil=True)
def _scatter(g, index, f):
    for i in range(g.shape[0]):
        for k in range(g.shape[1]):
            j = index[i, k]
            if j < 0:
                continue
            for c in range(3):                # R_ik = x_j - x_i: +g on i's force, -g on j's
                f[i, c] += g[i, k, c]
                f[j, c] -= g[i, k, c]


def virial(dE_dR, R):
    """Per-atom virials (n, 3, 3): W_i = -sum_k R_ik (outer) dE_i/dR_ik."""
    return -np.einsum("nka,nkb->nab", np.asarray(R, dtype=np.float64), np.asarray(dE_dR, dtype=np.float64))
