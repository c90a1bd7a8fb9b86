"""`adgrad sample`: shapes, ranges, determinism under chunk and seed changes, atomic output, bounded
memory, and a sampled file that `adgrad run` accepts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli
from adgrad.engine.tools.sample import BLOCK

MODEL = """\
adgrad: 1
name: tiny
inputs:
  s: {sample: {low: -2.0, high: 3.0}}
  v: {shape: [3]}
  F: {shape: [2, 2], sample: {low: 0.5, high: 1.5}}
outputs:
  W: s * sum(v) + trace(F)
  r: v * s
"""

CONFIG = """\
adgrad: 1
model: model.yaml
input:
  path: pts.h5
  datasets: {s: scale, F: grad}
output:
  path: out.h5
compute:
  values: [W]
  derivatives:
    - {of: W, wrt: F, direction: dF}
    - {of: r, wrt: v, cotangent: rbar}
"""


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def work(tmp_path):
    (tmp_path / "model.yaml").write_text(MODEL)
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    return tmp_path


def read_all(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][:] for k in f}, dict(f.attrs)


def test_model_datasets_shapes_ranges_and_provenance(work):
    out = work / "s.h5"
    res = invoke("sample", work / "model.yaml", "-n", 1000, "-o", out, "--seed", 5)
    assert res.exit_code == 0, res.output
    with h5py.File(out, "r") as f:
        assert sorted(f) == ["F", "s", "v"]
        assert f["s"].shape == (1000,) and f["v"].shape == (1000, 3) and f["F"].shape == (1000, 2, 2)
        assert all(f[k].dtype == np.float64 and f[k].chunks is not None and f[k].chunks[1:] == f[k].shape[1:]
                   for k in f)
        s, v, F = f["s"][:], f["v"][:], f["F"][:]
        assert f.attrs["seed"] == 5 and f.attrs["points"] == 1000
        assert f.attrs["model_yaml"] == MODEL and "config_yaml" not in f.attrs
        assert json.loads(f.attrs["sample"]) == {"s": [-2.0, 3.0], "v": [0.0, 1.0], "F": [0.5, 1.5]}
        assert (f["F"].attrs["low"], f["F"].attrs["high"]) == (0.5, 1.5)
    assert -2 <= s.min() < -1.9 and 2.9 < s.max() < 3
    assert 0 <= v.min() < 0.01 and 0.99 < v.max() < 1
    assert 0.5 <= F.min() < 0.51 and 1.49 < F.max() < 1.5
    assert list(work.iterdir()).count(out) == 1 and not list(work.glob(".*tmp"))
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask      # not a temporary file's 0600


def test_low_high_override_every_input(work):
    out = work / "s.h5"
    assert invoke("sample", work / "model.yaml", "-n", 500, "-o", out, "--low", 10, "--high", 11).exit_code == 0
    data, attrs = read_all(out)
    for arr in data.values():
        assert 10 <= arr.min() and arr.max() < 11
    assert invoke("sample", work / "model.yaml", "-n", 500, "-o", out, "--overwrite", "--high", 0.75).exit_code == 0
    data, attrs = read_all(out)
    assert json.loads(attrs["sample"]) == {"s": [-2.0, 0.75], "v": [0.0, 0.75], "F": [0.5, 0.75]}
    assert data["s"].min() < -1.9 and data["F"].min() >= 0.5 and max(a.max() for a in data.values()) < 0.75


def test_values_depend_on_seed_only_not_on_chunk(work):
    n = 2 * BLOCK + 123              # blocks straddle every chunk size below
    files = {}
    for chunk in (7, 1000, BLOCK, 65536):
        files[chunk] = work / f"c{chunk}.h5"
        assert invoke("sample", work / "model.yaml", "-n", n, "-o", files[chunk], "--chunk", chunk).exit_code == 0
    ref, _ = read_all(files[65536])
    for path in files.values():
        data, _ = read_all(path)
        for k in ref:
            assert np.array_equal(data[k], ref[k]), (path, k)
    assert invoke("sample", work / "model.yaml", "-n", n, "-o", work / "s1.h5", "--seed", 1).exit_code == 0
    other, _ = read_all(work / "s1.h5")
    assert not np.array_equal(other["v"], ref["v"])
    # a prefix of a longer sample: rows do not depend on M either
    assert invoke("sample", work / "model.yaml", "-n", 100, "-o", work / "short.h5").exit_code == 0
    short, _ = read_all(work / "short.h5")
    assert np.array_equal(short["F"], ref["F"][:100])


def test_config_names_and_product_inputs(work):
    out = work / "pts.h5"
    res = invoke("sample", work / "cfg.yaml", "-n", 64, "-o", out)
    assert res.exit_code == 0, res.output
    data, attrs = read_all(out)
    assert {k: v.shape for k, v in data.items()} == {
        "scale": (64,), "v": (64, 3), "grad": (64, 2, 2), "dF": (64, 2, 2), "rbar": (64, 3)}
    assert attrs["config_yaml"] == CONFIG
    res = invoke("run", work / "cfg.yaml")
    assert res.exit_code == 0, res.output
    with h5py.File(work / "out.h5", "r") as f:
        s, v, F, dF, rbar = data["scale"], data["v"], data["grad"], data["dF"], data["rbar"]
        np.testing.assert_allclose(f["W"][:], s * v.sum(1) + np.trace(F, axis1=1, axis2=2), rtol=1e-14)
        np.testing.assert_allclose(f["dW_dF_jvp"][:], np.trace(dF, axis1=1, axis2=2), rtol=1e-14)
        np.testing.assert_allclose(f["dr_dv_vjp"][:], rbar * s[:, None], rtol=1e-14)


def test_refusals_leave_no_file(work):
    out = work / "s.h5"
    res = invoke("sample", work / "model.yaml", "-n", 10, "-o", out, "--low", 2, "--high", 1)
    assert res.exit_code == 2 and "low < high" in res.stderr and not out.exists()
    out.write_text("keep me")
    res = invoke("sample", work / "model.yaml", "-n", 10, "-o", out)
    assert res.exit_code == 2 and "--overwrite" in res.stderr and out.read_text() == "keep me"
    res = invoke("sample", work / "nothere.yaml", "-n", 10, "-o", work / "x.h5")
    assert res.exit_code == 2 and "nothere.yaml" in res.stderr
    assert sorted(p.name for p in work.iterdir()) == ["cfg.yaml", "model.yaml", "s.h5"]


PEAK_RSS = """\
import resource, sys
from adgrad.cli.main import cli
try:
    cli(sys.argv[1:])
except SystemExit as exc:
    assert not exc.code, exc.code
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def test_memory_does_not_grow_with_points(tmp_path):
    model = tmp_path / "wide.yaml"
    model.write_text("adgrad: 1\ninputs:\n  x: {shape: [50]}\noutputs:\n  E: sum(x)\n")

    def peak_kib(n):
        out = subprocess.run([sys.executable, "-c", PEAK_RSS, "sample", str(model), "-n", str(n),
                              "-o", str(tmp_path / f"{n}.h5"), "--chunk", "4096"],
                             capture_output=True, text=True, check=True)
        return int(out.stdout.split()[-1])
    small, large = peak_kib(10_000), peak_kib(500_000)      # 4 MB and 200 MB of samples
    assert (tmp_path / "500000.h5").stat().st_size > 200e6
    assert large - small < 30_000, (small, large)           # KiB


def test_a_killed_sample_leaves_a_temporary_file_that_the_next_one_removes(tmp_path):
    """kill -9 in the middle of writing leaves `.s.h5.HOST.PID.*.tmp`; the next sample to s.h5 on this
    host removes it (its pid is gone), and leaves a live process's temporary file alone."""
    from adgrad.engine.store.atomic import _host
    model = tmp_path / "wide.yaml"
    model.write_text("adgrad: 1\ninputs:\n  x: {shape: [50]}\noutputs:\n  E: sum(x)\n")
    proc = subprocess.Popen([sys.executable, "-c", "from adgrad.cli.main import cli; cli()", "sample", str(model),
                             "-n", "20000000", "-o", str(tmp_path / "s.h5")], stderr=subprocess.DEVNULL)
    temps = lambda: sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp"))  # noqa: E731
    deadline = time.monotonic() + 60
    while not temps() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    proc.kill()
    assert proc.wait() == -9, "sample ended before its kill"
    left = temps()
    assert left == [f".s.h5.{_host()}.{proc.pid}.{left[0][-12:-4]}.tmp"] and not (tmp_path / "s.h5").exists()
    live = tmp_path / f".s.h5.{_host()}.{os.getpid()}.0123abcd.tmp"      # this process is writing it
    live.write_bytes(b"")
    result = invoke("sample", model, "-n", 10, "-o", tmp_path / "s.h5")
    assert result.exit_code == 0, result.output
    assert temps() == [live.name] and (tmp_path / "s.h5").exists()


def test_help():
    text = " ".join(invoke("sample", "--help").output.split())
    for words in ("Write M points, uniform", "--points", "--output", "--seed", "--low", "--high", "--chunk",
                  "--overwrite", "input.datasets"):
        assert words in text
