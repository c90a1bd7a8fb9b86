"""Hostile but fair calls of the Python API and the model language that used to give a wrong number, or
write past an array, with nothing said (issue "Nothing silently wrong"): every argument of load_model and
CompiledKernel.evaluate is checked at the boundary (engine/arguments.py), a local solve is judged on its
final iterate (engine/solve.py), and an invalid species index makes the point's results NaN whatever the
expression does with the looked-up value (engine/ir/lower.py species_guard)."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli
from adgrad.engine.api import compile_model, load_model
from adgrad.engine.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def write(tmp_path, text, name="m.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


@pytest.fixture(scope="module")
def eam():
    return compile_model(load_model(CONFIGS / "eam_model.yaml"), [("E", "x")])


@pytest.fixture(scope="module")
def points():
    return np.random.default_rng(0).random((10, 100))


def raises(kernel, exc, phrase, **kwargs):
    with pytest.raises(exc) as err:
        kernel.evaluate(**kwargs)
    assert phrase in str(err.value), str(err.value)


# ---- 1, 13: names, shapes and dtypes of evaluate's arguments -------------------------------------------------
@pytest.mark.parametrize("params, exc, phrase", [
    ({"a": 3.0}, ValueError, "model 'eam' has no param 'a' (its params: alpha)"),
    ({"alpha": 1.0, "Alpha": 2.0}, ValueError, "has no param 'Alpha'"),
    ({"alpha": [1.0, 2.0]}, ValueError, "param 'alpha' has shape (2,), but the model's param has shape ()"),
    ({"alpha": 1 + 2j}, TypeError, "param 'alpha' must hold real numbers, got dtype complex128"),
    ({"alpha": "3"}, TypeError, "param 'alpha' must hold real numbers"),
    ([("alpha", 3.0)], TypeError, "params must be a dict"),
])
def test_evaluate_refuses_params_the_model_does_not_have(eam, points, params, exc, phrase):
    raises(eam, exc, phrase, inputs={"x": points}, params=params)


def test_a_potential_param_cannot_be_overridden_per_call():
    k = compile_model(load_model(CONFIGS / "cu_eam_model.yaml"), [], values=["E"])
    n = k.graph.inputs["R"].shape[0]
    inputs = {"R": np.ones((2, n, 3)), "valid": np.zeros((2, n)), "s": np.zeros(2), "sn": np.zeros((2, n))}
    raises(k, ValueError, "param 'cu' of model 'cu_eam' is a table or potential", inputs=inputs, params={"cu": 1.0})
    raises(k, ValueError, "has no param 'cu__F'", inputs=inputs, params={"cu__F": np.zeros(3)})


@pytest.mark.parametrize("inputs, exc, phrase", [
    ({}, ValueError, "missing input 'x' of model 'eam'"),
    ({"x": "points", "y": "points"}, ValueError, "inputs: model 'eam' has no input 'y' (its inputs: x)"),
    ({"x": "complex"}, TypeError, "input 'x' must hold real numbers, got dtype complex128"),
    ({"x": "strings"}, TypeError, "input 'x' must hold real numbers"),
    ({"x": "flat"}, ValueError, "input 'x' must have shape (M, *(100,)), got (1000,)"),
])
def test_evaluate_refuses_inputs_it_would_misread(eam, points, inputs, exc, phrase):
    arrays = {"points": points, "complex": points.astype(complex), "strings": points.astype(str),
              "flat": points.ravel()}
    raises(eam, exc, phrase, inputs={n: arrays[v] for n, v in inputs.items()})


def test_integer_and_bool_inputs_are_numbers(eam, points):
    ints = (points * 3).astype(np.int64)
    assert np.array_equal(eam.evaluate({"x": ints})["E"], eam.evaluate({"x": ints.astype(float)})["E"])
    assert np.array_equal(eam.evaluate({"x": ints > 0})["E"], eam.evaluate({"x": (ints > 0) * 1.0})["E"])


def read_only(shape):
    a = np.zeros(shape)
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("out, exc, phrase", [
    ({"E": read_only(10)}, ValueError, "out['E'] is read-only"),
    ({"F": np.empty(10)}, ValueError, "out: model 'eam' has no result 'F' (its results: E, dE_dx)"),
    ({"E": np.empty(9)}, ValueError, "out['E'] must have shape (10,), got (9,)"),
    ({"dE_dx": np.empty((10, 99))}, ValueError, "out['dE_dx'] must have shape (10, 100), got (10, 99)"),
    ({"E": [0.0] * 10}, TypeError, "out['E'] must be a numpy array, got list"),
    ({"E": np.empty(10, dtype=complex)}, TypeError, "out['E'] must have a float dtype, got complex128"),
    ({"E": np.empty(10, dtype=np.int64)}, TypeError, "out['E'] must have a float dtype, got int64"),
])
def test_evaluate_refuses_out_arrays_it_cannot_fill(eam, points, out, exc, phrase):
    raises(eam, exc, phrase, inputs={"x": points}, out=out)


@pytest.mark.parametrize("flags, exc, phrase", [
    (np.zeros(5, dtype=bool), ValueError, "nonfinite must have shape (10,) (one flag per point), got (5,)"),
    (np.zeros(11, dtype=bool), ValueError, "got (11,)"),
    (np.zeros((10, 1), dtype=bool), ValueError, "got (10, 1)"),
    (np.zeros(10), TypeError, "nonfinite must be a numpy bool array of shape (10,), got float64"),
    ([False] * 10, TypeError, "got list"),
    (np.zeros(20, dtype=bool)[::2], ValueError, "nonfinite must be a writable, C-contiguous array"),
])
def test_evaluate_refuses_nonfinite_flags_it_would_write_past(eam, points, flags, exc, phrase):
    raises(eam, exc, phrase, inputs={"x": points}, nonfinite=flags)


def test_read_only_flags_are_refused(eam, points):
    flags = np.zeros(10, dtype=bool)
    flags.flags.writeable = False
    raises(eam, ValueError, "nonfinite must be a writable", inputs={"x": points}, nonfinite=flags)


@pytest.mark.parametrize("threads", [0, -1, 1000, 1.5, True, "2"])
def test_evaluate_refuses_thread_counts_numba_cannot_set(eam, points, threads):
    raises(eam, ValueError, "threads must be None or an integer from 1 to", inputs={"x": points}, threads=threads)


def test_a_refused_call_writes_nothing(eam, points):
    out = {"E": np.full(10, 7.0), "dE_dx": np.full((10, 100), 7.0)}
    with pytest.raises(ValueError):
        eam.evaluate({"x": points}, out=out, nonfinite=np.zeros(3, dtype=bool))
    assert (out["E"] == 7.0).all() and (out["dE_dx"] == 7.0).all()


def test_felupe_material_refuses_an_unknown_param_set_after_construction():
    pytest.importorskip("felupe")
    from adgrad.felupe import Material
    umat = Material(CONFIGS / "models" / "neo_hooke.yaml")
    x = [np.eye(3)[:, :, None, None] + np.zeros((3, 3, 4, 2)), np.zeros((0, 4, 2))]
    umat.params = {"bulkk": 50.0}
    with pytest.raises(ValueError, match="has no param 'bulkk'"):
        umat.gradient(x)
    with pytest.raises(ValueError, match="has no param 'bulkk'"):
        umat.hessian(x)
    umat.params = {"bulk": 50.0}
    P50, _ = umat.gradient([x[0] * 1.01, x[1]])
    umat.params = {}
    P2, _ = umat.gradient([x[0] * 1.01, x[1]])
    assert not np.allclose(P50, P2)         # the override is used, not ignored


# ---- 13: load_model's arguments are blamed, not the model file --------------------------------------------
@pytest.mark.parametrize("kwargs, exc, phrase", [
    ({"sizes": {"N": 0}}, ValueError, "sizes={'N': ...}: a size is an integer from 1 to 16,777,216, got 0"),
    ({"sizes": {"N": -3}}, ValueError, "sizes={'N': ...}: a size is an integer"),
    ({"sizes": {"N": 2.5}}, ValueError, "got 2.5"),
    ({"sizes": {"N": True}}, ValueError, "got True"),
    ({"sizes": {"N": 2 ** 40}}, ValueError, "a size is an integer from 1 to"),
    ({"sizes": {"M": 3}}, ValueError, "sizes={'M': ...}: the model has no size 'M' (its sizes: N)"),
    ({"sizes": [("N", 3)]}, TypeError, "sizes= must be a dict"),
    ({"input_shapes": {"Q": [3]}}, ValueError,
     "input_shapes: the model has no input 'Q' (its inputs: R, valid, s, sn)"),
    ({"input_shapes": {"R": [0, 3]}}, ValueError, "every axis needs a length of at least 1"),
    ({"input_shapes": {"R": 3}}, TypeError, "a shape is a sequence of integers"),
    ({"input_shapes": {"R": [2.5, 3]}}, TypeError, "a shape is a sequence of integers"),
])
def test_load_model_blames_its_arguments(kwargs, exc, phrase):
    with pytest.raises(exc) as err:
        load_model(CONFIGS / "cu_eam_model.yaml", **kwargs)
    assert phrase in str(err.value) and "cu_eam_model.yaml" not in str(err.value), str(err.value)


# ---- 3: a local solve is judged on its final iterate --------------------------------------------------------
CUBE = """
    adgrad: 1
    name: cube
    inputs:
      a: []
    let:
      x: {{solve: x**3 - a, init: {init}, max_iter: {iters}}}
    outputs:
      y: x
"""


# a start as (x0, s): init x0 + s * a, params of one kernel per max_iter (the literal start: the test below)
STARTS = {"10000.0": (1e4, 0.0), "1e100": (1e100, 0.0), "-10000.0": (-1e4, 0.0), "-1.0": (-1.0, 0.0),
          "1e-8": (1e-8, 0.0), "a * 1e6": (0.0, 1e6)}


@pytest.fixture(scope="module")
def cubes(tmp_path_factory):
    """max_iter -> the kernel of x**3 = a solved from init x0 + s * a (x0, s: params)."""
    root, params = tmp_path_factory.mktemp("cubes"), "params:\n      x0: 0.0\n      s: 0.0\n    let:"
    texts = {iters: CUBE.format(init="x0 + s * a", iters=iters).replace("let:", params) for iters in (25, 100)}
    return {iters: compile_model(load_model(write(root, text, f"cube{iters}.yaml")), [("y", "a")])
            for iters, text in texts.items()}


@pytest.mark.parametrize("init", list(STARTS))
@pytest.mark.parametrize("iters", [25, 100])
def test_a_solve_from_far_away_converges_to_round_off_or_flags_the_point(cubes, init, iters):
    """x**3 = a from starts 10^4 and 10^100 away (and others Newton handles badly): each point is either
    the root to round-off, with dx/da = 1/(3 x^2) to round-off, or NaN in both, never a number in between."""
    a = np.concatenate([np.geomspace(1e-6, 1e6, 40), [0.5, 1.0, 2.0, 8.0]])
    x0, s = STARTS[init]
    out = cubes[iters].evaluate({"a": a}, params={"x0": x0, "s": s})
    y, dy = out["y"], out["dy_da"]
    flagged = np.isnan(y)
    assert np.array_equal(flagged, np.isnan(dy))
    exact = np.cbrt(a[~flagged])
    assert np.all(np.abs(y[~flagged] - exact) <= 2 * np.spacing(exact)), (init, y[~flagged] / exact - 1)
    assert np.allclose(dy[~flagged] * 3 * exact ** 2, 1.0, rtol=1e-14, atol=0)
    if init == "10000.0":       # x shrinks by 2/3 per step from 10^4: 25 steps are too few, 100 enough
        assert flagged.any() if iters == 25 else not flagged.any()
    if init == "1e100":         # 10^100 needs some 570 steps
        assert flagged.all()


def test_the_start_is_not_the_scale_of_the_residual(tmp_path):
    """The old rule accepted max|r| <= tol * max(1, |r(init)|): from init 10^4, r(init) = 10^12 made
    x = 1.0001 (a residual of 4.5e-4, dx/da off by 1.6%) converged."""
    k = compile_model(load_model(write(tmp_path, CUBE.format(init="10000.0", iters=25).replace(
        "max_iter", "tol: 1e-10, max_iter"))), [("y", "a")])
    out = k.evaluate({"a": np.array([1.0])})
    assert np.isnan(out["y"][0]) and np.isnan(out["dy_da"][0])


def test_a_system_from_a_bad_start_is_flagged_and_counted_by_run(tmp_path):
    """A 2x2 system (a circle and a line) from a start 10^100 away: every point is NaN, and `adgrad run`
    counts them (non-finite points), or with engine.nan: error fails with exit 1."""
    write(tmp_path, """
        adgrad: 1
        name: circle
        inputs:
          c: [2]
        let:
          x: {solve: "stack([x[0]**2 + x[1]**2 - c[0], x[0] - x[1] - c[1]])", init: "ones(2) * 1e100"}
        outputs:
          y: sum(x)
    """)
    write(tmp_path, """
        adgrad: 1
        model: m.yaml
        input: {path: in.h5, datasets: {c: c}}
        output: {path: out.h5}
        compute: {values: [y], derivatives: [{of: y, wrt: c}]}
    """, "config.yaml")
    with h5py.File(tmp_path / "in.h5", "w") as f:
        f["c"] = np.column_stack([np.linspace(1, 4, 6), np.zeros(6)])
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "config.yaml")])
    assert res.exit_code == 0, res.output
    assert "non-finite points: 6" in res.output, res.output
    with h5py.File(tmp_path / "out.h5") as f:
        assert np.isnan(f["y"][:]).all() and np.isnan(f["dy_dc"][:]).all()
    # the same model from a good start converges at every point
    (tmp_path / "m.yaml").write_text((tmp_path / "m.yaml").read_text().replace("* 1e100", "* 2.0"))
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "config.yaml"), "--overwrite"])
    assert res.exit_code == 0 and "non-finite points: 0" in res.output, res.output
    with h5py.File(tmp_path / "out.h5") as f:
        c = np.column_stack([np.linspace(1, 4, 6), np.zeros(6)])
        assert np.allclose(f["y"][:], 2 * np.sqrt(c[:, 0] / 2), rtol=1e-15)


# ---- 4: an invalid species index flags the point ------------------------------------------------------------
def site_inputs(model, m, rng):
    n = model.graph.inputs["R"].shape[0]
    R = rng.normal(size=(m, n, 3))
    R *= (2.2 + rng.random((m, n, 1))) / np.linalg.norm(R, axis=2, keepdims=True)
    inputs = {"R": R, "valid": np.ones((m, n))}
    for name in ("s", "sn"):
        if name in model.graph.inputs:
            inputs[name] = np.zeros((m,) + model.graph.inputs[name].shape)
    return inputs


@pytest.mark.parametrize("name", ["cu_eam_model", "si_tersoff_model"])
def test_an_invalid_species_index_gives_nan_not_a_zero_energy(name):
    """LAMMPS's 1-based types (s = 1, sn = 1 with one element), a negative, a fraction, a neighbour's
    index alone: the point's energy and every gradient entry are NaN; the valid points are untouched."""
    model = load_model(CONFIGS / f"{name}.yaml")
    k = compile_model(model, [("E", "R")])
    inputs = site_inputs(model, 6, np.random.default_rng(1))
    inputs["s"][1] = 1.0
    inputs["sn"][2] = 1.0
    inputs["sn"][3, 0] = -1.0
    inputs["sn"][4, 5] = 0.5
    inputs["s"][5] = np.nan
    out = k.evaluate(inputs)
    flags = np.zeros(6, dtype=bool)
    k.evaluate(inputs, nonfinite=flags)
    assert np.isfinite(out["E"][0]) and out["E"][0] != 0.0 and np.isfinite(out["dE_dR"][0]).all()
    assert np.isnan(out["E"][1:]).all() and np.isnan(out["dE_dR"][1:]).all()
    assert flags.tolist() == [False] + [True] * 5
    valid = {n: v[:1] for n, v in inputs.items()}
    assert np.array_equal(k.evaluate(valid)["E"], out["E"][:1])


def test_a_one_element_three_body_file_checks_its_indices(tmp_path):
    """With one element, sw.epsilon[s, sn, sn] is a constant, but s and sn must still be 0."""
    shutil.copy(ROOT / "data" / "Si_sw85.sw", tmp_path / "si.sw")
    path = write(tmp_path, """
        adgrad: 1
        name: sw1
        inputs:
          r: [4]
          s: []
          sn: [4]
        params:
          sw: {potential: si.sw}
        outputs:
          E: sum(where(r < sw.cut[s, sn, sn], sw.epsilon[s, sn, sn] * r, 0.0))
    """)
    k = compile_model(load_model(path), [("E", "r")])
    r, sn = np.full((4, 4), 1.0), np.zeros((4, 4))
    s = np.array([0.0, 1.0, 0.0, 0.0])
    sn[2, 1], sn[3, 3] = 7.0, -0.0
    out = k.evaluate({"r": r, "s": s, "sn": sn})
    assert out["E"][0] == out["E"][3] != 0.0        # -0.0 is 0
    assert np.isnan(out["E"][1:3]).all() and np.isnan(out["dE_dr"][1:3]).all()


def test_a_constant_species_index_out_of_range_is_a_spec_error(tmp_path):
    shutil.copy(ROOT / "data" / "Cu_zhou04.eam.alloy", tmp_path / "cu.eam.alloy")
    path = write(tmp_path, """
        adgrad: 1
        name: eam1
        inputs:
          r: []
        params:
          cu: {potential: cu.eam.alloy}
        outputs:
          E: cu.F[1](r) + cu.phi[0, 0](r)
    """)
    with pytest.raises(SpecError) as err:
        load_model(path)
    assert (err.value.line, err.value.col, err.value.expr_col) == (8, 6, len("cu.F[")), str(err.value)
    assert "species index 1 is out of range: this lookup has 1 species (indices 0 to 0)" in str(err.value)


def test_run_with_lammps_types_counts_every_point(tmp_path):
    """si_tersoff's data with LAMMPS's 1-based types: the run says every point is non-finite (it said 0
    and wrote E = 0), and with engine.nan: error it fails with exit 1 naming a row."""
    with h5py.File(ROOT / "data" / "si_points.h5") as f, h5py.File(tmp_path / "types.h5", "w") as g:
        for name in ("R", "valid"):
            g[name] = f[name][:20]
        g["s"], g["sn"] = f["s"][:20] + 1, f["sn"][:20] + 1
    shutil.copy(CONFIGS / "si_tersoff_model.yaml", tmp_path / "model.yaml")
    shutil.copy(ROOT / "data" / "Si_tersoff88.tersoff", tmp_path / "si.tersoff")
    model = tmp_path / "model.yaml"
    model.write_text(model.read_text().replace("../data/Si_tersoff88.tersoff", "si.tersoff"))
    config = (CONFIGS / "si_tersoff.yaml").read_text().replace("si_tersoff_model.yaml", "model.yaml") \
        .replace("../data/si_points.h5", "types.h5")
    (tmp_path / "config.yaml").write_text(config)
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "config.yaml"), "-o", str(tmp_path / "o.h5")])
    assert res.exit_code == 0 and "non-finite points: 20" in res.output, res.output
    (tmp_path / "config.yaml").write_text(config + "engine:\n  nan: error\n")
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "config.yaml"), "-o", str(tmp_path / "o2.h5")])
    assert res.exit_code == 1 and "non-finite value at input row 0" in res.output, res.output


# ---- 12: a YAML document nested thousands deep --------------------------------------------------------------
@pytest.mark.parametrize("nested", ["flow", "block"])
def test_yaml_nested_thousands_deep_is_one_error(tmp_path, nested):
    deep = "[" * 10000 + "1" + "]" * 10000 if nested == "flow" else \
        "\n" + "".join("  " * (i + 2) + "-\n" for i in range(3000))
    path = tmp_path / "m.yaml"
    path.write_text(f"adgrad: 1\nname: d\ninputs:\n  x: []\nparams:\n  p: {deep}\noutputs:\n  y: x\n")
    res = CliRunner().invoke(cli, ["check", str(path)])
    assert res.exit_code == 2, res.output
    assert f"{path}:" in res.output and "YAML nested more than 100 levels deep" in res.output, res.output
    assert "Traceback" not in res.output


# ---- 5's neighbour: a YAML table whose grid the kernels cannot hold ---------------------------------------
@pytest.mark.parametrize("grid, phrase, col", [
    ("dx: 1.0e-320", "params.T.dx: the grid spacing must be positive (and 1/dx finite), got 1e-320", 38),
    ("dx: 1.0e+306, x0: 1.79e+308", "the table's grid ends at x = inf (x0 + (n - 1) dx), beyond float64's range", 6),
])
def test_a_yaml_table_grid_beyond_float64_is_refused(tmp_path, grid, phrase, col):
    path = write(tmp_path, f"""
        adgrad: 1
        name: t
        inputs:
          x: []
        params:
          T: {{table: [1, 2, 3, 4, 5, 6], {grid}}}
        outputs:
          y: T(x)
    """)
    with pytest.raises(SpecError) as err:
        load_model(path)
    assert phrase in str(err.value) and (err.value.line, err.value.col) == (6, col), str(err.value)
