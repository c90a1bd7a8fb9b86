"""`adgrad info`: run outputs, incomplete runs, shards, merged files (with their sources checked) and
sampled point clouds; exit 2 for a missing, non-HDF5 or non-adgrad file."""
from __future__ import annotations

import os
import shutil

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli

M = 30

MODEL = """\
adgrad: 1
name: quad
inputs:
  x: {shape: [2], sample: {low: -1.0, high: 2.0}}
params:
  k: 1.5
outputs:
  E: k * sum(x**2)
"""

CONFIG = """\
adgrad: 1
model: model.yaml
input: {path: in.h5}
output: {path: out.h5}
compute:
  derivatives:
    - {of: E, wrt: x}
    - {of: E, wrt: k, reduce: sum}
"""


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """in.h5 (sampled), out.h5 (a run), its shards out.shard0of2.h5 and out.shard1of2.h5, merged.h5."""
    d = tmp_path_factory.mktemp("info")
    (d / "model.yaml").write_text(MODEL)
    (d / "cfg.yaml").write_text(CONFIG)
    assert invoke("sample", d / "cfg.yaml", "-n", M, "-o", d / "in.h5", "--seed", 3).exit_code == 0
    assert invoke("run", d / "cfg.yaml", "-q").exit_code == 0
    for i in range(2):
        res = invoke("run", d / "cfg.yaml", "-q", "--shard", f"{i}/2")
        assert res.exit_code == 0, res.output
    assert invoke("merge", d / "merged.h5", d / "out.shard0of2.h5", d / "out.shard1of2.h5").exit_code == 0
    return d


def test_run_output(files):
    res = invoke("info", files / "out.h5")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.startswith(f"{files / 'out.h5'}: adgrad output, complete\n")
    assert f"points    {M}; chunks done 1 / 1 (rows done {M})" in out
    assert f"input     {files / 'in.h5'}" in out
    assert "modes     dE_dx: " in out and "threads   " in out and "numba " in out and "h5py " in out
    assert "started 20" in out and "finished 20" in out
    lines = out.splitlines()
    assert any(ln.split()[:3] == ["dE_dx", f"({M},", "2)"] and "float64" in ln for ln in lines)
    assert any(ln.split()[:3] == ["dE_dk_sum", "()", "float64"] and "summed over points" in ln for ln in lines)
    assert "model:\n  adgrad: 1\n  name: quad\n" in out and "config:\n  adgrad: 1\n  model: model.yaml\n" in out
    short = invoke("info", files / "out.h5", "--no-text").stdout
    assert "model:" not in short and "config:" not in short and short.splitlines()[:8] == lines[:8]


def test_incomplete_run(files, tmp_path):
    p = tmp_path / "cut.h5"
    shutil.copy(files / "out.h5", p)
    with h5py.File(p, "r+") as f:      # as kill -9 leaves it: the attributes lag the commit record
        f.attrs.update(complete=False, chunk=8, chunks_done=2)
        f["_adgrad/commit"][...] = [3, 2]
        digests = f["_adgrad/input_digests"]    # one row per chunk of 8, as such a run lays it out
        del f["_adgrad/input_digests"]
        f["_adgrad/input_digests"] = np.zeros((4, digests.shape[1]), dtype=np.uint64)
    res = invoke("info", p, "--no-text")
    assert res.exit_code == 0 and "INCOMPLETE (finish it with adgrad run --resume)" in res.stdout
    assert f"points    {M}; chunks done 3 / 4 (rows done 24)" in res.stdout


def test_shard_and_merged(files, tmp_path):
    res = invoke("info", files / "out.shard1of2.h5", "--no-text")
    assert res.exit_code == 0, res.output
    assert "adgrad shard 1/2, complete" in res.stdout
    assert f"shard     1/2: input rows [{M // 2}, {M}) of {M}" in res.stdout
    res = invoke("info", files / "merged.h5", "--no-text")
    assert res.exit_code == 0, res.output
    assert "adgrad output merged from 2 shard(s), complete" in res.stdout
    assert "sources   out.shard0of2.h5, out.shard1of2.h5" in res.stdout
    assert f"points    {M}; chunks done 2 in 2 shard(s)" in res.stdout
    assert "virtual, 2 source(s)" in res.stdout and "MISSING" not in res.stdout
    moved = tmp_path / "set"
    moved.mkdir()
    for name in ("merged.h5", "out.shard0of2.h5"):      # shard 1 left behind
        shutil.copy(files / name, moved / name)
    res = invoke("info", moved / "merged.h5", "--no-text")
    assert res.exit_code == 2
    assert "virtual, 2 source(s), 1 MISSING" in res.stdout
    assert res.stderr == (f"error: {moved / 'merged.h5'}: virtual source(s) missing, these rows read as fill "
                          f"values: 'E' rows [{M // 2}, {M}) from out.shard1of2.h5; 'dE_dx' rows [{M // 2}, {M}) from "
                          f"out.shard1of2.h5\n")


def test_sample_file(files):
    res = invoke("info", files / "in.h5")
    assert res.exit_code == 0, res.output
    assert "adgrad sample point cloud" in res.stdout
    assert f"points    {M}; seed 3; uniform x in [-1, 2)" in res.stdout
    assert "config:\n  adgrad: 1\n" in res.stdout


def test_bad_files(tmp_path):
    res = invoke("info", tmp_path / "none.h5")
    assert res.exit_code == 2 and res.stderr == f"error: {tmp_path / 'none.h5'}: file not found\n"
    (tmp_path / "t.h5").write_text("text")
    res = invoke("info", tmp_path / "t.h5")
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {tmp_path / 't.h5'}: not an HDF5 file")
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = np.zeros(3)
    res = invoke("info", tmp_path / "other.h5")
    assert res.exit_code == 2
    assert res.stderr == f"error: {tmp_path / 'other.h5'}: not an adgrad file (no adgrad_version attribute)\n"
    assert not os.path.exists(tmp_path / "none.h5")


def test_help():
    text = " ".join(invoke("info", "--help").output.split())
    for words in ("Summarize an output, shard, merged or sampled FILE", "--no-text", "virtual source"):
        assert words in text
