"""adgrad export --kim: site-energy models as KIM portable models in Debian's LAMMPS (`lmp`, built with
KIM and OpenMPI), against LAMMPS's own pair styles eam, eam/alloy, sw and tersoff on the same potential
files (Debian's lammps-data, /usr/share/lammps/potentials; never copied here): energy, per-atom energy,
forces and pressure at step 0 to 1e-10 relative, positions after 100 NVE steps at 600 K, 1 and 2 MPI
ranks, a compressed crystal whose atoms have more neighbours than the model's N, and bad input (a
model that is not a site energy, an unknown species, LAMMPS units other than metal, too many
neighbours for the largest kernel) refused with an error that names it.

LAMMPS splits the three-body terms of sw and tersoff among atoms differently from a site energy, so
their per-atom energies are compared with adgrad's own site energies (the Python API); their sum, the
forces and the pressure with LAMMPS's. Skipped, saying why, only where lmp, mpirun or the KIM API's
development files are missing (.ci/kim.sh installs them)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import lammps_oracle as lo
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
POTENTIALS = Path("/usr/share/lammps/potentials")
# Debian's lmp (with KIM) and its OpenMPI's mpirun, not the lmp and mpich mpirun of the pip packages lammps and
# mpich, which a venv puts first on PATH
LMP = "/usr/bin/lmp" if os.path.isfile("/usr/bin/lmp") else None
MPIRUN = "/usr/bin/mpirun" if os.path.isfile("/usr/bin/mpirun") else None
WHY = ("no /usr/bin/lmp (apt-get install lammps)" if not LMP else
       "no /usr/bin/mpirun (apt-get install openmpi-bin)" if not MPIRUN
       else "no KIM API headers (apt-get install libkim-api-dev)" if not Path("/usr/include/kim-api").is_dir()
       else f"no {POTENTIALS} (apt-get install lammps-data)" if not POTENTIALS.is_dir() else None)
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

# name: (model (eam, alloy: configs/cu_eam_model.yaml), LAMMPS pair_style, its pair_coeff file, KIM species of
# types 1, 2..., masses (the files': pair_style eam and eam/alloy set them from the file), lattice, a, jitter)
CASES = {
    "eam": ("eam", "eam", "Cu_u3.eam", ("Cu",), (63.55,), "fcc", 3.615, 0.05),
    "alloy": ("alloy", "eam/alloy", "CuNi.eam.alloy", ("Cu", "Ni"), (63.546, 58.689), "fcc", 3.56, 0.05),
    "sw": ("si_sw_model.yaml", "sw", "Si.sw", ("Si",), (28.0855,), "diamond", 5.431, 0.1),
    "tersoff": ("si_tersoff_model.yaml", "tersoff", "Si.tersoff", ("Si",), (28.0855,), "diamond", 5.431, 0.1),
}
SLOTS = {"eam": 48, "alloy": 96}        # neighbours within the cutoff: 42 (Cu_u3, fcc Cu), 86 (CuNi)


def model_file(tmp, case, n=None):
    """The model of a case, on Debian's potential file, as a file in tmp."""
    model, _, pot, *_ = CASES[case]
    path = tmp / f"{case}_{n or 'model'}.yaml"
    if model in ("eam", "alloy"):
        text = lo.eam_model(POTENTIALS / pot, n=n or SLOTS[case], name=f"kim_{case}")
    else:
        text = lo.model_text(ROOT / "configs" / model, POTENTIALS / pot)
    path.write_text(text)
    return path


def export(model, out, *args):
    res = CliRunner().invoke(cli, ["export", str(model), "-o", str(out), "-q", *args])
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{case: export directory of the KIM model adgrad_<case>}, each built once."""
    tmp = tmp_path_factory.mktemp("kim")
    out = {}
    for case in CASES:
        # Cu_u3.eam names no element; one model with code for any x86-64 (the default), the others for this CPU
        extra = ["--species", "Cu"] if case == "eam" else ["--cpu", "host"]
        code, text = export(model_file(tmp, case), tmp / case, "--kim", f"adgrad_{case}", *extra)
        assert code == 0, text
        out[case] = tmp / case
    return out


def crystal(lattice, a, reps, jitter, seed=7):
    f = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
    base = f if lattice == "fcc" else np.vstack([f, f + 0.25])
    cells = np.array([[i, j, k] for i in range(reps) for j in range(reps) for k in range(reps)])
    x = ((cells[:, None, :] + base[None]) * a).reshape(-1, 3)
    x = x + np.random.default_rng(seed).uniform(-jitter, jitter, x.shape)
    return np.mod(x, a * reps), a * reps


def lammps(tmp, x, L, types, masses, pair, ranks=1, units="metal", steps=0, models=None, tag="run"):
    """Run LAMMPS on atoms x (types 1-based) in a cubic box of side L with the pair style lines `pair`:
    (thermo of the last step {pe, press, pxx, ...}, per-atom columns by id {id, pe, fx, ..., x, y, z},
    the process's result)."""
    d = tmp / tag
    d.mkdir(exist_ok=True)
    lines = ["adgrad test_kim", "", f"{len(x)} atoms", f"{len(masses)} atom types", f"0 {float(L)!r} xlo xhi",
             f"0 {float(L)!r} ylo yhi", f"0 {float(L)!r} zlo zhi", "", "Masses", ""]
    lines += [f"{t} {m}" for t, m in enumerate(masses, 1)]
    lines += ["", "Atoms # atomic", ""] + [f"{i} {t} {float(p[0])!r} {float(p[1])!r} {float(p[2])!r}" for i, (t, p) in
                                           enumerate(zip(types, x), 1)]
    (d / "atoms.data").write_text("\n".join(lines) + "\n")
    md = (f"velocity all create 600.0 4928459 loop geom\nfix nve all nve\ntimestep 0.001\nthermo {steps}\n"
          f"run {steps}") if steps else "run 0"
    (d / "in.lmp").write_text(textwrap.dedent(f"""\
        units {units}
        atom_style atomic
        atom_modify map array
        boundary p p p
        read_data atoms.data
        {pair[0]}
        {pair[1]}
        neighbor 1.0 bin
        compute pe all pe/atom
        compute st all stress/atom NULL virial
        thermo_style custom step pe press pxx pyy pzz pxy pxz pyz
        thermo_modify format float %.17g
        dump d all custom {steps or 1} final.dump id c_pe fx fy fz x y z c_st[1] c_st[2] c_st[3] c_st[4] c_st[5] c_st[6]
        dump_modify d sort id format float %.17g
        """) + md + "\n")
    argv = [LMP, "-in", "in.lmp", "-log", "log.lammps", "-screen", "none", "-nocite"]
    if ranks > 1:
        argv = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] + argv
    env = {**os.environ, "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
    if models is not None:
        env["KIM_API_PORTABLE_MODELS_DIR"] = str(models)
    done = subprocess.run(argv, cwd=d, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return None, None, done, d
    log = (d / "log.lammps").read_text().splitlines()
    head = next(k for k, line in enumerate(log) if line.split()[:2] == ["Step", "PotEng"])
    rows = [line.split() for line in log[head + 1:] if line.split() and line.split()[0].isdigit()]
    names = ["step", "pe", "press", "pxx", "pyy", "pzz", "pxy", "pxz", "pyz"]
    thermo = dict(zip(names, map(float, rows[-1])))
    last = (d / "final.dump").read_text().split("ITEM: TIMESTEP")[-1].splitlines()[9:]
    atoms = np.loadtxt(last)
    columns = ["id", "pe", "fx", "fy", "fz", "x", "y", "z", "sxx", "syy", "szz", "sxy", "sxz", "syz"]
    return thermo, dict(zip(columns, atoms.T)), done, d


def run_case(tmp, exported, case, x, L, types, **kw):
    """(KIM model's results, LAMMPS pair style's) for one configuration."""
    _, style, pot, species, masses, *_ = CASES[case]
    names = {t: species[t - 1] for t in range(1, len(species) + 1)}
    own = f"pair_coeff * * {POTENTIALS / pot}" + ("" if style == "eam" else " " + " ".join(names.values()))
    kim = lammps(tmp, x, L, types, masses, (f"pair_style kim adgrad_{case}", "pair_coeff * * " + " ".join(
        names.values())), models=exported[case], tag=f"kim_{kw.get('ranks', 1)}", **kw)
    ref = lammps(tmp, x, L, types, masses, (f"pair_style {style}", own), tag=f"own_{kw.get('ranks', 1)}", **kw)
    for t, a, done, d in (kim, ref):
        assert done.returncode == 0, f"{d}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return kim[:2], ref[:2]


def close(a, b, rel):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return np.abs(a - b).max() <= rel * max(np.abs(b).max(), 1e-300)


def site_energies(tmp, case, x, L, types):
    """adgrad's own site energies (the Python API) of the configuration, in atom order."""
    from adgrad.engine import api
    from adgrad.engine.tools import atoms
    model = api.load_model(str(model_file(tmp, case)))
    cutoff = {"sw": lambda t: float(np.max(t["sw"].constants["cut"])),
              "tersoff": lambda t: float(np.max(t["ts"].constants["cut"]))}[case](model.tables)
    nb = atoms.neighbours(x, np.eye(3) * L, cutoff, np.asarray(types) - 1)
    n = nb["R"].shape[1]
    shapes = {"R": [n, 3], "valid": [n]} | ({"sn": [n]} if "sn" in model.graph.inputs else {})
    model = api.load_model(str(model_file(tmp, case)), input_shapes=shapes)
    inputs = {"R": nb["R"], "valid": nb["valid"]}
    if "s" in model.graph.inputs:
        inputs |= {"s": nb["species"].astype(float), "sn": nb["neighbour_species"].astype(float)}
    return api.compile_model(model, derivatives=[]).evaluate(inputs)["E"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_step_zero_equals_lammps_pair_style(tmp_path, exported, case):
    *_, species, _, lattice, a, jitter = CASES[case]
    x, L = crystal(lattice, a, 3, jitter)
    types = np.random.default_rng(3).integers(1, len(species) + 1, len(x))
    (kt, ka), (rt, ra) = run_case(tmp_path, exported, case, x, L, types)
    assert kt["pe"] == pytest.approx(rt["pe"], rel=1e-10)
    for p in ("pxx", "pyy", "pzz", "pxy", "pxz", "pyz"):
        assert abs(kt[p] - rt[p]) <= 1e-10 * abs(rt["press"]), (p, kt[p], rt[p])
    assert close(np.c_[ka["fx"], ka["fy"], ka["fz"]], np.c_[ra["fx"], ra["fy"], ra["fz"]], 1e-10)
    stress = ("sxx", "syy", "szz", "sxy", "sxz", "syz")
    for c in stress:        # per-atom virials: KIM's partialParticleVirial; their sums, the pressure's
        assert abs(ka[c].sum() - ra[c].sum()) <= 1e-10 * np.abs(ra[c]).sum(), c
    if case in ("eam", "alloy"):
        assert close(ka["pe"], ra["pe"], 1e-10)
        assert close(np.c_[[ka[c] for c in stress]], np.c_[[ra[c] for c in stress]], 1e-10)
    else:
        assert close(ka["pe"], site_energies(tmp_path, case, x, L, types), 1e-10)
    assert ka["pe"].sum() == pytest.approx(kt["pe"], rel=1e-12)


@pytest.mark.parametrize("case", sorted(CASES))
def test_nve_on_one_and_two_ranks_equals_lammps_pair_style(tmp_path, exported, case):
    """100 NVE steps from 600 K of a 1,372-atom (fcc) / 1,728-atom (diamond) crystal: the KIM model's
    positions equal those under LAMMPS's own pair style, and 2 MPI ranks give 1 rank's energy."""
    *_, species, _, lattice, a, jitter = CASES[case]
    x, L = crystal(lattice, a, 7 if lattice == "fcc" else 6, jitter)
    types = np.random.default_rng(5).integers(1, len(species) + 1, len(x))
    (k1, ka), (r1, ra) = run_case(tmp_path, exported, case, x, L, types, steps=100)
    (k2, kb), _ = run_case(tmp_path, exported, case, x, L, types, steps=100, ranks=2)
    for c in "xyz":
        assert np.abs(ka[c] - ra[c]).max() <= 1e-8
        assert np.abs(kb[c] - ka[c]).max() <= 1e-8
    assert k2["pe"] == pytest.approx(k1["pe"], rel=1e-12)
    assert k1["pe"] == pytest.approx(r1["pe"], rel=1e-10)


def test_compressed_crystal_with_more_neighbours_than_slots_equals_lammps(tmp_path, exported):
    """Cu at a = 3.35 A: 54 neighbours within Cu_u3's 4.95 A, more than the model's N = 48 slots (the
    kernel of 2N takes them), and the results are LAMMPS's still."""
    x, L = crystal("fcc", 3.35, 3, 0.05)
    types = np.ones(len(x), dtype=int)
    (kt, ka), (rt, ra) = run_case(tmp_path, exported, "eam", x, L, types)
    d = x[:, None, :] - x[None, :, :]
    d -= L * np.round(d / L)
    assert ((np.linalg.norm(d, axis=2) < 4.95).sum(axis=1) - 1).min() > SLOTS["eam"]
    assert kt["pe"] == pytest.approx(rt["pe"], rel=1e-10)
    assert close(ka["pe"], ra["pe"], 1e-10)
    assert close(np.c_[ka["fx"], ka["fy"], ka["fz"]], np.c_[ra["fx"], ra["fy"], ra["fz"]], 1e-10)
    assert abs(kt["press"] - rt["press"]) <= 1e-10 * abs(rt["press"])


def test_atoms_of_different_neighbour_counts_in_one_kernel_equal_lammps(tmp_path, exported):
    """Cu displaced by up to 0.5 A: the atoms' counts within the cutoff differ, so each of the driver's rows
    (which it rewrites only between the last atom's count and the next one's) holds fewer neighbours after
    more and more after fewer; per-atom energies and forces are still LAMMPS's."""
    x, L = crystal("fcc", 3.615, 3, 0.5)
    d = x[:, None, :] - x[None, :, :]
    d -= L * np.round(d / L)
    counts = (np.linalg.norm(d, axis=2) < 4.95).sum(axis=1) - 1
    assert counts.max() - counts.min() >= 6 and counts.max() <= SLOTS["eam"], (counts.min(), counts.max())
    (kt, ka), (rt, ra) = run_case(tmp_path, exported, "eam", x, L, np.ones(len(x), dtype=int))
    assert close(ka["pe"], ra["pe"], 1e-10)
    assert close(np.c_[ka["fx"], ka["fy"], ka["fz"]], np.c_[ra["fx"], ra["fy"], ra["fz"]], 1e-10)


def test_more_neighbours_than_the_largest_kernel_is_a_kim_error(tmp_path, exported):
    """Cu at a = 2.0 A: about 250 neighbours within the cutoff, more than 4N = 192: LAMMPS stops with KIM's
    error, and kim.log names the particle, its count and the size to export with."""
    x, L = crystal("fcc", 2.0, 4, 0.0)
    t, _, done, d = lammps(tmp_path, x, L, np.ones(len(x), dtype=int), (63.55,),
                           ("pair_style kim adgrad_eam", "pair_coeff * * Cu"), models=exported["eam"])
    assert t is None and "KIM Compute returned error" in done.stdout + (d / "log.lammps").read_text()
    found = re.search(r"particle \d+ has (\d+) neighbours within the cutoff 4.95 A, more than the 192 slots of this "
                      r"model's largest kernel; export it again with a larger neighbour count \(sizes: N >= (\d+)\)",
                      (d / "kim.log").read_text())
    assert found, (d / "kim.log").read_text()[-3000:]
    count, need = int(found[1]), int(found[2])
    assert count > 192 and need * 4 >= count > (need - 1) * 4


def test_units_other_than_metal_are_a_kim_error_naming_them(tmp_path, exported):
    x, L = crystal("fcc", 3.615, 2, 0.05)
    t, _, done, d = lammps(tmp_path, x, L, np.ones(len(x), dtype=int), (63.55,),
                           ("pair_style kim adgrad_eam", "pair_coeff * * Cu"), units="real", models=exported["eam"])
    assert t is None
    assert "did not accept the requested unit system" in (d / "log.lammps").read_text()
    assert ("KIM model adgrad_eam computes in A and eV (LAMMPS: units metal); the simulator asked for length A and "
            "energy kcal_mol") in (d / "kim.log").read_text()


def test_a_species_the_model_does_not_know_stops_lammps_naming_it(tmp_path, exported):
    x, L = crystal("fcc", 3.615, 2, 0.05)
    t, _, done, d = lammps(tmp_path, x, L, np.ones(len(x), dtype=int), (63.55,),
                           ("pair_style kim adgrad_eam", "pair_coeff * * Ni"), models=exported["eam"])
    assert t is None and "symbol not found: Ni" in (d / "log.lammps").read_text()


def test_export_refuses_what_is_not_a_kim_site_energy(tmp_path):
    code, text = export(ROOT / "configs" / "models" / "neo_hooke.yaml", tmp_path / "a", "--kim", "x")
    assert code == 2 and "not a site energy on the atoms contract" in text and not (tmp_path / "a").exists()
    code, text = export(model_file(tmp_path, "eam"), tmp_path / "b", "--kim", "x")      # Cu_u3 names no element
    assert code == 2 and "Cu_u3 is not a KIM species" in text and "--species" in text
    code, text = export(model_file(tmp_path, "eam"), tmp_path / "c", "--kim", "x", "--species", "Qq")
    assert code == 2 and "'Qq' is not a KIM species name" in text
    code, text = export(model_file(tmp_path, "sw"), tmp_path / "d", "--kim", "x", "--species", "Si,C")
    assert code == 2 and "reads no species" in text
    code, text = export(model_file(tmp_path, "sw"), tmp_path / "e", "--kim", "x", "--cutoff", "2.0")
    assert code == 2 and "smaller than the model's cutoff" in text
    code, text = export(model_file(tmp_path, "sw"), tmp_path / "f", "--kim", "1x")
    assert code == 2 and "a KIM model's name is a C identifier" in text
    code, text = export(model_file(tmp_path, "sw"), tmp_path / "g", "--species", "Si")
    assert code == 2 and "--species and --cutoff go with --kim" in text
    code, text = export(model_file(tmp_path, "sw"), tmp_path / "h", "--kim", "x", "--umat")
    assert code == 2 and "--umat and --kim make different libraries" in text
    for d in "bcdefgh":
        assert not (tmp_path / d).exists()


@pytest.mark.parametrize("cut", [0.0, -1.0, float("nan"), float("inf")])
def test_export_refuses_a_model_whose_cutoff_is_not_a_positive_distance(tmp_path, monkeypatch, cut):
    """A cutoff the readers let through (0: Stillinger-Weber's a = 0) or one a table built in code may hold
    (negative, NaN, infinite: the Si.sw reader patched to give it) exits 2 naming the model file and the value,
    rather than a KIM model that finds no neighbours or every one."""
    from adgrad.engine import potentials
    path = model_file(tmp_path, "sw")
    if cut == 0.0:      # a copy of Si.sw with a = 0 (its third parameter), in tmp
        sw = tmp_path / "a0.sw"
        sw.write_text((POTENTIALS / "Si.sw").read_text().replace("2.0951  1.80", "2.0951  0.0"))
        path.write_text(path.read_text().replace(str(POTENTIALS / "Si.sw"), str(sw)))
    else:
        read = potentials.READERS["sw"]

        def patched(files, elements=None):
            pot = read(files, elements)
            pot.constants["cut"] = np.full_like(pot.constants["cut"], cut)
            return pot
        monkeypatch.setitem(potentials.READERS, "sw", patched)
    code, text = export(path, tmp_path / "out", "--kim", "x")
    assert code == 2, text
    assert f"{path}: params.sw: the potential's cut is {cut:g}, not a finite positive distance (A)" in text, text
    assert not (tmp_path / "out").exists()


# A minimal KIM simulator: four atoms of a tetrahedron, all neighbours of each other, every atom with the species
# code given on the command line; for each x position of the first atom given after it, one compute with the same
# model and arguments, printing its status and the energy.
SIMULATOR = r"""
#include <stdio.h>
#include <stdlib.h>
#include "KIM_SimulatorHeaders.h"
#define N 4
static int nb[N][N - 1];
static int neighbours(void *data, int lists, const double *cutoffs, int list, int i, int *n, const int **of) {
    (void)data; (void)lists; (void)cutoffs; (void)list;
    *n = N - 1;
    *of = nb[i];
    return 0;
}
int main(int argc, char **argv) {
    double x[3 * N] = {0, 0, 0, 2.5, 0, 0, 1.25, 2.2, 0, 1.25, 0.7, 2.0}, energy = 0, forces[3 * N];
    int n = N, codes[N], contributing[N], accepted, status;
    KIM_Model *model;
    KIM_ComputeArguments *args;
    for (int i = 0; i < N; i++) {
        codes[i] = argc > 2 ? atoi(argv[2]) : 0;
        contributing[i] = 1;
        for (int k = 0, j = 0; j < N; j++)
            if (j != i)
                nb[i][k++] = j;
    }
    if (argc < 4 || KIM_Model_Create(KIM_NUMBERING_zeroBased, KIM_LENGTH_UNIT_A, KIM_ENERGY_UNIT_eV,
            KIM_CHARGE_UNIT_e, KIM_TEMPERATURE_UNIT_K, KIM_TIME_UNIT_ps, argv[1], &accepted, &model)
        || !accepted || KIM_Model_ComputeArgumentsCreate(model, &args))
        return 2;
    if (KIM_ComputeArguments_SetArgumentPointerInteger(args, KIM_COMPUTE_ARGUMENT_NAME_numberOfParticles, &n)
        || KIM_ComputeArguments_SetArgumentPointerInteger(args, KIM_COMPUTE_ARGUMENT_NAME_particleSpeciesCodes, codes)
        || KIM_ComputeArguments_SetArgumentPointerInteger(args, KIM_COMPUTE_ARGUMENT_NAME_particleContributing,
                                                          contributing)
        || KIM_ComputeArguments_SetArgumentPointerDouble(args, KIM_COMPUTE_ARGUMENT_NAME_coordinates, x)
        || KIM_ComputeArguments_SetArgumentPointerDouble(args, KIM_COMPUTE_ARGUMENT_NAME_partialEnergy, &energy)
        || KIM_ComputeArguments_SetArgumentPointerDouble(args, KIM_COMPUTE_ARGUMENT_NAME_partialForces, forces)
        || KIM_ComputeArguments_SetCallbackPointer(args, KIM_COMPUTE_CALLBACK_NAME_GetNeighborList, KIM_LANGUAGE_NAME_c,
                                                   (KIM_Function *)neighbours, NULL))
        return 2;
    for (int k = 3; k < argc; k++) {
        x[0] = atof(argv[k]);
        energy = 0;
        status = KIM_Model_Compute(model, args);
        printf("%d %.17g\n", status, energy);
    }
    KIM_Model_ComputeArgumentsDestroy(model, &args);
    KIM_Model_Destroy(&model);
    return 0;
}
"""


def simulator(tmp_path, exported):
    """SIMULATOR built in tmp_path on the EAM model: sim(code, *x0) -> [(status, energy)] of its computes."""
    (tmp_path / "sim.c").write_text(SIMULATOR)
    subprocess.run(["cc", "-o", "sim", "sim.c", "-I/usr/include/kim-api", "-lkim-api"], cwd=tmp_path, check=True)
    env = {**os.environ, "KIM_API_PORTABLE_MODELS_DIR": str(exported["eam"])}

    def sim(code, *x0):
        done = subprocess.run(["./sim", "adgrad_eam", code, *x0], cwd=tmp_path, env=env, capture_output=True,
                              text=True, check=True)
        return [(int(line.split()[0]), float(line.split()[1])) for line in done.stdout.splitlines()]
    return sim


def test_a_nan_position_or_a_species_code_out_of_range_is_a_kim_error(tmp_path, exported):
    """LAMMPS stops at a NaN position itself; another simulator gets a KIM error naming the particle, never
    a finite energy."""
    run = simulator(tmp_path, exported)

    def sim(x0, code):
        (status, energy), = run(code, x0)
        return status, energy, (tmp_path / "kim.log").read_text()
    status, energy, _ = sim("0.0", "0")
    assert status == 0 and np.isfinite(energy) and energy < 0
    status, _, log = sim("nan", "0")
    assert status != 0 and "adgrad: particle 0 has a non-finite position (nan 0 0)" in log
    status, _, log = sim("0.0", "3")
    assert status != 0 and "adgrad: particle 0 has species code 3; this model knows 1 species (Cu: codes 0 to 0)" in log


def test_a_compute_after_one_that_failed_starts_afresh(tmp_path, exported):
    """Atom 0 on atom 1 (r = 0: a non-finite site energy) stops a compute after its atoms are in the driver's
    blocks; the next compute of the same model, atom 0 back at 0, gives the energy of a fresh model, not one
    with the failed call's atoms in it."""
    sim = simulator(tmp_path, exported)
    (fresh, energy), = sim("0", "0.0")
    assert fresh == 0 and np.isfinite(energy)
    (failed, _), again = sim("0", "2.5", "0.0")
    assert failed != 0 and "non-finite site energy or gradient" in (tmp_path / "kim.log").read_text()
    assert again == (0, energy)


def test_a_model_with_a_literal_neighbour_count_has_one_kernel(tmp_path):
    """The ladder N, 2N, 4N needs N as a named size of the model's file; with R [48, 3] the KIM model has
    48 slots only (its error beyond them says to change R's N)."""
    from adgrad.engine import api
    from adgrad.engine.export import kim
    path = model_file(tmp_path, "eam")
    path.write_text(path.read_text().replace("[N, 3]", "[48, 3]").replace("[N]", "[48]"))
    assert kim.plan(api.load_model(str(path)), "x", species=("Cu",)).slots == (48,)
    assert kim.plan(api.load_model(str(model_file(tmp_path, "eam", 40))), "x", species=("Cu",)).slots == (40, 80, 160)


def test_the_kim_library_needs_no_python_and_exports_only_kims_record(exported):
    lib = exported["eam"] / "adgrad_eam" / "libkim-api-portable-model.so"
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]", subprocess.run(["readelf", "-d", str(lib)], capture_output=True,
                                                                 text=True, check=True).stdout)
    assert set(needed) == {"libkim-api.so.2", "libm.so.6", "libc.so.6"}, needed
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    assert sorted(line.split()[-1] for line in symbols.stdout.splitlines()) == [
        "kim_shared_library_schema", "kim_shared_library_schema_version"]
    kim = json.loads((exported["eam"] / "adgrad-export.json").read_text())["kim"]
    assert kim["library"] == "adgrad_eam/libkim-api-portable-model.so" and kim["species"] == ["Cu"]
    assert kim["slots"] == [48, 96, 192] and kim["cutoff"] == pytest.approx(4.95)
