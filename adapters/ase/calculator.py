"""AdgradCalculator: an adgrad site-energy model as an ASE calculator (docs/ase.md).

A step: a neighbour list (neighbours.py: 12 bytes a pair, kept between steps while no atom has moved
more than half the skin); each atom's pairs within the cutoff counted from it; the atoms ordered by their
width (their count rounded up to a multiple of SLOTS); then one call per width of its kernel's `sites`
driver (a kernel compiled for each width the atoms meet: a three-body model's N x N terms follow each
atom's own neighbours, 16 for an atom with 4, not the 256 of 16 slots), which gathers the rows of the
model's inputs R / valid / s / sn from the list into a thread's row buffers, 32 at a time, runs the
kernel on them and scatters E and dE/dR into energies, forces and the virial while they are in cache
(engine/numeric/sites.py). The rows are taken in parts (ROWS rows at least, MAX_PARTS at most, a power
of two) by adgrad's threads (engine/kernel.py run_threads); a part scatters into forces and a virial of
its own, summed in part order at the end. The parts and the order follow from the positions alone: the
same bits on any thread count, and within round-off of one serial scatter (2 m eps times the sum of an
atom's m terms' magnitudes; tests/test_ase.py).

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
from adgrad.engine.potentials.cutoff import CUTOFFS, model_cutoff
from adgrad.engine.tools.cell_list import independent, lattice

from .neighbours import image_list, wrap

SLOTS = 4       # neighbour slots come in multiples of this: runs whose counts differ by one share a kernel
ROWS = 32       # rows at least in a part of the kernels' (a part holds forces for every atom: 24 bytes an atom)
FEW = 32        # atoms of a width fewer than this run in the next wider width's call (one call: 15-40 us)
PART = 512      # atoms at least in a part of the counting pass and of the parts' sum (a hand-off: 0.04-0.1 ms)
MAX_PARTS = 8   # parts at most, of either kind


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
    N: one kernel of N neighbour slots (the model's N) for every atom. By default each atom runs the
    kernel of its own count within the cutoff rounded up to a multiple of 4 (SLOTS), compiled when the
    first atom of that width appears (once; then loaded from adgrad's compile cache). With N=, an atom
    with more neighbours than slots compiles for more, and says so through `log`.
    log: called with one line of text when the calculator compiles a kernel that is not in adgrad's
    compile cache (before, and with its time after) or grows its slots; default: printed on stderr;
    None: silent; e.g. logging.getLogger("adgrad").info.
    """

    implemented_properties = ["energy", "free_energy", "energies", "forces", "stress"]

    def __init__(self, model, cutoff=None, species=None, skin=0.5, energy="E", N=None, log=stderr,
                 **kwargs):
        if "headroom" in kwargs:        # ASE's Calculator would keep it as a parameter, silently unused
            raise ValueError("headroom= is no longer an argument: each atom runs the kernel of its own neighbour "
                             "count (rounded up to a multiple of 4), so no slots are added; leave it out")
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
        self.N = _slots_argument(N)
        if log is not None and not callable(log):
            raise ValueError(f"log={log!r}: give a function of one line of text, or None for silence")
        self.log = log
        self.species = self._species(species, declared)
        self._index = np.full(len(chemical_symbols), -1.0 if self.species is not None else 0.0)  # Z -> species
        for symbol, index in (self.species or {}).items():
            self._index[atomic_numbers[symbol]] = index
        self.kernels, self.width = {}, self.N or 0      # width -> kernel; N=: the one width
        self._workspaces = {}
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
        call and two or three calls a step: 5% of a 256-atom step."""
        old = self.atoms
        if old is None or len(old) != len(atoms):
            return list(all_changes)
        return [name for name, a, b in (("positions", old.positions, atoms.positions),
                                        ("numbers", old.numbers, atoms.numbers),
                                        ("cell", old.cell.array, atoms.cell.array), ("pbc", old.pbc, atoms.pbc))
                if not _same(a, b)]

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
        self.results = {}
        try:
            # Calculator.calculate copies the atoms (which get_property has just copied: 15-30 us) and makes the
            # calculator's directory (a stat per call); this calculator writes no files
            if atoms is not None and (self.atoms is None or self.check_state(atoms)):
                self.atoms = atoms.copy()
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
            energies, forces, virial = self._evaluate(atoms)
            self._finite(atoms, energies, forces)
        energy = float(energies.sum())
        self.results = {"energy": energy, "free_energy": energy, "energies": energies, "forces": forces}
        if atoms.pbc.all():         # dE/d(strain) / volume, ASE's sign: positive under tension
            (a, b, c), (d, e, f), (g, h, k) = atoms.cell.array.tolist()    # the volume: 1 us, get_volume 12
            volume = abs(a * (e * k - f * h) - b * (d * k - f * g) + c * (d * h - e * g))
            self.results["stress"] = full_3x3_to_voigt_6_stress((virial + virial.T) / (2 * volume))

    def _evaluate(self, atoms):
        """One step: each atom's neighbours within the cutoff counted from the list (and the parts' forces
        zeroed); the atoms ordered by their width (slots: the count rounded up to a multiple of SLOTS, or
        N=); one sites call per width (gather, kernel, scatter: _run_kernel); the parts' forces summed."""
        im, *_, basis = self._list
        n, cutsq, count = len(atoms), self.cutoff ** 2, self._count
        p = wrap(atoms.positions, im.moved, basis, self._wrapped)
        parts, rows, scatter = self._parts
        inside = self._inside
        _run(lambda w: _count(im.first[parts[w]], im.first[parts[w + 1]], parts[w], parts[w + 1], p, im.i, im.j,
                              im.code, im.shifts, cutsq, inside, count, scatter), len(parts) - 1)
        fixed = self._fixed_width(count) if self.N is not None else 0
        order, width, groups = self._rows
        G = _layout(count, fixed, FEW, order, width, groups)      # by width, then atom: from the positions alone
        energies, forces, virial = np.empty(n), np.empty((n, 3)), np.zeros((len(rows) - 1, 3, 3))
        step = (rows, (order, count), (im.first, im.j, im.code, im.shifts, inside, p), self._species,
                (energies, scatter, virial))
        for g in range(G):
            t0, t1 = int(groups[g]), int(groups[g + 1])
            self._run_kernel(int(width[order[t0]]), t0, t1, step)
        _run(lambda w: _sum_parts(parts[w], parts[w + 1], scatter, forces), len(parts) - 1)
        return energies, forces, virial.sum(axis=0)         # in part order, as the forces

    def _fixed_width(self, count):
        """N=: the one width of every atom, N grown to fit the most neighbours (said through log)."""
        most = int(count.max())
        if most > self.width:
            width = SLOTS * math.ceil(most / SLOTS)
            self._say(f"adgrad: an atom has {most} neighbours within the cutoff of {self.cutoff:g} A, more than "
                      f"the {self.width} slots of the kernel; compiling for {width} (AdgradCalculator(N=...) "
                      f"sets them from the start)")
            self.width = width
        return self.width

    def _run_kernel(self, width, t0, t1, step):
        """The kernel of `width` slots on rows t0 <= t < t1 (its sites driver: energies, the parts' forces and
        virials), on a thread per part of these rows (at most numba's thread count)."""
        kernel, params = self.kernels.get(width) or self._compile(width, t1 - t0)
        rows, *lists, results = step
        parts = int(np.count_nonzero((rows[:-1] < t1) & (rows[1:] > t0)))
        workers = max(1, min(numba.get_num_threads(), parts))
        if workers not in self._workspaces.setdefault(width, {}):
            self._workspaces[width][workers] = kernel.site_buffers(workers)
        kernel.sites(rows, t0, t1, *lists, params, results, self._workspaces[width][workers])

    def _finite(self, atoms, energies, forces):
        """A site energy or force that is NaN or infinite is an error, naming the atoms and their nearest
        neighbours (a model is undefined there: two atoms on one spot, a radius where its function is not)."""
        if np.isfinite(energies.sum()) and np.isfinite(forces.sum()):     # the common case, in two reductions
            return
        bad = np.flatnonzero(~(np.isfinite(energies) & np.isfinite(forces).all(axis=1)))
        if len(bad):
            im, p = self._list[0], self._wrapped

            def nearest(i):         # of atom i's pairs within the cutoff
                e = np.arange(im.first[i], im.first[i + 1])[self._inside[im.first[i]:im.first[i + 1]] > 0]
                return np.linalg.norm(p[im.j[e]] - p[i] + im.shifts[im.code[e]], axis=1).min(initial=np.inf)
            r = [nearest(i) for i in bad[:3]]
            near = ", ".join(f"atom {i} ({atoms[i].symbol}: site energy {energies[i]:g}, nearest neighbour at "
                             f"{d:g} A)" for i, d in zip(bad[:3], r))
            raise ValueError(f"{self.path} gives a non-finite energy or force at {len(bad)} atom(s), first {near}; "
                             f"the model is not defined for these neighbourhoods")

    def _stale(self, atoms):
        if self._list is None:
            return True
        _, x0, cell, pbc, numbers, _ = self._list
        if len(atoms) != len(x0) or not (_same(atoms.cell.array, cell) and _same(atoms.pbc, pbc)
                                         and _same(atoms.numbers, numbers)):
            return True
        moved = _moved(atoms.positions, x0)
        if not moved < np.inf:      # NaN or inf: checked (and refused) by _build
            return True
        return moved > (self.skin / 2) ** 2 if self.skin > 0 else moved > 0.0

    def _build(self, atoms):
        """Check the atoms, then a neighbour list within cutoff + skin, sorted by atom: pair p of atom i is
        first[i] <= p < first[i + 1] (neighbours.py: memory in proportion to the atoms and their neighbours,
        whatever the cell's size)."""
        self._list = None
        basis, inverse = self._check(atoms)
        images = image_list(atoms.positions, basis, inverse, atoms.pbc, self.cutoff + self.skin)
        self._list = (images, atoms.positions.copy(), atoms.cell.array.copy(), atoms.pbc.copy(),
                      atoms.numbers.copy(), basis)
        n = len(atoms)      # each step's wrapped positions and counts of neighbours within the cutoff
        self._wrapped, self._count = np.empty((n, 3)), np.empty(n, dtype=np.int64)
        self._inside = np.empty(len(images.j), dtype=np.uint8)     # each step: whether a pair is within the cutoff
        # each step's rows (_layout): order, width, the groups' first rows
        self._rows = (np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n + 1, dtype=np.int64))
        # the parts of the counting pass and of the kernels' rows, and the latter's forces (zeroed by the count)
        rows = _parts(n, ROWS)
        self._parts = (_parts(n), rows, np.empty((len(rows) - 1, n, 3)))

    def _check(self, atoms):
        """The atoms' positions, cell, periodicity and elements, as the model needs them; returns the lattice
        (cell_list.lattice) and sets the atoms' species."""
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

    def _say(self, line):
        if self.log is not None:
            self.log(line)

    def _compile(self, width, rows):
        """Compile E and dE/dR for `width` neighbour slots (a cached kernel if adgrad compiled it before)."""
        if self.sized:
            model = load_model(self.path, sizes={"N": width})
        else:
            shapes = {"R": [width, 3], "valid": [width], "sn": [width]}
            model = load_model(self.path, input_shapes={n: shapes[n] for n in self.inputs if n in shapes})
        which = (f"{rows} atom(s) with up to {width} neighbours: one kernel per width of "
                 f"neighbour counts, in steps of {SLOTS}, each compiled once (~1-2 CPU s) and then loaded from the "
                 f"cache" if self.N is None else "every atom (N=)")
        log = None if self.log is None else (
            lambda line: self._say(f"adgrad: {line}: {width} neighbour slots" +
                                   (f", for {which}" if line.startswith("compiling") else "")))
        with FIRST_USE.paused():            # the kernel's compile says so itself
            kernel = compile_model(model, derivatives=[(self.energy, "R")], values=[self.energy], log=log, sites=True)
        if set(kernel.graph.outputs) != {self.energy, self.gradient}:
            raise RuntimeError(f"{self.path}: the kernel's outputs are {', '.join(kernel.graph.outputs)}, not "
                               f"{self.energy} and {self.gradient}")
        self.kernels[width] = kernel, kernel.param_rows()
        return self.kernels[width]


class FirstUse(numba_event.Listener):
    """The calculator's own numba functions (neighbour list, counting, ordering) compile at their first
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
                self.say("adgrad: compiling the ASE calculator's helpers (neighbour list, counting, ordering; first "
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


def _slots_argument(n):
    if n is None:
        return None
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"N={n!r}: give the number of neighbour slots, an integer >= 1 (or None: sized from the "
                         f"neighbour list)")
    return int(n)


def _length(name, value, positive=False):
    """A distance argument in A: a real number, finite, > 0 (positive) or >= 0."""
    arr = np.asarray(value) if not isinstance(value, (str, bytes)) else None
    if arr is None or arr.ndim or arr.dtype.kind not in "iuf":
        raise ValueError(f"{name}={value!r}: give a number (A)")
    v = float(arr)
    if not (np.isfinite(v) and (v > 0 if positive else v >= 0)):
        raise ValueError(f"{name}={v:g}: must be finite and {'> 0' if positive else '>= 0'} (A)")
    return v


def _same(a, b):
    """Whether arrays a and b hold the same values, bit for bit (a NaN equals itself; -0.0 differs from 0.0,
    which at most calculates once more): 1 us for 512 positions, where np.array_equal takes 4."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _listed(index):
    """'atom 3' / 'atoms 3 and 9' / 'atoms 3, 5 and 9' / 'atoms 3, 5, 9 and 4 more'."""
    index = [str(int(i)) for i in index]
    if len(index) == 1:
        return f"atom {index[0]}"
    if len(index) > 3:
        return f"atoms {', '.join(index[:3])} and {len(index) - 3} more"
    return f"atoms {', '.join(index[:-1])} and {index[-1]}"


def _parts(n, least=PART):
    """Part boundaries over n atoms (or rows): at least `least` a part, at most MAX_PARTS parts, a power of two
    (as many parts on each of 1, 2, 4 or 8 threads). They follow from n alone, so the forces (a sum over the
    parts) have the same bits on any thread count."""
    P = 1 << max(0, int(min(MAX_PARTS, n // least)).bit_length() - 1)
    return np.arange(P + 1) * n // P


def _run(call, parts):
    """call(w) for each part w on adgrad's threads (engine/kernel.py run_threads): part w on thread w % threads."""
    threads = max(1, min(numba.get_num_threads(), parts))
    run_threads(lambda t: [call(w) for w in range(t, parts, threads)], threads)


@njit(cache=True, nogil=True)
def _count(e0, e1, t0, t1, p, I, J, code, shifts, cutsq, inside, count, forces):
    """Pairs e0 <= e < e1 of the list (those of atoms t0 <= i < t1): inside[e], whether the vector p_j - p_i +
    shifts[code] is within the cutoff, and count[i], how many of atom i's are. One loop over the pairs (a
    loop over atoms and then their pairs took 2-3x as long). And these atoms' forces in every part zeroed,
    for the kernels' scatter."""
    for i in range(t0, t1):
        count[i] = 0
        for w in range(forces.shape[0]):
            forces[w, i, 0], forces[w, i, 1], forces[w, i, 2] = 0.0, 0.0, 0.0
    for e in range(e0, e1):
        i, a, c = I[e], J[e], code[e]
        dx = p[a, 0] - p[i, 0] + shifts[c, 0]
        dy = p[a, 1] - p[i, 1] + shifts[c, 1]
        dz = p[a, 2] - p[i, 2] + shifts[c, 2]
        ok = dx * dx + dy * dy + dz * dz < cutsq
        inside[e] = ok
        count[i] += ok


@njit(cache=True, nogil=True)
def _moved(x, x0):
    """The largest squared displacement from x0 to x; inf if one is NaN."""
    most = 0.0
    for i in range(x.shape[0]):
        d = (x[i, 0] - x0[i, 0]) ** 2 + (x[i, 1] - x0[i, 1]) ** 2 + (x[i, 2] - x0[i, 2]) ** 2
        if not d <= most:
            if d != d:
                return np.inf
            most = d
    return most


@njit(cache=True, nogil=True)
def _layout(count, fixed, few, order, width, groups):
    """The rows of a step: each atom's width (its count rounded up to a multiple of SLOTS, at least SLOTS;
    or `fixed` > 0), the atoms of a width held by fewer than `few` atoms moved up to the next wider width
    present (a kernel call costs tens of us; padded slots cost less), the atoms ordered by width then index
    (order: a counting sort), and the first rows of the widths present, groups[0] = 0 < ... < groups[G] = n.
    All from the counts alone. Returns G, the number of widths."""
    n, most = len(count), SLOTS
    for i in range(n):
        width[i] = fixed if fixed > 0 else max(SLOTS, (count[i] + SLOTS - 1) // SLOTS * SLOTS)
        most = max(most, width[i])
    size = np.zeros(most // SLOTS + 1, dtype=np.int64)
    for i in range(n):
        size[width[i] // SLOTS] += 1
    target, wider = np.arange(len(size)), -1      # the width class each class's atoms take
    for k in range(len(size) - 1, -1, -1):
        if size[k] > 0:
            if size[k] < few and wider >= 0:
                target[k] = wider
            else:
                wider = k
    start = np.zeros(most // SLOTS + 2, dtype=np.int64)
    for i in range(n):
        width[i] = target[width[i] // SLOTS] * SLOTS
        start[width[i] // SLOTS + 1] += 1
    for k in range(len(start) - 1):
        start[k + 1] += start[k]
    for i in range(n):
        k = width[i] // SLOTS
        order[start[k]] = i
        start[k] += 1
    G = 0
    for t in range(n):
        if t == 0 or width[order[t]] != width[order[t - 1]]:
            groups[G] = t
            G += 1
    groups[G] = n
    return G


@njit(cache=True, nogil=True)
def _sum_parts(t0, t1, forces, total):
    """Atoms t0 <= a < t1: the parts' forces summed in part order."""
    for a in range(t0, t1):
        for c in range(3):
            f = forces[0, a, c]
            for w in range(1, forces.shape[0]):
                f += forces[w, a, c]
            total[a, c] = f
