"""AdgradCalculator: an adgrad site-energy model as an ASE calculator (docs/ase.md).

A step: a neighbour list (matscipy's, kept between steps while no atom has moved more than half the
skin), packed into the model's padded inputs R / valid / s / sn by a numba loop, one evaluate of E
and dE/dR into reused buffers (the only parallel part), then one numba pass over the neighbour slots
that assembles forces and the virial. Packing and assembly are serial: memory-bound, about 1 ms each
for 4000 Cu atoms, and a parallel pack was no faster on 2 threads while adding a parallel region
whose wake-up costs milliseconds on a busy machine.
"""
from __future__ import annotations

import os

import numpy as np
from ase.calculators.calculator import Calculator, all_changes
from ase.data import atomic_numbers, chemical_symbols
from ase.stress import full_3x3_to_voigt_6_stress
from matscipy.neighbours import neighbour_list
from numba import njit

from adgrad.engine.api import compile_model, load_model

SLOTS = 8       # neighbour slots grow in multiples of this, so an MD run does not recompile every few steps


class AdgradCalculator(Calculator):
    """Energy, per-atom energies, forces and stress of a site-energy model E_i(R_i).

    model: path of a model file whose inputs are R (N, 3) (neighbour vectors x_j - x_i, zero rows
    pad), valid (N,) (1 for a real neighbour), and optionally s () and sn (N,) (the species of the
    atom and of each neighbour), as configs/cu_eam_model.yaml; N is chosen here, at run time (the
    model's size N if it declares one, `sizes: {N: ...}`, so params shaped by N follow; else the first
    axis of R, valid and sn).
    cutoff: neighbours are the atoms (periodic images included) closer than this, in A.
    species: chemical symbol -> species index (required when the model reads s or sn); an atom of
    another element is an error.
    skin: the neighbour list holds pairs within cutoff + skin and is rebuilt only when an atom has
    moved more than skin / 2 since it was built (or the cell, the periodicity or the atoms changed);
    results do not depend on it (pairs beyond the cutoff are left out at every step). 0 rebuilds it at
    every step.
    energy: the model's output that is the site energy.
    """

    implemented_properties = ["energy", "free_energy", "energies", "forces", "stress"]

    def __init__(self, model, cutoff, species=None, skin=0.5, energy="E", **kwargs):
        super().__init__(**kwargs)
        self.path = os.fspath(model)
        self.cutoff, self.skin, self.energy = float(cutoff), float(skin), energy
        declared = load_model(self.path)
        self.inputs, self.sized = tuple(declared.graph.inputs), "N" in declared.spec.sizes
        if not {"R", "valid"} <= set(self.inputs) <= {"R", "valid", "s", "sn"}:
            raise ValueError(f"{self.path}: a site-energy model has inputs R, valid and optionally s, sn; "
                             f"this one has {', '.join(self.inputs)}")
        if species is None and {"s", "sn"} & set(self.inputs):
            raise ValueError(f"{self.path} reads species (s, sn): give species={{symbol: index}}")
        self.species = dict(species or {})
        self._index = np.full(len(chemical_symbols), -1.0 if self.species else 0.0)   # atomic number -> species
        for symbol, index in self.species.items():
            self._index[atomic_numbers[symbol]] = index
        self.gradient = f"d{energy}_dR"
        self.kernel, self.width = None, 0
        self._allocate(0)
        self._list = None           # (neighbour list, positions, cell, pbc, numbers) when it was built

    def check_state(self, atoms, tol=1e-15):
        """What changed since the last calculation among what the model reads (positions, numbers, cell,
        pbc), compared exactly. ASE's own comparison runs allclose over every per-atom array, 0.1 ms a
        call and two calls a step (forces, then stress): 5% of a 256-atom step."""
        old = self.atoms
        if old is None or len(old) != len(atoms):
            return list(all_changes)
        return [name for name, a, b in (("positions", old.positions, atoms.positions),
                                        ("numbers", old.numbers, atoms.numbers),
                                        ("cell", old.cell.array, atoms.cell.array), ("pbc", old.pbc, atoms.pbc))
                if not np.array_equal(a, b)]

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
        super().calculate(atoms, properties, system_changes)
        atoms = self.atoms
        if self._stale(atoms):
            self._build(atoms)
        if len(self.buffers["R"]) != len(atoms):
            self._allocate(len(atoms))
        count = self._pack(atoms)
        if self.kernel is None or count > self.width:    # more neighbours than slots: compile, pack again
            self._compile(-(-max(count, 1) // SLOTS) * SLOTS)
            self._pack(atoms)
        out = self.kernel.evaluate({n: self.buffers[n] for n in self.inputs}, out=self.out)
        forces, virial = np.zeros((len(atoms), 3)), np.zeros((3, 3))
        _assemble(out[self.gradient], self.buffers["index"], self.buffers["R"], forces, virial)
        energy = float(out[self.energy].sum())
        self.results = {"energy": energy, "free_energy": energy, "energies": out[self.energy].copy(),
                        "forces": forces}
        if atoms.pbc.all():         # dE/d(strain) / volume, ASE's sign: positive under tension
            self.results["stress"] = full_3x3_to_voigt_6_stress((virial + virial.T) / (2 * atoms.get_volume()))

    def _stale(self, atoms):
        if self._list is None:
            return True
        _, x0, cell, pbc, numbers = self._list
        if len(atoms) != len(x0) or not (np.array_equal(atoms.cell.array, cell) and np.array_equal(atoms.pbc, pbc)
                                         and np.array_equal(atoms.numbers, numbers)):
            return True
        moved = np.einsum("ij,ij->i", atoms.positions - x0, atoms.positions - x0).max(initial=0.0)
        return moved > (self.skin / 2) ** 2 if self.skin > 0 else moved > 0.0

    def _build(self, atoms):
        """A neighbour list within cutoff + skin, sorted by atom: pair p of atom i is first[i] <= p <
        first[i + 1]. matscipy's (C, cell lists) and not engine/tools/atoms.neighbours (Python over
        bins, sorting each atom's neighbours): 29 ms against 145 ms for 4000 Cu atoms within 4.95 A,
        4 ms against 76 ms for 256. A free cluster goes by its positions alone (matscipy wraps them in a
        box of its own; its cell may be zero)."""
        reach = self.cutoff + self.skin
        if atoms.pbc.any():
            i, j, S = neighbour_list("ijS", atoms, reach)
        else:
            i, j, S = neighbour_list("ijS", positions=atoms.positions, cutoff=reach)
        first = np.searchsorted(i, np.arange(len(atoms) + 1))
        self._list = ((first, j, S), atoms.positions.copy(), atoms.cell.array.copy(),
                      atoms.pbc.copy(), atoms.numbers.copy())
        self._species = self._index[atoms.numbers]
        if np.any(self._species < 0):
            unknown = sorted(set(np.array(atoms.get_chemical_symbols())[self._species < 0]))
            raise ValueError(f"no species index for {', '.join(unknown)} (species={self.species})")

    def _compile(self, width):
        """Compile E and dE/dR for `width` neighbour slots (a cached kernel if adgrad compiled it before)."""
        if self.sized:
            model = load_model(self.path, sizes={"N": width})
        else:
            shapes = {"R": [width, 3], "valid": [width], "sn": [width]}
            model = load_model(self.path, input_shapes={n: shapes[n] for n in self.inputs if n in shapes})
        self.kernel = compile_model(model, derivatives=[(self.energy, "R")], values=[self.energy])
        self.width = width
        self._allocate(len(self.atoms))

    def _allocate(self, n):
        w = self.width
        self.buffers = {"R": np.zeros((n, w, 3)), "valid": np.zeros((n, w)), "s": np.zeros(n),
                        "sn": np.zeros((n, w)), "index": np.full((n, w), -1)}
        self.out = {self.energy: np.empty(n), self.gradient: np.empty((n, w, 3))}

    def _pack(self, atoms):
        """Fill the padded inputs from the neighbour list; returns the largest neighbour count (slots
        beyond the width are not written: the caller compiles for more and packs again)."""
        (first, j, S), _, cell, *_ = self._list
        b = self.buffers
        b["s"][:] = self._species
        return _pack(atoms.positions, first, j, S, cell, self.cutoff ** 2, self._species,
                     b["R"], b["valid"], b["index"], b["sn"])


@njit(cache=True, nogil=True)
def _pack(x, first, j, S, cell, cutsq, species, R, valid, index, sn):
    """Atom i's neighbours within the cutoff into slots 0, 1, ... of row i, zeros after them. The
    vector of pair p is x_j - x_i + S_p cell (S: the cell boundaries it crosses), made here rather than
    by a numpy S @ cell (slower than this whole loop)."""
    width, most = R.shape[1], 0
    for i in range(x.shape[0]):
        k = 0
        for p in range(first[i], first[i + 1]):
            a = j[p]
            s0, s1, s2 = S[p, 0], S[p, 1], S[p, 2]
            dx = x[a, 0] - x[i, 0] + (s0 * cell[0, 0] + s1 * cell[1, 0] + s2 * cell[2, 0])
            dy = x[a, 1] - x[i, 1] + (s0 * cell[0, 1] + s1 * cell[1, 1] + s2 * cell[2, 1])
            dz = x[a, 2] - x[i, 2] + (s0 * cell[0, 2] + s1 * cell[1, 2] + s2 * cell[2, 2])
            if dx * dx + dy * dy + dz * dz < cutsq:
                if k < width:
                    R[i, k, 0], R[i, k, 1], R[i, k, 2] = dx, dy, dz
                    valid[i, k], index[i, k], sn[i, k] = 1.0, a, species[a]
                k += 1
        most = max(most, k)
        for q in range(k, width):
            R[i, q, 0], R[i, q, 1], R[i, q, 2] = 0.0, 0.0, 0.0
            valid[i, q], index[i, q], sn[i, q] = 0.0, -1, 0.0
    return most


@njit(cache=True, nogil=True)
def _assemble(g, index, R, forces, virial):
    """F_i += dE_i/dR_ik and F_j -= dE_i/dR_ik for R_ik = x_j - x_i; virial += R_ik (outer) dE_i/dR_ik
    (= dE/d(strain), the stress times the volume). Serial: a scatter to j."""
    for i in range(g.shape[0]):
        for k in range(g.shape[1]):
            a = index[i, k]
            if a < 0:
                break                   # padding comes after the neighbours
            for c in range(3):
                forces[i, c] += g[i, k, c]
                forces[a, c] -= g[i, k, c]
                for d in range(3):
                    virial[c, d] += R[i, k, c] * g[i, k, d]
