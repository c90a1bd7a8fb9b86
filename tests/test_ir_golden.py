"""Golden tests of the lowered IR: format_graph(load_model(p).graph) for a few small models equals
tests/golden/<name>.txt. After an intended change of lowering or printing, regenerate with
ADGRAD_UPDATE_GOLDEN=1 pytest tests/test_ir_golden.py and review the diff."""
from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from adgrad.engine.ir.printer import format_graph

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("ADGRAD_UPDATE_GOLDEN") == "1"

MODELS = {
    "basic": """\
        adgrad: 1
        name: basic
        inputs:
          x: {shape: [3]}
          s: {shape: []}
        params:
          alpha: 2.0
        functions:
          rho:
            args: [r]
            expr: exp(-alpha*r)
            derivative: [-alpha*rho(r)]
        let:
          d: sum(rho(x))
        outputs:
          E: d**2 + s*d - 1
          G: x / s + pi
        """,
    "index": """\
        adgrad: 1
        name: index
        inputs:
          x: {shape: [6]}
          Y: {shape: [2, 3]}
        outputs:
          a: x[1:5]
          b: x[::-1] * x[-2:0:-2][0]
          c: Y[:, 0] * x[-1]
          d: Y.T
          e: Y[1, 2] + Y[0][::2]
        """,
    "reduce": """\
        adgrad: 1
        name: reduce
        inputs:
          X: {shape: [2, 3]}
          y: {shape: [3]}
        outputs:
          m: sum(X * y, axis=1) + max(X, axis=-1)
          p: prod(X, axis=0) * y / mean(X)
          n: norm(y) + dot(y, X[0]) + min(X)
        """,
    "where": """\
        adgrad: 1
        name: where
        inputs:
          a: {shape: [2]}
          s: {shape: []}
        params:
          c: [1.0, 2.0]
        outputs:
          w: where((a > s) & ~(a >= c) | (s == 0), minimum(a, s), a**2)
          t: arctan2(a, s) + maximum(a, 0) ** 3 + sigmoid(a) * c
        """,
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_ir_golden(model_from_text, name):
    got = format_graph(model_from_text(MODELS[name], f"golden_{name}").graph) + "\n"
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(got)
        return
    assert path.exists(), f"missing {path}; create it with ADGRAD_UPDATE_GOLDEN=1"
    want = path.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            f"golden/{name}.txt", "lowered now"))
        pytest.fail(f"IR of model '{name}' differs from {path} "
                    f"(regenerate with ADGRAD_UPDATE_GOLDEN=1 if intended):\n{diff}")
