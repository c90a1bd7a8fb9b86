"""User functions with tensor arguments, with and without hand-written derivative rules."""
import numpy as np
import pytest

from adgrad.engine.tools import check as oracle
from adgrad.engine import compile_model
from adgrad.engine.errors import SpecError

MODEL = """\
adgrad: 1
inputs:
  F: {shape: [3, 3], sample: {low: -0.1, high: 0.1}}
  G: {shape: [2, 3, 3], sample: {low: -0.1, high: 0.1}}
functions:
  energy:
    args: {C: [3, 3]}
    expr: trace(C) - log(det(C))
  J:
    args: {A: [3, 3]}
    expr: det(A)
    derivative: [J(A) * inv(A).T]
outputs:
  W: energy((F + eye(3)).T @ (F + eye(3))) + J(F + eye(3))**2
  V: sum(G @ (F + eye(3)))
"""


def test_tensor_functions_and_jacobian_rules_agree_with_finite_differences(model_from_text):
    m = model_from_text(MODEL, "tensor_functions")
    pts = oracle.sample_points(m, 4, seed=1)
    rows = oracle.check(m, [("W", ("F",)), ("V", ("F",)), ("V", ("G",)), ("W", ("F", "F"))], pts)
    bad = [r for r in rows if not r.ok]
    assert not bad, oracle.format_rows(rows)


def test_rule_of_the_wrong_shape_is_reported(model_from_text):
    from adgrad.engine import compile_model
    m = model_from_text(MODEL.replace("[J(A) * inv(A).T]", "[J(A)]"), "bad_rule")
    with pytest.raises(SpecError) as info:
        compile_model(m, [("W", "F")], mode="reverse")
    assert "the derivative of 'J' with respect to 'A' must have shape (3, 3), got ()" in str(info.value)
    assert "functions.J.derivative[0]" in str(info.value)


def test_tensor_argument_shape_is_checked(model_from_text):
    with pytest.raises(SpecError, match=r"argument 'C' must have shape \(3, 3\), got \(2, 3, 3\)"):
        model_from_text(MODEL.replace("energy((F + eye(3)).T @ (F + eye(3)))", "energy(G)"), "bad_arg")


def test_dot_with_a_scalar_operand_multiplies_as_numpy_does(model_from_text):
    m = model_from_text("""\
adgrad: 1
inputs:
  s: []
  v: {shape: [3]}
  A: {shape: [2, 3]}
outputs:
  a: dot(s, v)
  b: dot(A, s)
  c: dot(s, s) + dot(v, v)
""", "dot_scalar")
    rng = np.random.default_rng(0)
    pts = {"s": rng.normal(size=4), "v": rng.normal(size=(4, 3)), "A": rng.normal(size=(4, 2, 3))}
    out = compile_model(m, [("a", "s"), ("b", "A")]).evaluate(pts)
    for i in range(4):
        s, v, A = pts["s"][i], pts["v"][i], pts["A"][i]
        np.testing.assert_allclose(out["a"][i], np.dot(s, v), rtol=1e-15)
        np.testing.assert_allclose(out["b"][i], np.dot(A, s), rtol=1e-15)
        np.testing.assert_allclose(out["c"][i], np.dot(s, s) + np.dot(v, v), rtol=1e-15)
        np.testing.assert_allclose(out["da_ds"][i], v, rtol=1e-15)
        np.testing.assert_allclose(out["db_dA"][i], s * np.eye(6).reshape(2, 3, 2, 3), rtol=1e-15)
