"""The point kernel called from the user's own parallel numba code (the Python API contract): one
workspace per thread, the point's rows as 1-D arrays, and the same bits as `evaluate`."""
from __future__ import annotations

from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

from adgrad.engine import compile_model, load_model

EAM = Path(__file__).resolve().parents[1] / "configs" / "eam_model.yaml"


def user_driver(point):
    """What a simulation code writes: its own prange over atoms, one workspace row per thread."""
    @njit(parallel=True)
    def run(x, alpha, energy, grad, work):
        n, threads = x.shape[0], work.shape[0]
        for t in prange(threads):
            for i in range(t * n // threads, (t + 1) * n // threads):
                point(x[i], alpha, energy[i], grad[i], work[t])
    return run


def test_point_kernel_from_user_njit_code_matches_evaluate():
    model = load_model(EAM)
    kernel = compile_model(model, derivatives=[("E", "x")], mode="reverse")
    rng = np.random.default_rng(3)
    x = rng.uniform(0.0, 1.0, (1001, 100))
    want = kernel.evaluate({"x": x})
    threads = numba.get_num_threads()
    energy, grad = np.full((1001, 1), np.nan), np.full((1001, 100), np.nan)
    work = np.zeros((threads, max(1, kernel.workspace_size)))
    alpha = np.array([model.param_values["alpha"]], dtype=np.float64).reshape(1)
    user_driver(kernel.point_kernel)(x, alpha, energy, grad, work)
    assert np.array_equal(energy[:, 0], want["E"])
    assert np.array_equal(grad, want["dE_dx"])
