"""AdgradCalculator: an adgrad site-energy model as an ASE calculator (docs/ase.md).

A step: a neighbour list (neighbours.py, kept between steps while no atom has moved more than half the
skin), packed into the model's padded inputs R / valid / s / sn, one evaluate of E and dE/dR into reused
buffers, then forces and the virial assembled from dE/dR. Packing and assembly are numba loops over parts
of the atoms (PART atoms at least, MAX_PARTS parts at most, a power of two) on adgrad's threads (engine/kernel.py
run_threads, as the kernel's). A part packs its rows (the same bits as one loop) and scatters its rows'
terms into forces and a virial of its own; the parts' forces are then summed in part order. The parts
follow from the number of atoms alone: the same bits on any thread count, and within round-off of one
serial scatter (2 m eps times the sum of an atom's m terms' magnitudes; tests/test_ase.py).

Every argument is checked where it enters: the constructor's when it is called, the atoms' (positions,
cell, periodicity, elements) at the start of each calculation, before anything is computed from them.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Mapping

import numba
import numpy as np
from ase.calculators.calculator import Calculator, all_changes
from ase.data import atomic_numbers, chemical_symbols
from ase.stress import full_3x3_to_voigt_6_stress
from numba import njit
from numba.core import event as numba_event

import adgrad.engine.numeric.cache  # noqa: F401  (first: numba caches the cache=True functions below in adgrad's cache)

from adgrad.engine.api import compile_model, load_model
from adgrad.engine.kernel import run_threads
from adgrad.engine.potentials import Potential
from adgrad.engine.tools.cell_list import independent

from .neighbours import lattice, neighbour_list

SLOTS = 4       # neighbour slots come in multiples of this: runs whose counts differ by one share a kernel
# a potential format -> its constant that is the cutoff
CUTOFFS = {"eam": "cutoff", "eam/alloy": "cutoff", "eam/fs": "cutoff", "sw": "cut", "tersoff": "cut"}
PART = 256      # atoms at least in a part of packing and assembly (a thread's wake-up: ~0.1 ms)
MAX_PARTS = 8   # parts at most: each holds forces for every atom (24 bytes an atom)


def stderr(line):
    """The default log: the line on stderr, now (an MD script's output is often piped or buffered)."""
    print(line, file=sys.stderr, flush=True)


class AdgradCalculator(Calculator):
    """Energy, per-atom energies, forces and stress of a site-energy model E_i(R_i).

    model: path of a model file whose inputs are R (N, 3) (neighbour vectors x_j - x_i, zero rows
    pad), valid (N,) (1 for a real neighbour), and optionally s () and sn (N,) (the species of the
    atom and of each neighbour), as configs/cu_eam_model.yaml; N is chosen here, at run time (the
    model's size N if it declares one, `sizes: {N: ...}`, so params shaped by N follow; else the first
    axis of R, valid and sn).
    cutoff: neighbours are the atoms (periodic images included) closer than this, in A. By default the
    model's own (model_cutoff: its potential files'); a smaller one is an error, a larger one is taken.
    species: chemical symbol -> species index; an atom of another element is an error. Without it, a
    model that reads s or sn maps each element of its potential files to its index there (the files
    must name the same chemical elements in one order), and a model that reads no species takes the
    elements its potential files name (any element when they name none).
    skin: the neighbour list holds pairs within cutoff + skin and is rebuilt only when an atom has
    moved more than skin / 2 since it was built (or the cell, the periodicity or the atoms changed);
    results do not depend on it (pairs beyond the cutoff are left out at every step). 0 rebuilds it at
    every step.
    energy: the model's output that is the site energy.
    N: the neighbour slots to compile for (the model's N). By default, at the first calculation, the most
    pairs any atom has in the neighbour list (within cutoff + skin) times 1 + headroom, rounded up to a
    multiple of 4: within the list's lifetime no atom can have more neighbours within the cutoff, so
    thermal motion does not recompile. An atom with more neighbours than slots compiles for more, and
    says so through `log`.
    headroom: the fraction of slots added to that count (>= 0).
    log: called with one line of text when the calculator compiles a kernel that is not in adgrad's
    compile cache (before, and with its time after) or grows its slots; default: printed on stderr;
    None: silent; e.g. logging.getLogger("adgrad").info.
    """

    implemented_properties = ["energy", "free_energy", "energies", "forces", "stress"]

    def __init__(self, model, cutoff=None, species=None, skin=0.5, energy="E", N=None, headroom=0.0, log=stderr,
                 **kwargs):
        super().__init__(**kwargs)
        if not isinstance(model, (str, os.PathLike)):
            raise ValueError(f"model={model!r}: give the path of a model file")
        self.path = os.fspath(model)
        declared = load_model(self.path)
        self.inputs, self.sized = tuple(declared.graph.inputs), "N" in declared.spec.sizes
        if not {"R", "valid"} <= set(self.inputs) <= {"R", "valid", "s", "sn"}:
            raise ValueError(f"{self.path}: a site-energy model has inputs R, valid and optionally s, sn; "
                             f"this one has {', '.join(self.inputs)}")
        shapes = {name: v.shape for name, v in declared.graph.inputs.items()}
        n = shapes["R"][0] if len(shapes["R"]) == 2 else None
        want = {"R": (n, 3), "valid": (n,), "s": (), "sn": (n,)}
        if n is None or any(shape != want[name] for name, shape in shapes.items()):
            raise ValueError(f"{self.path}: a site-energy model's inputs are R [N, 3], valid [N] and optionally s [] "
                             f"and sn [N]; this one has " + ", ".join(f"{k} {list(v)}" for k, v in shapes.items()))
        outputs = declared.graph.outputs
        if not isinstance(energy, str) or energy not in outputs:
            raise ValueError(f"energy={energy!r} is not an output of {self.path} (its outputs: {', '.join(outputs)})")
        if outputs[energy].shape != ():
            raise ValueError(f"energy={energy!r}: output '{energy}' of {self.path} has shape {outputs[energy].shape}, "
                             f"but a site energy is one number per atom (shape ())")
        self.energy, self.gradient = energy, f"d{energy}_dR"
        known, complete = model_cutoff(declared)
        self.model_cutoff = known[0] if known else None
        self.cutoff = self._cutoff(cutoff, known, complete)
        self.skin = _length("skin", skin)
        self.N, self.headroom = _slots_argument(N), _headroom(headroom)
        if log is not None and not callable(log):
            raise ValueError(f"log={log!r}: give a function of one line of text, or None for silence")
        self.log = log
        self.species = self._species(species, declared)
        self._index = np.full(len(chemical_symbols), -1.0 if self.species is not None else 0.0)  # Z -> species
        for symbol, index in (self.species or {}).items():
            self._index[atomic_numbers[symbol]] = index
        self.kernel, self.width = None, 0
        self._allocate(0)
        self._list = None           # (neighbour list, positions, cell, pbc, numbers, basis) when it was built

    def _cutoff(self, cutoff, known, complete):
        if cutoff is None:
            if known is None or not complete:
                raise ValueError(f"{self.path}: the model's cutoff is not known from its params (only a potential "
                                 f"file of format {', '.join(CUTOFFS)} gives one, and a table param none): give "
                                 f"cutoff=, the distance (A) beyond which no neighbour changes a site energy")
            return known[0]
        value = _length("cutoff", cutoff, positive=True)
        if known is not None and value < known[0]:
            raise ValueError(f"cutoff={value:g} A is smaller than the model's cutoff {known[0]:g} A ({known[1]} of "
                             f"{self.path}): neighbours between them would be left out; give cutoff >= {known[0]:g} "
                             f"or leave it out")
        return value

    def _species(self, species, model):
        """The species map, checked: chemical symbols to integer indices within every potential's elements, each
        symbol at its own element where the potential names chemical elements. None: any element (index 0)."""
        potentials = {name: val.elements for name, val in model.tables.items() if isinstance(val, Potential)}
        if species is None:
            if {"s", "sn"} & set(self.inputs):
                return self._species_of_elements(potentials)
            named = [e for elements in potentials.values() for e in elements if e in atomic_numbers]
            return {e: 0 for e in dict.fromkeys(named)} or None
        if not isinstance(species, Mapping) or not species:
            raise ValueError(f"species={species!r}: give a dict of chemical symbol -> species index, e.g. {{'Cu': 0}}")
        out = {}
        for symbol, index in species.items():
            if not isinstance(symbol, str) or symbol not in atomic_numbers:
                raise ValueError(f"species: {symbol!r} is not a chemical symbol (as 'Cu' or 'Ni')")
            if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)) or index < 0:
                raise ValueError(f"species: the index of {symbol} must be an integer >= 0, got {index!r}")
            for name, elements in potentials.items():
                if index >= len(elements):
                    raise ValueError(f"species: {symbol} -> {index}, but potential '{name}' of {self.path} has "
                                     f"{len(elements)} element(s) ({', '.join(elements)}: indices 0 to "
                                     f"{len(elements) - 1})")
                if elements[index] in atomic_numbers and elements[index] != symbol:
                    raise ValueError(f"species: {symbol} -> {index}, but element {index} of potential '{name}' of "
                                     f"{self.path} is {elements[index]} (its elements: {', '.join(elements)})")
            out[symbol] = int(index)
        return out

    def _species_of_elements(self, potentials):
        """A model that reads species, without species=: each element of its potential files is the species
        of its index there (CuNi.eam.alloy with elements [Cu, Ni]: Cu 0, Ni 1). Every file must name the same
        chemical elements in the same order, each once; otherwise only the user knows the map."""
        give = "give species={symbol: index}"
        if not potentials:
            raise ValueError(f"{self.path} reads species (s, sn) and has no potential file naming elements: {give}")
        (first, elements), *others = potentials.items()
        for name, other in others:
            if other != elements:
                raise ValueError(f"{self.path} reads species (s, sn), but its potentials name different elements "
                                 f"('{first}': {', '.join(elements)}; '{name}': {', '.join(other)}): {give}")
        if not all(e in atomic_numbers for e in elements):
            raise ValueError(f"{self.path} reads species (s, sn), but potential '{first}' names its species "
                             f"{', '.join(elements)}, not chemical elements (funcfl files by their names): {give}")
        if len(set(elements)) < len(elements):
            raise ValueError(f"{self.path} reads species (s, sn), but potential '{first}' has an element twice "
                             f"({', '.join(elements)}): {give}")
        return {e: i for i, e in enumerate(elements)}

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
        self.results = {}
        try:
            super().calculate(atoms, properties, system_changes)
            with FIRST_USE.watch(self._say) if not FIRST_USE.ready else contextlib.nullcontext():
                self._calculate(self.atoms)
        except BaseException:
            self.atoms = None       # a failed call leaves no state that a repeat with these atoms would reuse
            raise

    def _calculate(self, atoms):
        if self._stale(atoms):
            self._build(atoms)
        n = len(atoms)
        if n == 0:
            energies, forces, virial = np.zeros(0), np.zeros((0, 3)), np.zeros((3, 3))
        else:
            if len(self.buffers["R"]) != n:
                self._allocate(n)
            count = self._pack(atoms)
            if self.kernel is None or count > self.width:    # more neighbours than slots: compile, pack again
                self._compile(self._width(count))
                self._pack(atoms)
            out = self.kernel.evaluate({name: self.buffers[name] for name in self.inputs}, out=self.out)
            forces, virial = self._assemble(out[self.gradient])
            energies = out[self.energy].copy()
            self._finite(atoms, energies, forces)
        energy = float(energies.sum())
        self.results = {"energy": energy, "free_energy": energy, "energies": energies, "forces": forces}
        if atoms.pbc.all():         # dE/d(strain) / volume, ASE's sign: positive under tension
            self.results["stress"] = full_3x3_to_voigt_6_stress((virial + virial.T) / (2 * atoms.get_volume()))

    def _finite(self, atoms, energies, forces):
        """A site energy or force that is NaN or infinite is an error, naming the atoms and their nearest
        neighbours (a model is undefined there: two atoms on one spot, a radius where its function is not)."""
        bad = np.flatnonzero(~(np.isfinite(energies) & np.isfinite(forces).all(axis=1)))
        if len(bad):
            R, valid = self.buffers["R"][bad], self.buffers["valid"][bad] > 0.5
            r = np.where(valid, np.linalg.norm(R, axis=2), np.inf).min(axis=1)
            near = ", ".join(f"atom {i} ({atoms[i].symbol}: site energy {energies[i]:g}, nearest neighbour at "
                             f"{d:g} A)" for i, d in zip(bad[:3], r[:3]))
            raise ValueError(f"{self.path} gives a non-finite energy or force at {len(bad)} atom(s), first {near}; "
                             f"the model is not defined for these neighbourhoods")

    def _stale(self, atoms):
        if self._list is None:
            return True
        _, x0, cell, pbc, numbers, _ = self._list
        if len(atoms) != len(x0) or not (np.array_equal(atoms.cell.array, cell) and np.array_equal(atoms.pbc, pbc)
                                         and np.array_equal(atoms.numbers, numbers)):
            return True
        moved = np.einsum("ij,ij->i", atoms.positions - x0, atoms.positions - x0).max(initial=0.0)
        if not moved < np.inf:      # NaN or inf: checked (and refused) by _build
            return True
        return moved > (self.skin / 2) ** 2 if self.skin > 0 else moved > 0.0

    def _build(self, atoms):
        """Check the atoms, then a neighbour list within cutoff + skin, sorted by atom: pair p of atom i is
        first[i] <= p < first[i + 1] (neighbours.py: memory in proportion to the atoms and their neighbours,
        whatever the cell's size)."""
        self._list = None
        basis, inverse = self._check(atoms)
        first, j, S = neighbour_list(atoms.positions, basis, inverse, atoms.pbc, self.cutoff + self.skin)
        self._list = ((first, j, S), atoms.positions.copy(), atoms.cell.array.copy(),
                      atoms.pbc.copy(), atoms.numbers.copy(), basis)

    def _check(self, atoms):
        """The atoms' positions, cell, periodicity and elements, as the model needs them; returns the lattice
        (neighbours.lattice) and sets the atoms' species."""
        x, cell, pbc, numbers = atoms.positions, atoms.cell.array, atoms.pbc, atoms.numbers
        bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
        if len(bad):
            where = f"atom {bad[0]} ({atoms[bad[0]].symbol}) is at {x[bad[0]].tolist()}"
            where = where if len(bad) == 1 else f"{_listed(bad)} are not finite: {where}"
            raise ValueError(f"atoms.positions: {where}; positions must be finite (did the dynamics diverge?)")
        if not np.isfinite(cell).all():
            raise ValueError(f"atoms.cell holds NaN or infinity: {cell.tolist()}")
        if not independent(cell[pbc]):
            axes = "".join(np.array(["a", "b", "c"])[pbc])
            raise ValueError(f"atoms.cell: the vectors of its periodic directions ({', '.join(axes)}; pbc "
                             f"{pbc.tolist()}) are zero or linearly dependent: {cell.tolist()}; a periodic direction "
                             f"needs a cell vector, and a fully periodic cell a volume")
        known = (numbers >= 0) & (numbers < len(self._index))
        species = np.full(len(numbers), -1.0)
        species[known] = self._index[numbers[known]]
        bad = np.flatnonzero(species < 0)
        if len(bad):
            symbols = sorted({chemical_symbols[z] if 0 <= z < len(chemical_symbols) else f"Z={z}"
                              for z in numbers[bad]})
            mapped = self.species if self.species is not None else {}
            raise ValueError(f"no species index for {', '.join(symbols)}: {_listed(bad)} (species={mapped})")
        self._species = species
        return lattice(cell, pbc)

    def _width(self, count):
        """Slots for a kernel that fits `count` neighbours within the cutoff: N= if it does, else the most
        pairs of an atom in the neighbour list with headroom (said through log when slots grow)."""
        if self.kernel is None and self.N is not None and count <= self.N:
            return self.N
        first = self._list[0][0]
        reach = int(np.diff(first).max(initial=0))
        width = max(SLOTS, SLOTS * math.ceil(max(count, reach * (1 + self.headroom)) / SLOTS))
        if self.kernel is not None or self.N is not None:
            self._say(f"adgrad: an atom has {count} neighbours within the cutoff of {self.cutoff:g} A, more than "
                      f"the {self.width or self.N} slots of the kernel; compiling for {width} "
                      f"(AdgradCalculator(N=...) sets them from the start)")
        return width

    def _say(self, line):
        if self.log is not None:
            self.log(line)

    def _compile(self, width):
        """Compile E and dE/dR for `width` neighbour slots (a cached kernel if adgrad compiled it before)."""
        if self.sized:
            model = load_model(self.path, sizes={"N": width})
        else:
            shapes = {"R": [width, 3], "valid": [width], "sn": [width]}
            model = load_model(self.path, input_shapes={n: shapes[n] for n in self.inputs if n in shapes})
        log = None if self.log is None else (lambda line: self._say(f"adgrad: {line}: {width} neighbour slots"))
        with FIRST_USE.paused():            # the kernel's compile says so itself
            self.kernel = compile_model(model, derivatives=[(self.energy, "R")], values=[self.energy], log=log)
        self.width = width
        self._allocate(len(self.atoms))

    def _allocate(self, n):
        w = self.width
        self.buffers = {"R": np.zeros((n, w, 3)), "valid": np.zeros((n, w)), "s": np.zeros(n),
                        "sn": np.zeros((n, w)), "index": np.full((n, w), -1),
                        "filled": np.zeros(n, dtype=np.int64)}     # slots of each row not padding now
        self.out = {self.energy: np.empty(n), self.gradient: np.empty((n, w, 3))}

    def _pack(self, atoms):
        """Fill the padded inputs from the neighbour list; returns the largest neighbour count (slots
        beyond the width are not written: the caller compiles for more and packs again)."""
        (first, j, S), *_, basis = self._list
        b = self.buffers
        b["s"][:] = self._species
        parts = _parts(len(atoms))
        most = np.zeros(len(parts) - 1, dtype=np.int64)
        x, cutsq = atoms.positions, self.cutoff ** 2

        def pack(w):
            most[w] = _pack(parts[w], parts[w + 1], x, first, j, S, basis, cutsq, self._species,
                            b["R"], b["valid"], b["index"], b["sn"], b["filled"])
        _run(pack, len(parts) - 1)
        return int(most.max())

    def _assemble(self, g):
        """(forces, virial) from dE/dR (g): each part of the atoms scatters its rows' terms into forces and a
        virial of its own, on its own thread; then the parts' forces are summed, in part order, by ranges of
        atoms on the threads. One part (fewer than 2 PART atoms): the serial scatter."""
        n = len(g)
        index, R = self.buffers["index"], self.buffers["R"]
        parts = _parts(n)
        P = len(parts) - 1
        forces, virial = np.zeros((P, n, 3)), np.zeros((P, 3, 3))
        _run(lambda w: _assemble(parts[w], parts[w + 1], g, index, R, forces[w], virial[w]), P)
        if P == 1:
            return forces[0], virial[0]
        total = np.empty((n, 3))
        _run(lambda w: _sum_parts(parts[w], parts[w + 1], forces, total), P)
        return total, virial.sum(axis=0)        # in part order, as the forces


class FirstUse(numba_event.Listener):
    """The calculator's own numba functions (neighbour list, packing, force assembly) compile at their first
    call after adgrad is installed (then load from adgrad's cache): a few seconds that are announced and
    timed as a kernel's compile is. Listens to numba's compile events (which a load from the cache does
    not raise) during calculations until one has succeeded in this process."""

    def __init__(self):
        self.ready, self.say, self.hold, self.depth, self.t0 = False, None, False, 0, 0.0
        self.seconds = None         # compiling: None until the first compile starts

    @contextlib.contextmanager
    def watch(self, say):
        before, self.say = self.seconds, say
        numba_event.register("numba:compile", self)
        try:
            yield
        finally:
            numba_event.unregister("numba:compile", self)
        if self.seconds is not None and self.seconds != before:
            say(f"adgrad: compiled the ASE calculator's helpers in {self.seconds:.1f} s")
        self.ready = True

    @contextlib.contextmanager
    def paused(self):
        self.hold = True
        try:
            yield
        finally:
            self.hold = False

    def on_start(self, event):
        if self.hold:
            return
        if self.depth == 0:
            if self.seconds is None:
                self.seconds = 0.0
                self.say("adgrad: compiling the ASE calculator's helpers (neighbour list, packing, forces; first "
                         "use after installing adgrad)")
            self.t0 = time.perf_counter()
        self.depth += 1

    def on_end(self, event):
        if self.hold:
            return
        self.depth -= 1
        if self.depth == 0:
            self.seconds += time.perf_counter() - self.t0


FIRST_USE = FirstUse()


def model_cutoff(model):
    """((the model's cutoff, where it comes from) or None, whether every table-like param has one): the
    largest cutoff of the model's potential files (EAM's `cutoff`, the largest `cut` of SW and Tersoff). A
    `table:` param has none (its grid's end is no cutoff), nor a potential format not in CUTOFFS."""
    found, complete = [], True
    for name, val in model.tables.items():
        key = CUTOFFS.get(val.format) if isinstance(val, Potential) else None
        if key is None or key not in val.constants:
            complete = False
            continue
        value = float(np.max(val.constants[key]))
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"params.{name}: the potential's {key} is {value}, not a positive distance")
        found.append((value, f"params.{name}: {key}"))
    return (max(found) if found else None), complete


def _slots_argument(n):
    if n is None:
        return None
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"N={n!r}: give the number of neighbour slots, an integer >= 1 (or None: sized from the "
                         f"neighbour list)")
    return int(n)


def _headroom(value):
    arr = np.asarray(value) if not isinstance(value, (str, bytes)) else None
    if arr is None or arr.ndim or arr.dtype.kind not in "iuf" or not (np.isfinite(arr) and arr >= 0):
        raise ValueError(f"headroom={value!r}: give a fraction >= 0 of slots to add (0.25: a quarter more)")
    return float(arr)


def _length(name, value, positive=False):
    """A distance argument in A: a real number, finite, > 0 (positive) or >= 0."""
    arr = np.asarray(value) if not isinstance(value, (str, bytes)) else None
    if arr is None or arr.ndim or arr.dtype.kind not in "iuf":
        raise ValueError(f"{name}={value!r}: give a number (A)")
    v = float(arr)
    if not (np.isfinite(v) and (v > 0 if positive else v >= 0)):
        raise ValueError(f"{name}={v:g}: must be finite and {'> 0' if positive else '>= 0'} (A)")
    return v


def _listed(index):
    """'atom 3' / 'atoms 3 and 9' / 'atoms 3, 5 and 9' / 'atoms 3, 5, 9 and 4 more'."""
    index = [str(int(i)) for i in index]
    if len(index) == 1:
        return f"atom {index[0]}"
    if len(index) > 3:
        return f"atoms {', '.join(index[:3])} and {len(index) - 3} more"
    return f"atoms {', '.join(index[:-1])} and {index[-1]}"


def _parts(n):
    """Part boundaries over n atoms: at least PART atoms a part, at most MAX_PARTS parts, a power of two (as
    many parts on each of 1, 2, 4 or 8 threads). They follow from n alone, so the forces (a sum over the
    parts) have the same bits on any thread count."""
    P = 1 << max(0, int(min(MAX_PARTS, n // PART)).bit_length() - 1)
    return np.arange(P + 1) * n // P


def _run(call, parts):
    """call(w) for each part w on adgrad's threads (engine/kernel.py run_threads): part w on thread w % threads."""
    threads = max(1, min(numba.get_num_threads(), parts))
    run_threads(lambda t: [call(w) for w in range(t, parts, threads)], threads)


@njit(cache=True, nogil=True)
def _pack(t0, t1, x, first, j, S, cell, cutsq, species, R, valid, index, sn, filled):
    """Atoms t0 <= i < t1: atom i's neighbours within the cutoff into slots 0, 1, ... of row i, padding after
    them (written only where the last pack wrote neighbours, filled[i] slots); returns the most neighbours
    of an atom. The vector of pair p is x_j - x_i + S_p cell (S: the cell
    boundaries it crosses), made here rather than by a numpy S @ cell (slower than this whole loop)."""
    width, most = R.shape[1], 0
    for i in range(t0, t1):
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
        for q in range(k, filled[i]):
            R[i, q, 0], R[i, q, 1], R[i, q, 2] = 0.0, 0.0, 0.0
            valid[i, q], index[i, q], sn[i, q] = 0.0, -1, 0.0
        filled[i] = min(k, width)
    return most


@njit(cache=True, nogil=True)
def _assemble(t0, t1, g, index, R, forces, virial):
    """Rows t0 <= i < t1: F_i += dE_i/dR_ik and F_j -= dE_i/dR_ik for R_ik = x_j - x_i; virial += R_ik (outer)
    dE_i/dR_ik (= dE/d(strain), the stress times the volume). A scatter to j, in row then slot order; the
    virial summed in locals (the parts' virials share cache lines: written once, at the end)."""
    v00, v01, v02, v10, v11, v12, v20, v21, v22 = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for i in range(t0, t1):
        for k in range(g.shape[1]):
            a = index[i, k]
            if a < 0:
                break                   # padding comes after the neighbours
            g0, g1, g2 = g[i, k, 0], g[i, k, 1], g[i, k, 2]
            r0, r1, r2 = R[i, k, 0], R[i, k, 1], R[i, k, 2]
            forces[i, 0] += g0
            forces[a, 0] -= g0
            forces[i, 1] += g1
            forces[a, 1] -= g1
            forces[i, 2] += g2
            forces[a, 2] -= g2
            v00, v01, v02 = v00 + r0 * g0, v01 + r0 * g1, v02 + r0 * g2
            v10, v11, v12 = v10 + r1 * g0, v11 + r1 * g1, v12 + r1 * g2
            v20, v21, v22 = v20 + r2 * g0, v21 + r2 * g1, v22 + r2 * g2
    virial[0, 0], virial[0, 1], virial[0, 2] = v00, v01, v02
    virial[1, 0], virial[1, 1], virial[1, 2] = v10, v11, v12
    virial[2, 0], virial[2, 1], virial[2, 2] = v20, v21, v22


@njit(cache=True, nogil=True)
def _sum_parts(t0, t1, forces, total):
    """Atoms t0 <= a < t1: the parts' forces summed in part order."""
    for a in range(t0, t1):
        for c in range(3):
            f = forces[0, a, c]
            for w in range(1, forces.shape[0]):
                f += forces[w, a, c]
            total[a, c] = f
