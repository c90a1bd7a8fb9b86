"""adgrad.ase.AdgradCalculator: forces are minus the gradient of the energy, the stress is ASE's
numerical stress, per-atom energies sum to the energy, Cu (Cu_u3.eam) and a CuNi alloy equal LAMMPS
through the calculator, velocity Verlet conserves energy, and neither the neighbour-list skin nor
the growth of the neighbour slots changes a result.

The calculators are module fixtures: each compiles its kernel once (about 3 s cold)."""
from __future__ import annotations

import re
from pathlib import Path

import lammps_oracle as lo
import numba
import numpy as np
import pytest
from ase import Atoms, units
from ase.build import bulk
from ase.calculators.calculator import PropertyNotImplementedError
from ase.calculators.fd import calculate_numerical_forces, calculate_numerical_stress
from ase.md.langevin import Langevin
from ase.md.verlet import VelocityVerlet
from ase.neighborlist import neighbor_list

from adgrad.ase import AdgradCalculator
from adgrad.engine.api import load_model

ROOT = Path(__file__).resolve().parents[1]


def cutoff(path):
    """The potential file's cutoff, as the model reads it."""
    return load_model(path).tables["cu"].constants["cutoff"]


def model_file(tmp_path_factory, potfile, elements=()):
    """configs/cu_eam_model.yaml reading one of LAMMPS's potential files instead of our Zhou table."""
    el = f", elements: [{', '.join(elements)}]" if elements else ""
    text = (ROOT / "configs" / "cu_eam_model.yaml").read_text()
    path = tmp_path_factory.mktemp("ase") / f"{potfile}.yaml"
    path.write_text(re.sub(r"\{potential: [^}]*\}", f"{{potential: {lo.potential(potfile)}{el}}}", text))
    return path


@pytest.fixture(scope="module")
def cu_model(tmp_path_factory):
    return model_file(tmp_path_factory, "Cu_u3.eam")


@pytest.fixture(scope="module")
def cu(cu_model):
    return AdgradCalculator(cu_model, cutoff(cu_model), {"Cu": 0})


@pytest.fixture(scope="module")
def cuni(tmp_path_factory):
    path = model_file(tmp_path_factory, "CuNi.eam.alloy", ("Cu", "Ni"))
    return AdgradCalculator(path)       # species by name: Cu 0, Ni 1 as the file's elements; its cutoff


def copper(reps=2, rattle=0.1, strain=None, seed=1):
    """Rattled fcc Cu, reps^3 conventional cells; `strain` (3x3) deforms cell and atoms (triclinic)."""
    atoms = bulk("Cu", "fcc", a=3.615, cubic=True).repeat(reps)
    atoms.rattle(rattle, seed=seed)
    if strain is not None:
        atoms.set_cell(atoms.cell.array @ (np.eye(3) + np.asarray(strain)), scale_atoms=True)
    return atoms


def alloy(reps=3, seed=7):
    """A random Cu-Ni fcc alloy (LAMMPS's atom types 1 = Cu, 2 = Ni) at LAMMPS's orthorhombic box."""
    x, cell = lo.fcc(3.56, reps, 0.15, seed=seed)
    types = np.random.default_rng(seed).integers(1, 3, len(x))
    return Atoms(np.array(["Cu", "Ni"])[types - 1], positions=x, cell=cell, pbc=True), types


SHEAR = [[0.01, 0.02, 0.0], [0.0, -0.01, 0.01], [0.0, 0.0, 0.005]]


@pytest.mark.parametrize("shape", ["cubic", "triclinic", "cluster"])
def test_forces_are_minus_the_energy_gradient(cu, shape):
    atoms = copper(strain=SHEAR if shape == "triclinic" else None)
    atoms.pbc = shape != "cluster"                  # 32 atoms, in a periodic cell or free
    atoms.calc = cu
    f = atoms.get_forces()
    fd = calculate_numerical_forces(atoms, eps=1e-5)
    assert np.abs(f).max() > 0.1
    np.testing.assert_allclose(f, fd, rtol=1e-6, atol=1e-7)
    assert np.abs(f.sum(axis=0)).max() < 1e-11      # Newton's third law


def test_stress_equals_numerical_stress(cu):
    atoms = copper(strain=SHEAR)
    atoms.calc = cu
    s = atoms.get_stress()
    assert np.abs(s).max() > 1e-3
    np.testing.assert_allclose(s, calculate_numerical_stress(atoms, eps=1e-6), rtol=1e-6, atol=1e-9)
    atoms.set_cell(atoms.cell * 1.02, scale_atoms=True)     # stretched: tension is positive (ASE's sign)
    assert atoms.get_stress()[:3].min() > 0


def test_free_cluster_has_no_stress(cu):
    atoms = Atoms("Cu4", positions=copper(1, 0.05).positions[:4])
    atoms.calc = cu
    with pytest.raises(PropertyNotImplementedError):
        atoms.get_stress()


def test_energies_sum_to_energy(cu, cuni):
    for atoms, calc in ((copper(3, 0.1), cu), (alloy()[0], cuni)):
        atoms.calc = calc
        e = atoms.get_potential_energies()
        assert len(set(np.round(e, 8))) > 10            # really per atom, not a share of the total
        assert atoms.get_potential_energy() == pytest.approx(e.sum(), rel=1e-14)


def test_cu_eam_equals_lammps(cu):
    """The shipped copper model on Cu_u3.eam through the calculator against LAMMPS's pair_style eam."""
    assert_equals_lammps(cu, *lo.fcc(3.615, 3, 0.15, seed=7))


def test_cu_eam_in_parts_equals_lammps(cu):
    """5,324 atoms: counted in 8 parts of 665-666 atoms, the kernels' rows gathered and scattered in 8 parts
    (the forces summed part by part), against LAMMPS as above."""
    from adgrad.ase import calculator
    x, cell = lo.fcc(3.615, 11, 0.15, seed=8)
    assert len(calculator._parts(len(x))) - 1 == calculator.MAX_PARTS == 8
    assert_equals_lammps(cu, x, cell)


def assert_equals_lammps(cu, x, cell):
    """Copper at x in a periodic cell through the calculator: energies, forces and energy against LAMMPS's
    pair_style eam on Cu_u3.eam."""
    e_ref, f_ref, pe = lo.run(x, cell, np.ones(len(x), dtype=int), "eam", f"1 1 {lo.potential('Cu_u3.eam')}",
                              (63.55,))
    atoms = Atoms(f"Cu{len(x)}", positions=x, cell=cell, pbc=True, calculator=cu)
    assert np.abs(atoms.get_potential_energies() - e_ref).max() <= 1e-10 * np.abs(e_ref).max()
    assert np.abs(atoms.get_forces() - f_ref).max() <= 1e-10 * np.abs(f_ref).max()
    assert atoms.get_potential_energy() == pytest.approx(pe, rel=1e-12)


def test_model_without_named_sizes(cu_model, cu, tmp_path):
    """A model with literal shapes (R: [78, 3], no sizes:) gets its neighbour slots by input_shapes."""
    text = re.sub(r"sizes:\n  N: .*\n", "", cu_model.read_text())
    assert "sizes:" not in text
    literal = tmp_path / "literal.yaml"
    literal.write_text(text.replace("[N, 3]", "[78, 3]").replace("[N]", "[78]"))
    calc = AdgradCalculator(literal, cutoff(cu_model), {"Cu": 0})
    assert not calc.sized
    atoms = copper(seed=9)
    np.testing.assert_array_equal(calc.get_forces(atoms), cu.get_forces(atoms))


def test_binary_alloy_equals_lammps_and_its_stress_the_numerical_one(cuni):
    atoms, types = alloy()
    e_ref, f_ref, pe = lo.run(atoms.positions, atoms.cell.array, types, "eam/alloy",
                              f"* * {lo.potential('CuNi.eam.alloy')} Cu Ni", (63.55, 58.69))
    atoms.calc = cuni
    assert np.abs(atoms.get_potential_energies() - e_ref).max() <= 1e-10 * np.abs(e_ref).max()
    assert np.abs(atoms.get_forces() - f_ref).max() <= 1e-10 * np.abs(f_ref).max()
    assert atoms.get_potential_energy() == pytest.approx(pe, rel=1e-12)
    small = alloy(reps=2, seed=8)[0]                    # 32 atoms, sheared
    small.set_cell(small.cell.array @ (np.eye(3) + np.asarray(SHEAR)), scale_atoms=True)
    small.calc = cuni
    np.testing.assert_allclose(small.get_stress(), calculate_numerical_stress(small, eps=1e-6), rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="no species index for Ag"):
        Atoms("Ag", cell=np.eye(3) * 10, pbc=True, calculator=cuni).get_potential_energy()


def test_velocity_verlet_conserves_energy(cu):
    atoms = copper(3, 0.05, seed=4)                     # 108 atoms
    rng = np.random.default_rng(0)                      # ~300 K: m v^2 = kT per component
    v = rng.normal(size=(len(atoms), 3)) * np.sqrt(300 * units.kB / atoms.get_masses())[:, None]
    atoms.set_velocities(v - v.mean(axis=0))
    atoms.calc = cu
    energies = []
    md = VelocityVerlet(atoms, timestep=1.0 * units.fs)
    md.attach(lambda: energies.append(atoms.get_total_energy()), interval=1)
    md.run(100)
    e = np.array(energies)
    assert len(e) == 101 and atoms.get_temperature() > 100       # the atoms really moved
    assert np.abs(e - e[0]).max() / len(atoms) < 1e-5


def test_skin_does_not_change_results_and_fixed_slots_grow_with_a_message(cu_model):
    """A neighbour list kept within a skin (rebuilt as atoms drift past half of it) equals one built
    at every step. With N= (one kernel for every atom) the slots grow, in multiples of 4, only when an
    atom has more neighbours than slots, which the calculator says through its log."""
    lines = []
    kept = AdgradCalculator(cu_model, cutoff(cu_model), {"Cu": 0}, skin=0.3, N=40, log=lines.append)
    fresh = AdgradCalculator(cu_model, cutoff(cu_model), {"Cu": 0}, skin=0.0, log=None)
    atoms, rng = copper(2, 0.05, seed=5), np.random.default_rng(5)
    start = atoms.positions.copy()
    for _ in range(25):
        atoms.positions += rng.normal(scale=0.04, size=atoms.positions.shape)
        f, e = kept.get_forces(atoms), kept.get_potential_energies(atoms)
        np.testing.assert_allclose(f, fresh.get_forces(atoms), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(e, fresh.get_potential_energies(atoms), rtol=1e-13)
    assert np.linalg.norm(atoms.positions - start, axis=1).max() > kept.skin     # rebuilt on the way
    width = kept.width
    grown = [line for line in lines if "more than" in line]
    assert width % 4 == 0 and len(grown) == len(kept.kernels) and max(kept.kernels) == width
    assert "more than the 40 slots of the kernel" in grown[0] and len(fresh.kernels) > 1, lines
    squeezed = atoms.copy()
    squeezed.set_cell(atoms.cell * 0.85, scale_atoms=True)     # 0.61 of the volume: more neighbours
    squeezed.calc = kept
    f = squeezed.get_forces()
    assert kept.width > width and kept.width % 4 == 0 and max(kept.kernels) == kept.width
    grown = [line for line in lines if "more than" in line]
    assert len(grown) == len(kept.kernels) and re.fullmatch(
        rf"adgrad: an atom has \d+ neighbours within the cutoff of {cutoff(cu_model):g} A, more than the {width} "
        rf"slots of the kernel; compiling for {kept.width} \(AdgradCalculator\(N=\.\.\.\) sets them from the start\)",
        grown[-1]), grown
    d, h = rng.normal(size=f.shape), 1e-5          # every force at once: the energy along a direction d
    along = [kept.get_potential_energy(Atoms(squeezed.numbers, squeezed.positions + t * d, cell=squeezed.cell,
                                             pbc=True)) for t in (h, -h)]
    assert -np.vdot(f, d) == pytest.approx((along[0] - along[1]) / (2 * h), rel=1e-7)
    kernels = dict(kept.kernels)
    squeezed.positions += 0.01
    squeezed.get_forces()
    assert kept.kernels == kernels                  # no recompile while the slots suffice


def test_md_at_600_K_compiles_each_width_once():
    """Stillinger-Weber silicon held at 600 K: atoms of the second shell (3.84 A) come within the
    cutoff (3.77 A) within a few steps, and an atom's neighbours go from 4 to 10 and more. Each atom is
    evaluated by the kernel of its count rounded up to a multiple of 4 (4: 16 terms of the N x N
    three-body arrays, not 256): the widths the run meets are compiled once each, and every step equals
    one kernel of 16 slots for every atom (N=16) to round-off."""
    compiled = []
    calc = AdgradCalculator(ROOT / "configs" / "si_sw_model.yaml", log=None)
    one = AdgradCalculator(ROOT / "configs" / "si_sw_model.yaml", N=16, log=None)
    inner = calc._compile
    calc._compile = lambda width, rows: (compiled.append(width), inner(width, rows))[1]
    atoms = bulk("Si", "diamond", a=5.431, cubic=True).repeat(2)
    kT, rng = 1200 * units.kB, np.random.default_rng(0)    # twice 600 K: half goes into the potential energy
    atoms.set_momenta(np.sqrt(atoms.get_masses()[:, None] * kT) * rng.normal(size=(len(atoms), 3)))
    atoms.calc = calc
    md = Langevin(atoms, timestep=2 * units.fs, temperature_K=600, friction=0.02 / units.fs, fixcm=False, rng=rng)
    counts, temperatures = [], []

    def step():
        counts.append(np.bincount(neighbor_list("i", atoms, calc.cutoff)).max())   # ASE's list: the oracle
        temperatures.append(atoms.get_temperature())
        other = atoms.copy()
        f = atoms.get_forces()
        np.testing.assert_allclose(one.get_forces(other), f, rtol=0, atol=1e-12 * np.abs(f).max())
        assert one.get_potential_energy(other) == pytest.approx(atoms.get_potential_energy(), rel=1e-13)
    md.attach(step, interval=2)
    md.run(100)
    assert compiled[0] == 4 and sorted(compiled) == sorted(set(compiled)) and max(counts) > 8
    assert set(calc.kernels) == set(compiled) and max(compiled) >= 12 and list(one.kernels) == [16]
    assert 400 < np.mean(temperatures[len(temperatures) // 2:]) < 800


@pytest.mark.parametrize("style", ["sw", "tersoff"])
def test_three_body_widths_equal_lammps_and_one_width(style):
    """Hot silicon (atoms displaced by up to 0.45 A: 4 to 8 neighbours within Stillinger-Weber's 3.77 A,
    3 to 6 within Tersoff's 3.2 A): the atoms grouped by width, each width its own kernel, give
    LAMMPS's energy and forces, and those of one kernel for every atom (N=) to round-off."""
    x, cell = lo.diamond(5.431, 3, 0.45, seed=11)
    potfile = {"sw": "Si_sw85.sw", "tersoff": "Si_tersoff88.tersoff"}[style]
    _, f_ref, pe = lo.run(x, cell, np.ones(len(x), dtype=int), style, f"* * {ROOT / 'data' / potfile} Si", (28.0855,))
    model = ROOT / "configs" / f"si_{style}_model.yaml"
    atoms = Atoms(f"Si{len(x)}", positions=x, cell=cell, pbc=True)
    grouped = AdgradCalculator(model, log=None)
    f, e = grouped.get_forces(atoms), grouped.get_potential_energy(atoms)
    assert len(grouped.kernels) >= 2                    # more than one width: the grouping is tested
    assert e == pytest.approx(pe, rel=1e-10)
    assert np.abs(f - f_ref).max() <= 1e-10 * np.abs(f_ref).max()
    one = AdgradCalculator(model, N=max(grouped.kernels), log=None)
    np.testing.assert_allclose(one.get_forces(atoms), f, rtol=0, atol=1e-13 * np.abs(f).max())
    np.testing.assert_allclose(one.get_potential_energies(atoms), grouped.get_potential_energies(atoms), rtol=1e-13)
    np.testing.assert_allclose(one.get_stress(atoms), grouped.get_stress(atoms), rtol=1e-12, atol=1e-15)


def test_first_compile_of_the_helpers_is_announced():
    """The calculator's own numba functions compile once per install: their first compile is announced
    once, and timed when the calculation is done; a kernel's compile (which says so itself) is not."""
    from numba import njit

    from adgrad.ase.calculator import FirstUse
    first, lines = FirstUse(), []

    @njit
    def helper(x):
        return x + 1
    with first.watch(lines.append):
        with first.paused():
            njit(lambda x: x * 2)(1)
        assert lines == [] and not first.ready
        helper(1), helper(1.5)
    assert len(lines) == 2 and first.ready, lines
    assert lines[0] == ("adgrad: compiling the ASE calculator's helpers (neighbour list, counting, ordering; first use "
                        "after installing adgrad)")
    assert re.fullmatch(r"adgrad: compiled the ASE calculator's helpers in \d+\.\d s", lines[1]), lines


def test_recalculates_exactly_when_what_the_model_reads_changes(cuni):
    """check_state compares positions, numbers, cell and pbc exactly: the same atoms again are answered
    from the results, and any change of those (a displacement of 1e-12 A, a swapped species, a strained
    cell) is recalculated."""
    (atoms, _), calls = alloy(2), []
    atoms.calc = cuni
    inner = cuni.calculate
    cuni.calculate = lambda *a, **k: (calls.append(1), inner(*a, **k))
    try:
        e = atoms.get_potential_energy()
        atoms.get_forces(), atoms.get_stress(), atoms.get_potential_energies()
        assert len(calls) == 1
        atoms.positions[3, 1] += 1e-12
        atoms.get_forces()
        assert len(calls) == 2
        numbers = atoms.numbers.copy()
        numbers[0] = 28 if numbers[0] == 29 else 29            # Cu <-> Ni
        atoms.numbers = numbers
        assert atoms.get_potential_energy() != e and len(calls) == 3
        atoms.set_cell(atoms.cell * 1.001, scale_atoms=True)
        atoms.get_stress()
        assert len(calls) == 4
    finally:
        del cuni.calculate


def test_three_body_model_without_species_inputs():
    """configs/si_sw_model.yaml (Stillinger-Weber silicon: inputs R and valid only, pairs of neighbours
    as N x N arrays): forces and stress against finite differences."""
    model = ROOT / "configs" / "si_sw_model.yaml"
    calc = AdgradCalculator(model, float(np.max(load_model(model).tables["sw"].constants["cut"])), {"Si": 0})
    atoms = bulk("Si", "diamond", a=5.431, cubic=True).repeat(2)
    atoms.rattle(0.15, seed=2)
    atoms.calc = calc
    np.testing.assert_allclose(atoms.get_forces(), calculate_numerical_forces(atoms, eps=1e-5), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(atoms.get_stress(), calculate_numerical_stress(atoms, eps=1e-6), rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="no species index for Ge"):
        Atoms("Ge", cell=np.eye(3) * 10, pbc=True, calculator=calc).get_potential_energy()
    assert AdgradCalculator(ROOT / "configs" / "cu_eam_model.yaml").species == {"Cu": 0}


def test_species_by_name_from_the_potential_files_elements(tmp_path_factory, cuni):
    """A model that reads species, given no map, maps each element of its potential files to its index
    there; an explicit map still works (and gives the same bits); an element the map lacks is named;
    files that name no chemical elements (funcfl), or different ones, or one twice, need a map."""
    assert cuni.species == {"Cu": 0, "Ni": 1}
    atoms = alloy(reps=2, seed=3)[0]
    explicit = AdgradCalculator(cuni.path, species={"Ni": 1, "Cu": 0})
    np.testing.assert_array_equal(explicit.get_forces(atoms), cuni.get_forces(atoms))
    swapped = alloy(reps=2, seed=3)[0]
    swapped.numbers = np.where(swapped.numbers == 29, 28, 29)
    assert cuni.get_potential_energy(swapped) != cuni.get_potential_energy(atoms)
    atoms = Atoms("AgCuAu", positions=np.eye(3) * 2.5)
    with pytest.raises(ValueError, match=r"no species index for Ag, Au: atoms 0 and 2 \(species=\{'Cu': 0, 'Ni': 1"):
        cuni.get_potential_energy(atoms)
    funcfl = model_file(tmp_path_factory, "Cu_u3.eam")
    with pytest.raises(ValueError, match="names its species Cu_u3, not chemical elements"):
        AdgradCalculator(funcfl)
    text = Path(cuni.path).read_text()
    root = tmp_path_factory.mktemp("species")
    for name, elements, phrase in (("twice", "[Cu, Cu]", "has an element twice (Cu, Cu)"),
                                   ("other", "[Ni, Cu]", "name different elements ('other': Ni, Cu; 'cu': Cu, Ni)")):
        second = f"  other: {{potential: {lo.potential('CuNi.eam.alloy')}, elements: [Ni, Cu]}}\n"
        model = root / f"{name}.yaml"
        model.write_text(text.replace("elements: [Cu, Ni]", f"elements: {elements}") if name == "twice"
                         else text.replace("params:\n", "params:\n" + second))
        with pytest.raises(ValueError, match=re.escape(phrase)):
            AdgradCalculator(model)


def test_multi_element_stillinger_weber_by_name_equals_lammps():
    """configs/sw_model.yaml as shipped (LAMMPS's GaN.sw, found among the lammps package's potentials) on
    zincblende GaN, species by name (Ga 0, N 1 as the file's elements): LAMMPS's energy and forces."""
    x, cell = lo.diamond(4.5, 2, 0.1, seed=4)
    types = np.tile([1, 1, 1, 1, 2, 2, 2, 2], len(x) // 8)
    _, f_ref, pe = lo.run(x, cell, types, "sw", f"* * {lo.potential('GaN.sw')} Ga N", (69.723, 14.007))
    atoms = Atoms(np.array(["Ga", "N"])[types - 1], positions=x, cell=cell, pbc=True)
    atoms.calc = AdgradCalculator(ROOT / "configs" / "sw_model.yaml", log=None)
    assert atoms.calc.species == {"Ga": 0, "N": 1}
    assert atoms.get_potential_energy() == pytest.approx(pe, rel=1e-10)
    assert np.abs(atoms.get_forces() - f_ref).max() <= 1e-10 * np.abs(f_ref).max()


def test_a_width_of_few_atoms_runs_in_the_next_wider_kernel(monkeypatch):
    """Hot silicon (Stillinger-Weber, 216 atoms: 104 of width 8, 111 of 12, one of 16): the atoms of a width
    held by fewer than calculator.FEW atoms (110 here) join the next wider width present, so a step makes
    fewer kernel calls (each costs tens of us); the widest stays, however few. The results equal one call
    per width to round-off."""
    from adgrad.ase import calculator
    x, cell = lo.diamond(5.431, 3, 0.35, seed=3)
    atoms = Atoms(f"Si{len(x)}", positions=x, cell=cell, pbc=True)
    runs = {}
    for few in (0, 110):
        monkeypatch.setattr(calculator, "FEW", few)
        calc, calls = AdgradCalculator(ROOT / "configs" / "si_sw_model.yaml", log=None), []
        inner = calc._run_kernel
        calc._run_kernel = lambda width, t0, t1, *a: (calls.append((width, t1 - t0)), inner(width, t0, t1, *a))[1]
        runs[few] = calls, calc.get_forces(atoms), calc.get_potential_energies(atoms)
    (alone, f0, e0), (merged, f1, e1) = runs[0], runs[110]
    assert alone == [(8, 104), (12, 111), (16, 1)] and merged == [(12, 215), (16, 1)]
    np.testing.assert_allclose(f1, f0, rtol=0, atol=1e-13 * np.abs(f0).max())
    np.testing.assert_allclose(e1, e0, rtol=1e-13)


def test_parts_give_the_same_bits_on_any_thread_count_and_the_serial_sums_within_round_off(cu_model, monkeypatch):
    """The kernels take the rows in parts (calculator.ROWS rows at least, MAX_PARTS at most; 8 here: 8 parts
    of 13-14 rows), each scattering into forces of its own, summed in part order: the parts follow from the
    number of atoms alone, so one thread or two give the same bits; against one part (the serial scatter) the
    energies are the same bits, and forces and stress differ by the round-off of summing each atom's terms
    part by part."""
    from adgrad.ase import calculator
    atoms = copper(reps=3)                  # 108 atoms
    results = {}
    before = numba.get_num_threads()
    try:
        for least, threads in ((1 << 30, 1), (8, 1), (8, 2)):
            monkeypatch.setattr(calculator, "ROWS", least)
            numba.set_num_threads(threads)
            calc = AdgradCalculator(cu_model, cutoff(cu_model), {"Cu": 0}, log=None)
            a = atoms.copy()
            a.calc = calc
            results[least, threads] = (a.get_potential_energies(), a.get_forces(), a.get_stress())
    finally:
        numba.set_num_threads(before)
    serial, one, two = results[1 << 30, 1], results[8, 1], results[8, 2]
    assert len(calculator._parts(len(atoms), 8)) - 1 == calculator.MAX_PARTS
    for x, y in zip(one, two):
        assert x.tobytes() == y.tobytes()
    assert serial[0].tobytes() == one[0].tobytes()
    # per atom, m terms summed in another grouping: within 2 m eps times the sum of their magnitudes
    terms, count = np.zeros((len(atoms), 3)), np.zeros(len(atoms))
    for i, (R, valid, index, sn, s) in rows_of(calc).items():
        kernel, _ = calc.kernels[len(valid)]
        g = kernel.evaluate({"R": R[None], "valid": valid[None], "s": np.array([s]), "sn": sn[None]})["dE_dR"][0]
        real = index >= 0
        np.add.at(terms, np.full(real.sum(), i), np.abs(g[real]))
        np.add.at(terms, index[real], np.abs(g[real]))
        count[i] += real.sum()
        np.add.at(count, index[real], 1)
    eps = np.finfo(float).eps
    assert (np.abs(one[1] - serial[1]) <= 2 * count[:, None] * eps * terms).all()
    assert not np.array_equal(one[1], serial[1])        # the grouping did change (else the bound tests nothing)
    np.testing.assert_allclose(one[2], serial[2], rtol=1e-13, atol=1e-15)


def rows_of(calc):
    """Each atom's row of the calculator's last step as its kernel's sites driver gathers it from the list
    (engine/numeric/sites.py gather) into buffers of NaN (a thread's buffers hold the rows before):
    {atom: (R (width, 3), valid, index, sn, s)}."""
    from adgrad.engine.numeric.sites import gather
    im, (order, width, _) = calc._list[0], calc._rows
    rows = {}
    for t, i in enumerate(order):
        w = int(width[i])
        R, valid, sn = np.full((1, 3 * w), np.nan), np.full((1, w), np.nan), np.full((1, w), np.nan)
        s = np.zeros((1, 1))
        index = np.full((1, w), 99, dtype=np.int32)
        gather(t, 1, order, im.first, im.j, im.code, im.shifts, calc._inside, calc._wrapped, calc._species, R, valid,
               s, sn, index)
        rows[int(i)] = R.reshape(w, 3), valid[0], index[0], sn[0], s[0, 0]
    return rows


def test_a_row_that_loses_neighbours_is_padded_again(cu):
    """A free cluster expanded by 12% within the skin (the list kept), its third shell leaving the cutoff:
    each atom's row holds its neighbours within the cutoff, then padding only (no stale neighbour of the
    step before), its width a multiple of 4 that holds them, and the results equal a fresh calculator's."""
    atoms = copper(reps=2, rattle=0.0)
    atoms.pbc = False
    calc = AdgradCalculator(cu.path, cu.cutoff, {"Cu": 0}, skin=3.0, log=None)
    atoms.calc = calc
    atoms.get_forces()

    def rows():
        return {i: row[:4] for i, row in rows_of(calc).items()}
    kept, before = calc._list[0], {i: (index >= 0).sum() for i, (_, _, index, _) in rows().items()}
    centre = atoms.positions.mean(axis=0)
    atoms.positions = centre + 1.12 * (atoms.positions - centre)
    forces = atoms.get_forces()
    assert calc._list[0] is kept
    for i, (R, valid, index, sn) in rows().items():
        m = (index >= 0).sum()
        assert m < before[i] and len(index) % 4 == 0 and len(index) >= max(4, m)
        assert (index[m:] == -1).all() and (valid[m:] == 0).all() and (R[m:] == 0).all() and (sn[m:] == 0).all()
        assert (valid[:m] == 1).all() and (index[:m] >= 0).all()
        d = atoms.positions[index[:m]] - atoms.positions[i]
        np.testing.assert_array_equal(R[:m], d)
    fresh = atoms.copy()
    fresh.calc = AdgradCalculator(cu.path, cu.cutoff, {"Cu": 0}, log=None)
    np.testing.assert_allclose(forces, fresh.get_forces(), rtol=0, atol=1e-12 * np.abs(forces).max())
    np.testing.assert_allclose(atoms.get_potential_energies(), fresh.get_potential_energies(), rtol=1e-13)


@pytest.mark.parametrize("model, rattle, lanes", [("si_sw_model.yaml", 0.05, True), ("si_sw_model.yaml", 0.35, False),
                                                  ("si_tersoff_model.yaml", 0.35, False)])
def test_the_sites_driver_gives_the_batch_drivers_bits(model, rattle, lanes):
    """Each width's kernel runs through its sites driver (rows gathered from the list, the body, energies and
    forces scattered; SW's 4 slots a lanes kernel, the wider ones loop or straight-line kernels): the site
    energies are the bits of the batch driver on the same rows (compile_model without sites, evaluate), the
    forces those of its gradients scattered in row order. Cold silicon (width 4) and hot (8, 12, 16); each
    driver compiled once, at compile_model (no second compile for the calculator's argument types)."""
    from adgrad.engine.api import compile_model
    x, cell = lo.diamond(5.431, 3, rattle, seed=3)
    atoms = Atoms(f"Si{len(x)}", positions=x, cell=cell, pbc=True)
    calc = AdgradCalculator(ROOT / "configs" / model, log=None)
    atoms.calc = calc
    energies, forces = atoms.get_potential_energies(), atoms.get_forces()
    assert any(k.lanes for k, _ in calc.kernels.values()) == lanes and len(calc.kernels) >= (1 if lanes else 2)
    assert all(len(k.module.sites.overloads) == 1 for k, _ in calc.kernels.values())
    batch = {w: compile_model(load_model(ROOT / "configs" / model, sizes={"N": w}), derivatives=[("E", "R")],
                              values=["E"]) for w in calc.kernels}
    reference = np.zeros_like(forces)
    for i, (R, valid, index, sn, s) in rows_of(calc).items():
        given = {"R": R[None], "valid": valid[None], "s": np.array([s]), "sn": sn[None]}
        out = batch[len(valid)].evaluate({n: given[n] for n in calc.inputs})
        assert out["E"][0].tobytes() == energies[i].tobytes()
        g = out["dE_dR"][0][index >= 0]
        reference[i] += g.sum(axis=0)
        np.subtract.at(reference, index[index >= 0], g)
    np.testing.assert_allclose(forces, reference, rtol=0, atol=1e-12 * np.abs(forces).max())


def test_a_kernel_with_sites_is_a_site_energy():
    """compile_model(sites=True) of a model that is not a site energy (inputs R, valid, optionally s, sn;
    results a site energy and its gradient with respect to R) is an error naming the model."""
    from adgrad.engine.api import compile_model
    from adgrad.engine.errors import SpecError
    model = load_model(ROOT / "configs" / "si_sw_model.yaml", sizes={"N": 4})
    with pytest.raises(SpecError, match="model 'si_sw' is not a site energy"):
        compile_model(model, derivatives=[("E", "R"), ("E", "valid")], values=["E"], sites=True)
    with pytest.raises(SpecError, match="not a site energy"):
        compile_model(load_model(ROOT / "configs" / "neohookean_model.yaml"), sites=True)
