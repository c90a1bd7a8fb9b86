"""Compiled kernels agree with the numpy interpreter of their own optimized graph, point by point
(rtol 1e-12), for values and derivatives. Most kernels are the ones test_rules.py compiles (same model
text and requests, so the same cached kernel: no extra numba compilation when run together)."""
from __future__ import annotations

import numpy as np
import pytest

from adgrad.engine import compile_model
from adgrad.engine.ir.interp import interpret
from test_rules import BINARY, BROADCAST, EAM, FUNCS, INDEX, PARAMS, REDUCE, SECOND, UNARY, kernels, random_points  # noqa: F401

RTOL = 1e-12


def assert_matches_interpreter(kernel, model, pts, params=None):
    """evaluate() on all points == interpret(kernel.graph) at each point, for every output."""
    params = {**model.param_values, **(params or {})}
    out = kernel.evaluate(pts, params=params)
    m = next(iter(pts.values())).shape[0]
    assert set(out) == set(kernel.graph.outputs)
    for i in range(m):
        point = {n: v[i] for n, v in pts.items()}
        ref = interpret(kernel.graph, point, params)
        base = interpret(model.graph, point, params)          # the unoptimized model graph, values only
        for name, want in ref.items():
            got = out[name][i]
            assert got.shape == want.shape, name
            scale = max(1e-300, float(np.max(np.abs(want), initial=0.0)))
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * scale,
                                       err_msg=f"{model.name}: {name} at point {i}: compiled != interpreter")
            if name in base:
                np.testing.assert_allclose(got, base[name], rtol=RTOL, atol=RTOL * scale,
                                           err_msg=f"{model.name}: {name} at point {i}: compiled != model graph")


CHUNKS = [c for g in (UNARY, BINARY, BROADCAST, REDUCE, INDEX, FUNCS, PARAMS) for c in g.chunks()]


@pytest.mark.parametrize("chunk", CHUNKS, ids=[c.name for c in CHUNKS])
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_rule_models(kernels, chunk, mode):
    k = kernels(chunk)
    kern = k.fwd if mode == "forward" else k.rev
    assert_matches_interpreter(kern, k.model, random_points(chunk, 5, seed=11))


@pytest.mark.parametrize("mode", ["manual", "forward", "reverse", "auto"])
def test_eam(model_from_text, mode):
    m = model_from_text(EAM, "eam_small")
    k = compile_model(m, [("E", "x")], mode=mode)
    X = np.random.default_rng(12).uniform(0.0, 1.0, size=(7, 5))
    assert_matches_interpreter(k, m, {"x": X})
    # another param value, passed at evaluate time
    assert_matches_interpreter(k, m, {"x": X}, params={"alpha": np.array(2.5)})


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_second_derivatives(model_from_text, mode):
    text, boxes, names = SECOND["smooth"]
    m = model_from_text(text, "second_smooth")
    pairs = [(a, b) for a in names for b in names]
    k = compile_model(m, [("E", n) for n in names] + [("E", [a, b]) for a, b in pairs], mode=mode)
    rng = np.random.default_rng(13)
    pts = {n: rng.uniform(lo, hi, size=(6,) + m.graph.inputs[n].shape) for n, (lo, hi) in boxes.items()}
    assert_matches_interpreter(k, m, pts)


LAW = """\
adgrad: 1
name: law
inputs:
  F: {shape: [2, 2]}
  t: {shape: []}
params:
  mu: 1.5
  lam: [[1.0, 0.5], [0.5, 2.0]]
let:
  J: F[0, 0] * F[1, 1] - F[0, 1] * F[1, 0]
  I1: sum(F**2)
outputs:
  W: mu * (I1 - 2) - 2 * mu * log(J) + sum(lam * log1p(F**2)) + where(t > 0.5, t * J, J**2)
  P: lam * F * t + maximum(F, 0.9)
"""


def test_mixed_model_auto_mode(model_from_text):
    """let entries, matrix params, a matrix-valued output, a second derivative and a param derivative."""
    m = model_from_text(LAW, "law")
    k = compile_model(m, [("W", "F"), ("W", ["F", "F"]), ("P", "F"), ("W", "mu"), ("P", "lam"), ("W", "t")])
    rng = np.random.default_rng(14)
    F = np.eye(2) + rng.uniform(-0.3, 0.3, size=(8, 2, 2))
    t = rng.uniform(0.0, 1.0, size=8)
    assert_matches_interpreter(k, m, {"F": F, "t": t})
    out = k.evaluate({"F": F, "t": t})
    assert out["d2W_dF_dF"].shape == (8, 2, 2, 2, 2)
    assert out["dP_dlam"].shape == (8, 2, 2, 2, 2)
