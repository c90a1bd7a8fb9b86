"""Tensor and linear-algebra functions (matmul, einsum, outer, trace, det, inv, softmax, logsumexp,
stack, concatenate, reshape, transpose): values against numpy, derivatives forward = reverse =
central differences of the numpy interpreter, including a hyperelastic Hessian; det and inv above
4x4 (an LU factorization with partial pivoting) and the closed forms up to 4x4 against numpy and their
closed-form derivatives; every einsum form (diagonals, implicit output, '...', size-1 broadcasting)."""
import numpy as np
import pytest

from adgrad.engine import compile_model
from adgrad.engine.errors import SpecError
from adgrad.engine.ir.interp import interpret
from ir_oracle import assert_close_to_fd, assert_compiled_matches, central_differences, derivative_graph

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
    ("sum(einsum('ij,jk', A, A))", "einsum: subscript 'j' has sizes 3 and 2"),
    ("sum(einsum('ii->i', A))", "einsum: subscript 'i' repeats over axes of sizes 2 and 3"),
    ("sum(einsum('...j->j', A))", "einsum: the operands' '...' axes need a '...' in the output subscripts"),
    ("sum(einsum('ijk->i', A))", "einsum: subscripts 'ijk' need an operand of rank 3, got shape (2, 3)"),
    ("sum(inv(eye(17)))", "inv: matrices larger than 16x16 are not supported, got shape (17, 17)"),
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


# ---- det and inv above 4x4: an LU factorization with partial pivoting (engine/ir/ops/linalg.py) ---------
def _matrices():
    rng = np.random.default_rng(5)
    zero_pivot = rng.normal(size=(5, 5))
    zero_pivot[0, 0] = 0.0                          # the first pivot must come from another row
    return {"normal5": rng.normal(size=(5, 5)), "normal8": rng.normal(size=(8, 8)),
            "zero_pivot": zero_pivot, "permutation": np.eye(6)[[3, 0, 5, 1, 4, 2]],
            "tie": np.ones((5, 5)) + np.diag([1.0, 2.0, 3.0, 4.0, 5.0]) - np.eye(5)[::-1],   # equal |pivots|
            "largest": rng.normal(size=(16, 16))}


MATRICES = _matrices()


@pytest.fixture(scope="module")
def square_model(model_from_text):
    models = {}

    def get(n):
        if n not in models:
            models[n] = model_from_text(
                f"adgrad: 1\ninputs:\n  A: {{shape: [{n}, {n}]}}\noutputs:\n  D: det(A)\n  I: inv(A)\n", f"square{n}")
        return models[n]
    return get


def _det_derivatives(A):
    """d det / dA = det inv(A).T; d inv / dA[k, l] = -inv[:, k] inv[l, :]; the Hessian of det."""
    Ai, d = np.linalg.inv(A), np.linalg.det(A)
    hess = d * (np.einsum("ji,lk->ijkl", Ai, Ai) - np.einsum("li,jk->ijkl", Ai, Ai))
    return d * Ai.T, -np.einsum("ik,lj->ijkl", Ai, Ai), hess


@pytest.mark.parametrize("case", list(MATRICES))
def test_large_det_and_inv_match_numpy(square_model, case):
    A = MATRICES[case]
    m = square_model(A.shape[0])
    out = interpret(m.graph, {"A": A}, {})
    np.testing.assert_allclose(out["D"], np.linalg.det(A), rtol=1e-11)
    np.testing.assert_allclose(out["I"], np.linalg.inv(A), rtol=1e-10, atol=1e-12 * np.abs(np.linalg.inv(A)).max())


@pytest.mark.parametrize("case", ["normal5", "normal8", "zero_pivot", "permutation", "tie"])
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_large_det_and_inv_derivatives(square_model, case, mode):
    A = MATRICES[case]
    m = square_model(A.shape[0])
    g = derivative_graph(m, [("D", "A"), ("I", "A")], mode)
    out = interpret(g, {"A": A}, {})
    d_det, d_inv, _ = _det_derivatives(A)
    np.testing.assert_allclose(out["dD_dA"], d_det, rtol=1e-9, atol=1e-11 * np.abs(d_det).max())
    np.testing.assert_allclose(out["dI_dA"], d_inv, rtol=1e-9, atol=1e-11 * np.abs(d_inv).max())


@pytest.mark.parametrize("case", ["normal5", "zero_pivot"])
def test_large_det_hessian(square_model, case):
    A = MATRICES[case]
    g = derivative_graph(square_model(5), [("D", ["A", "A"])], "reverse")
    H = interpret(g, {"A": A}, {})["d2D_dA_dA"]
    np.testing.assert_allclose(H, _det_derivatives(A)[2], rtol=1e-9, atol=1e-11 * np.abs(H).max())
    np.testing.assert_allclose(H, H.transpose(2, 3, 0, 1), rtol=1e-12, atol=1e-14 * np.abs(H).max())


def _cofactors(A):
    """The cofactor matrix from minors (numpy's det of each): det's gradient, singular A included."""
    n = A.shape[0]
    return np.array([[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(A, i, 0), j, 1)) for j in range(n)]
                     for i in range(n)])


def _singular():
    rng = np.random.default_rng(11)
    col = MATRICES["normal5"].copy()
    col[:, 2] = 0.0                                     # rank 4, the zero pivot in the middle
    row = rng.normal(size=(6, 6))
    row[3] = 0.0                                        # the zero row ends last: the zero pivot of the last column
    first = MATRICES["normal5"].copy()
    first[:, 0] = 0.0                                   # the first pivot is zero
    rank3 = rng.normal(size=(5, 3)) @ rng.normal(size=(3, 5))
    return {"zero_column": col, "zero_row": row, "zero_first_column": first,
            "ones": 1.5 * np.ones((5, 5)), "rank3": rank3}


@pytest.mark.parametrize("case", list(_singular()))
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_singular_matrix_det_and_gradient(square_model, case, mode):
    """det 0 and its gradient the cofactors (adj(A)^T, not det inv(A)^T = 0 * inf), also where a pivot is
    exactly zero: rank n-1 gives the rank-one adjugate, lower rank 0 (up to round-off where the
    elimination leaves tiny pivots instead of zeros)."""
    A = _singular()[case]
    m = square_model(A.shape[0])
    out = interpret(derivative_graph(m, [("D", "A")], mode), {"A": A}, {})
    assert abs(out["D"]) <= 1e-12 * np.abs(A).max() ** A.shape[0]
    want = _cofactors(A)
    np.testing.assert_allclose(out["dD_dA"], want, rtol=1e-9, atol=1e-11 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_large_inv_second_derivatives(model_from_text, mode):
    """The second derivative of a function of inv(A) (each rule is written with lu_inv, so it differentiates
    again) against central differences of its gradient."""
    m = model_from_text("adgrad: 1\ninputs:\n  A: {shape: [6, 6]}\nparams:\n  W: " +
                        str(np.round(np.random.default_rng(8).normal(size=(6, 6)), 3).tolist()) +
                        "\noutputs:\n  E: sum(inv(A) * W) + det(A)\n", "inv6")
    A = MATRICES["permutation"] + 0.3 * np.random.default_rng(9).normal(size=(6, 6))
    g = derivative_graph(m, [("E", "A"), ("E", ["A", "A"])], mode)
    out = interpret(g, {"A": A}, m.param_values)
    fd = central_differences(derivative_graph(m, [("E", "A")], "reverse"), {"A": A}, m.param_values, "A", ["dE_dA"])
    assert_close_to_fd(out["d2E_dA_dA"], fd["dE_dA"], [out["dE_dA"]])


def test_compiled_16x16_det_and_inv_gradients(model_from_text):
    """The largest size, compiled (one helper call per factorization, not 16 unrolled elimination steps:
    this kernel compiled in 137 s before and in about 6 s now) equals numpy's closed forms."""
    m = model_from_text("adgrad: 1\ninputs:\n  A: {shape: [16, 16]}\noutputs:\n  D: det(A)\n  S: sum(inv(A))\n",
                        "square16")
    A = np.random.default_rng(10).normal(size=(3, 16, 16))
    out = compile_model(m, [("D", "A"), ("S", "A")], mode="reverse").evaluate({"A": A})
    for i in range(3):
        inv, det = np.linalg.inv(A[i]), np.linalg.det(A[i])
        np.testing.assert_allclose(out["D"][i], det, rtol=1e-12)
        np.testing.assert_allclose(out["dD_dA"][i], det * inv.T, rtol=1e-9, atol=1e-11 * abs(det * inv).max())
        grad_s = -inv.sum(axis=0)[:, None] * inv.sum(axis=1)[None, :]      # d sum(inv) / dA[k, l]
        np.testing.assert_allclose(out["dS_dA"][i], grad_s, rtol=1e-9, atol=1e-11 * abs(grad_s).max())


# ---- einsum: every form numpy users write -------------------------------------------------------------
EINSUMS = {     # subscripts -> operand shapes
    "ii->i": [(3, 3)], "ii->": [(3, 3)], "ii": [(3, 3)], "iij,jk->ik": [(2, 2, 3), (3, 2)],
    "iji->j": [(2, 3, 2)], "jii->ij": [(2, 3, 3)], "iii->i": [(2, 2, 2)], "ij->ji": [(2, 3)],
    "ij,jk": [(2, 3), (3, 2)], "bA,b": [(2, 3), (2,)], "ij,ij->": [(2, 3), (2, 3)], "i,j->ij": [(2,), (3,)],
    "...ij,...jk->...ik": [(2, 2, 3), (3, 2)], "ij...,jk": [(2, 3, 2), (3, 2)], "...i,...i": [(2, 1, 3), (2, 3)],
    "i...->...": [(2, 1, 3)], "i,i->i": [(1,), (3,)], "ij,jk,kl->il": [(2, 3), (3, 2), (2, 2)], ",i->i": [(), (3,)],
}


@pytest.fixture(scope="module")
def einsum_models(model_from_text):
    models = {}
    for k, (spec, shapes) in enumerate(EINSUMS.items()):
        names = [f"x{i}" for i in range(len(shapes))]
        text = "adgrad: 1\ninputs:\n" + "".join(f"  {n}: {{shape: {list(s)}}}\n" for n, s in zip(names, shapes))
        text += f"outputs:\n  E: einsum('{spec}', {', '.join(names)})\n"
        models[spec] = model_from_text(text, f"einsum{k}")
    return models


@pytest.mark.parametrize("spec", list(EINSUMS))
def test_einsum_forms(einsum_models, spec):
    """Values equal numpy's einsum; derivatives forward == reverse == central differences."""
    m = einsum_models[spec]
    rng = np.random.default_rng(6)
    point = {n: rng.uniform(-1, 1, v.shape) for n, v in m.graph.inputs.items()}
    want = np.einsum(spec, *point.values())
    got = interpret(m.graph, point, {})["E"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    requests = [("E", n) for n in point]
    fwd, rev = (interpret(derivative_graph(m, requests, mode), point, {}) for mode in ("forward", "reverse"))
    for n in point:
        np.testing.assert_allclose(fwd[f"dE_d{n}"], rev[f"dE_d{n}"], rtol=1e-12, atol=1e-14)
        fd = central_differences(m.graph, point, {}, n, ["E"])["E"]
        assert_close_to_fd(rev[f"dE_d{n}"], fd, [want], msg=f"{spec}: dE_d{n}")


COMPILED = """\
adgrad: 1
inputs:
  A: {shape: [5, 5]}
  B: {shape: [2, 2, 3]}
outputs:
  D: det(A)
  I: inv(A)[1:3]
  T: einsum('iij,jk->ik', B, A[:3, 1:3]) + einsum('ii->i', A[:2, :2])
"""


@pytest.mark.parametrize("mode, requests", [
    ("forward", [("T", "A"), ("T", "B")]),
    ("reverse", [("D", "A"), ("T", "A"), ("T", "B")])])
def test_compiled_lu_and_diagonals(model_from_text, mode, requests):
    """The compiled kernels of the LU ops and of einsum diagonals (strided views of a reshape)
    equal the interpreter, derivatives included."""
    m = model_from_text(COMPILED, "lu_and_diagonals")
    rng = np.random.default_rng(7)
    pts = {"A": rng.normal(size=(3, 5, 5)), "B": rng.normal(size=(3, 2, 2, 3))}
    pts["A"][0, 0, 0] = 0.0
    assert_compiled_matches(m, requests, mode, pts)


# ---- det and inv up to 4x4: the closed forms (the op det and its cofactor rules) ------------------------
CLOSED = {n: np.random.default_rng(20 + n).normal(size=(n, n)) + n * np.eye(n) for n in (1, 2, 3, 4)}


@pytest.mark.parametrize("n", list(CLOSED))
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_closed_det_and_inv_derivatives(square_model, n, mode):
    """Values against numpy; det's gradient and Hessian, inv's Jacobian, by both modes, against the closed
    forms; and the Hessian of det against central differences of its gradient."""
    A = CLOSED[n]
    m = square_model(n)
    g = derivative_graph(m, [("D", "A"), ("I", "A"), ("D", ["A", "A"])], mode)
    out = interpret(g, {"A": A}, {})
    np.testing.assert_allclose(out["D"], np.linalg.det(A), rtol=1e-13)
    np.testing.assert_allclose(out["I"], np.linalg.inv(A), rtol=1e-12, atol=1e-14)
    d_det, d_inv, hess = _det_derivatives(A)
    np.testing.assert_allclose(out["dD_dA"], d_det, rtol=1e-12, atol=1e-13 * np.abs(d_det).max())
    np.testing.assert_allclose(out["dI_dA"], d_inv, rtol=1e-11, atol=1e-13 * np.abs(d_inv).max())
    np.testing.assert_allclose(out["d2D_dA_dA"], hess, rtol=1e-11, atol=1e-12 * max(1.0, np.abs(hess).max()))
    fd = central_differences(derivative_graph(m, [("D", "A")], "reverse"), {"A": A}, {}, "A", ["dD_dA"])
    assert_close_to_fd(out["d2D_dA_dA"], fd["dD_dA"], [out["dD_dA"]])


@pytest.mark.parametrize("n", [2, 3, 4])
def test_closed_det_gradient_at_singular_matrices(square_model, n):
    """At a singular matrix the closed form's gradient is the cofactor matrix exactly (finite), by both
    modes, and the compiled (scalarized) kernel agrees with the interpreter."""
    A = CLOSED[n].copy()
    A[:, -1] = A[:, 0]                                  # two equal columns: det 0, adjugate of rank one
    m = square_model(n)
    for mode in ("forward", "reverse"):
        out = interpret(derivative_graph(m, [("D", "A")], mode), {"A": A}, {})
        assert out["D"] == 0.0 or abs(out["D"]) < 1e-14
        np.testing.assert_allclose(out["dD_dA"], _cofactors(A), rtol=1e-12, atol=1e-13)
    k = compile_model(m, derivatives=[("D", "A"), ("D", ["A", "A"])], mode="reverse", values=["D"])
    got = k.evaluate({"A": A[None]})
    want = interpret(derivative_graph(m, [("D", "A"), ("D", ["A", "A"])], "reverse"), {"A": A}, {})
    for name in ("D", "dD_dA", "d2D_dA_dA"):
        np.testing.assert_allclose(got[name][0], want[name], rtol=1e-13, atol=1e-14)
