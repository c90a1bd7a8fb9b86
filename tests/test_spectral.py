"""Spectral functions (eigvalsh, powm, sqrtm, logm, expm): values, gradients and Hessians against an
mpmath oracle (eigen-decomposition and divided differences at 50 digits) at F = I, at two equal
eigenvalues, at gaps of 1e-4, 1e-8 and 1e-12 and at random F; forward against reverse mode; central
differences; and the derivatives that are refused with a message."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adgrad.engine import compile_model, load_model
from adgrad.engine.errors import SpecError
from adgrad.engine.numeric import spectral as num

DIGITS = 60         # mpmath's working precision for the oracle (set locally: other tests set their own)

MODEL = """\
adgrad: 1
name: spectral_test
inputs:
  F: {shape: [3, 3]}
params:
  a: 1.7
let:
  C: F.T @ F
outputs:
  Wpow: trace(powm(C, a/2))
  Wlog: trace(logm(C) @ logm(C))/4
  Wsqrt: sum(sqrtm(C) * F)
  Wexp: trace(expm(C/4))
  lam: eigvalsh(C)
  Wmat: sum(powm(C, a/2))
  Wsum: 2*trace(powm(C, a/2)) - 0.3*trace(powm(C, -0.75)) + trace(logm(C))/5
"""
# the scalar function each output applies to the eigenvalues of C (for the oracle), where it is tr f(C)
ORACLE_F = {
    "Wpow": lambda x: x ** mpmath.mpf(0.85),
    "Wlog": lambda x: mpmath.log(x) ** 2 / 4,
    "Wexp": lambda x: mpmath.exp(x / 4),
    "Wsum": lambda x: 2 * x ** mpmath.mpf(0.85) - mpmath.mpf(0.3) * x ** mpmath.mpf(-0.75) + mpmath.log(x) / 5,
}
NAMES = ["Wpow", "Wlog", "Wsqrt", "Wexp", "Wsum"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("spectral") / "model.yaml"
    path.write_text(MODEL)
    return load_model(path)


@pytest.fixture(scope="module")
def kernels(model):
    want = [(n, "F") for n in NAMES] + [(n, ["F", "F"]) for n in NAMES] + [("lam", "F"), ("Wpow", "a")]
    return {mode: compile_model(model, derivatives=want, mode=mode) for mode in ("forward", "reverse")}


def rotation(rng):
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    return q * np.sign(np.diag(r))


def stretched(stretches, rng):
    """F = Q diag(stretches) R: C = F^T F has the eigenvalues stretches**2."""
    return rotation(rng) @ np.diag(stretches) @ rotation(rng)


def cases():
    """(label, F): the degenerate and nearly degenerate points, then random ones."""
    rng = np.random.default_rng(7)
    out = [("identity", np.eye(3)), ("uniaxial", np.diag([1.3, 1 / math.sqrt(1.3), 1 / math.sqrt(1.3)])),
           ("rotated uniaxial", stretched([1.3, 0.9, 0.9], rng)), ("rotation", rotation(rng))]
    for gap in (1e-4, 1e-8, 1e-12):
        s = math.sqrt(1 + gap)
        out.append((f"gap {gap:g}, two", stretched([1.0, s, 1.4], rng)))
        out.append((f"gap {gap:g}, three", stretched([1.0, s, math.sqrt(1 + 2 * gap)], rng)))
    for k in range(6):
        out.append((f"random {k}", np.eye(3) + 0.3 * rng.normal(size=(3, 3))))
    return out


CASES = cases()


# ---- the oracle: tr f(F^T F), its gradient and Hessian in 50-digit arithmetic ---------------------------
def _dd(f, xs):
    """The divided difference f[x0, ..., xn], confluent nodes by derivatives (mpmath.diff)."""
    xs = sorted(xs)
    if xs[0] == xs[-1]:
        return mpmath.diff(f, xs[0], len(xs) - 1) / math.factorial(len(xs) - 1)
    return (_dd(f, xs[1:]) - _dd(f, xs[:-1])) / (xs[-1] - xs[0])


def oracle(f, F):
    """(W, dW/dF (3, 3), d2W/dF2 (3, 3, 3, 3)) of W = tr f(F^T F): dW = tr(f'(C) dC) and
    d2W = tr(f'(C) d2C) + <D f'(C)[dC], dC'> (Daleckii-Krein with the divided differences of f')."""
    with mpmath.workdps(DIGITS):
        return _oracle(f, F)


def _oracle(f, F):
    Fm = mpmath.matrix(F.tolist())
    C = Fm.T * Fm
    lam, Q = mpmath.eigsy(C)
    lam = [lam[i] for i in range(3)]
    fp = lambda x: mpmath.diff(f, x)                                    # noqa: E731
    W = sum(f(x) for x in lam)
    G1 = Q * mpmath.diag([fp(x) for x in lam]) * Q.T                   # f'(C)
    P = 2 * Fm * G1                                                     # dW/dF
    gam = [[_dd(fp, [lam[i], lam[j]]) for j in range(3)] for i in range(3)]

    def dC(a, b):
        E = mpmath.zeros(3, 3)
        E[a, b] = 1
        return E.T * Fm + Fm.T * E, E
    dirs = [dC(a, b) for a in range(3) for b in range(3)]
    H = np.zeros((9, 9))
    hats = [Q.T * d * Q for d, _ in dirs]
    for i, (dci, Ei) in enumerate(dirs):
        for j, (dcj, Ej) in enumerate(dirs):
            first = 2 * sum((G1 * (Ei.T * Ej))[k, k] for k in range(3))
            second = sum(gam[p][q] * hats[i][p, q] * hats[j][p, q] for p in range(3) for q in range(3))
            H[i, j] = float(first + second)
    return float(W), np.array(P.tolist(), dtype=float), H.reshape(3, 3, 3, 3)


def rel(got, want, floor=1e-300):
    """The largest difference relative to the largest entry of `want` (or `floor`, for a zero gradient)."""
    return float(np.max(np.abs(got - want)) / max(floor, np.max(np.abs(want))))


@pytest.fixture(scope="module")
def results(kernels):
    F = np.array([f for _, f in CASES])
    return {mode: k.evaluate({"F": F}) for mode, k in kernels.items()}


@pytest.mark.parametrize("name", sorted(ORACLE_F))
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_values_gradients_hessians_match_the_oracle_at_degenerate_points(results, mode, name):
    out = results[mode]
    for k, (label, F) in enumerate(CASES):
        W, P, H = oracle(ORACLE_F[name], F)
        assert rel(out[name][k], W, 1.0) < 1e-14, label
        assert rel(out[f"d{name}_dF"][k], P, 1.0) < 1e-12, label
        hess = out[f"d2{name}_dF_dF"][k] if f"d2{name}_dF_dF" in out else out[f"d2{name}_dF2"][k]
        assert np.isfinite(hess).all(), label
        assert rel(hess, H, 1.0) < 1e-9, f"{label}: Hessian {rel(hess, H, 1.0):.1e} from the exact one"


def test_forward_and_reverse_mode_agree(results):
    f, r = results["forward"], results["reverse"]
    for name in f:
        np.testing.assert_allclose(f[name], r[name], rtol=1e-11, atol=1e-11 * np.max(np.abs(f[name])), err_msg=name)


def _central(kernel, name, F, h=1e-6):
    cols = []
    for idx in np.ndindex(3, 3):
        step = np.zeros((3, 3))
        step[idx] = h
        cols.append((kernel.evaluate({"F": F + step})[name] - kernel.evaluate({"F": F - step})[name]) / (2 * h))
    d = np.stack(cols, axis=-1)
    return d.reshape(d.shape[:-1] + (3, 3))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(-0.3, 0.3), min_size=9, max_size=9), st.sampled_from(["forward", "reverse"]))
def test_derivatives_equal_central_differences(kernels, noise, mode):
    """Every output (sqrtm times F; the eigenvalues where they are apart) at F = I + noise, both orders."""
    k = kernels[mode]
    F = (np.eye(3) + np.reshape(noise, (3, 3)))[None]
    if abs(np.linalg.det(F[0])) < 0.2:
        return
    out = k.evaluate({"F": F})
    # single eigenvalues have derivatives only where they are apart
    apart = int(np.min(np.diff(np.linalg.eigvalsh(F[0].T @ F[0]))) > 1e-3)
    for name in NAMES + ["lam"] * apart:
        fd = _central(k, name, F)
        assert rel(out[f"d{name}_dF"], fd, 1.0) < 1e-7, name
    for name in NAMES:
        hess = out[f"d2{name}_dF_dF"] if f"d2{name}_dF_dF" in out else out[f"d2{name}_dF2"]
        assert rel(hess, _central(k, f"d{name}_dF", F), 1.0) < 1e-6, name


def test_derivative_with_respect_to_the_exponent(kernels, model):
    F = np.array([f for _, f in CASES[3:8]])
    k = kernels["reverse"]
    h = 1e-6
    up = k.evaluate({"F": F}, params={"a": 1.7 + h})["Wpow"]
    down = k.evaluate({"F": F}, params={"a": 1.7 - h})["Wpow"]
    for mode in ("forward", "reverse"):
        got = kernels[mode].evaluate({"F": F})["dWpow_da"]
        assert rel(got, (up - down) / (2 * h)) < 1e-7


def test_a_sum_of_traces_rotates_each_direction_once(model):
    """The Hessian of a sum of traces of matrix functions of one matrix (reverse, then forward mode): its
    derivatives of matrix functions in the same directions are merged into one eig_d1 (engine/opt/spectral.py);
    the oracle and central-difference tests above check its values (Wsum)."""
    ops = [e.op for e in compile_model(model, derivatives=[("Wsum", ["F", "F"])], mode="reverse").graph.eqns]
    assert ops.count("eig_d1") == 1 and "matfun_d1" not in ops


def test_eigenvalues_match_numpy():
    rng = np.random.default_rng(3)
    for scale in (1e-300, 1e-8, 1.0, 1e8, 1e300):
        for _ in range(50):
            a = rng.normal(size=(3, 3)) * scale
            e = num.eigh3(tuple(a.ravel()))
            lam, u = np.array(e[:3]), np.array(e[3:]).reshape(3, 3)
            sym = (a + a.T) / 2
            want = np.linalg.eigvalsh(sym)
            assert np.all(np.abs(lam - want) <= 4e-15 * np.max(np.abs(want))), scale
            assert np.allclose(u.T @ u, np.eye(3), atol=4e-16 * 3)
            assert np.allclose(u @ np.diag(lam) @ u.T, sym, rtol=0, atol=2e-15 * np.max(np.abs(want)))


@pytest.mark.parametrize("kind, p, f", [(num.POW, 0.85, lambda x: x ** mpmath.mpf(0.85)),
                                        (num.POW, -3.5, lambda x: x ** mpmath.mpf(-3.5)),
                                        (num.POW, 12.0, lambda x: x ** 12), (num.LOG, 0.0, mpmath.log),
                                        (num.EXP, 0.0, mpmath.exp)])
def test_divided_differences_are_accurate_at_every_gap(kind, p, f):
    with mpmath.workdps(DIGITS):
        _divided_differences(kind, p, f)


def _divided_differences(kind, p, f):
    for x in (0.3, 1.0, 7.0):
        for gap in (0.0, 1e-15, 1e-12, 1e-8, 1e-5, 1e-4, 2e-4, 1e-2, 0.5, 3.0):
            a, b, c = x, x * (1 + gap), x * (1 + 2.5 * gap)
            want1 = _dd(f, [mpmath.mpf(a), mpmath.mpf(b)])
            assert abs(num.dd1(kind, p, a, b) - want1) <= 1e-14 * abs(want1), (x, gap)
            want2 = _dd(f, [mpmath.mpf(a), mpmath.mpf(b), mpmath.mpf(c)])
            assert abs(num.dd2(kind, p, a, b, c) - want2) <= 2e-13 * abs(want2), (x, gap)
            want2 = _dd(f, [mpmath.mpf(a), mpmath.mpf(a), mpmath.mpf(c)])
            assert abs(num.dd2(kind, p, a, a, c) - want2) <= 2e-13 * abs(want2), (x, gap)


def test_kind_codes_agree():
    from adgrad.engine.ir.ops.spectral import KINDS
    assert KINDS == num.KINDS


def test_second_derivatives_of_eigenvalues_are_refused(model):
    with pytest.raises(SpecError, match="second derivatives of eigvalsh"):
        compile_model(model, derivatives=[("lam", ["F", "F"])])


def test_second_derivatives_in_the_exponent_are_refused(model):
    with pytest.raises(SpecError, match="with respect to its exponent"):
        compile_model(model, derivatives=[("Wmat", ["F", "a"])])


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_mixed_derivative_of_a_trace_in_the_exponent(model, mode):
    """trace(powm(C, p)) has the gradient p C**(p-1), a matrix function whose derivative in p is
    exact (no eigenvalue derivatives), so d2/dF da is given, and equals central differences in a."""
    F = np.array([f for _, f in CASES])
    k = compile_model(model, derivatives=[("Wpow", ["F", "a"]), ("Wpow", "F")], mode=mode, values=["Wpow"])
    h = 1e-6
    fd = (k.evaluate({"F": F}, params={"a": 1.7 + h})["dWpow_dF"] -
          k.evaluate({"F": F}, params={"a": 1.7 - h})["dWpow_dF"]) / (2 * h)
    assert rel(k.evaluate({"F": F})["d2Wpow_dF_da"], fd, 1.0) < 1e-8


def test_a_matrix_that_is_not_3x3_is_an_error(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MODEL.replace("Wexp: trace(expm(C/4))", "Wexp: sum(expm(F[0:2, 0:2]))"))
    with pytest.raises(SpecError, match="expm: a symmetric 3x3 matrix, got shape \\(2, 2\\)"):
        load_model(path)
