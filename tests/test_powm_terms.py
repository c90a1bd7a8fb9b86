"""powm with an exponent per term and trace over named axes: what lets configs/models/ogden.yaml take
any number of terms as arrays (`sum(2*mu/alpha**2*(trace(powm(Cb, alpha/2), axis1=-2, axis2=-1) - 3))`).

powm(A, p) of an array p is the stack of A**p[i] (numpy's broadcasting of p[..., None, None]), lowered to
the existing spectral ops (one eigendecomposition, one matrix function per entry: no derivative rules of
its own); trace(a, axis1=i, axis2=j) is numpy's, and of such a stack it takes each entry's trace as
trace(powm(A, p)) does (trfun). Checked: the same bits as the terms written one by one, numpy's trace
of arrays of rank 2 to 4 over any two axes, forward = reverse = central differences for the gradient and
the tangent at F = I, at equal stretches and at random F, and the errors.
"""
from __future__ import annotations

import numpy as np
import pytest
from adgrad.engine import compile_model, load_model
from adgrad.engine.errors import SpecError


def model_text(name, W, S):
    """A model of W and S of C = F.T @ F with three terms' coefficients c and exponents p."""
    return f"""\
adgrad: 1
name: {name}
inputs:
  F: {{shape: [3, 3]}}
params:
  c: [1.0, 0.01, -0.05]
  p: [0.65, 2.5, -1.0]
let:
  C: F.T @ F
outputs:
  W: {W}
  S: {S}
"""


TERMS = model_text("powm_terms", "sum(c*trace(powm(C, p), axis1=-2, axis2=-1))", "powm(C, p)")
ONE_BY_ONE = model_text("powm_one_by_one",
                        "c[0]*trace(powm(C, p[0])) + c[1]*trace(powm(C, p[1])) + c[2]*trace(powm(C, p[2]))",
                        "stack([powm(C, p[0]), powm(C, p[1]), powm(C, p[2])])")
DERIVATIVES = [("W", "F"), ("W", ["F", "F"])]


def model(tmp_path, text, name="m"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return load_model(path)


def points(seed=5):
    """F = I, equal stretches (two and three), nearly equal ones, and random F about I."""
    rng = np.random.default_rng(seed)
    F = np.eye(3) + 0.2 * rng.standard_normal((40, 3, 3))
    F = F[np.linalg.det(F) > 0][:30]
    return np.concatenate([np.eye(3)[None], np.diag([1.3, 1.3, 0.8])[None], np.diag([1.0, 1.0 + 1e-9, 1.0])[None],
                           np.diag([0.9, 0.9, 0.9])[None], F])


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("powm")
    terms, one = model(tmp, TERMS, "terms"), model(tmp, ONE_BY_ONE, "one")
    return {"terms": {mode: compile_model(terms, DERIVATIVES, mode=mode, values=["W", "S"])
                      for mode in ("forward", "reverse")},
            "one": compile_model(one, DERIVATIVES, mode="reverse", values=["W", "S"])}


def rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


def test_an_exponent_per_term_is_the_terms_one_by_one(kernels):
    """The stack and its traces are the terms written one by one, to the bit (the same ops)."""
    F = points()
    got, want = kernels["terms"]["reverse"].evaluate({"F": F}), kernels["one"].evaluate({"F": F})
    assert got["S"].shape == (len(F), 3, 3, 3)
    for name in ("W", "S", "dW_dF", "d2W_dF_dF"):
        assert np.array_equal(got[name], want[name]), name
    C = np.einsum("mki,mkj->mij", F, F)[4:]                 # distinct eigenvalues: numpy's eigh
    lam, U = np.linalg.eigh(C)
    for i, p in enumerate([0.65, 2.5, -1.0]):
        assert rel(got["S"][4:, i], np.einsum("mij,mj,mkj->mik", U, lam**p, U)) <= 1e-13


def test_forward_reverse_and_central_differences_agree(kernels):
    F = points()
    fwd, rev = (kernels["terms"][m].evaluate({"F": F}) for m in ("forward", "reverse"))
    for name in ("W", "dW_dF", "d2W_dF_dF"):
        assert rel(fwd[name], rev[name]) <= 1e-13, name
    h, k = 1e-6, kernels["terms"]["reverse"]
    E = np.eye(9).reshape(9, 3, 3)
    fd_P = np.stack([(k.evaluate({"F": F + h * e})["W"] - k.evaluate({"F": F - h * e})["W"]) / (2 * h) for e in E], -1)
    fd_A = np.stack([(k.evaluate({"F": F + h * e})["dW_dF"] - k.evaluate({"F": F - h * e})["dW_dF"]) / (2 * h)
                     for e in E], -1)
    assert rel(rev["dW_dF"], fd_P.reshape(-1, 3, 3)) <= 1e-8
    assert rel(rev["d2W_dF_dF"], fd_A.reshape(-1, 3, 3, 3, 3)) <= 1e-7


def test_the_gradient_of_the_traces_merges_the_terms(kernels):
    """trace over the stack's matrix axes takes each term's trace as trfun, so the tangent of the terms
    rotates each direction into the eigenbasis once (one eig_d1, engine/opt/spectral.py), as the terms one
    by one do; without trfun it would differentiate the matrix functions twice (matfun_d2)."""
    ops = [e.op for e in kernels["terms"]["reverse"].graph.eqns]
    assert ops.count("eig_d1") == 1 and "matfun_d2" not in ops and ops.count("eigh3") == 1


TRACES = """\
adgrad: 1
name: traces
inputs:
  x: {shape: [2, 3, 4, 3]}
outputs:
  t01: trace(x[0], axis1=0, axis2=1)
  t02: trace(x[0], axis1=0, axis2=2)
  t12: trace(x[0], axis1=-2, axis2=-1)
  t21: trace(x[0], axis1=2, axis2=1)
  t13: trace(x, axis1=1, axis2=3)
  t2: trace(x[0, :, 0])
  t2T: trace(x[0, :, 0], axis1=1, axis2=0)
"""


def test_trace_over_named_axes_is_numpys(tmp_path):
    x = np.random.default_rng(2).standard_normal((7, 2, 3, 4, 3))
    out = compile_model(model(tmp_path, TRACES), [("t13", "x")], mode="reverse").evaluate({"x": x})
    want = {"t01": np.trace(x[:, 0], axis1=1, axis2=2), "t02": np.trace(x[:, 0], axis1=1, axis2=3),
            "t12": np.trace(x[:, 0], axis1=-2, axis2=-1), "t21": np.trace(x[:, 0], axis1=3, axis2=2),
            "t13": np.trace(x, axis1=2, axis2=4), "t2": np.trace(x[:, 0, :, 0], axis1=1, axis2=2),
            "t2T": np.trace(x[:, 0, :, 0], axis1=2, axis2=1)}
    for name, value in want.items():
        assert out[name].shape == value.shape and np.abs(out[name] - value).max() <= 1e-14, name
    grad = np.zeros((2, 4, 2, 3, 4, 3))                       # dt13[a, c]/dx[a, b, c, b] = 1
    for a, b, c in np.ndindex(2, 3, 4):
        grad[a, c, a, b, c, b] = 1.0
    assert np.array_equal(out["dt13_dx"], np.broadcast_to(grad, (7, *grad.shape)))


@pytest.mark.parametrize("expr, message", [
    ("trace(powm(C, p))", r"trace: expects a matrix, got shape \(3, 3, 3\); of a stack of matrices, name the "
                          r"axes: trace\(a, axis1=-2, axis2=-1\)"),
    ("trace(powm(C, p), axis1=-1)", r"trace: expects a matrix, got shape \(3, 3, 3\)"),
    ("trace(C, axis1=1, axis2=-1)", r"trace: axis1 and axis2 are both axis 1"),
    ("trace(C, offset=1)", r"trace\(a\) of a matrix, or trace\(a, axis1=i, axis2=j\) of a stack of matrices"),
    ("trace(C, axis1=0, axis2=3)", r"axis 3 is out of range for an array of rank 2"),
    ("sum(powm(C[0:2, 0:2], p))", r"powm: a symmetric 3x3 matrix, got shape \(2, 2\)"),
])
def test_errors(tmp_path, expr, message):
    with pytest.raises(SpecError, match=message):
        model(tmp_path, TERMS.replace("sum(c*trace(powm(C, p), axis1=-2, axis2=-1))", expr))
