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

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..limits import MAX_ELEMENTS
from ..numeric.tables import MIN_NODES, TableData
from .base import Potential, TextReader, one_file

ZR_TO_PHI = 27.2 * 0.529     # Hartree * Bohr in eV * Angstrom: r*phi = 27.2*0.529 Z_i Z_j (funcfl)


@dataclass
class _Grid:
    nrho: int
    drho: float
    nr: int
    dr: float
    cut: float


GRID = "Nrho, drho, Nr, dr, cutoff"


def _grid(rd, species, least=MIN_NODES, why=""):
    """The grid line: Nrho drho Nr dr cutoff, checked before any table is read. The `species` tables
    of rho and the species^2 of r are one param each: within the limit of a param's elements."""
    what = f"the grid line ({GRID})"
    toks = rd.values(5, what)
    if len(toks) > 5:       # an eam/he file's sixth value (rhomax) would change F: never drop a value
        raise rd.error(f"{what}: 5 values, but the line goes on with '{toks[5].text}'", toks[5])
    nrho = rd.count(toks[0], "Nrho", least, why)
    drho = rd.positive(toks[1], "drho")
    nr = rd.count(toks[2], "Nr", least, why)
    dr = rd.positive(toks[3], "dr")
    cut = rd.positive(toks[4], "the cutoff")
    for n, d, tok, names in ((nrho, drho, toks[1], ("Nrho", "drho")), (nr, dr, toks[3], ("Nr", "dr"))):
        if not math.isfinite((n - 1) * d):
            raise rd.error(f"{names[1]} = {tok.text} makes the grid's end ({names[0]} - 1) * {names[1]} overflow", tok)
    for tables, n, tok, name in ((species, nrho, toks[0], "Nrho"), (species * species, nr, toks[2], "Nr")):
        if tables * n > MAX_ELEMENTS:
            raise rd.error(f"{name} = {n:,} points in each of {tables:,} tables ({species} elements) make "
                           f"{tables * n:,} values, more than the limit of {MAX_ELEMENTS:,} elements of a param", tok)
    return _Grid(nrho, drho, nr, dr, cut)


def _element(rd, what):
    """A line 'atomic-number mass ...' (the rest, lattice constant and structure, is not read)."""
    toks = rd.values(2, f"the {what} line")
    rd.integer(toks[0], f"the atomic number of {what}")
    mass = rd.number(toks[1], f"the mass of {what}")
    if not mass > 0:
        raise rd.error(f"the mass of {what} must be positive, got {toks[1].text}", toks[1])


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
        with TextReader(path) as rd:
            rd.skip(1, "line 2 (atomic number, mass)")
            _element(rd, "element")
            g = _grid(rd, len(files), MIN_NODES + 1, " (pair_eam resamples a funcfl file onto one point fewer)")
            F = rd.numbers(g.nrho, "F(rho)")
            Z = rd.numbers(g.nr, "Z(r)")
            rho = rd.numbers(g.nr, "rho(r)")
            rd.finish("rho(r)")
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
    with TextReader(path) as rd:
        return _read_multi(rd, fs, elements)


def _read_multi(rd, fs, elements):
    rd.skip(3, "line 4 (the number of elements, then their names)")
    toks = rd.values(1, "the element line")
    count = rd.count(toks[0], "the number of elements")
    names = [t.text for t in toks[1:]]
    if len(names) != count:     # at the count, or at the first name too many
        raise rd.error(f"{count} elements announced, {len(names)} named", toks[0 if len(names) < count else count + 1])
    for i, t in enumerate(toks[1:]):
        if t.text in names[:i]:
            raise rd.error(f"element '{t.text}' is named twice", t)
    elements = tuple(elements) if elements is not None else tuple(names)
    if not elements:
        raise ValueError("elements: an empty list selects no element")
    for e in elements:
        if e not in names:
            raise rd.error(f"element '{e}' is not in this file (it has {', '.join(names)})", toks[1])
    g = _grid(rd, len(elements))
    F, rho = [], []
    for name in names:
        _element(rd, f"element {name}")
        F.append(rd.numbers(g.nrho, f"F(rho) of {name}"))
        if fs:
            rho.append([rd.numbers(g.nr, f"rho(r) of {name} with {other}") for other in names])
        else:
            rho.append(rd.numbers(g.nr, f"rho(r) of {name}"))
    z2r = {}
    for i in range(count):
        for j in range(i + 1):
            z2r[i, j] = z2r[j, i] = rd.numbers(g.nr, f"r*phi(r) of {names[i]}-{names[j]}")
    rd.finish(f"r*phi(r) of {names[-1]}-{names[-1]}")
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
    return _multi(one_file(files, "eam/alloy"), False, elements)


def read_fs(files, elements=None):
    return _multi(one_file(files, "eam/fs"), True, elements)

