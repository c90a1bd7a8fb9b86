"""The model library (configs/models/*.yaml) against felupe, the oracle (tests/felupe_oracle.py).

Each hyperelastic law's W, P = dW/dF and A = d2W/dF2, compiled by adgrad from its model file, equal
felupe's (for the stretch-based Ogden and extended tube: the `hyperelastic` package's, whose
derivatives at equal stretches are exact where tensortrax perturbs) at 1000 deformation gradients: F
= I, 99 uniaxial stretches diag(s, 1/sqrt(s), 1/sqrt(s)) with s in [0.5, 3] and 900 random F = I +
0.25 N(0, 1) with det F > 0. J2 plasticity's stress, plastic strain, hardening variable and
consistent tangent equal felupe's at 1000 strains (half of them yielding), its tangent equals the
closed-form Simo-Hughes tangent and its pure-shear curve the closed-form one. felupe gets the param
values the model files declare from felupe_oracle, not from the files, so a changed param fails; a
param perturbed by 1e-6 is caught too.

Agreement is norm-wise per point: |adgrad - felupe| / max(|felupe|, floor) <= 1e-10, with Frobenius
norms over the value's entries, and floor = 1e-3 times the median of |felupe| over the points (it
matters only where the reference vanishes to round-off: P at F = I, the stress of a strain-free state).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import felupe_oracle as fo
import numpy as np
import pytest
from adgrad.engine import compile_model, load_model

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "configs" / "models"
PLASTIC = "linear_elastic_plastic_isotropic_hardening"
RTOL = 1e-10
HYPER = [("W", "F"), ("W", ["F", "F"])]
HYPERELASTIC = sorted([*fo.HYPERELASTIC, *fo.STRETCH])     # felupe's laws, and the stretch-based ones


def rel_err(a, b):
    """Per point |a - b| / max(|b|, 1e-3 median |b|), norms over all entries of a point's value."""
    a, b = (np.asarray(x).reshape(len(x), -1) for x in (a, b))
    ref = np.linalg.norm(b, axis=1)
    return np.linalg.norm(a - b, axis=1) / np.maximum(ref, 1e-3 * np.median(ref))


def params_of(model):
    return {k: float(v) if v.ndim == 0 else v.copy() for k, v in model.param_values.items()}


def perturbed(model, rel=1e-6):
    """(name, params) with one param value, or one entry of an array param, changed by `rel`."""
    for param, value in params_of(model).items():
        for i in np.ndindex(np.shape(value)):
            changed = np.array(value, dtype=float)
            changed[i] *= 1 + rel
            yield f"{param}{list(i) if i else ''}", {param: changed if changed.ndim else float(changed)}


def deformation_gradients(seed=13):
    rng = np.random.default_rng(seed)
    s = np.linspace(0.5, 3.0, 99)
    uniaxial = np.zeros((99, 3, 3))
    uniaxial[:, 0, 0], uniaxial[:, 1, 1], uniaxial[:, 2, 2] = s, 1 / np.sqrt(s), 1 / np.sqrt(s)
    F = np.eye(3) + 0.25 * rng.standard_normal((1200, 3, 3))
    F = F[np.linalg.det(F) > 0][:900]
    assert len(F) == 900
    return np.concatenate([np.eye(3)[None], uniaxial, F])


@pytest.fixture(scope="module")
def points():
    return deformation_gradients()


def derivatives(name):
    return [("sigma", "eps")] if name == PLASTIC else HYPER


def compiled(name):
    model = load_model(MODELS / f"{name}.yaml")
    return model, compile_model(model, derivatives=derivatives(name))


COMPILE = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_felupe import compiled
for name in sys.argv[1:]:
    compiled(name)
"""


@pytest.fixture(scope="module")
def kernels():
    """name -> (model, kernel), every library model compiled once. numba compiles on one core, so a
    second process compiles every other model meanwhile, and this one then loads those from adgrad's
    kernel cache (with a warm cache both only load)."""
    names = sorted([*HYPERELASTIC, "hencky", PLASTIC])
    helper = subprocess.Popen([sys.executable, "-c", COMPILE, *names[1::2]], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        done = {name: compiled(name) for name in names[0::2]}
    finally:
        helper.wait()
    return {**done, **{name: compiled(name) for name in names[1::2]}}


@pytest.fixture(scope="module")
def hyperelastic(kernels, points):
    """name -> (model, kernel, adgrad's results, felupe's (W, P, A)), computed once."""
    done = {}

    def get(name):
        if name not in done:
            model, kernel = kernels[name]
            oracle = fo.stretch_based if name in fo.STRETCH else fo.hyperelastic
            done[name] = (model, kernel, kernel.evaluate({"F": points}), oracle(name, points))
        return done[name]
    return get


def compare(out, ref):
    """Max relative errors of W, P, A over the points where felupe is finite (adgrad must be NaN exactly
    where felupe is), and the number of such points."""
    finite = np.isfinite(ref[0])
    assert np.array_equal(np.isfinite(out["W"]), finite)
    got = (out["W"], out["dW_dF"], out["d2W_dF_dF"])
    return [rel_err(a[finite], b[finite]).max() for a, b in zip(got, ref)], int(finite.sum())


@pytest.mark.parametrize("name", HYPERELASTIC)
def test_hyperelastic_law_equals_felupe(name, hyperelastic):
    _, _, out, ref = hyperelastic(name)
    errors, finite = compare(out, ref)
    # felupe's van der Waals is NaN where Im < 3 (its I2 uses tr C, see the model file): a few points with J < 1
    assert finite == 1000 if name != "van_der_waals" else finite >= 950
    assert max(errors) <= RTOL, dict(zip(("W", "P", "A"), errors))


@pytest.mark.parametrize("name", HYPERELASTIC)
def test_a_perturbed_param_is_caught(name, hyperelastic, points):
    """The comparison can fail: each param changed by 1e-6 relative gives errors far above RTOL."""
    model, kernel, _, ref = hyperelastic(name)
    for param, params in perturbed(model):
        errors, _ = compare(kernel.evaluate({"F": points}, params=params), ref)
        assert max(errors) > 100 * RTOL, (param, errors)


def test_ogden_with_exponents_2_and_minus_2_is_mooney_rivlin(kernels, points):
    """sum lbar**2 = I1bar and sum lbar**-2 = I2bar, so Ogden (mu_1, 2; mu_2, -2) is Mooney-Rivlin with
    C10 = mu_1/2, C01 = mu_2/2: also its tangent at F = I and at the uniaxial stretches (equal stretches)."""
    _, ogden = kernels["ogden"]
    mr_model, mr = kernels["mooney_rivlin"]
    c10, c01 = params_of(mr_model)["C10"], params_of(mr_model)["C01"]
    got = ogden.evaluate({"F": points}, params={"mu": [2 * c10, 2 * c01], "alpha": [2.0, -2.0]})
    want = mr.evaluate({"F": points})
    for name in ("W", "dW_dF", "d2W_dF_dF"):
        assert rel_err(got[name], want[name]).max() <= 1e-12, name


# three Ogden terms (Ogden 1972's fit of Treloar's data has exponents 1.3, 5 and -2)
OGDEN3 = {"mu": [1.0, 0.01, -0.05], "alpha": [1.3, 5.0, -2.0], "bulk": 2.0}


@pytest.fixture(scope="module")
def ogden3(tmp_path_factory):
    """The library's ogden.yaml with three terms: its arrays mu and alpha replaced in a copy (a config's
    params: may change the values, not the number of terms), compiled."""
    text = (MODELS / "ogden.yaml").read_text()
    for name in ("mu", "alpha"):
        text, n = re.subn(rf"(?m)^  {name}: \[.*\]$", f"  {name}: {OGDEN3[name]}", text)
        assert n == 1, name
    path = tmp_path_factory.mktemp("ogden3") / "ogden.yaml"
    path.write_text(text)
    model = load_model(path)
    assert params_of(model)["mu"].shape == (3,)
    return model, compile_model(model, derivatives=HYPER)


def test_ogden_with_three_terms_equals_felupe(ogden3, points):
    """W, P and A of three terms: felupe's Hyperelastic(ogden, mu, alpha) & Volumetric, whose tensortrax
    eigenvalues are perturbed (up to 3e-5 from the exact values here, 1e-8 at the median; the
    third term left out is more than 1e-2 off), and to 1e-10 the `hyperelastic` package's exact Ogden
    with felupe's Volumetric."""
    model, kernel = ogden3
    out = kernel.evaluate({"F": points})
    got = (out["W"], out["dW_dF"], out["d2W_dF_dF"])
    mu, alpha, bulk = OGDEN3["mu"], OGDEN3["alpha"], OGDEN3["bulk"]
    x = fo.to_felupe(points)
    vol = fo.fem.Volumetric(bulk=bulk)
    umat = fo.fem.Hyperelastic(fo.fem.ogden, mu=mu, alpha=alpha) & vol
    C = np.einsum("kI...,kJ...->IJ...", x, x)
    W = fo.tr.function(fo.fem.ogden, wrt=0, ntrax=2)(C, mu=mu, alpha=alpha)[0] + vol.function([x])[0][0]
    felupe = (W, fo.from_felupe(umat.gradient([x, None])[0]), fo.from_felupe(umat.hessian([x, None])[0]))
    for a, b, name in zip(got, felupe, "WPA"):
        errors = rel_err(a, b)
        assert errors.max() <= 1e-4 and np.median(errors) <= 1e-7, (name, errors.max(), np.median(errors))
    wrong = kernel.evaluate({"F": points}, params={"mu": [1.0, 0.01, 0.0]})
    assert min(rel_err(a, b).max() for a, b in zip((wrong["W"], wrong["dW_dF"], wrong["d2W_dF_dF"]), felupe)) > 1e-2
    exact = fo.hel.DistortionalSpace(fo.hel.StretchesFramework(fo.hel.models.stretches.Ogden(mu=mu, alpha=alpha)))
    P = fo.from_felupe(exact.gradient([x, None])[0] + vol.gradient([x, None])[0])
    A = fo.from_felupe(exact.hessian([x, None])[0] + vol.hessian([x, None])[0])
    assert max(rel_err(got[1], P).max(), rel_err(got[2], A).max()) <= RTOL
    for param, params in perturbed(model):
        changed = kernel.evaluate({"F": points}, params=params)
        assert rel_err(changed["d2W_dF_dF"], A).max() > 100 * RTOL, param


def log_strain(F):
    """log V of b = F F^T (M, 3, 3), by numpy's eigh."""
    lam, n = np.linalg.eigh(np.einsum("mik,mjk->mij", F, F))
    return np.einsum("mia,ma,mja->mij", n, np.log(lam) / 2, n)


def test_hencky_stress_is_the_closed_form(kernels, points):
    """P = tau F^-T with tau = 2 mu dev(log V) + bulk tr(log V) I, and at F = I the tangent of linear
    elasticity with shear modulus mu and bulk modulus bulk; elsewhere the tangent equals central
    differences of that stress."""
    model, k = kernels["hencky"]
    mu, bulk = params_of(model)["mu"], params_of(model)["bulk"]

    def stress(F):
        e = log_strain(F)
        tr_e = np.trace(e, axis1=1, axis2=2)[:, None, None]
        tau = 2 * mu * (e - tr_e / 3 * np.eye(3)) + bulk * tr_e * np.eye(3)
        return tau @ np.linalg.inv(F).transpose(0, 2, 1)
    out = k.evaluate({"F": points})
    assert rel_err(out["dW_dF"], stress(points)).max() <= 1e-12
    d = np.eye(3)
    linear = mu * (np.einsum("ik,jl->ijkl", d, d) + np.einsum("il,jk->ijkl", d, d)) + \
        (bulk - 2 * mu / 3) * np.einsum("ij,kl->ijkl", d, d)
    assert np.abs(out["d2W_dF_dF"][0] - linear).max() <= 1e-13
    h, F = 1e-6, points[::50]
    fd = np.stack([(stress(F + h * E) - stress(F - h * E)) / (2 * h) for E in np.eye(9).reshape(9, 3, 3)], axis=-1)
    assert rel_err(out["d2W_dF_dF"][::50], fd.reshape(-1, 3, 3, 3, 3)).max() <= 1e-7


# -- small-strain J2 plasticity with linear isotropic hardening


def sym(a):
    return (a + np.swapaxes(a, 1, 2)) / 2


def plastic_points(seed=7):
    """eps (non-symmetric: the model, like felupe, takes its symmetric part), a deviatoric eps_p, alpha
    in [0, 0.05], and the previous step's strain for felupe's state; point 0 is strain-free (eps = eps_p)."""
    rng = np.random.default_rng(seed)
    m = 1000
    eps = 0.01 * rng.standard_normal((m, 3, 3))
    eps_p = sym(0.004 * rng.standard_normal((m, 3, 3)))
    eps_p -= np.trace(eps_p, axis1=1, axis2=2)[:, None, None] * np.eye(3) / 3
    alpha = rng.uniform(0.0, 0.05, m)
    eps[0] = eps_p[0]
    return {"eps": eps, "eps_p": eps_p, "alpha": alpha}, sym(0.01 * rng.standard_normal((m, 3, 3)))


PLASTIC_RESULTS = ("sigma", "eps_p_new", "alpha_new", "dsigma_deps")


@pytest.fixture(scope="module")
def plastic(kernels):
    """(model, kernel, inputs, felupe's (sigma, eps_p_new, alpha_new, dsigma_deps)), computed once."""
    model, kernel = kernels[PLASTIC]
    inputs, eps_old = plastic_points()
    return model, kernel, inputs, fo.plasticity(inputs["eps"], inputs["eps_p"], inputs["alpha"], eps_old)


def plastic_errors(out, ref):
    return {k: rel_err(out[k], r).max() for k, r in zip(PLASTIC_RESULTS, ref)}


def test_plasticity_equals_felupe(plastic):
    _, kernel, inputs, ref = plastic
    out = kernel.evaluate(inputs)
    yielded = out["alpha_new"] > inputs["alpha"]
    assert 300 <= yielded.sum() <= 700 and not yielded[0]
    errors = plastic_errors(out, ref)
    assert max(errors.values()) <= RTOL, errors


def test_a_perturbed_plasticity_param_is_caught(plastic):
    model, kernel, inputs, ref = plastic
    for param, params in perturbed(model):
        errors = plastic_errors(kernel.evaluate(inputs, params=params), ref)
        assert max(errors.values()) > 100 * RTOL, (param, errors)


def simo_hughes(eps, eps_p, alpha, E, nu, sy, K):
    """The closed-form consistent tangent of the radial return (Simo and Hughes 1998, chapter 3)."""
    lmbda, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    eye = np.eye(3)
    ident = (np.einsum("ik,jl->ijkl", eye, eye) + np.einsum("il,jk->ijkl", eye, eye)) / 2
    vol = np.einsum("ij,kl->ijkl", eye, eye)
    ee = sym(eps) - eps_p
    s = 2 * mu * (ee - np.trace(ee, axis1=1, axis2=2)[:, None, None] * eye / 3)
    norm_s = np.linalg.norm(s, axis=(1, 2))
    f = norm_s - np.sqrt(2 / 3) * (sy + K * alpha)
    tangent = np.broadcast_to(lmbda * vol + 2 * mu * ident, (len(eps), 3, 3, 3, 3)).copy()
    p = f > 0
    n = s[p] / norm_s[p, None, None]
    nn = np.einsum("mij,mkl->mijkl", n, n)
    dgamma = f[p] / (2 * mu + 2 / 3 * K)
    tangent[p] -= (2 * mu / (1 + K / (3 * mu)) * nn
                   + (4 * mu**2 * dgamma / norm_s[p])[:, None, None, None, None] * (ident - vol / 3 - nn))
    return tangent


def test_plasticity_tangent_is_simo_hughes(plastic):
    _, kernel, inputs, _ = plastic
    out = kernel.evaluate(inputs)
    assert rel_err(out["dsigma_deps"], simo_hughes(**inputs, **fo.PLASTICITY)).max() <= RTOL


def test_plasticity_pure_shear(plastic):
    """eps_12 = eps_21 = gamma/2 from a virgin state: tau = mu gamma up to gamma_y = sy/(sqrt(3) mu),
    then tau = sy/sqrt(3) + mu K/(3 mu + K) (gamma - gamma_y)."""
    kernel = plastic[1]
    E, nu, sy, K = (fo.PLASTICITY[k] for k in ("E", "nu", "sy", "K"))
    mu = E / (2 * (1 + nu))
    gamma_y = sy / (np.sqrt(3) * mu)
    gamma = np.linspace(0.0, 5 * gamma_y, 101)
    eps = np.zeros((101, 3, 3))
    eps[:, 0, 1] = eps[:, 1, 0] = gamma / 2
    out = kernel.evaluate({"eps": eps, "eps_p": np.zeros((101, 3, 3)), "alpha": np.zeros(101)})
    tau = np.where(gamma <= gamma_y, mu * gamma, sy / np.sqrt(3) + mu * K / (3 * mu + K) * (gamma - gamma_y))
    np.testing.assert_allclose(out["sigma"][:, 0, 1], tau, rtol=RTOL, atol=RTOL * sy)
    others = out["sigma"].copy()
    others[:, 0, 1] = others[:, 1, 0] = 0
    assert np.abs(others).max() <= RTOL * sy


def test_the_felupe_extra_installs_the_counterparts():
    """docs/models.md names felupe.Hyperelastic(law, ...) as the counterparts; it needs tensortrax, so the
    felupe extra installs it with felupe, and the counterpart runs (here: neo-Hooke's stress at a stretch)."""
    extra = re.search(r"^felupe = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert set(re.findall(r'"([\w-]+)', extra)) == {"felupe", "tensortrax"}
    x = fo.to_felupe(np.diag([1.2, 1.0, 1.0])[None])
    P = fo.fem.Hyperelastic(fo.fem.neo_hooke, mu=1.0).gradient([x, None])[0][..., 0, 0]
    assert np.isclose(P[0, 0], 1.2 ** (-2 / 3) * (1.2 - (1.2**2 + 2) / (3 * 1.2)))


def test_the_checked_models_are_in_the_library_and_documented():
    """Each model checked here is a file of configs/models whose header gives its parameters, a
    reference and its felupe counterpart."""
    checked = sorted([*HYPERELASTIC, "hencky", PLASTIC])
    assert set(checked) <= {p.stem for p in MODELS.glob("*.yaml")}
    for name in checked:
        header = (MODELS / f"{name}.yaml").read_text().split("\nadgrad:")[0]
        assert "Reference:" in header and "felupe:" in header and "Parameters" in header, name
