"""User functions with tensor arguments, with and without hand-written derivative rules."""
import pytest

from adgrad.engine import check as oracle
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
