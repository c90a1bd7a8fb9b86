"""Jacobian-vector and vector-Jacobian products (never the full Jacobian) and derivatives with
respect to params summed over all points (deterministic whatever the thread count)."""
import h5py
import numba
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli
from adgrad.engine import compile_model
from adgrad.engine.spec import DerivativeRequest as D

MODEL = """\
adgrad: 1
inputs:
  F: {shape: [3, 3]}
  r: {shape: [4]}
params:
  mu: 1.5
  c: [1.0, 2.0, 3.0, 4.0]
outputs:
  W: mu * sum(F * F) + det(F + eye(3))
  R: exp(-mu * r) * c
"""


def points(m=50, seed=0):
    rng = np.random.default_rng(seed)
    return {"F": rng.uniform(-0.3, 0.3, (m, 3, 3)), "r": rng.random((m, 4)),
            "dF": rng.standard_normal((m, 3, 3)), "rbar": rng.standard_normal((m, 4))}


@pytest.fixture(scope="module")
def kernel(model_from_text):
    m = model_from_text(MODEL, "products")
    reqs = [D("W", ("F",), direction="dF"), D("R", ("r",), cotangent="rbar"), D("W", ("mu",), reduce="sum"),
            D("R", ("c",), reduce="sum"), D("R", ("r",)), D("W", ("F",)), D("R", ("c",)), D("W", ("mu",))]
    return compile_model(m, reqs)


def test_products_equal_contracted_jacobians(kernel):
    pts = points()
    o = kernel.evaluate(pts)
    assert o["dW_dF_jvp"].shape == (50,) and o["dR_dr_vjp"].shape == (50, 4)
    np.testing.assert_allclose(o["dW_dF_jvp"], np.einsum("mij,mij->m", o["dW_dF"], pts["dF"]), rtol=1e-12)
    np.testing.assert_allclose(o["dR_dr_vjp"], np.einsum("mi,mij->mj", pts["rbar"], o["dR_dr"]), rtol=1e-12)
    assert kernel.modes["dW_dF_jvp"] == "forward" and kernel.modes["dR_dr_vjp"] == "reverse"


def test_products_do_not_build_the_jacobian(model_from_text):
    m = model_from_text(MODEL, "products")
    k = compile_model(m, [D("R", ("r",), cotangent="rbar")], values=[])
    # the vjp of R = exp(-mu r) * c is elementwise: nothing of shape (4, 4) exists in the kernel
    assert all(e.out.shape != (4, 4) for e in k.graph.eqns)


def test_param_sums(kernel):
    pts = points()
    o = kernel.evaluate(pts)
    assert o["dR_dc_sum"].shape == (4, 4) and o["dW_dmu_sum"].shape == ()
    np.testing.assert_allclose(o["dR_dc_sum"], o["dR_dc"].sum(axis=0), rtol=1e-14)
    np.testing.assert_allclose(o["dW_dmu_sum"], (pts["F"] ** 2).sum(), rtol=1e-12)


def test_results_are_bit_identical_for_one_and_two_threads(kernel):
    pts = points(m=1001, seed=5)
    before = numba.get_num_threads()
    try:
        one = kernel.evaluate(pts, threads=1)
        two = kernel.evaluate(pts, threads=min(2, numba.config.NUMBA_NUM_THREADS))
    finally:
        numba.set_num_threads(before)
    for name in one:
        assert np.array_equal(one[name], two[name]), name


def test_run_writes_products_and_sums(tmp_path, model_from_text):
    (tmp_path / "model.yaml").write_text(MODEL)
    pts = points(m=40, seed=2)
    with h5py.File(tmp_path / "in.h5", "w") as f:
        for n, a in pts.items():
            f[n] = a
    (tmp_path / "cfg.yaml").write_text("""\
adgrad: 1
model: model.yaml
input: {path: in.h5}
output: {path: out.h5}
compute:
  values: [W]
  derivatives:
    - {of: W, wrt: F, direction: dF}
    - {of: R, wrt: r, cotangent: rbar}
    - {of: R, wrt: c, reduce: sum}
engine: {chunk: 16}
""")
    result = CliRunner().invoke(cli, ["run", str(tmp_path / "cfg.yaml"), "-q"])
    assert result.exit_code == 0, result.output
    k = compile_model(model_from_text(MODEL, "products"),
                      [D("W", ("F",), direction="dF"), D("R", ("r",), cotangent="rbar"), D("R", ("c",))], values=["W"])
    want = k.evaluate(pts)
    with h5py.File(tmp_path / "out.h5") as f:
        assert f["dW_dF_jvp"].shape == (40,) and f["dR_dr_vjp"].shape == (40, 4) and f["dR_dc_sum"].shape == (4, 4)
        np.testing.assert_allclose(f["dW_dF_jvp"][:], want["dW_dF_jvp"], rtol=1e-14)
        np.testing.assert_allclose(f["dR_dr_vjp"][:], want["dR_dr_vjp"], rtol=1e-14)
        # three chunks of 16, 16 and 8 rows, summed in order
        np.testing.assert_allclose(f["dR_dc_sum"][:], want["dR_dc"].sum(axis=0), rtol=1e-13)
        assert f.attrs["complete"]


def test_direction_must_not_name_a_model_input(model_from_text):
    from adgrad.engine.errors import SpecError
    m = model_from_text(MODEL, "products")
    with pytest.raises(SpecError, match="names an input or param"):
        compile_model(m, [D("W", ("F",), direction="r")])
