"""At a non-smooth point the derivative is that of the branch taken, and the branch not taken can
never make it NaN: where(x > 0, sqrt(x), 0) at x = 0 and x < 0, in both modes and to second order."""
import numpy as np
import pytest

from adgrad.engine import compile_model

MODEL = """\
adgrad: 1
inputs:
  x: {shape: [4]}
  s: {shape: []}
outputs:
  A: sum(where(x > 0, sqrt(x), 0.0))
  B: sum(where(x > 0, log(x) * s, x * s)) + where(s > 0, sqrt(s), s)
  C: where(s > 0, sqrt(s), 0.0) * sum(x)
"""


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_untaken_branch_cannot_make_nan(model_from_text, mode):
    m = model_from_text(MODEL, "where_nan")
    x = np.array([[0.0, -1.0, 2.0, 0.25]])
    s = np.array([0.0])
    k = compile_model(m, [("A", "x"), ("B", "x"), ("B", "s"), ("C", "x"), ("C", "s"), ("A", ["x", "x"])],
                      mode=mode)
    o = k.evaluate({"x": x, "s": s})
    for name, got in o.items():
        assert np.isfinite(got).all(), (name, got)
    np.testing.assert_allclose(o["dA_dx"][0], [0.0, 0.0, 0.5 / np.sqrt(2.0), 1.0], rtol=1e-14)
    np.testing.assert_allclose(o["dB_dx"][0], [0.0, 0.0, 0.0, 0.0], atol=0)
    np.testing.assert_allclose(o["dB_ds"][0], np.log(2.0) + np.log(0.25) - 1.0 + 1.0, rtol=1e-14)
    np.testing.assert_allclose(o["dC_ds"][0], 0.0, atol=0)
    np.testing.assert_allclose(np.diag(o["d2A_dx_dx"][0]), [0.0, 0.0, -0.25 * 2.0 ** -1.5, -0.25 * 0.25 ** -1.5],
                               rtol=1e-14)


def test_division_by_zero_follows_numpy(model_from_text):
    m = model_from_text("adgrad: 1\ninputs:\n  x: {shape: [2]}\noutputs:\n  E: sum(1.0 / x)\n", "divzero")
    out = compile_model(m, [("E", "x")], mode="reverse").evaluate({"x": np.array([[0.0, 1.0]])})
    assert out["E"][0] == np.inf and np.isinf(out["dE_dx"][0, 0])
