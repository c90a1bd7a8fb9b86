"""Tensor and linear-algebra functions (matmul, einsum, outer, trace, det, inv, softmax, logsumexp,
stack, concatenate, reshape, transpose): values against numpy, derivatives forward = reverse =
central differences of the numpy interpreter, including a hyperelastic Hessian."""
import numpy as np
import pytest

from adgrad.engine import compile_model
from adgrad.engine.errors import SpecError
from adgrad.engine.ir.interp import interpret

MODEL = """\
adgrad: 1
inputs:
  F: {shape: [3, 3]}
  A: {shape: [2, 3]}
  v: {shape: [3]}
params:
  W: [[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]]
let:
  G: F + eye(3)
  C: G.T @ G
outputs:
  W1: 0.5*(trace(C) - 3) - log(det(G)) + 0.25*(det(G) - 1)**2
  P: inv(G) @ v
  M: A @ G
  S: sum(einsum('ij,jk->ik', A, G) * W) + sum(outer(v, v[::-1]))
  X: softmax(A, axis=-1) * logsumexp(v)
  K: concatenate([v, A[0], v[1:]], axis=0) * 2.0
  T: stack([v, A[1]], axis=1) @ A
  R: reshape(A, (3, 2))[1:, :] * dot(v, v)
  D: det(A @ A.T) + sum(inv(A[:, :2]))
"""

DERIVS = [("W1", "F"), ("P", "F"), ("P", "v"), ("M", "A"), ("S", "A"), ("S", "v"), ("X", "A"), ("X", "v"),
          ("K", "A"), ("T", "A"), ("T", "v"), ("R", "A"), ("D", "A"), ("W1", ["F", "F"])]


def points(k=3, seed=3):
    rng = np.random.default_rng(seed)
    return {"F": rng.uniform(-0.2, 0.2, (k, 3, 3)), "A": rng.uniform(0.5, 1.5, (k, 2, 3)),
            "v": rng.uniform(-1, 1, (k, 3))}


@pytest.fixture(scope="module")
def model(model_from_text):
    return model_from_text(MODEL, "linalg")


@pytest.fixture(scope="module")
def results(model):
    pts = points()
    return pts, {mode: compile_model(model, DERIVS, mode=mode).evaluate(pts) for mode in ("forward", "reverse")}


def test_values_match_numpy(model, results):
    pts, res = results
    out = res["reverse"]
    W = np.array(model.param_values["W"])
    for i in range(3):
        F, A, v = pts["F"][i], pts["A"][i], pts["v"][i]
        G = F + np.eye(3)
        C = G.T @ G
        J = np.linalg.det(G)
        want = {
            "W1": 0.5 * (np.trace(C) - 3) - np.log(J) + 0.25 * (J - 1) ** 2,
            "P": np.linalg.inv(G) @ v, "M": A @ G,
            "S": np.sum(np.einsum("ij,jk->ik", A, G) * W) + np.sum(np.outer(v, v[::-1])),
            "X": np.exp(A) / np.exp(A).sum(-1, keepdims=True) * np.log(np.exp(v).sum()),
            "K": np.concatenate([v, A[0], v[1:]]) * 2.0,
            "T": np.stack([v, A[1]], axis=1) @ A,
            "R": A.reshape(3, 2)[1:, :] * (v @ v),
            "D": np.linalg.det(A @ A.T) + np.sum(np.linalg.inv(A[:, :2])),
        }
        for name, w in want.items():
            np.testing.assert_allclose(out[name][i], w, rtol=1e-12, atol=1e-12, err_msg=name)


def _fd(model, of, wrt, pt, inner=None):
    """Central differences of `of` (through the interpreter), or of its reverse-mode derivative
    wrt `inner` (through a compiled kernel: nested differences would lose half the digits)."""
    grad = compile_model(model, [(of, inner)], mode="reverse") if inner else None

    def f(p):
        if inner is None:
            return interpret(model.graph, p, model.param_values, want=[of])[of]
        return grad.evaluate({k: v[None] for k, v in p.items()})[f"d{of}_d{inner}"][0]
    x = pt[wrt]
    cols = []
    for j in range(x.size):
        h = 1e-6 * max(1.0, abs(x.flat[j]))
        plus, minus = dict(pt), dict(pt)
        plus[wrt], minus[wrt] = x.copy(), x.copy()
        plus[wrt].flat[j] += h
        minus[wrt].flat[j] -= h
        cols.append((f(plus) - f(minus)) / (2 * h))
    d = np.stack(cols, axis=-1)
    return d.reshape(d.shape[:-1] + x.shape)


@pytest.mark.parametrize("of, wrt", DERIVS, ids=lambda x: x if isinstance(x, str) else "_".join(x))
def test_forward_reverse_and_finite_differences_agree(model, results, of, wrt):
    pts, res = results
    wrt = [wrt] if isinstance(wrt, str) else wrt
    name = f"d{of}_d{wrt[0]}" if len(wrt) == 1 else f"d2{of}_d{wrt[0]}_d{wrt[1]}"
    fwd, rev = res["forward"][name], res["reverse"][name]
    np.testing.assert_allclose(fwd, rev, rtol=1e-10, atol=1e-12)
    i = 1
    pt = {k: v[i] for k, v in pts.items()}
    fd = _fd(model, of, wrt[-1], pt) if len(wrt) == 1 else _fd(model, of, wrt[1], pt, inner=wrt[0])
    np.testing.assert_allclose(rev[i], fd, rtol=1e-5, atol=1e-6)


def test_hessian_is_symmetric(results):
    _, res = results
    H = res["reverse"]["d2W1_dF_dF"].reshape(3, 9, 9)
    np.testing.assert_allclose(H, H.transpose(0, 2, 1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("expr, message", [
    ("sum(A @ A)", "matmul: (2, 3) @ (2, 3): inner dimensions 3 and 2 differ"),
    ("sum(einsum('ij,jk->ik', A, A))", "einsum: subscript 'j' has sizes 3 and 2"),
    ("sum(einsum('ij,jk', A, A))", "einsum: give explicit output subscripts"),
    ("det(A)", "det: expects a square matrix, got shape (2, 3)"),
    ("sum(concatenate([A, v], axis=0))", "concatenate: shapes (2, 3) and (3,) differ"),
    ("sum(stack([v, A], axis=0))", "stack: all arrays need the same shape, got (3,) and (2, 3)"),
    ("sum(reshape(A, (4, 2)))", "reshape: cannot reshape (2, 3) (size 6) to (4, 2)"),
])
def test_shape_errors_name_the_operation_and_both_shapes(model_from_text, expr, message):
    text = "adgrad: 1\ninputs:\n  A: {shape: [2, 3]}\n  v: {shape: [3]}\noutputs:\n  E: " + expr + "\n"
    with pytest.raises(SpecError) as info:
        model_from_text(text, "bad_linalg")
    assert message in str(info.value)
    assert ":6:6: outputs.E: " in str(info.value)
