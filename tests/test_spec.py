"""The spec loader: sections with their defaults, the normalized derivative request, and params read
from HDF5 files with a declared shape."""
from __future__ import annotations

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli
from adgrad.engine import load_model
from adgrad.engine.errors import SpecError
from adgrad.engine.spec import (ComputeSection, DerivativeRequest, EngineSection, InputSection, Loc,
                                OutputSection, as_request, derivative_name, load_config_file,
                                load_model_file)

MODEL = """\
adgrad: 1
inputs:
  x: {shape: [3]}
params:
  W: {file: w.h5, dataset: w SHAPE}
outputs:
  E: sum(W @ x)
"""


def test_derivative_names():
    assert derivative_name("E", ("x",)) == "dE_dx"
    assert derivative_name("W", ("F", "F")) == "d2W_dF_dF"
    assert derivative_name("E", ("a",), "sum") == "dE_da_sum"
    assert DerivativeRequest("W", ("F",), direction="dF").name == "dW_dF_jvp"
    assert DerivativeRequest("R", ("r",), cotangent="rbar").name == "dR_dr_vjp"


def test_requests_carry_their_kind_and_vector():
    assert (DerivativeRequest("E", ("a",), reduce="sum").kind, DerivativeRequest("E", ("a",)).kind) == ("sum", "")
    jvp = DerivativeRequest("W", ("F",), direction="dF")
    assert (jvp.kind, jvp.vector) == ("jvp", "dF")
    assert DerivativeRequest("R", ("r",), cotangent="rbar").vector == "rbar"


def test_as_request_normalizes_pairs_and_fills_the_mode():
    assert as_request(("E", "x"), "auto") == DerivativeRequest("E", ("x",), mode="auto")
    assert as_request(("E", ["x", "y"])) == DerivativeRequest("E", ("x", "y"))
    own = DerivativeRequest("E", ("x",), mode="forward")
    assert as_request(own, "reverse") is own


def test_request_kinds_exclude_each_other_at_the_request():
    with pytest.raises(SpecError, match="reduce, direction and cotangent exclude each other") as e:
        DerivativeRequest("E", ("x",), reduce="sum", direction="d", loc=Loc("cfg.yaml", 7, 7))
    assert (e.value.path, e.value.line) == ("cfg.yaml", 7)
    with pytest.raises(SpecError, match="a jvp is of a first derivative"):
        DerivativeRequest("E", ("x", "x"), direction="d")


def test_config_sections_have_their_defaults(tmp_path):
    (tmp_path / "m.yaml").write_text("adgrad: 1\ninputs:\n  x: {shape: [2]}\noutputs:\n  E: sum(x)\n  G: x\n")
    (tmp_path / "c.yaml").write_text("adgrad: 1\nmodel: m.yaml\n")
    cfg = load_config_file(str(tmp_path / "c.yaml"))
    assert cfg.input == InputSection(None, {"x": "x"})
    assert cfg.output == OutputSection() == OutputSection(None, "float64", "none")
    assert cfg.engine == EngineSection() == EngineSection(0, None, "propagate", "vector", 2 << 30)
    assert cfg.compute == ComputeSection(("E", "G"), ())
    assert cfg.mode == "auto" and cfg.params == {}


def write_param_model(tmp_path, shape_key=""):
    with h5py.File(tmp_path / "w.h5", "w") as f:
        f["w"] = np.arange(6.0).reshape(2, 3)
    path = tmp_path / "m.yaml"
    path.write_text(MODEL.replace(" SHAPE", f", shape: {shape_key}" if shape_key else ""))
    return path


def test_param_from_a_file_with_a_matching_shape(tmp_path):
    model = load_model(write_param_model(tmp_path, "[2, 3]"))
    np.testing.assert_array_equal(model.param_values["W"], np.arange(6.0).reshape(2, 3))
    assert load_model(write_param_model(tmp_path)).param_values["W"].shape == (2, 3)     # shape: optional


def test_param_from_a_file_with_another_shape_is_a_spec_error(tmp_path):
    path = write_param_model(tmp_path, "[3, 2]")
    result = CliRunner().invoke(cli, ["explain", str(path), "--show", "shapes"])
    assert result.exit_code == 2
    assert f"{path}:5:6: params.W: dataset 'w' in {tmp_path / 'w.h5'} has shape (2, 3), but the param " \
           f"declares shape [3, 2]" in result.stderr


def test_param_shape_must_be_a_shape(tmp_path):
    path = write_param_model(tmp_path, "abc")
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 2
    assert "params.W.shape: 'abc' is not a size of the model (declare it under sizes:" in result.stderr
    path = write_param_model(tmp_path, "[2, 0]")
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 2
    assert "params.W.shape: a shape is a list of positive integers or sizes, got [2, 0]" in result.stderr


# ---- named sizes: a neighbour count chosen at run time ------------------------------------------------

SIZED = """\
adgrad: 1
name: sized
sizes:
  N: 4
inputs:
  R: [N, 3]
  w: N
outputs:
  E: sum(w * sum(R**2, axis=1))
"""


def test_sizes_set_shapes_and_are_replaced_by_the_api_and_the_config(tmp_path):
    from adgrad.engine import compile_model, load_model
    (tmp_path / "m.yaml").write_text(SIZED)
    assert load_model(tmp_path / "m.yaml").spec.inputs["R"].shape == (4, 3)
    for n in (4, 7):
        model = load_model(tmp_path / "m.yaml", sizes={"N": n})
        assert model.spec.inputs["R"].shape == (n, 3) and model.spec.inputs["w"].shape == (n,)
        k = compile_model(model, derivatives=[("E", "R")])
        R, w = np.random.default_rng(n).random((5, n, 3)), np.random.default_rng(n + 1).random((5, n))
        out = k.evaluate({"R": R, "w": w})
        np.testing.assert_allclose(out["dE_dR"], 2 * w[..., None] * R, rtol=1e-14)
    (tmp_path / "c.yaml").write_text("adgrad: 1\nmodel: m.yaml\nsizes: {N: 9}\n")
    assert load_config_file(str(tmp_path / "c.yaml")).model.inputs["R"].shape == (9, 3)


@pytest.mark.parametrize("text, where, phrase", [
    (SIZED.replace("[N, 3]", "[M, 3]"), (6, 6), "'M' is not a size of the model (declare it under sizes:; its "
                                                "sizes: N)"),
    (SIZED.replace("N: 4", "N: 0"), (4, 6), "sizes.N: a size is an integer from 1"),
    (SIZED.replace("N: 4", "N: four"), (4, 6), "sizes.N: a size is an integer from 1"),
    (SIZED.replace("N: 4", "R: 4"), (6, 6), "input 'R' is already defined as size"),
])
def test_bad_sizes_in_a_model(tmp_path, text, where, phrase):
    (tmp_path / "m.yaml").write_text(text)
    with pytest.raises(SpecError) as exc:
        load_model_file(str(tmp_path / "m.yaml"))
    assert phrase in str(exc.value) and (exc.value.line, exc.value.col) == where, (str(exc.value), exc.value.line,
                                                                                  exc.value.col)


@pytest.mark.parametrize("sizes, where, phrase", [
    ("{M: 9}", (3, 12), "sizes.M: the model has no size 'M' (its sizes: N)"),
    ("{N: -1}", (3, 12), "sizes.N: a size is an integer from 1"),
    ("[9]", (3, 8), "sizes"),
])
def test_bad_sizes_in_a_config(tmp_path, sizes, where, phrase):
    (tmp_path / "m.yaml").write_text(SIZED)
    (tmp_path / "c.yaml").write_text(f"adgrad: 1\nmodel: m.yaml\nsizes: {sizes}\n")
    with pytest.raises(SpecError) as exc:
        load_config_file(str(tmp_path / "c.yaml"))
    assert phrase in str(exc.value) and str(exc.value.path).endswith("c.yaml"), str(exc.value)
    assert (exc.value.line, exc.value.col) == where, (exc.value.line, exc.value.col)


def test_an_api_size_the_model_does_not_declare(tmp_path):
    from adgrad.engine import load_model
    (tmp_path / "m.yaml").write_text(SIZED)
    with pytest.raises(ValueError, match="sizes={'K': ...}: the model has no size 'K' \\(its sizes: N\\)"):
        load_model(tmp_path / "m.yaml", sizes={"K": 3})
