"""EAM files of LAMMPS: funcfl (pair_style eam), setfl (eam/alloy) and Finnis-Sinclair (eam/fs).

Each reader returns the tables the pair style interpolates, on its grids, indexed by species in the
order of `elements`:
    F[a](rho)          embedding energy of an atom of species a
    rho[a, b](r)       density at an atom of species a from a neighbour of species b
    z2r[a, b](r)       r * phi_ab(r) as tabulated;  phi[a, b](r) = z2r[a, b](r) / r
    cutoff             LAMMPS's cutoff (pairs with r >= cutoff contribute nothing)
F is extended linearly above rhomax (pair_eam's compute); the r tables hold their last value.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..numeric.tables import MIN_NODES, TableData
from .base import Potential, TextReader

ZR_TO_PHI = 27.2 * 0.529     # Hartree * Bohr in eV * Angstrom: r*phi = 27.2*0.529 Z_i Z_j (funcfl)


@dataclass
class _Grid:
    nrho: int
    drho: float
    nr: int
    dr: float
    cut: float


def _grid(rd, what):
    nrho, drho, nr, dr, cut = rd.header(rd.line(what), (int, float, int, float, float), what)
    for name, n in (("Nrho", nrho), ("Nr", nr)):
        if n < MIN_NODES:
            raise rd.error(f"{what}: {name} = {n}, but a table needs at least {MIN_NODES} points")
    if not (drho > 0 and dr > 0 and cut > 0):
        raise rd.error(f"{what}: drho, dr and the cutoff must be positive, got {drho}, {dr}, {cut}")
    return _Grid(nrho, drho, nr, dr, cut)


def _tables(F, rho, z2r, grid, rhomax, elements, fmt):
    return Potential(fmt, tuple(elements), {
        "F": TableData(F, 0.0, grid.drho, xlin=rhomax),
        "rho": TableData(rho, 0.0, grid.dr),
        "z2r": TableData(z2r, 0.0, grid.dr),
        "phi": TableData(z2r, 0.0, grid.dr, over_x=True),
    }, {"cutoff": grid.cut})


# ---- funcfl: one file per element, resampled to one grid ---------------------------------------------
def read_funcfl(files, elements=None):
    if elements is not None:
        raise ValueError("a funcfl potential (pair_style eam) takes one file per element, in species order; "
                         "'elements' selects elements of a setfl or fs file")
    parsed = []
    for path in files:
        rd = TextReader(path)
        rd.skip(1)
        rd.header(rd.line("the atomic number and mass (line 2)"), (float, float), "line 2 (atomic number, mass)")
        g = _grid(rd, "line 3 (Nrho, drho, Nr, dr, cutoff)")
        F = rd.numbers(g.nrho, "F(rho)")
        Z = rd.numbers(g.nr, "Z(r)")
        rho = rd.numbers(g.nr, "rho(r)")
        parsed.append((g, F, Z, rho))
    # PairEAM::file2array: one grid for all files, at the largest spacings, up to the largest extent
    dr = max(g.dr for g, *_ in parsed)
    drho = max(g.drho for g, *_ in parsed)
    rmax = max((g.nr - 1) * g.dr for g, *_ in parsed)
    rhomax = max((g.nrho - 1) * g.drho for g, *_ in parsed)
    nr, nrho = int(rmax / dr + 0.5), int(rhomax / drho + 0.5)
    grid = _Grid(nrho, drho, nr, dr, max(g.cut for g, *_ in parsed))
    S = len(parsed)
    F = np.stack([_resample(F, g.drho, nrho, drho) for g, F, _, _ in parsed])
    rho_b = [_resample(rho, g.dr, nr, dr) for g, _, _, rho in parsed]
    zr = [_resample(Z, g.dr, nr, dr) for g, _, Z, _ in parsed]
    rho = np.stack([np.stack(rho_b) for _ in range(S)])         # rho[a, b] depends on the neighbour b
    z2r = np.stack([np.stack([ZR_TO_PHI * zr[max(a, b)] * zr[min(a, b)] for b in range(S)]) for a in range(S)])
    return _tables(F, rho, z2r, grid, rhomax, [Path(f).name.split(".")[0] for f in files], "eam")


def _resample(f, fdx, n, dx):
    """LAMMPS's 4-point Lagrange resampling of f (spacing fdx) onto n points of spacing dx."""
    sixth = 1.0 / 6.0
    m = np.arange(1, n + 1)
    r = (m - 1) * dx
    p = r / fdx + 1.0
    k = np.maximum(np.minimum(p.astype(np.int64), f.shape[0] - 2), 2)
    p = np.minimum(p - k, 2.0)
    cof1 = -sixth * p * (p - 1.0) * (p - 2.0)
    cof2 = 0.5 * (p * p - 1.0) * (p - 2.0)
    cof3 = -0.5 * p * (p + 1.0) * (p - 2.0)
    cof4 = sixth * p * (p * p - 1.0)
    # f is 0-based here: LAMMPS's f[k] (1-based) is f[k - 1]
    return cof1 * f[k - 2] + cof2 * f[k - 1] + cof3 * f[k] + cof4 * f[k + 1]


# ---- setfl and fs: several elements on one grid ----------------------------------------------------
def _multi(path, fs, elements):
    rd = TextReader(path)
    rd.skip(3)
    tokens = rd.line("the element line (line 4)")
    (count,) = rd.header(tokens, (int,), "line 4 (number of elements, then their names)")
    names = tokens[1:1 + count]
    if count < 1 or len(names) != count:
        raise rd.error(f"line 4: {count} elements announced, {len(names)} named")
    g = _grid(rd, "line 5 (Nrho, drho, Nr, dr, cutoff)")
    F, rho = [], []
    for name in names:
        rd.header(rd.line(f"the header of element {name}"), (float, float), f"the header line of element {name}")
        F.append(rd.numbers(g.nrho, f"F(rho) of {name}"))
        if fs:
            rho.append([rd.numbers(g.nr, f"rho(r) of {name} with {other}") for other in names])
        else:
            rho.append(rd.numbers(g.nr, f"rho(r) of {name}"))
    z2r = {}
    for i in range(count):
        for j in range(i + 1):
            z2r[i, j] = z2r[j, i] = rd.numbers(g.nr, f"r*phi(r) of {names[i]}-{names[j]}")
    elements = tuple(elements) if elements is not None else tuple(names)
    for e in elements:
        if e not in names:
            raise rd.error(f"element '{e}' is not in this file (it has {', '.join(names)})", 4)
    idx = [names.index(e) for e in elements]
    S = len(idx)
    F = np.stack([F[i] for i in idx])
    if fs:      # pair_eam_fs: the density at a (center) from b (neighbour) is the file's rho of b with a
        rho = np.stack([np.stack([rho[idx[b]][idx[a]] for b in range(S)]) for a in range(S)])
    else:
        rho = np.stack([np.stack([rho[idx[b]] for b in range(S)]) for _ in range(S)])
    z2r = np.stack([np.stack([z2r[idx[a], idx[b]] for b in range(S)]) for a in range(S)])
    return _tables(F, rho, z2r, g, (g.nrho - 1) * g.drho, elements, "eam/fs" if fs else "eam/alloy")


def read_setfl(files, elements=None):
    return _multi(_one(files, "eam/alloy"), False, elements)


def read_fs(files, elements=None):
    return _multi(_one(files, "eam/fs"), True, elements)


def _one(files, fmt):
    if len(files) != 1:
        raise ValueError(f"a {fmt} potential is one file, got {len(files)}")
    return files[0]

