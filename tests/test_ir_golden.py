"""Golden tests of the IR text: for each small model, the graph as lowered (tests/golden/<name>.txt)
and, for the tensor functions, the graph with its reverse-mode gradients appended, as
differentiated and before any optimization (tests/golden/<name>.grad.txt). After an intended
change of lowering, rules or printing, regenerate with
ADGRAD_UPDATE_GOLDEN=1 pytest tests/test_ir_golden.py and review the diff."""
from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

import pytest

from adgrad.engine.ir.printer import format_graph
from ir_oracle import derivative_graph

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("ADGRAD_UPDATE_GOLDEN") == "1"


def model_text(inputs, outputs, extra=""):
    """A model's YAML: inputs name -> shape, outputs name -> expression, `extra` more top-level YAML
    (params, functions, let) in between."""
    lines = ["adgrad: 1", "inputs:"] + [f"  {n}: {{shape: {s}}}" for n, s in inputs.items()]
    lines += [extra.rstrip("\n")] if extra else []
    lines += ["outputs:"] + [f"  {n}: {json.dumps(e)}" for n, e in outputs.items()]
    return "\n".join(lines) + "\n"


# name -> (model text, names of the inputs the first output's reverse-mode gradient is taken for)
CASES = {
    "basic": (model_text({"x": [3], "s": []}, {"E": "d**2 + s*d - 1", "G": "x / s + pi"}, """\
params:
  alpha: 2.0
functions:
  rho:
    args: [r]
    expr: exp(-alpha*r)
    derivative: [-alpha*rho(r)]
let:
  d: sum(rho(x))"""), ()),
    "index": (model_text({"x": [6], "Y": [2, 3]}, {
        "a": "x[1:5]", "b": "x[::-1] * x[-2:0:-2][0]", "c": "Y[:, 0] * x[-1]", "d": "Y.T",
        "e": "Y[1, 2] + Y[0][::2]"}), ()),
    "reduce": (model_text({"X": [2, 3], "y": [3]}, {
        "m": "sum(X * y, axis=1) + max(X, axis=-1)", "p": "prod(X, axis=0) * y / mean(X)",
        "n": "norm(y) + dot(y, X[0]) + min(X)"}), ()),
    "where": (model_text({"a": [2], "s": []}, {
        "w": "where((a > s) & ~(a >= c) | (s == 0), minimum(a, s), a**2)",
        "t": "arctan2(a, s) + maximum(a, 0) ** 3 + sigmoid(a) * c"}, "params:\n  c: [1.0, 2.0]"), ()),
    "matmul": (model_text({"A": [2, 3], "B": [3, 2], "v": [3], "C": [2, 2, 3]}, {
        "L": "sum(A @ B) + v @ v + sum(matmul(A, v)) + sum(C @ B)"}), ("A", "B", "v", "C")),
    "einsum": (model_text({"A": [2, 3], "B": [3, 2], "S": [2, 2], "v": [3]}, {
        "L": "sum(einsum('ij,jk->ik', A, B) * S) + einsum('ii->', S) + sum(einsum('ij,j', A, v))"}),
               ("A", "B", "S", "v")),
    "transpose": (model_text({"C": [2, 3, 2], "A": [2, 3]}, {
        "L": "sum(transpose(C, [2, 0, 1]) * A) + sum(transpose(A) ** 2)"}), ("C", "A")),
    "det_inv": (model_text({"F": [2, 2]}, {"L": "det(F) + sum(inv(F + 3 * eye(2)))"}), ("F",)),
    "softmax": (model_text({"A": [2, 3], "v": [3]}, {
        "L": "sum(softmax(A, axis=-1) * v) + logsumexp(v) + sum(logsumexp(A, axis=0))"}), ("A", "v")),
    "stack": (model_text({"v": [3], "w": [3]}, {
        "L": "sum(stack([v, w], axis=1) ** 2) + sum(concatenate([v, w[:2]]) * 2)"
             " + sum(reshape(stack([v, w]), (3, 2))[0])"}),
              ("v", "w")),
    "tensor_function": (model_text({"F": [2, 2]}, {"L": "energy(F + eye(2))"}, """\
functions:
  energy:
    args: {G: [2, 2]}
    expr: trace(G.T @ G) - log(det(G))"""), ("F",)),
}

SNAPSHOTS = [(name, False) for name in CASES] + [(name, True) for name, (_, wrt) in CASES.items() if wrt]


def snapshot(model_from_text, name, gradient):
    text, wrt = CASES[name]
    model = model_from_text(text, f"golden_{name}")
    if not gradient:
        return format_graph(model.graph) + "\n"
    first = next(iter(model.graph.outputs))
    return format_graph(derivative_graph(model, [(first, w) for w in wrt], "reverse")) + "\n"


@pytest.mark.parametrize("name, gradient", SNAPSHOTS, ids=[n + (".grad" if g else "") for n, g in SNAPSHOTS])
def test_ir_golden(model_from_text, name, gradient):
    got = snapshot(model_from_text, name, gradient)
    path = GOLDEN / f"{name}{'.grad' if gradient else ''}.txt"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(got)
        return
    assert path.exists(), f"missing {path}; create it with ADGRAD_UPDATE_GOLDEN=1"
    want = path.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            f"golden/{path.name}", "now"))
        pytest.fail(f"IR of model '{name}' differs from {path} "
                    f"(regenerate with ADGRAD_UPDATE_GOLDEN=1 if intended):\n{diff}")
