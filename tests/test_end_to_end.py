"""End to end: the shipped EAM config and data against a hand-written numpy EAM, the Python API in
every mode, allocation-free kernels (numba NRT stats) and the on-disk compile cache."""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli
from adgrad.engine import compile_model, load_model
from adgrad.engine.kernel import run_threads

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "eam.yaml"
MODEL = ROOT / "configs" / "eam_model.yaml"
DATA = ROOT / "data" / "eam_points.h5"
RTOL = 1e-12


def eam_numpy(x, alpha=3.0):
    """rho = sum(exp(-3(x+1))), E = rho^2 + rho^3 + rho^4/4, dE/dx_i = (2rho + 3rho^2 + rho^3)(-3)exp(-3(x_i+1))."""
    r = np.exp(-alpha * (x + 1.0))
    rho = r.sum(axis=1)
    e = rho**2 + rho**3 + 0.25 * rho**4
    de = (2 * rho + 3 * rho**2 + rho**3)[:, None] * (-alpha) * r
    return e, de


@pytest.fixture(scope="module")
def points():
    with h5py.File(DATA, "r") as f:
        return f["points"][()]


def test_run_shipped_eam_config(tmp_path, points):
    out = tmp_path / "eam_out.h5"
    result = CliRunner().invoke(cli, ["run", str(CONFIG), "-o", str(out)])
    assert result.exit_code == 0, result.output
    e_ref, de_ref = eam_numpy(points)
    with h5py.File(out, "r") as f:
        assert bool(f.attrs["complete"]) is True
        assert int(f.attrs["points"]) == points.shape[0] == 2000
        assert Path(f.attrs["input_path"]) == DATA
        assert json.loads(f.attrs["modes"]) == {"dE_dx": "reverse"}
        assert f["E"].shape == (2000,) and f["dE_dx"].shape == (2000, 100)
        np.testing.assert_allclose(f["E"][()], e_ref, rtol=RTOL, atol=0)
        np.testing.assert_allclose(f["dE_dx"][()], de_ref, rtol=RTOL, atol=0)


@pytest.mark.parametrize("mode", ["forward", "reverse", "manual"])
def test_python_api_modes(points, mode):
    model = load_model(MODEL)
    kernel = compile_model(model, derivatives=[("E", "x")], mode=mode)
    assert kernel.modes == {"dE_dx": mode}
    assert kernel.workspace_size >= 0
    out = kernel.evaluate({"x": points})
    assert set(out) == {"E", "dE_dx"}
    assert out["E"].shape == (2000,) and out["dE_dx"].shape == (2000, 100)
    e_ref, de_ref = eam_numpy(points)
    np.testing.assert_allclose(out["E"], e_ref, rtol=RTOL, atol=0)
    np.testing.assert_allclose(out["dE_dx"], de_ref, rtol=RTOL, atol=0)


def test_python_api_param_override(points):
    """evaluate(params=...) uses the new alpha (values and derivative)."""
    kernel = compile_model(load_model(MODEL), derivatives=[("E", "x")], mode="reverse")
    out = kernel.evaluate({"x": points[:50]}, params={"alpha": 2.5})
    e_ref, de_ref = eam_numpy(points[:50], alpha=2.5)
    np.testing.assert_allclose(out["E"], e_ref, rtol=RTOL, atol=0)
    np.testing.assert_allclose(out["dE_dx"], de_ref, rtol=RTOL, atol=0)


def _python(script, tmp_path, model=MODEL, **env):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    full_env = {**os.environ, **{k: str(v) for k, v in env.items()}}
    proc = subprocess.run([sys.executable, str(path), str(model)], env=full_env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


NRT_SCRIPT = """
    import json, sys
    import numpy as np
    from numba.core.runtime import rtsys
    from adgrad.engine import compile_model, load_model

    model = load_model(sys.argv[1])
    rng = np.random.default_rng(0)
    res = {}
    for mode in ("forward", "reverse", "manual"):
        kernel = compile_model(model, derivatives=[("E", "x")], mode=mode)
        for m in (1000, 1000, 100000):          # first call may warm up; compare the second with the big one
            x = rng.random((m, 100))
            out = {"E": np.empty(m), "dE_dx": np.empty((m, 100))}
            s0 = rtsys.get_allocation_stats()
            kernel.evaluate({"x": x}, out=out, threads=1)    # one driver call: its arguments' boxing counts once
            s1 = rtsys.get_allocation_stats()
            res[f"{mode}/{m}"] = [s1.alloc - s0.alloc, s1.free - s0.free]
    print(json.dumps(res))
"""


def test_nrt_allocations_do_not_grow_with_points(tmp_path):
    """NUMBA_NRT_STATS must be set before numba initializes, hence a subprocess. On one thread the
    whole batch is one driver call, so any allocation per point or per row would show."""
    res = _python(NRT_SCRIPT, tmp_path, NUMBA_NRT_STATS=1)
    for mode in ("forward", "reverse", "manual"):
        small, big = res[f"{mode}/1000"], res[f"{mode}/100000"]
        assert small[0] == big[0], (mode, res)            # allocations independent of the point count
        assert big[0] == big[1], (mode, res)              # and all freed
        assert big[0] < 100, (mode, res)                  # per call, not per point


COMPILE_SCRIPT = """
    import json, sys, time
    from adgrad.engine import compile_model, load_model

    model = load_model(sys.argv[1])
    t = time.perf_counter()
    kernel = compile_model(model, derivatives=[("E", "x")], mode="reverse")
    dt = time.perf_counter() - t
    st = kernel.module.batch.stats
    print(json.dumps({"seconds": dt, "hits": sum(st.cache_hits.values()), "misses": sum(st.cache_misses.values())}))
"""


def test_second_compile_uses_disk_cache(tmp_path):
    cache = tmp_path / "cache"
    first = _python(COMPILE_SCRIPT, tmp_path, ADGRAD_CACHE_DIR=cache)
    second = _python(COMPILE_SCRIPT, tmp_path, ADGRAD_CACHE_DIR=cache)
    assert first["misses"] >= 1, first                    # a fresh cache dir really compiles
    # the counts, not a time bound: a cold compile of this kernel takes under a second too
    assert second["hits"] >= 1 and second["misses"] == 0, second
    assert any(cache.glob("k_*.py"))


BITS_SCRIPT = """
    import hashlib, json, sys
    import numpy as np
    from adgrad.engine import compile_model, load_model

    kernel = compile_model(load_model(sys.argv[1]), derivatives=[("E", "x"), ("E", "a"), ("E", "c")])
    x = np.random.default_rng(0).standard_normal((6000, 4)) * 3
    out = kernel.evaluate({"x": x})
    st = kernel.module.batch.stats
    print(json.dumps({"misses": sum(st.cache_misses.values()),
                      "digest": hashlib.sha256(b"".join(out[n].tobytes() for n in sorted(out))).hexdigest()}))
"""


def test_compiled_and_cached_kernels_give_the_same_bits(tmp_path):
    """A process that compiles a kernel and one that loads it from the disk cache compute the same
    bits (with fastmath contract+reassoc they did not, for this straight-line kernel), so a run
    resumed or sharded on a warm cache equals one that compiled."""
    model = tmp_path / "small.yaml"
    model.write_text("adgrad: 1\nname: small\ninputs:\n  x: {shape: [4]}\n"
                     "params:\n  a: [1.0, 2.0, 3.0, 4.0]\n  c: 0.5\n"
                     "outputs:\n  E: sum(a * exp(-c * x)) + c * sum(x**2)\n")
    cache = tmp_path / "cache"
    compiled = _python(BITS_SCRIPT, tmp_path, model, ADGRAD_CACHE_DIR=cache)
    loaded = _python(BITS_SCRIPT, tmp_path, model, ADGRAD_CACHE_DIR=cache)
    assert compiled["misses"] >= 1 and loaded["misses"] == 0
    assert compiled["digest"] == loaded["digest"]


def test_kernel_source_independent_of_compile_history():
    first = compile_model(load_model(MODEL), derivatives=[("E", "x")], mode="reverse")
    compile_model(load_model(MODEL), derivatives=[("E", "x")], mode="forward")
    again = compile_model(load_model(MODEL), derivatives=[("E", "x")], mode="reverse")
    assert again.source == first.source
    assert again.module is first.module


def test_eam_gradient_kernel_calls_exp_once_per_element():
    """CSE shares the exp between the value and the gradient: one exp call in the whole kernel,
    inside the single loop over x, and the gradient pass reads the stored product."""
    kernel = compile_model(load_model(MODEL), derivatives=[("E", "x")], mode="reverse")
    point = kernel.source[kernel.source.index("def point_body("):kernel.source.index("def point(")]
    assert point.count("__vexp(") == 1 and "np.exp(" not in point      # vectorized (tests/test_vectorize.py)
    assert point.count("for i0 in range(100):") == 2


def test_evaluate_flags_points_with_nonfinite_inputs_or_results(model_from_text):
    """The batch driver checks each point's rows as it writes them: a NaN input (row 3), an
    overflowing result (row 5) and an infinite gradient only (row 6) are flagged, nothing else."""
    model = model_from_text("adgrad: 1\ninputs:\n  x: {shape: [3]}\noutputs:\n  E: sum(exp(x)) + sqrt(x[0])\n",
                            "flags")
    kernel = compile_model(model, [("E", "x")], mode="reverse")
    x = np.ones((8, 3))
    x[3, 1] = np.nan
    x[5, 2] = 1000.0
    x[6, 0] = 0.0                           # sqrt: finite value, infinite derivative
    flags = np.ones(8, dtype=bool)
    kernel.evaluate({"x": x}, nonfinite=flags)
    assert np.flatnonzero(flags).tolist() == [3, 5, 6]


def test_out_arrays_that_share_memory_with_inputs_or_each_other_are_refused(model_from_text):
    """The kernels store each result as soon as it is computed, so an out array over an input would
    be read back as that input: refused before anything is written, as are two outputs in one array.
    Disjoint views of one buffer are fine (exact overlap, not just overlapping bounds)."""
    model = model_from_text("adgrad: 1\ninputs:\n  x: {shape: [2]}\noutputs:\n  E: x[0] * exp(x[1])\n", "alias")
    kernel = compile_model(model, [("E", "x")], mode="forward")
    x = np.random.default_rng(0).standard_normal((10, 2))
    expect = kernel.evaluate({"x": x})
    for out, message in (({"dE_dx": x}, "out['dE_dx'] shares memory with input 'x'"),
                         ({"E": x[:, 1]}, "out['E'] shares memory with input 'x'"),
                         ({"E": x[:, 0], "dE_dx": np.empty((10, 2))}, "out['E'] shares memory with input 'x'")):
        before = x.copy()
        with pytest.raises(ValueError, match=re.escape(message)):
            kernel.evaluate({"x": x}, out=out)
        assert x.tobytes() == before.tobytes()
    both = np.empty((10, 3))
    with pytest.raises(ValueError, match=re.escape("out['E'] shares memory with out['dE_dx']")):
        kernel.evaluate({"x": x}, out={"E": both[:, 0], "dE_dx": both[:, :2]})
    got = kernel.evaluate({"x": x}, out={"E": both[:, 0], "dE_dx": both[:, 1:]})     # interleaved, disjoint
    assert got["E"].tobytes() == expect["E"].tobytes() and np.array_equal(got["dE_dx"], expect["dE_dx"])


@pytest.mark.parametrize("m", [0, 1, 15, 16, 17, 2 * 64 * 16 + 3, 20_011])
def test_batch_driver_computes_every_row_once_for_any_size(model_from_text, m):
    """Threads take blocks of rows from a shared counter (at least 16 rows, m / (64 * threads) for
    large m): sizes around a block and a prime are computed row for row like numpy, into
    outputs prefilled with NaN, with the same bits for 1 and 2 threads, and flagged only where asked."""
    model = model_from_text("adgrad: 1\ninputs:\n  x: {shape: [2]}\noutputs:\n  E: x[0] * exp(x[1])\n", "blocks")
    kernel = compile_model(model, [("E", "x")], mode="forward")
    kernel.serial_below = 0                 # every size on 2 threads
    x = np.random.default_rng(m).standard_normal((m, 2))
    x[m // 2:m // 2 + 1, 0] = np.inf if m else 0.0
    results = []
    for threads in (1, 2):
        out = {"E": np.full(m, np.nan), "dE_dx": np.full((m, 2), np.nan)}     # a row left out stays NaN
        flags = np.zeros(m, dtype=bool)
        kernel.evaluate({"x": x}, out=out, threads=threads, nonfinite=flags)
        results.append(out)
        assert np.flatnonzero(flags).tolist() == ([m // 2] if m else [])
    np.testing.assert_allclose(results[0]["E"], x[:, 0] * np.exp(x[:, 1]), rtol=1e-15)   # exp: libm vs numpy
    np.testing.assert_allclose(results[0]["dE_dx"][:, 1], results[0]["E"], rtol=0)
    for name in ("E", "dE_dx"):
        assert results[0][name].tobytes() == results[1][name].tobytes()


def test_threads_work_in_a_forked_child_and_errors_reach_the_caller(model_from_text):
    """A child forked after the parent's calls used the pool (whose threads it does not inherit) makes
    its own and finishes; an exception in a thread reaches the caller once every thread has stopped."""
    import multiprocessing
    model = model_from_text("adgrad: 1\ninputs:\n  x: {shape: [2]}\noutputs:\n  E: x[0] * exp(x[1])\n", "fork")
    kernel = compile_model(model, [("E", "x")])
    x = np.random.default_rng(1).standard_normal((5000, 2))
    want = kernel.evaluate({"x": x}, threads=2)["E"]
    child = multiprocessing.get_context("fork").Process(
        target=lambda: os._exit(0 if np.array_equal(kernel.evaluate({"x": x}, threads=2)["E"], want) else 1))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0, "the forked child hung or computed other values"
    finished = []

    def call(w):
        if w == 1:
            raise RuntimeError("thread 1 failed")
        time.sleep(0.2)
        finished.append(w)
    with pytest.raises(RuntimeError, match="thread 1 failed"):
        run_threads(call, 2)
    assert finished == [0]                  # raised after the calling thread's share was done
