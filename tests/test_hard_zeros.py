"""A derivative that `where` zeroes is a hard zero in every mode: no inf or NaN of the branch not
taken reaches a result, also when the mask cannot follow the value (through a broadcast product or a
reduction, as in three-body terms over pairs of neighbours).

For every elementwise function with a singular point: the last entry of x is padding, set to the
singular point; u = f(x) is formed into a matrix of pairs (outer(u, u)), and only pairs of real
entries are kept. Gradients must be finite, exactly 0 on the padding entry, and equal central
differences elsewhere, in forward and reverse mode."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest
from adgrad.engine import api

# function expression of x -> (singular point, a range of regular values)
SINGULAR = {
    "sqrt(x)": (0.0, (0.5, 2.0)),
    "cbrt(x)": (0.0, (0.5, 2.0)),
    "log(x)": (0.0, (0.5, 2.0)),
    "log2(x)": (0.0, (0.5, 2.0)),
    "log10(x)": (0.0, (0.5, 2.0)),
    "log1p(x)": (-1.0, (0.5, 2.0)),
    "1 / x": (0.0, (0.5, 2.0)),
    "x ** 0.5": (0.0, (0.5, 2.0)),
    "x ** -1.5": (0.0, (0.5, 2.0)),
    "arcsin(x)": (1.0, (-0.5, 0.5)),
    "arccos(x)": (1.0, (-0.5, 0.5)),
    "arctanh(x)": (1.0, (-0.5, 0.5)),
    "arccosh(x)": (1.0, (1.5, 3.0)),
    "arctan2(x, x)": (0.0, (0.5, 2.0)),
    "norm(stack([x, x], axis=1), axis=1)": (0.0, (0.5, 2.0)),
}
N = 5


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    outs = "\n".join(f"  E{k}: sum(where(pairs, outer(u{k}, u{k}), 0.0))" for k in range(len(SINGULAR)))
    lets = "\n".join(f"  u{k}: {expr}" for k, expr in enumerate(SINGULAR))
    path = tmp_path_factory.mktemp("hard") / "model.yaml"
    path.write_text(textwrap.dedent(f"""\
        adgrad: 1
        name: hard_zeros
        inputs:
          x: [{N}]
          valid: [{N}]
        let:
          pairs: outer(valid, valid) > 0.5
        """) + lets + "\noutputs:\n" + outs + "\n")
    return api.load_model(str(path))


@pytest.fixture(scope="module")
def kernels(model):
    """mode -> one kernel of every E_k's gradient and Hessian (the first derivative by that mode, then
    forward mode over it), which both tests read: one compile per mode."""
    n = range(len(SINGULAR))
    return {mode: api.compile_model(model, derivatives=[(f"E{k}", "x") for k in n] + [(f"E{k}", ["x", "x"]) for k in n],
                                    mode=mode) for mode in ("forward", "reverse")}


def points(k):
    singular, (lo, hi) = list(SINGULAR.values())[k]
    rng = np.random.default_rng(k)
    x = rng.uniform(lo, hi, (3, N))
    x[:, -1] = singular
    valid = np.ones((3, N))
    valid[:, -1] = 0.0
    return {"x": x, "valid": valid}


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_where_gives_hard_zeros_for_every_singular_function(kernels, mode):
    kernel = kernels[mode]
    h = 1e-6
    for k, expr in enumerate(SINGULAR):
        pts = points(k)
        g = kernel.evaluate(pts)[f"dE{k}_dx"]
        assert np.isfinite(g).all(), f"{expr}: a non-finite derivative in {mode} mode: {g}"
        assert np.all(g[:, -1] == 0.0), f"{expr}: the padding entry's derivative is not 0 in {mode} mode"
        for j in range(N - 1):
            up, dn = {**pts, "x": pts["x"].copy()}, {**pts, "x": pts["x"].copy()}
            up["x"][:, j] += h
            dn["x"][:, j] -= h
            fd = (kernel.evaluate(up)[f"E{k}"] - kernel.evaluate(dn)[f"E{k}"]) / (2 * h)
            np.testing.assert_allclose(g[:, j], fd, rtol=1e-6, atol=1e-6, err_msg=f"{expr}, {mode} mode")


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_second_derivatives_keep_the_hard_zeros(kernels, mode):
    """A Hessian (the first derivative by `mode`, then forward mode over it) is finite, 0 in the padding
    row and column, and equals central differences of the gradient."""
    kernel = kernels[mode]
    h = 1e-6
    for k, expr in enumerate(SINGULAR):
        pts = points(k)
        H = kernel.evaluate(pts)[f"d2E{k}_dx_dx"]
        assert np.isfinite(H).all(), f"{expr}: a non-finite second derivative in {mode} mode"
        assert np.all(H[:, -1, :] == 0.0) and np.all(H[:, :, -1] == 0.0), f"{expr}: padding not 0 ({mode})"
        for j in range(N - 1):
            up, dn = {**pts, "x": pts["x"].copy()}, {**pts, "x": pts["x"].copy()}
            up["x"][:, j] += h
            dn["x"][:, j] -= h
            fd = (kernel.evaluate(up)[f"dE{k}_dx"] - kernel.evaluate(dn)[f"dE{k}_dx"]) / (2 * h)
            np.testing.assert_allclose(H[:, :N - 1, j], fd[:, :N - 1], rtol=1e-5, atol=1e-5,
                                       err_msg=f"{expr}, {mode} mode")
