"""Local Newton solves (`let: {x: {solve: ..., init: ..., tol: ..., max_iter: ...}}`, engine/solve.py):
values, first and second derivatives by the implicit function theorem against closed forms and
central differences in both modes; non-convergence as NaN; J2 plasticity with Voce hardening
against a numpy return mapping and, with q = 0, against the closed-form linear-hardening model;
errors in a solve entry named at their line."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from adgrad.engine import compile_model, load_model
from adgrad.engine.errors import SpecError

MODELS = Path(__file__).resolve().parents[1] / "configs" / "models"

CUBIC = """\
adgrad: 1
name: cubic
inputs:
  t: {shape: []}
  v: {shape: [2]}
params:
  c: 1.5
let:
  x:
    solve: x**3 + c*x - t
    init: 1.0
  y:                          # a 2x2 system: y0 + y1**3 = v0, exp(y0) - y1 = v1 (init gives the shape)
    solve: stack([y[0] + y[1]**3 - v[0], exp(y[0]) - c*y[1] - v[1]])
    init: zeros(2)
    tol: 1e-14
    max_iter: 40
  z:
    solve: z*z + 1 + t*t
outputs:
  X: x
  Y: sum(y*y) + t*y[0]
  Z: z
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("solve") / "cubic.yaml"
    path.write_text(CUBIC)
    return load_model(path)


@pytest.fixture(scope="module")
def kernels(model):
    want = [("X", "t"), ("X", ["t", "t"]), ("X", "c"), ("X", ["t", "c"]), ("Y", "v"), ("Y", ["v", "v"]),
            ("Y", "t"), ("Y", "c"), ("Y", ["v", "t"])]
    return {mode: compile_model(model, derivatives=want, mode=mode, values=["X", "Y"])
            for mode in ("forward", "reverse")}


def points(n=40, seed=3):
    rng = np.random.default_rng(seed)
    return {"t": rng.uniform(-5, 5, n), "v": rng.uniform(-1, 1, (n, 2)) + np.array([0.5, 1.5])}


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_scalar_solve_and_its_derivatives_are_the_implicit_function_theorems(kernels, mode):
    """x^3 + c x = t: dx/dt = 1/(3x^2 + c), d2x/dt2 = -6x (dx/dt)^3, dx/dc = -x dx/dt,
    d2x/dtdc = -(dx/dt)^2 - 6x dx/dt dx/dc ... checked in closed form."""
    p = points()
    out = kernels[mode].evaluate(p)
    x, t, c = out["X"], p["t"], 1.5
    np.testing.assert_allclose(x ** 3 + c * x, t, rtol=1e-14, atol=1e-14)
    g = 1 / (3 * x ** 2 + c)
    np.testing.assert_allclose(out["dX_dt"], g, rtol=1e-14)
    np.testing.assert_allclose(out["d2X_dt_dt"], -6 * x * g ** 3, rtol=1e-13)
    dxdc = -x * g
    np.testing.assert_allclose(out["dX_dc"], dxdc, rtol=1e-14, atol=1e-15)
    # d/dc of 1/(3x^2 + c) = -(6 x dx/dc + 1) g^2
    np.testing.assert_allclose(out["d2X_dt_dc"], -(6 * x * dxdc + 1) * g ** 2, rtol=1e-13, atol=1e-15)


def _central(kernel, p, name, wrt, h=1e-6):
    cols = []
    base = np.asarray(p[wrt], dtype=float)
    shape = base.shape[1:]
    for idx in np.ndindex(*shape):
        step = np.zeros(shape)
        step[idx] = h
        up = kernel.evaluate({**p, wrt: base + step})[name]
        down = kernel.evaluate({**p, wrt: base - step})[name]
        cols.append((up - down) / (2 * h))
    d = np.stack(cols, axis=-1)
    return d.reshape(d.shape[:-1] + shape)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_vector_solve_derivatives_equal_central_differences(kernels, mode):
    k, p = kernels[mode], points()
    out = k.evaluate(p)
    assert np.isfinite(out["Y"]).all()
    np.testing.assert_allclose(out["dY_dv"], _central(k, p, "Y", "v"), rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(out["dY_dt"], _central(k, p, "Y", "t"), rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(out["d2Y_dv_dv"], _central(k, p, "dY_dv", "v"), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(out["d2Y_dv_dt"], _central(k, p, "dY_dv", "t"), rtol=1e-6, atol=1e-7)
    f, r = kernels["forward"].evaluate(p), kernels["reverse"].evaluate(p)
    for name in f:
        np.testing.assert_allclose(f[name], r[name], rtol=1e-12, atol=1e-13, err_msg=name)


def test_a_point_that_does_not_converge_is_nan_and_flagged(model):
    k = compile_model(model, derivatives=[("Z", "t")], values=["Z"])
    p = points(8)
    flags = np.zeros(8, dtype=bool)
    out = k.evaluate(p, nonfinite=flags)          # z^2 + 1 + t^2 = 0 has no real root
    assert np.isnan(out["Z"]).all() and np.isnan(out["dZ_dt"]).all() and flags.all()


# ---- J2 plasticity with Voce hardening ----------------------------------------------------------------
def return_mapping(eps, eps_p, alpha, E, nu, sy, K, q, b):
    """The Voce return mapping in numpy: a scalar Newton iteration per point, to round-off."""
    lmbda, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    ee = (eps + eps.transpose(0, 2, 1)) / 2 - eps_p
    tr = np.trace(ee, axis1=1, axis2=2)[:, None, None]
    st = 2 * mu * ee + lmbda * tr * np.eye(3)
    s = st - np.trace(st, axis1=1, axis2=2)[:, None, None] / 3 * np.eye(3)
    ns = np.sqrt(np.sum(s * s, axis=(1, 2)))
    k = np.sqrt(2 / 3)

    def hardening(a):
        return sy + K * a + q * (1 - np.exp(-b * a)), K + q * b * np.exp(-b * a)
    plastic = ns - k * hardening(alpha)[0] > 0
    dg = np.zeros_like(ns)
    for _ in range(60):
        r, dr = hardening(alpha + k * dg)
        dg = np.where(plastic, dg - (ns - 2 * mu * dg - k * r) / (-2 * mu - k * k * dr), 0.0)
    n = np.where(plastic[:, None, None], s / np.where(ns > 0, ns, 1)[:, None, None], 0.0)
    return st - 2 * mu * dg[:, None, None] * n, eps_p + dg[:, None, None] * n, alpha + k * dg


def plastic_points(m=400, seed=11):
    rng = np.random.default_rng(seed)
    eps = 0.02 * rng.standard_normal((m, 3, 3))
    eps_p = 0.004 * rng.standard_normal((m, 3, 3))
    eps_p = (eps_p + eps_p.transpose(0, 2, 1)) / 2
    eps_p -= np.trace(eps_p, axis1=1, axis2=2)[:, None, None] / 3 * np.eye(3)
    return {"eps": eps, "eps_p": eps_p, "alpha": rng.uniform(0, 0.05, m)}


@pytest.fixture(scope="module")
def voce():
    model = load_model(MODELS / "j2_voce.yaml")
    return model, compile_model(model, derivatives=[("sigma", "eps"), ("sigma", ["eps", "eps"])])


def test_voce_return_mapping_equals_numpy_and_its_tangent_central_differences(voce):
    model, k = voce
    p = plastic_points()
    params = {n: float(v) for n, v in model.param_values.items()}
    out = k.evaluate(p)
    sigma, eps_p, alpha = return_mapping(p["eps"], p["eps_p"], p["alpha"], **params)
    assert 0.3 < np.mean(out["alpha_new"] > p["alpha"]) < 0.9            # both branches are exercised
    np.testing.assert_allclose(out["sigma"], sigma, rtol=0, atol=1e-13)
    np.testing.assert_allclose(out["eps_p_new"], eps_p, rtol=0, atol=1e-14)
    np.testing.assert_allclose(out["alpha_new"], alpha, rtol=0, atol=1e-14)
    np.testing.assert_allclose(out["dsigma_deps"], _central(k, p, "sigma", "eps", 1e-7), rtol=0, atol=2e-8)
    np.testing.assert_allclose(out["d2sigma_deps_deps"], _central(k, p, "dsigma_deps", "eps", 1e-7),
                               rtol=0, atol=2e-5 * np.abs(out["d2sigma_deps_deps"]).max())


def voce_tangent(eps, eps_p, alpha_new, sigma_dgamma, E, nu, sy, K, q, b):
    """The closed-form consistent tangent of the Voce return mapping (Simo and Hughes 1998, box 3.2):
    C - 4 mu^2/(2 mu + 2/3 H') n x n - 4 mu^2 dgamma/|s| (I_dev - n x n), H' = K + q b exp(-b alpha_new)."""
    lmbda, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    ee = (eps + eps.transpose(0, 2, 1)) / 2 - eps_p
    s = 2 * mu * (ee - np.trace(ee, axis1=1, axis2=2)[:, None, None] / 3 * np.eye(3))
    ns = np.sqrt(np.sum(s * s, axis=(1, 2)))
    dg = sigma_dgamma
    plastic = dg > 0
    n = np.where(plastic[:, None, None], s / ns[:, None, None], 0.0)
    d = np.eye(3)
    sym = (np.einsum("ik,jl->ijkl", d, d) + np.einsum("il,jk->ijkl", d, d)) / 2
    dev = sym - np.einsum("ij,kl->ijkl", d, d) / 3
    hp = K + q * b * np.exp(-b * alpha_new)
    c1 = np.where(plastic, 4 * mu * mu / (2 * mu + 2 / 3 * hp), 0.0)
    c2 = np.where(plastic, 4 * mu * mu * dg / np.where(plastic, ns, 1.0), 0.0)
    nn = np.einsum("mij,mkl->mijkl", n, n)
    C = 2 * mu * sym + lmbda * np.einsum("ij,kl->ijkl", d, d)
    return C - c1[:, None, None, None, None] * nn - c2[:, None, None, None, None] * (dev - nn)


def test_voce_tangent_is_the_closed_form_consistent_tangent(voce):
    model, k = voce
    p = plastic_points()
    params = {n: float(v) for n, v in model.param_values.items()}
    out = k.evaluate(p)
    dgamma = (out["alpha_new"] - p["alpha"]) / np.sqrt(2 / 3)
    want = voce_tangent(p["eps"], p["eps_p"], out["alpha_new"], dgamma, **params)
    np.testing.assert_allclose(out["dsigma_deps"], want, rtol=0, atol=1e-13)


def test_state_variables_carry_a_loading_path_from_step_to_step(voce):
    """Load, unload and reload in shear plus tension: each step's outputs eps_p_new and alpha_new are
    the next step's inputs eps_p and alpha, as a simulation runs it."""
    model, k = voce
    params = {n: float(v) for n, v in model.param_values.items()}
    direction = np.array([[0.5, 1.0, 0.0], [1.0, -0.2, 0.0], [0.0, 0.0, -0.3]])
    path = [0.0, 0.01, 0.02, 0.03, 0.02, 0.0, -0.02, -0.03, -0.01, 0.01, 0.03, 0.04]
    eps_p, alpha = np.zeros((3, 3, 3)), np.zeros(3)
    ref_p, ref_a = eps_p.copy(), alpha.copy()
    for level in path:
        eps = level * np.array([direction, direction.T, 0.5 * direction])
        out = k.evaluate({"eps": eps, "eps_p": eps_p, "alpha": alpha})
        sigma, ref_p, ref_a = return_mapping(eps, ref_p, ref_a, **params)
        np.testing.assert_allclose(out["sigma"], sigma, rtol=0, atol=1e-13)
        eps_p, alpha = out["eps_p_new"], out["alpha_new"]
        np.testing.assert_allclose(eps_p, ref_p, rtol=0, atol=1e-14)
    assert alpha.min() > 0.01                         # it went plastic, both ways


def test_voce_without_the_exponential_is_the_closed_form_linear_model(voce):
    """q = 0: the solve gives the radial return of linear hardening and its Simo-Hughes tangent."""
    _, k = voce
    linear = compile_model(load_model(MODELS / "linear_elastic_plastic_isotropic_hardening.yaml"),
                           derivatives=[("sigma", "eps")])
    p = plastic_points()
    got, want = k.evaluate(p, params={"q": 0.0}), linear.evaluate(p)
    for name in ("sigma", "eps_p_new", "alpha_new", "dsigma_deps"):
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-14, err_msg=name)


# ---- errors --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry, message", [
    ("{solve: x - t, tol: 2}", "let.x.tol: a tolerance is a number between 0 and 1, got 2"),
    ("{solve: x - t, max_iter: 0}", "let.x.max_iter: an integer from 1 to 100, got 0"),
    ("{solve: x - t, steps: 3}", "let.x: unknown key 'steps'"),
    ("{init: 1.0}", "let.x: missing required key 'solve'"),
    ("{solve: 'stack([x, x]) - t', init: 0.0}", "the residual has shape (2,), but the unknown 'x' has shape ()"),
    ("{solve: t - 1.0}", "the residual does not depend on 'x'"),
])
def test_a_bad_solve_entry_is_reported_at_its_line(tmp_path, entry, message):
    path = tmp_path / "bad.yaml"
    path.write_text(f"adgrad: 1\nname: bad\ninputs:\n  t: {{shape: []}}\nlet:\n  x: {entry}\noutputs:\n  X: x\n")
    with pytest.raises(SpecError) as err:
        load_model(path)
    assert message in str(err.value) and f"{path}:6:" in str(err.value)
