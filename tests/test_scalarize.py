"""Scalarizing small tensors: the scalar graph means what the tensor graph means, Hessians read
their upper triangle from the lower one, structural zeros stay zero, and only small kernels change."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adgrad.engine import compile_model, load_model
from adgrad.engine.ad.transform import jacobian_forward, jacobian_reverse
from adgrad.engine.ir.core import Builder, Graph, Var
from adgrad.engine.ir.interp import interpret
from adgrad.engine.opt.dce import dce
from adgrad.engine.opt.scalarize import pays_off, scalarize
from ir_oracle import derivative_graph
from test_tensor_props import models

SMALL = """
adgrad: 1
name: small
inputs:
  F: {shape: [3, 3]}
  v: {shape: [3]}
params:
  A: [[1.0, 0.5, 0.0], [0.0, 2.0, -1.0], [0.3, 0.0, 1.5]]
let:
  C: F.T @ F
  s: softmax(v * F[1, ::-1])
outputs:
  W: 0.5*trace(C) - log(det(F)) + sum(inv(F) * A) + max(v) * prod(v[::2]) + dot(s, v)
  P: where(F > 0, F**2, -F) @ v + minimum(v, 0.5) * F[:, 0]
"""

DERIVS = {
    "gradient": [("W", ["F"]), ("P", ["v"])],
    "hessian": [("W", ["F", "F"]), ("W", ["v", "v"]), ("W", ["F", "v"])],
    "jacobian": [("P", ["F"])],
}


def graph_of(model, requests, mode):
    """The optimized derivative graph compile_model would emit, and its symmetric outputs."""
    symmetric = {f"d2{of}_d{wrt[0]}_d{wrt[1]}": len(model.graph.inputs[wrt[0]].shape)
                 for of, wrt in requests if len(wrt) == 2 and wrt[0] == wrt[1]}
    return dce(derivative_graph(model, requests, mode)), symmetric


def points(model, k, seed=0):
    rng = np.random.default_rng(seed)
    F = np.eye(3) + 0.3 * rng.standard_normal((k, 3, 3))
    return [{"F": F[i], "v": rng.uniform(-1, 1, 3)} for i in range(k)]


@pytest.mark.parametrize("mode", ["forward", "reverse"])
@pytest.mark.parametrize("which", sorted(DERIVS))
def test_scalar_graph_means_the_tensor_graph(model_from_text, which, mode):
    model = model_from_text(SMALL)
    graph, symmetric = graph_of(model, DERIVS[which], mode)
    scalar = scalarize(graph, symmetric, limit=100_000)
    assert all(not e.out.shape for e in scalar.eqns if e.op != "pack")
    for pt in points(model, 5):
        want = interpret(graph, pt, model.param_values)
        got = interpret(scalar, pt, model.param_values)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12, err_msg=name)


def test_hessian_reads_upper_triangle_from_lower(model_from_text):
    model = model_from_text(SMALL)
    graph, symmetric = graph_of(model, [("W", ["F", "F"])], "reverse")
    mirrored, full = scalarize(graph, symmetric, limit=100_000), scalarize(graph, {}, limit=100_000)
    assert len(mirrored.eqns) < 0.85 * len(full.eqns)
    pt = points(model, 1)[0]
    H = interpret(mirrored, pt, model.param_values)["d2W_dF_dF"].reshape(9, 9)
    np.testing.assert_array_equal(H, H.T)
    np.testing.assert_allclose(H, interpret(full, pt, model.param_values)["d2W_dF_dF"].reshape(9, 9),
                               rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_structural_zeros_stay_zero_where_a_partial_is_infinite(model_from_text, mode):
    """sqrt's partial is inf at 0; the off-diagonal entries of the Jacobian of sqrt(x) are exact
    zeros (JAX's symbolic zeros), not inf*0 = NaN."""
    model = model_from_text("""
adgrad: 1
name: roots
inputs: {x: {shape: [3]}}
outputs: {y: sqrt(x)}
""")
    kernel = compile_model(model, [("y", "x")], mode=mode)
    assert kernel.scalarized
    J = kernel.evaluate({"x": np.array([[0.0, 4.0, 1.0]])})["dy_dx"][0]
    assert J[0, 0] == np.inf
    np.testing.assert_array_equal(J[1:, 1:], np.diag([0.25, 0.5]))
    assert (J[~np.eye(3, dtype=bool)] == 0).all()


def test_small_kernels_are_straight_line_and_long_loops_stay(model_from_text):
    neo = load_model("configs/neohookean_model.yaml")
    kernel = compile_model(neo, [("W", "F"), ("W", ["F", "F"])])
    assert kernel.scalarized and kernel.workspace_size == 0
    point = kernel.source[kernel.source.index("def point("):kernel.source.index("def batch(")]
    assert "for " not in point
    F = np.eye(3) + 0.05 * np.random.default_rng(1).standard_normal((7, 3, 3))
    out = kernel.evaluate({"F": F})
    graph = kernel.graph
    for i in range(len(F)):
        want = interpret(graph, {"F": F[i]}, neo.param_values)
        for name, value in want.items():
            np.testing.assert_allclose(out[name][i], value, rtol=1e-13, atol=1e-14, err_msg=name)

    eam = compile_model(load_model("configs/eam_model.yaml"), [("E", "x")], mode="reverse")
    assert not eam.scalarized           # 100-element loops: straight-line code would remove nothing
    graph, _ = graph_of(eam.model, [("E", ["x"])], "reverse")
    assert not pays_off(graph, scalarize(graph))


def test_gives_up_on_long_results(model_from_text):
    model = model_from_text(SMALL)
    graph, symmetric = graph_of(model, DERIVS["hessian"], "forward")
    assert scalarize(graph, symmetric, limit=50) is None


def test_few_large_products_stay_loops(model_from_text):
    """sum(inv(A))'s gradient for a 16x16 A: two 16x16x16 products would be 9,477 scalar equations,
    above the limit (straight-line it compiled in 20 s, as loops in 3 s)."""
    model = model_from_text("adgrad: 1\ninputs:\n  A: {shape: [16, 16]}\noutputs:\n  S: sum(inv(A))\n", "inv16")
    graph, _ = graph_of(model, [("S", ["A"])], "reverse")
    assert len(scalarize(graph, limit=100_000).eqns) > 3000
    assert scalarize(graph) is None


def test_pack_rules_in_both_modes():
    """pack's own derivative rules: d pack(x1*x2, sin(x0), x2) / dx in forward and reverse mode."""
    x = Var((3,))
    b = Builder(Graph({"x": x}, {}, [], {}))
    with b.active():
        x0, x1, x2 = (b.emit("getitem", x, index=(k,)) for k in range(3))
        y = b.emit("pack", x1 * x2, b.emit("sin", x0), x2, 2.0 * x0, shape=(2, 2))
    b.graph.outputs = {"fwd": jacobian_forward(b, {}, x, y), "rev": jacobian_reverse(b, {}, x, y)}
    xv = np.array([0.3, -1.2, 0.7])
    want = np.array([[0, xv[2], xv[1]], [np.cos(xv[0]), 0, 0], [0, 0, 1], [2, 0, 0]]).reshape(2, 2, 3)
    got = interpret(dce(b.graph), {"x": xv}, {})
    np.testing.assert_allclose(got["fwd"], want, rtol=1e-15)
    np.testing.assert_allclose(got["rev"], want, rtol=1e-15)


def test_negations_fold_into_sums_and_out_of_products():
    """x + (-y) -> x - y, x - (-y) -> x + y, (-x) y -> -(x y) and (-x)(-y) -> x y: no neg is left where a
    sum absorbs it, and the values are the tensor graph's to the bit, signed zeros, infinities and NaN included
    (a NaN's sign is not a value)."""
    x, y = Var((6,)), Var((6,))
    b = Builder(Graph({"x": x, "y": y}, {}, [], {}))
    with b.active():
        nx, ny = b.emit("neg", x), b.emit("neg", y)
        b.graph.outputs = {"a": x + ny, "s": x - ny, "m": (nx * y) + 1.0, "mm": nx * ny}
    scalar = scalarize(b.graph, limit=100_000)
    assert not any(e.op == "neg" for e in scalar.eqns)
    pt = {"x": np.array([0.0, -0.0, 1.5, np.inf, np.nan, -2.0]), "y": np.array([-0.0, -0.0, 0.25, np.inf, 1.0, 3e300])}
    want, got = interpret(b.graph, pt, {}), interpret(scalar, pt, {})
    for name in want:
        number = ~np.isnan(want[name])
        np.testing.assert_array_equal(np.signbit(got[name][number]), np.signbit(want[name][number]), err_msg=name)
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(case=models(max_depth=3, rank_max=2), seed=st.integers(0, 2**32 - 1), mode=st.sampled_from(["forward", "reverse"]))
def test_scalarized_random_expressions_mean_the_same(model_from_text, case, seed, mode):
    """Random tensor expressions (tests/test_tensor_props.py's generator) with gradients and
    Hessians: the scalar graph interprets to the tensor graph's values."""
    text, inputs, _ = case
    m = model_from_text(text, "scalarize_props")
    names = list(inputs)[:2]
    requests = [("E", n) for n in names] + [("S", [n, n]) for n in names]
    graph, symmetric = graph_of(m, requests, mode)
    scalar = scalarize(graph, symmetric, limit=100_000)
    point = {n: np.random.default_rng(seed).uniform(-1.0, 1.0, s) for n, s in inputs.items()}
    want, got = interpret(graph, point, {}), interpret(scalar, point, {})
    for name, w in want.items():
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(got[name], w, rtol=1e-10, atol=1e-12 * scale, err_msg=f"{name} of\n{text}")


NEO_HOOKEAN = """
adgrad: 1
name: neohookean
inputs:
  F: {shape: [3, 3]}
params:
  mu: 1.0
  lam: 2.0
let:
  J: det(F)
  logJ: log(J)
outputs:
  W: mu/2*(trace(F.T @ F) - 3) - mu*logJ + lam/2*logJ**2
"""


def test_neo_hookean_tangent_costs_what_the_closed_form_does(model_from_text):
    """W, P and the tangent A as mode auto derives them (P by reverse mode, A by forward mode over it) in
    at most 210 scalar operations (365 before det's gradient was its cofactor matrix and scalar chains'
    tangents were accumulated as one coefficient): each distinct entry of A is one product of two
    cofactors by a scalar, plus mu F_m where it has one. The hand-written closed form
    (benchmarks/neohookean.py) needs about as many."""
    model = model_from_text(NEO_HOOKEAN)
    graph, symmetric = graph_of(model, [("W", ["F"]), ("W", ["F", "F"])], "reverse")
    scalar = scalarize(graph, symmetric)
    arithmetic = [e for e in scalar.eqns if e.op not in ("getitem", "pack", "const")]
    assert len(arithmetic) <= 210, len(arithmetic)
    for pt in points(model, 5):
        want, got = interpret(graph, pt, model.param_values), interpret(scalar, pt, model.param_values)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-13, atol=1e-13, err_msg=name)
