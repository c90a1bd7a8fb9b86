"""Hostile but fair input to adgrad.ase.AdgradCalculator (issue 25, items 8-10, and their neighbours).

Two tables: ARGUMENTS, the constructor's arguments (model, cutoff, species, skin, energy, N, log, and
headroom, which is gone), and ATOMS, what a calculation is given (positions, cell, periodicity, elements);
each row is refused with a ValueError whose message names the argument and the problem. Every input the docs
call valid gets its value, compared with an independent computation: LAMMPS on the same potential files (free
clusters of every dimension, placed in a periodic box too large for any image to reach), the model evaluated
directly through adgrad.engine.api, Lennard-Jones by hand, and the neighbour list against every pair of every
periodic image by brute force. Memory is measured in a child process."""
from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import lammps_oracle as lo
import numpy as np
import pytest
from ase import Atoms
from ase.build import bulk
from ase.calculators.calculator import PropertyNotImplementedError
from ase.stress import full_3x3_to_voigt_6_stress

from adgrad.ase import AdgradCalculator
from adgrad.ase.neighbours import neighbour_list
from adgrad.engine.api import compile_model, load_model
from adgrad.engine.tools.cell_list import face_distances, lattice

ROOT = Path(__file__).resolve().parents[1]
CU = ROOT / "configs" / "cu_eam_model.yaml"         # Zhou's copper, data/Cu_zhou04.eam.alloy, cutoff 6.0 A
SW = ROOT / "configs" / "si_sw_model.yaml"          # reads no species
TERSOFF = ROOT / "configs" / "si_tersoff_model.yaml"
LJ = """adgrad: 1
name: lj
sizes:
  N: 8
inputs:
  R: [N, 3]
  valid: [N]
let:
  r: norm(R, axis=1)
  inside: (valid > 0.5) & (r < 5.0)
outputs:
  E: 0.5 * sum(where(inside, 4.0 * (r ** -12 - r ** -6), 0.0))
"""


@pytest.fixture(scope="module")
def cu():
    return AdgradCalculator(CU, species={"Cu": 0})


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Model files made for these tests: lj (no potential: no cutoff of its own), flat (lj on R [N, 2]),
    cuni (LAMMPS's CuNi alloy), funcfl (its Cu_u3.eam: species named by the file, not an element), vector (the copper
    model with a second output of shape (3,)), sw_a0 (Stillinger-Weber silicon with a = 0: a cutoff of 0)."""
    root = tmp_path_factory.mktemp("ase_models")
    (root / "lj.yaml").write_text(LJ)
    (root / "flat.yaml").write_text(LJ.replace("R: [N, 3]", "R: [N, 2]"))
    text = CU.read_text()
    cuni = f"{{potential: {lo.potential('CuNi.eam.alloy')}, elements: [Cu, Ni]}}"
    (root / "cuni.yaml").write_text(re.sub(r"\{potential: [^}]*\}", cuni, text))
    funcfl = f"{{potential: {lo.potential('Cu_u3.eam')}}}"
    (root / "funcfl.yaml").write_text(re.sub(r"\{potential: [^}]*\}", funcfl, text))
    text = text.replace("../data/", f"{ROOT / 'data'}/")
    (root / "vector.yaml").write_text(text.replace("outputs:\n", "outputs:\n  V: R[0]\n"))
    sw = (ROOT / "data" / "Si_sw85.sw").read_text().replace("2.1683 2.0951 1.8 ", "2.1683 2.0951 0.0 ")    # a = 0
    (root / "a0.sw").write_text(sw)
    (root / "sw_a0.yaml").write_text(SW.read_text().replace("../data/Si_sw85.sw", str(root / "a0.sw")))
    return {name: root / f"{name}.yaml" for name in ("lj", "flat", "cuni", "funcfl", "vector", "sw_a0")}


# ---- the constructor's arguments ---------------------------------------------------------------------------
ARGUMENTS = [  # (id, model, keyword arguments, phrases of the message)
    ("model not a path", None, dict(cutoff=5.0), ["model=None: give the path of a model file"]),
    ("a model of other inputs", ROOT / "configs" / "eam_model.yaml", dict(cutoff=5.0),
     ["eam_model.yaml: a site-energy model has inputs R, valid and optionally s, sn; this one has x"]),
    ("R of two columns", "flat", dict(cutoff=5.0), ["flat.yaml: a site-energy model's inputs are R [N, 3]",
                                                    "this one has R [8, 2], valid [8]"]),
    ("cutoff below the model's", CU, dict(cutoff=4.0, species={"Cu": 0}),
     ["cutoff=4 A is smaller than the model's cutoff 6 A", "params.cu: cutoff", "cu_eam_model.yaml"]),
    ("cutoff below SW's largest cut", SW, dict(cutoff=3.5), ["smaller than the model's cutoff 3.77118 A", "cut"]),
    ("cutoff NaN", CU, dict(cutoff=float("nan"), species={"Cu": 0}), ["cutoff=nan: must be finite and > 0"]),
    ("cutoff inf", CU, dict(cutoff=float("inf"), species={"Cu": 0}), ["cutoff=inf: must be finite and > 0"]),
    ("cutoff negative", CU, dict(cutoff=-6.0, species={"Cu": 0}), ["cutoff=-6: must be finite and > 0"]),
    ("cutoff zero", "lj", dict(cutoff=0.0), ["cutoff=0: must be finite and > 0"]),
    ("cutoff a string", CU, dict(cutoff="7", species={"Cu": 0}), ["cutoff='7': give a number"]),
    ("cutoff a bool", CU, dict(cutoff=True, species={"Cu": 0}), ["cutoff=True: give a number"]),
    ("cutoff a list", CU, dict(cutoff=[7.0], species={"Cu": 0}), ["cutoff=[7.0]: give a number"]),
    ("cutoff unknown to the model", "lj", dict(), ["lj.yaml: the model's cutoff is not known", "give cutoff="]),
    ("the potential's cutoff zero", "sw_a0", dict(), ["sw_a0.yaml: params.sw: the potential's cut is 0, not a finite "
                                                      "positive distance (A)"]),
    ("skin negative", CU, dict(skin=-0.1, species={"Cu": 0}), ["skin=-0.1: must be finite and >= 0"]),
    ("skin NaN", CU, dict(skin=float("nan"), species={"Cu": 0}), ["skin=nan: must be finite and >= 0"]),
    ("skin inf", CU, dict(skin=float("inf"), species={"Cu": 0}), ["skin=inf: must be finite and >= 0"]),
    ("N zero", SW, dict(N=0), ["N=0: give the number of neighbour slots, an integer >= 1"]),
    ("N a float", SW, dict(N=16.0), ["N=16.0: give the number of neighbour slots"]),
    ("N a bool", SW, dict(N=True), ["N=True: give the number of neighbour slots"]),
    ("headroom, gone", SW, dict(headroom=0.25), ["headroom= is no longer an argument", "leave it out"]),
    ("log not callable", SW, dict(log="stderr"), ["log='stderr': give a function of one line of text, or None"]),
    ("energy not an output", CU, dict(energy="F", species={"Cu": 0}), ["energy='F' is not an output", "outputs: E"]),
    ("energy not a name", CU, dict(energy=None, species={"Cu": 0}), ["energy=None is not an output"]),
    ("energy not one number", "vector", dict(energy="V", species={"Cu": 0}), ["output 'V'", "shape (3,)"]),
    ("species missing, funcfl", "funcfl", dict(), ["names its species Cu_u3, not chemical elements",
                                                    "give species={symbol: index}"]),
    ("species not a dict", CU, dict(species=["Cu"]), ["species=['Cu']: give a dict"]),
    ("species empty", CU, dict(species={}), ["species={}: give a dict"]),
    ("species unknown symbol", CU, dict(species={"Qq": 0}), ["species: 'Qq' is not a chemical symbol"]),
    ("species index negative", CU, dict(species={"Cu": -1}), ["index of Cu must be an integer >= 0, got -1"]),
    ("species index a float", CU, dict(species={"Cu": 0.0}), ["index of Cu must be an integer >= 0, got 0.0"]),
    ("species index a bool", CU, dict(species={"Cu": False}), ["index of Cu must be an integer >= 0"]),
    ("species index beyond the elements", CU, dict(species={"Cu": 1}), ["Cu -> 1", "has 1 element(s) (Cu"]),
    ("species swapped", "cuni", dict(species={"Cu": 1, "Ni": 0}), ["Cu -> 1", "element 1 of potential 'cu'", "is Ni"]),
]


@pytest.mark.parametrize("model, kwargs, phrases", [row[1:] for row in ARGUMENTS], ids=[row[0] for row in ARGUMENTS])
def test_constructor_refuses(models, model, kwargs, phrases):
    with pytest.raises(ValueError) as err:
        AdgradCalculator(models.get(model, model), **kwargs)
    for phrase in phrases:
        assert phrase in str(err.value)


def test_cutoff_defaults_to_the_model_and_a_larger_one_changes_nothing(cu, models):
    """EAM's `cutoff`, the largest `cut` of SW and Tersoff; cutoff >= it is taken (pairs it adds are
    beyond the model's reach), and a model without a potential runs on the cutoff it is given."""
    pot = load_model(TERSOFF).tables["ts"].constants
    assert cu.cutoff == cu.model_cutoff == 6.0
    sw = AdgradCalculator(SW)
    assert sw.cutoff == pytest.approx(1.80 * 2.0951)
    assert sw.species == {"Si": 0}                     # no species= for a model that reads none: the file's elements
    with pytest.raises(ValueError, match=r"no species index for Cu: atom 1 \(species=\{'Si': 0\}\)"):
        sw.get_potential_energy(Atoms("SiCu", positions=[[0, 0, 0], [2.3, 0, 0]]))
    assert AdgradCalculator(TERSOFF, species={"Si": 0}).cutoff == float(np.max(pot["R"] + pot["D"]))
    atoms = bulk("Cu", "fcc", a=3.615, cubic=True).repeat(2)
    atoms.rattle(0.1, seed=3)
    wide = AdgradCalculator(CU, 7.5, {"Cu": 0})
    assert wide.cutoff == 7.5
    np.testing.assert_allclose(wide.get_forces(atoms), cu.get_forces(atoms), rtol=1e-12, atol=1e-12)
    assert wide.get_potential_energy(atoms) == pytest.approx(cu.get_potential_energy(atoms), rel=1e-13)
    assert AdgradCalculator(CU, 6.0, {"Cu": 0}).cutoff == 6.0          # equal to the model's: taken
    lj = AdgradCalculator(models["lj"], 5.0)
    assert lj.model_cutoff is None and lj.species is None      # no potential: any element
    r = 1.2                                                             # Lennard-Jones by hand
    dimer = Atoms("Ar2", positions=[[0, 0, 0], [r, 0, 0]], calculator=lj)
    assert dimer.get_potential_energy() == pytest.approx(4 * (r ** -12 - r ** -6), rel=1e-14)
    assert dimer.get_forces()[1, 0] == pytest.approx(4 * (12 * r ** -13 - 6 * r ** -7), rel=1e-13)


# ---- the atoms ---------------------------------------------------------------------------------------------
def cluster(n=5, seed=0, **kw):
    """n Cu atoms 2.2-2.8 A apart along a random walk."""
    steps = np.random.default_rng(seed).normal(size=(n, 3))
    steps *= np.random.default_rng(seed + 1).uniform(2.2, 2.8, (n, 1)) / np.linalg.norm(steps, axis=1)[:, None]
    return Atoms(f"Cu{n}", positions=np.cumsum(steps, axis=0), **kw)


def at(atoms, index, value):
    atoms.positions[index] = value
    return atoms


def box(cell, pbc=True, n=4):
    return cluster(n, cell=cell, pbc=pbc)


ATOMS = [  # (id, atoms, phrases of the message)
    ("NaN position, periodic", at(box(np.eye(3) * 12), 1, [np.nan, 0, 0]),
     ["atoms.positions: atom 1 (Cu) is at [nan, 0.0, 0.0]", "must be finite"]),
    ("inf position, free", at(cluster(), 2, [0, np.inf, 0]), ["atom 2 (Cu) is at [0.0, inf, 0.0]"]),
    ("many non-finite positions", at(cluster(8), [0, 2, 3, 5, 7], np.nan),
     ["atoms 0, 2, 3 and 2 more are not finite: atom 0 (Cu) is at [nan, nan, nan]"]),
    ("NaN in the cell", box(np.diag([12.0, 12.0, np.nan])), ["atoms.cell holds NaN or infinity", "nan"]),
    ("inf in a free direction's cell vector", box(np.diag([12.0, 12.0, np.inf]), [True, True, False]),
     ["atoms.cell holds NaN or infinity", "inf"]),
    ("zero-volume periodic cell", box(np.diag([12.0, 12.0, 0.0])),
     ["atoms.cell: the vectors of its periodic directions (a, b, c", "zero or linearly dependent"]),
    ("zero vector in a periodic direction", box(np.diag([12.0, 0.0, 12.0]), [True, True, False]),
     ["periodic directions (a, b; pbc [True, True, False])", "zero or linearly dependent"]),
    ("parallel periodic vectors", box([[12.0, 0, 0], [12.0, 0, 0], [0, 0, 12.0]]),
     ["zero or linearly dependent", "[[12.0, 0.0, 0.0], [12.0, 0.0, 0.0]"]),
    ("cell too thin for the cutoff", box(np.diag([12.0, 12.0, 1e-7])),
     ["too thin for the cutoff + skin of 6.5 A", "distances between its faces are 12, 12, 1e-07 A"]),
    ("atom 1e12 cells away", at(box(np.eye(3) * 12), 3, [1.2e13, 0, 0]),
     ["atom 3 is 1e+12 cell lengths outside the periodic cell"]),
    ("unknown element", Atoms("CuAgCu", positions=np.eye(3) * 2.5), ["no species index for Ag: atom 1", "'Cu': 0"]),
    ("unknown elements, periodic", Atoms("AgAuCuAg", positions=np.eye(4, 3) * 2.5, cell=np.eye(3) * 9, pbc=True),
     ["no species index for Ag, Au: atoms 0, 1 and 3"]),
    ("a dummy atom", Atoms("XCu", positions=[[0, 0, 0], [2.5, 0, 0]]), ["no species index for X: atom 0"]),
    ("two atoms on one spot", Atoms("Cu3", positions=[[0, 0, 0], [0, 0, 0], [2.5, 0, 0]]),
     ["gives a non-finite energy or force at 2 atom(s), first atom 0", "nearest neighbour at 0 A"]),
]


@pytest.mark.parametrize("atoms, phrases", [row[1:] for row in ATOMS], ids=[row[0] for row in ATOMS])
def test_calculation_refuses(cu, atoms, phrases):
    """Refused before anything is computed from it, and the calculator works on after."""
    for prop in ("energy", "forces"):
        with pytest.raises(ValueError) as err:
            cu.get_property(prop, atoms)
        for phrase in phrases:
            assert phrase in str(err.value)
    good = cluster()
    assert cu.get_potential_energy(good) == AdgradCalculator(CU, species={"Cu": 0}).get_potential_energy(good)


@pytest.mark.parametrize("skin", [0.5, 0.0])
def test_a_diverged_dynamics_stops(cu, skin):
    """An atom that goes NaN in the middle of a run is refused at once (the neighbour list kept within
    the skin notwithstanding); put back, the atoms give what they gave before."""
    calc = AdgradCalculator(CU, species={"Cu": 0}, skin=skin)
    atoms = bulk("Cu", "fcc", a=3.615, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=2)
    atoms.calc = calc
    e, f = atoms.get_potential_energy(), atoms.get_forces()
    x = atoms.positions.copy()
    for bad in (np.nan, np.inf):
        atoms.positions[5, 1] = bad
        with pytest.raises(ValueError, match=r"atom 5 \(Cu\) is at \[.*(nan|inf)"):
            atoms.get_forces()
        with pytest.raises(ValueError, match="atom 5"):
            atoms.get_potential_energy()            # again: no result was kept for these atoms
        atoms.positions = x
        assert atoms.get_potential_energy() == e
        np.testing.assert_array_equal(atoms.get_forces(), f)


# ---- free systems of any dimension, and zero atoms: LAMMPS, and the model evaluated directly --------------
MODELS = {  # name: (model, species, LAMMPS pair style, potential file, element, mass, bond length)
    "eam": (CU, {"Cu": 0}, "eam/alloy", "Cu_zhou04.eam.alloy", "Cu", 63.546, 2.55),
    "sw": (SW, None, "sw", "Si_sw85.sw", "Si", 28.0855, 2.35),
    "tersoff": (TERSOFF, {"Si": 0}, "tersoff", "Si_tersoff88.tersoff", "Si", 28.0855, 2.35),
}
SHAPES = {  # name: positions in bond lengths (a little irregular, so that no force vanishes by symmetry)
    "one atom": [[0, 0, 0]],
    "dimer": [[0, 0, 0], [1, 0, 0]],
    "linear chain": [[0, 0, 0], [1, 0, 0], [2.05, 0, 0], [3.1, 0, 0]],
    "planar cluster": [[0, 0, 0], [1, 0, 0], [0.45, 0.9, 0], [1.5, 0.85, 0], [-0.6, 0.8, 0]],
    "tetrahedron": [[0, 0, 0], [1, 0, 0], [0.5, 0.85, 0], [0.5, 0.3, 0.8]],
}


@pytest.fixture(scope="module")
def calcs():
    return {name: AdgradCalculator(m[0], species=m[1]) for name, m in MODELS.items()}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("name", list(MODELS))
def test_free_clusters_of_any_dimension_equal_lammps(calcs, name, shape):
    """One atom, a dimer, a chain, a planar cluster (ASE's cell all zero, matscipy's LinAlgError
    before) and a tetrahedron: energies and forces of LAMMPS, which computes them in a 60 A periodic
    box (no image within the cutoff)."""
    _, _, style, potfile, element, mass, bond = MODELS[name]
    x = np.array(SHAPES[shape], dtype=float) * bond + np.random.default_rng(len(shape)).normal(scale=0.03)
    atoms = Atoms(f"{element}{len(x)}", positions=x, calculator=calcs[name])
    e_ref, f_ref, pe = lo.run(x + 30.0, np.eye(3) * 60.0, np.ones(len(x), dtype=int), style,
                              f"* * {ROOT / 'data' / potfile} {element}", (mass,))
    f = atoms.get_forces()
    assert atoms.get_potential_energy() == pytest.approx(pe, rel=1e-10, abs=1e-12)
    assert np.abs(f - f_ref).max() <= 1e-10 * max(np.abs(f_ref).max(), 1e-2)
    if name == "eam":                   # LAMMPS's per-atom split is EAM's site energies (not the three-body ones)
        np.testing.assert_allclose(atoms.get_potential_energies(), e_ref, rtol=1e-10, atol=1e-12)
    if len(x) > 1:
        assert np.abs(f).max() > 1e-3
        assert np.abs(f.sum(axis=0)).max() < 1e-12
    with pytest.raises(PropertyNotImplementedError):
        atoms.get_stress()


def test_a_dimer_equals_the_model_evaluated_directly(cu):
    """E_i and dE_i/dR of adgrad.engine.api's kernel at R = +-(x1 - x0): the calculator's energies and
    forces (F_0 = dE_0/dR_01 - dE_1/dR_10), to round-off."""
    x = np.array([[0.1, -0.2, 0.3], [2.4, 0.5, -0.4]])
    kernel = compile_model(load_model(CU, sizes={"N": 8}), derivatives=[("E", "R")], values=["E"])
    R, valid = np.zeros((2, 8, 3)), np.zeros((2, 8))
    R[0, 0], R[1, 0], valid[:, 0] = x[1] - x[0], x[0] - x[1], 1.0
    out = kernel.evaluate({"R": R, "valid": valid, "s": np.zeros(2), "sn": np.zeros((2, 8))})
    g = out["dE_dR"][:, 0]
    atoms = Atoms("Cu2", positions=x, calculator=cu)
    np.testing.assert_allclose(atoms.get_potential_energies(), out["E"], rtol=1e-14)
    np.testing.assert_allclose(atoms.get_forces(), [g[0] - g[1], g[1] - g[0]], rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("cell, pbc", [(np.zeros((3, 3)), False), (np.eye(3) * 10, True),
                                        (np.diag([10.0, 10.0, 0.0]), [True, True, False])])
def test_zero_atoms_have_zero_energy(cu, cell, pbc):
    atoms = Atoms(cell=cell, pbc=pbc, calculator=cu)
    assert atoms.get_potential_energy() == 0.0
    assert atoms.get_forces().shape == (0, 3) and atoms.get_potential_energies().shape == (0,)
    if np.all(pbc):
        np.testing.assert_array_equal(atoms.get_stress(), np.zeros(6))
    else:
        with pytest.raises(PropertyNotImplementedError):
            atoms.get_stress()


def test_a_slab_needs_no_third_cell_vector(cu):
    """pbc (True, True, False) with a zero c vector (ASE's way of saying 'no cell there'): the same
    energies and forces as with any c, and as a fully periodic cell whose c is too long to matter."""
    slab = bulk("Cu", "fcc", a=3.615, cubic=True).repeat((2, 2, 2))
    slab.rattle(0.1, seed=4)
    slab.pbc = [True, True, False]
    results = []
    for c in ([0, 0, 0], [0, 0, 40.0], [3.0, -2.0, 40.0]):
        atoms = slab.copy()
        atoms.cell[2] = c
        atoms.pbc = [True, True, c[2] == 40.0 and c[0] == 0]     # the 40 A upright one as a periodic cell
        atoms.calc = cu
        results.append((atoms.get_potential_energies(), atoms.get_forces()))
    for e, f in results[1:]:
        np.testing.assert_allclose(e, results[0][0], rtol=1e-13)
        np.testing.assert_allclose(f, results[0][1], rtol=1e-11, atol=1e-12)


# ---- memory follows the atoms, not the cell ----------------------------------------------------------------
def test_a_sparse_periodic_box_equals_the_free_atoms(cu):
    """4 atoms in periodic cubes up to 10^7 A (matscipy's list binned the whole cell: 1.7 GiB at 10^4 A),
    one pair across the boundary: the energies and forces of the same atoms unwrapped and free, and their
    virial over the volume."""
    free = Atoms("Cu4", positions=[[0, 0, 0], [2.5, 0, 0], [-2.2, 0.4, 0.1], [50, 50, 50]], calculator=cu)
    e, f = free.get_potential_energies(), free.get_forces()
    for L in (1e2, 1e4, 1e7):
        x = free.positions.copy()
        x[2] += [L, 0, 0]                      # across the cell's face from atom 0 (to an ulp of L: 2e-9 A at 1e7)
        atoms = Atoms("Cu4", positions=x, cell=np.eye(3) * L, pbc=True, calculator=cu)
        np.testing.assert_allclose(atoms.get_potential_energies(), e, rtol=0, atol=1e-13 + 1e-15 * L)
        np.testing.assert_allclose(atoms.get_forces(), f, rtol=0, atol=1e-12 + 1e-14 * L)
        virial = -free.positions.T @ f                  # dE/d(strain) of the free atoms: -sum_i x_i (outer) F_i
        stress = full_3x3_to_voigt_6_stress((virial + virial.T) / 2) / L ** 3
        np.testing.assert_allclose(atoms.get_stress(), stress, rtol=0, atol=(1e-12 + 1e-14 * L) * np.abs(stress).max())


MEMORY = """
import resource, numpy as np
from ase import Atoms
from adgrad.ase import AdgradCalculator
calc = AdgradCalculator({model!r}, species={{"Cu": 0}})
Atoms("Cu4", positions=[[0, 0, 0], [2.5, 0, 0], [0, 2.5, 0], [0, 0, 2.5]], calculator=calc).get_forces()  # compiled
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
L = 1e4
atoms = Atoms("Cu4", positions=[[0, 0, 0], [2.5, 0, 0], [L / 2] * 3, [L - 2.0, 0, 0]], cell=np.eye(3) * L, pbc=True)
atoms.calc = calc
atoms.get_forces(), atoms.get_stress()
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""


def test_memory_follows_the_atoms_not_the_cell():
    """4 atoms in a periodic cube of 10^4 A: the calculation's peak memory grows by a few MiB at most
    (1.7 GiB with matscipy's list)."""
    res = subprocess.run([sys.executable, "-c", MEMORY.format(model=str(CU))], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert float(res.stdout.split()[-1]) < 50, res.stdout


# ---- the neighbour list itself ------------------------------------------------------------------------------
def brute_force(x, cell, pbc, reach):
    """Every (i, j, S) within reach, over every image a pair could need (the positions' spread in cell
    lengths plus the reach)."""
    basis, inverse = lattice(cell, pbc)
    f = x @ inverse
    spread = (np.ptp(f, axis=0) if len(x) else 0.0) + reach / face_distances(inverse) + 2
    ranges = [range(-int(spread[c]), int(spread[c]) + 1) if pbc[c] else [0] for c in range(3)]
    out = set()
    for S in itertools.product(*ranges):
        d = x[None, :, :] - x[:, None, :] + np.array(S) @ basis
        for i, j in zip(*np.nonzero((d ** 2).sum(-1) < reach ** 2)):
            if i != j or any(S):
                out.add((int(i), int(j), S))
    return out


def test_neighbour_list_equals_brute_force():
    """Random cells (upright and triclinic, thinner than the reach, periodic in any directions, zero vectors
    where not periodic), atoms inside and up to a few cells outside, 0 to 11 of them."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(0, 12))
        pbc = rng.random(3) < 0.6
        cell = np.diag(rng.uniform(1.5, 9, 3)) + rng.normal(size=(3, 3)) * (trial % 2)
        if trial % 5 == 0:
            cell[~pbc] = 0.0
        x = rng.uniform(-3, 12, (n, 3))
        reach = rng.uniform(1, 6)
        basis, inverse = lattice(cell, pbc)
        first, j, S = neighbour_list(x, basis, inverse, pbc, reach)
        assert np.all(np.diff(first) >= 0) and first[0] == 0 and first[-1] == len(j)
        i = np.repeat(np.arange(n), np.diff(first))
        assert set(zip(i.tolist(), j.tolist(), map(tuple, S.tolist()))) == brute_force(x, cell, pbc, reach)
        assert len(j) == len(set(zip(i.tolist(), j.tolist(), map(tuple, S.tolist()))))     # no pair twice


def test_atoms_many_cells_outside_are_their_images(cu):
    """Atoms moved by whole cell vectors (up to 10^6 cells, as an MD run that never wraps drifts): the same
    pairs, their shifts S changed by the cells moved, and the same energies and forces to the precision
    left in the moved coordinates."""
    atoms = bulk("Cu", "fcc", a=3.615).repeat((3, 2, 2))            # triclinic primitive cells, 12 atoms
    atoms.rattle(0.1, seed=6)
    rng = np.random.default_rng(6)
    for span in (3, 10 ** 6):
        moved = atoms.copy()
        cells = rng.integers(-span, span + 1, (len(atoms), 3))
        moved.positions += cells @ atoms.cell.array
        basis, inverse = lattice(atoms.cell.array, atoms.pbc)
        lists = [neighbour_list(a.positions, basis, inverse, a.pbc, 6.5) for a in (atoms, moved)]
        pairs = []
        for (first, j, S), shift in zip(lists, (np.zeros_like(cells), cells)):
            i = np.repeat(np.arange(len(atoms)), np.diff(first))
            pairs.append(set(zip(i.tolist(), j.tolist(), map(tuple, (S + shift[j] - shift[i]).tolist()))))
        assert pairs[0] == pairs[1] and len(pairs[0]) > 40 * len(atoms)
        moved.calc = cu
        atol = 1e-12 * span * 10
        np.testing.assert_allclose(moved.get_potential_energies(), cu.get_potential_energies(atoms), rtol=0, atol=atol)
        np.testing.assert_allclose(moved.get_forces(), cu.get_forces(atoms), rtol=0, atol=10 * atol)
        np.testing.assert_allclose(moved.get_stress(), cu.get_stress(atoms), rtol=0, atol=atol)
