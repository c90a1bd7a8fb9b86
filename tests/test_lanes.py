"""Lanes kernels (engine/codegen/vector.py lanes_fit, engine/codegen/load.py LANES): a straight-line
kernel with few values in and out per point runs its body over blocks of LANES_BLOCK points in the
workspace, vectorized across the points, with the vector forms of its math functions.

- which kernels are lanes kernels: the neo-Hookean W+P is; its W+P+A (100 values a point) is only
  when compiled for a caller with the points last (compile_model's points_last); any `math: libm`
  kernel and a kernel calling sin (whose vector form needs libm beyond 2**30) are not;
- the strided driver of a lanes kernel moves entries straight between the caller's arrays and the
  workspace: points last (unit stride), point-first rows with a stride and a partial block give batch's
  bits, and it flags the rows holding a NaN or an infinity, in inputs or results;
- every way of calling one gives the same bits: the batch driver on one thread and on two, with a
  partial last block, the strided driver (a caller's point-last layout), and kernel.point_kernel
  called row by row from the caller's own numba loop;
- the values are the libm kernel's within a few ulp, NaN rows are flagged, and a model with a scalar
  input, a param and two outputs addresses each of them right;
- LLVM vectorizes the loop over points (packed-double instructions in `lanes`).
"""
from __future__ import annotations

import re

import numba
import numpy as np
import pytest
from llvmlite import binding as llvm

from adgrad.engine import compile_model, load_model
from adgrad.engine.codegen.vector import LANES_BLOCK
from adgrad.engine.tools.explain import explain

NEO_HOOKE = """\
adgrad: 1
name: lanes_neo_hooke
inputs:
  F: {shape: [3, 3]}
params:
  mu: 1.5
  lam: 2.5
let:
  J: det(F)
outputs:
  W: 0.5*mu*(trace(F.T @ F) - 3) - mu*log(J) + 0.5*lam*log(J)**2
"""
MIXED = """\
adgrad: 1
name: lanes_mixed
inputs:
  x: {shape: [2]}
  s: {shape: []}
params:
  c: 0.75
outputs:
  E: s * exp(c * x[0]) + log1p(x[1] * x[1]) / (1 + s * s)
  G: x[0] * s - tanh(x[1])
"""
SIZES = [0, 1, LANES_BLOCK - 1, LANES_BLOCK, LANES_BLOCK + 1, 1001]


def is_lanes(kernel):
    assert kernel.lanes == ("def lanes(" in kernel.source)
    return kernel.lanes


@pytest.fixture(scope="module")
def neo(tmp_path_factory):
    path = tmp_path_factory.mktemp("lanes") / "nh.yaml"
    path.write_text(NEO_HOOKE)
    model = load_model(path)
    return model, compile_model(model, [("W", "F")]), compile_model(model, [("W", "F")], math="libm")


def points(m, seed=0):
    return np.eye(3) + 0.1 * np.random.default_rng(seed).standard_normal((m, 3, 3))


def test_which_kernels_run_in_lanes(neo, model_from_text):
    model, vec, lib = neo
    assert is_lanes(vec) and ("log", "vector", f"straight-line code, {LANES_BLOCK} points per vector pass") \
        in vec.math_calls
    assert "kernel: straight-line scalar code (small tensors scalarized), run across points" in explain(model)
    assert not is_lanes(lib) and lib.math_calls == (("log", "libm", "straight-line code"),)
    tangent = compile_model(model, [("W", "F"), ("W", ["F", "F"])])
    assert tangent.scalarized and not is_lanes(tangent)          # 9 + 1 + 9 + 81 values a point
    trig = model_from_text("adgrad: 1\ninputs:\n  x: {shape: [2]}\noutputs:\n  E: sin(x[0]) * x[1]\n", "lanes_sin")
    assert not is_lanes(compile_model(trig, [("E", "x")]))


@pytest.mark.parametrize("m", SIZES)
def test_every_driver_gives_the_same_bits(neo, m):
    _, kernel, _ = neo
    F = points(m)
    serial = kernel.evaluate({"F": F})
    kernel.serial_below = 0
    try:
        parallel = kernel.evaluate({"F": F}, threads=2)
    finally:
        kernel.serial_below = 1024
    last = {n: np.moveaxis(np.full((*s, m), np.nan), -1, 0) for n, s in kernel.output_shapes.items()}
    strided = kernel.evaluate({"F": F}, out=last)
    rows = {n: np.full((m, max(1, int(np.prod(s)))), np.nan) for n, s in kernel.output_shapes.items()}
    by_point(kernel.point_kernel, np.ascontiguousarray(F.reshape(m, 9)), *kernel.param_rows(),
             rows["W"], rows["dW_dF"], kernel.workspace(1)[0])
    for name in serial:
        for other in (parallel[name], strided[name], rows[name].reshape(serial[name].shape)):
            assert np.ascontiguousarray(other).tobytes() == serial[name].tobytes(), name


@numba.njit
def by_point(point, F, mu, lam, W, P, work):
    for i in range(F.shape[0]):
        point(F[i], mu, lam, W[i], P[i], work)


def test_values_equal_the_libm_kernel_and_nan_rows_are_flagged(neo):
    _, vec, lib = neo
    F = points(2000, seed=3)
    F[17, 1, 2] = np.nan
    flags = np.zeros(len(F), dtype=bool)
    a, b = vec.evaluate({"F": F}, nonfinite=flags), lib.evaluate({"F": F})
    assert np.flatnonzero(flags).tolist() == [17]
    for name in a:                          # within 4 ulp of each point's largest entry (P cancels)
        x, y = (np.delete(r[name].reshape(len(F), -1), 17, axis=0) for r in (a, b))
        assert np.all(np.abs(x - y) <= 4 * np.finfo(float).eps * np.abs(y).max(axis=1, keepdims=True)), name
        assert np.isnan(a[name][17]).any()


def test_a_scalar_input_a_param_and_two_outputs(model_from_text):
    model = model_from_text(MIXED, "lanes_mixed")
    kernel = compile_model(model, [("E", "x"), ("E", "s"), ("G", "x")])
    assert is_lanes(kernel)
    rng = np.random.default_rng(5)
    x, s = rng.standard_normal((77, 2)), rng.standard_normal(77)
    got = kernel.evaluate({"x": x, "s": s})
    c, x0, x1 = 0.75, x[:, 0], x[:, 1]
    want = {"E": s * np.exp(c * x0) + np.log1p(x1 * x1) / (1 + s * s), "G": x0 * s - np.tanh(x1),
            "dE_dx": np.stack([s * c * np.exp(c * x0), 2 * x1 / (1 + x1 * x1) / (1 + s * s)], axis=1),
            "dE_ds": np.exp(c * x0) - np.log1p(x1 * x1) * 2 * s / (1 + s * s) ** 2,
            "dG_dx": np.stack([s, -(1 - np.tanh(x1) ** 2)], axis=1)}
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-13, atol=1e-15, err_msg=name)


@pytest.mark.skipif(not all(llvm.get_host_cpu_features().get(f) for f in ("avx2", "fma")),
                    reason="packed-double code needs AVX2 and FMA")
def test_the_loop_over_points_is_vectorized(neo):
    _, kernel, _ = neo
    lanes = kernel.module.lanes
    fresh = numba.njit(nogil=True, error_model="numpy")(lanes.py_func)
    params = kernel.param_rows()
    fresh(*params, kernel.workspace(1)[0], 1)
    asm = fresh.inspect_asm(fresh.signatures[0])
    assert len(re.findall(r"^\s*v\w+pd\s+.*%[yz]mm", asm, re.MULTILINE)) >= 50


def test_points_last_makes_the_tangent_a_lanes_kernel(neo):
    """The 100-value tangent as a lanes kernel (points_last): every driver and layout gives the same bits
    (points last: unit stride; every other row of a bigger array: stride 2 points; 1001 points: a partial
    last block), the libm tangent's values within a few ulp, and nonfinite flags on the strided driver."""
    model, _, _ = neo
    requests = [("W", "F"), ("W", ["F", "F"])]
    kernel = compile_model(model, requests, points_last=True)
    assert is_lanes(kernel) and not is_lanes(compile_model(model, requests))
    lib = compile_model(model, requests, math="libm")
    m = 1001
    F = points(m, seed=7)
    ref = kernel.evaluate({"F": F})
    last = {n: np.moveaxis(np.full((*s, m), np.nan), -1, 0) for n, s in kernel.output_shapes.items()}
    F_last = np.moveaxis(np.ascontiguousarray(np.moveaxis(F, 0, -1)), -1, 0)
    spaced = {n: np.full((2 * m, *s), np.nan)[::2] for n, s in kernel.output_shapes.items()}
    for inputs, out in (({"F": F_last}, last), ({"F": F}, spaced)):
        got = kernel.evaluate(inputs, out=out)
        for name in ref:
            assert got[name] is out[name] and np.array_equal(got[name], ref[name]), name
    rows = {n: np.full((m, max(1, int(np.prod(s)))), np.nan) for n, s in kernel.output_shapes.items()}
    by_tangent(kernel.point_kernel, np.ascontiguousarray(F.reshape(m, 9)), *kernel.param_rows(), rows["W"],
               rows["dW_dF"], rows["d2W_dF_dF"], kernel.workspace(1)[0])
    want = lib.evaluate({"F": F})
    for name in ref:
        assert np.array_equal(rows[name].reshape(ref[name].shape), ref[name]), name
        x, y = ref[name].reshape(m, -1), want[name].reshape(m, -1)
        assert np.all(np.abs(x - y) <= 4 * np.finfo(float).eps * np.abs(y).max(axis=1, keepdims=True)), name
    F_last[40, 2, 2] = np.inf              # rows 40 (an input), 900 (a result: J < 0 makes log's NaN)
    F_last[900] = -np.eye(3)
    flags = np.zeros(m, dtype=bool)
    kernel.evaluate({"F": F_last}, out=last, nonfinite=flags)
    assert np.flatnonzero(flags).tolist() == [40, 900]


@numba.njit
def by_tangent(point, F, mu, lam, W, P, A, work):
    for i in range(F.shape[0]):
        point(F[i], mu, lam, W[i], P[i], A[i], work)
