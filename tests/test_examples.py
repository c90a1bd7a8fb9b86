"""The shipped tensor-language examples (configs/*.yaml with data from data/make_examples.py):
each passes `adgrad check`, runs to an output file with the SPEC shapes, and matches numpy."""
from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from adgrad.cli.main import cli
from adgrad.engine import compile_model, load_model

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
DATA = ROOT / "data"

# config -> {dataset: shape without the point axis}
EXAMPLES = {
    "neohookean": {"W": (), "dW_dF": (3, 3), "d2W_dF_dF": (3, 3, 3, 3)},
    "attention": {"score": (), "dscore_dX": (8, 6), "dscore_dWm": (4, 8)},
    "attention_einsum": {"score": (), "dscore_dX": (8, 6), "dscore_dWm": (4, 8)},
    "gaussian": {"rs": (21,), "drs_dm": (21,)},
    "tanh_net": {"E": (), "dE_dx": (6,)},
}
POINTS = {"neohookean": 1000, "attention": 200, "attention_einsum": 200, "gaussian": 500, "tanh_net": 1000}


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Run every example config once: name -> (output path, {dataset: array}, root attributes)."""
    root = tmp_path_factory.mktemp("examples")
    done = {}

    def get(name):
        if name not in done:
            out = root / f"{name}_out.h5"
            result = invoke("run", CONFIGS / f"{name}.yaml", "-o", out, "-q")
            assert result.exit_code == 0, result.output
            with h5py.File(out, "r") as f:
                done[name] = (out, {k: f[k][()] for k in f.keys() if k != "_adgrad"}, dict(f.attrs))
        return done[name]
    return get


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_check_passes(name):
    result = invoke("check", CONFIGS / f"{name}.yaml", "--points", 8)
    assert result.exit_code == 0, result.output
    assert "MISMATCH" not in result.output


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_run_output_shapes(name, outputs):
    _, data, attrs = outputs(name)
    m = POINTS[name]
    assert {k: v.shape for k, v in data.items()} == {k: (m, *s) for k, s in EXAMPLES[name].items()}
    assert attrs["complete"] and attrs["points"] == m
    for k, v in data.items():
        assert np.isfinite(v).all(), k


def test_data_files_are_small():
    for name in ("neohookean_points", "attention_points", "gaussian_points", "tanh_net_points",
                 "tanh_net_weights"):
        assert (DATA / f"{name}.h5").stat().st_size < 300_000, name


def test_neohookean_stress_and_tangent(outputs):
    _, data, _ = outputs("neohookean")
    with h5py.File(DATA / "neohookean_points.h5", "r") as f:
        F = f["F"][()]
    mu, lam = 1.0, 2.0
    J = np.linalg.det(F)
    FinvT = np.transpose(np.linalg.inv(F), (0, 2, 1))
    W = mu / 2 * (np.einsum("mij,mij->m", F, F) - 3) - mu * np.log(J) + lam / 2 * np.log(J) ** 2
    P = mu * (F - FinvT) + lam * np.log(J)[:, None, None] * FinvT
    np.testing.assert_allclose(data["W"], W, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(data["dW_dF"], P, rtol=1e-10, atol=1e-13)
    C = data["d2W_dF_dF"].reshape(-1, 9, 9)
    np.testing.assert_allclose(C, np.transpose(C, (0, 2, 1)), rtol=1e-12, atol=1e-13)
    # the analytic tangent: mu I(x)I + (mu - lam log J) Finv^T_il Finv^T_kj + lam FinvT (x) FinvT
    Finv = np.linalg.inv(F)
    eye = np.eye(3)
    A = (mu * np.einsum("ik,jl->ijkl", eye, eye)[None]
         + (mu - lam * np.log(J))[:, None, None, None, None] * np.einsum("mli,mjk->mijkl", Finv, Finv)
         + lam * np.einsum("mji,mlk->mijkl", Finv, Finv))
    np.testing.assert_allclose(data["d2W_dF_dF"], A, rtol=1e-10, atol=1e-12)


def test_attention_formulations_agree(outputs):
    _, slices, _ = outputs("attention")
    _, einsum, _ = outputs("attention_einsum")
    for k in ("score", "dscore_dX", "dscore_dWm"):
        np.testing.assert_allclose(slices[k], einsum[k], rtol=1e-12, atol=1e-15, err_msg=k)
    # and both are seed 001's score, computed with numpy
    with h5py.File(DATA / "attention_points.h5", "r") as f:
        X, Z = f["X"][()], f["Z"][()]
    params = yaml.safe_load((CONFIGS / "attention_einsum_model.yaml").read_text())["params"]
    assert params == yaml.safe_load((CONFIGS / "attention_slices_model.yaml").read_text())["params"]
    Wm, b = np.array(params["Wm"]), np.array(params["b"])
    Y = np.tanh(np.einsum("oi,mib->mob", Wm, X) + b)
    score = np.einsum("mob,mob->m", Y, Z)
    np.testing.assert_allclose(slices["score"], score, rtol=1e-12)
    G = (1 - Y**2) * Z                                   # dscore / d(pre-activation)
    np.testing.assert_allclose(slices["dscore_dX"], np.einsum("oi,mob->mib", Wm, G), rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(slices["dscore_dWm"], np.einsum("mob,mib->moi", G, X), rtol=1e-11, atol=1e-14)


def test_gaussian_picks_forward_mode(outputs):
    _, data, attrs = outputs("gaussian")
    assert json.loads(attrs["modes"]) == {"drs_dm": "forward"}
    kernel = compile_model(load_model(CONFIGS / "gaussian_model.yaml"), derivatives=[("rs", "m")], mode="auto")
    assert kernel.modes == {"drs_dm": "forward"}
    with h5py.File(DATA / "gaussian_points.h5", "r") as f:
        m, d = f["m"][()], f["d"][()]
    xs = np.arange(-10.0, 11.0)

    def rs(m):
        fx = np.exp(-1.5 * (xs - m[:, None]) ** 2)
        return d - ((d * fx).sum(1) / (fx * fx).sum(1))[:, None] * fx
    np.testing.assert_allclose(data["rs"], rs(m), rtol=1e-12, atol=1e-14)
    h = 1e-6
    np.testing.assert_allclose(data["drs_dm"], (rs(m + h) - rs(m - h)) / (2 * h), rtol=1e-5, atol=1e-8)


def test_tanh_net_matches_numpy(outputs):
    _, data, _ = outputs("tanh_net")
    with h5py.File(DATA / "tanh_net_weights.h5", "r") as f:
        W1, b1, W2 = f["W1"][()], f["b1"][()], f["W2"][()]
    with h5py.File(DATA / "tanh_net_points.h5", "r") as f:
        x = f["x"][()]
    h = np.tanh(x @ W1.T + b1)
    np.testing.assert_allclose(data["E"], h @ W2, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(data["dE_dx"], ((1 - h**2) * W2) @ W1, rtol=1e-11, atol=1e-14)
