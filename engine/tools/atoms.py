"""Atoms in, site-energy inputs out, forces back: the glue between a periodic crystal and a model of
a site energy E_i(R_i) on padded neighbour vectors (docs/model-language.md, Atoms and potentials).

neighbours()  padded neighbour arrays of every atom: R[i, k] = x_j - x_i (minimum image over
              periodic images), valid[i, k], index[i, k] = j, species of i and of each neighbour
forces()      F_j = -sum_i dE_i/dx_j from dE_dR: each neighbour vector R_ik = x_j - x_i gives
              +dE_i/dR_ik to j and -dE_i/dR_ik to i
virial()      the per-atom virial W_i = -sum_k R_ik (x) dE_i/dR_ik (3x3); its sum over atoms is the
              cell's virial, and -sum / volume its stress
"""
from __future__ import annotations

import itertools

import numpy as np


def neighbours(positions, cell, cutoff, species=None, max_neighbours=None):
    """Padded neighbour arrays of atoms at `positions` (n, 3) in an orthorhombic or triclinic periodic
    `cell` (3, 3; rows are the cell vectors): every image of every atom within `cutoff` of an atom,
    nearest first. Returns a dict of arrays: R (n, N, 3), valid (n, N), index (n, N) (padding: -1),
    species (n,) and neighbour_species (n, N) (padding: 0), with N the largest count (or
    `max_neighbours`, which must not be smaller)."""
    x = np.asarray(positions, dtype=np.float64)
    cell = np.asarray(cell, dtype=np.float64)
    n = x.shape[0]
    species = np.zeros(n, dtype=np.int64) if species is None else np.asarray(species, dtype=np.int64)
    # enough images that every point within the cutoff is found: cutoff over each plane spacing
    spacing = 1.0 / np.linalg.norm(np.linalg.inv(cell), axis=0)
    reach = np.ceil(cutoff / spacing).astype(int)
    shifts = np.array(list(itertools.product(*[range(-k, k + 1) for k in reach])), dtype=np.float64) @ cell
    lists = []
    for i in range(n):
        d = (x[None, :, :] + shifts[:, None, :]) - x[i]             # (images, n, 3)
        r = np.linalg.norm(d, axis=2)
        img, j = np.nonzero((r < cutoff) & (r > 0.0))
        order = np.argsort(r[img, j], kind="stable")
        lists.append((d[img[order], j[order]], j[order]))
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


def forces(dE_dR, index, natoms=None):
    """Forces (natoms, 3) from the gradient dE_dR (n, N, 3) of site energies with respect to their
    neighbour vectors and the neighbour indices (n, N; padding -1)."""
    g = np.asarray(dE_dR, dtype=np.float64)
    index = np.asarray(index)
    n = g.shape[0]
    natoms = n if natoms is None else natoms
    real = index >= 0
    f = np.zeros((natoms, 3))
    np.add.at(f, index[real], -g[real])                 # on neighbour j: -dE_i/dR_ij
    f[:n] += np.where(real[..., None], g, 0.0).sum(axis=1)     # on the centre i: +sum_j dE_i/dR_ij
    return f


def virial(dE_dR, R):
    """Per-atom virials (n, 3, 3): W_i = -sum_k R_ik (outer) dE_i/dR_ik."""
    return -np.einsum("nka,nkb->nab", np.asarray(R, dtype=np.float64), np.asarray(dE_dR, dtype=np.float64))
