"""`adgrad merge`: shards of 1-4 uneven splits join into a file equal, bit for bit, to a single run
(virtual and --copy); a moved directory stays readable; every bad set of shards is refused."""
from __future__ import annotations

import json
import os
import shutil

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from adgrad.cli.main import cli

M = 103                          # uneven for every N below

MODEL = """\
adgrad: 1
name: tiny
inputs:
  x: {shape: [3], sample: {low: -1.0, high: 1.0}}
params:
  a: [0.5, 2.0]
outputs:
  E: a[0] * sum(exp(-x)) + a[1] * x[0] * x[1]
derivatives:
  dE_dx: -a[0] * exp(-x) + a[1] * stack([x[1], x[0], 0.0])
"""

CONFIG = """\
adgrad: 1
model: model.yaml
input:
  path: in.h5
output:
  path: full.h5
compute:
  values: [E]
  derivatives:
    - {of: E, wrt: x}
    - {of: E, wrt: a, reduce: sum}
engine:
  chunk: 40
"""


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """in.h5 (M points), full.h5 (a run without shards) and shards/<N>/out.shard<I>of<N>.h5 for N = 1..4."""
    d = tmp_path_factory.mktemp("merge")
    (d / "model.yaml").write_text(MODEL)
    (d / "cfg.yaml").write_text(CONFIG)
    assert invoke("sample", d / "cfg.yaml", "-n", M, "-o", d / "in.h5").exit_code == 0
    res = invoke("run", d / "cfg.yaml", "-q")
    assert res.exit_code == 0, res.output
    for n in (1, 2, 3, 4):
        (d / "shards" / str(n)).mkdir(parents=True)
        for i in range(n):
            res = invoke("run", d / "cfg.yaml", "-q", "--shard", f"{i}/{n}", "-o", d / "shards" / str(n) / "out.h5")
            assert res.exit_code == 0, res.output
    return d


def shard_paths(d, n):
    return [d / "shards" / str(n) / f"out.shard{i}of{n}.h5" for i in range(n)]


def read(path):
    with h5py.File(path, "r") as f:
        data = {}
        f.visititems(lambda name, obj: data.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        return data, dict(f.attrs)


def assert_same_as_full(d, out, n):
    full, full_attrs = read(d / "full.h5")
    data, attrs = read(out)
    # results and the exact sums' states; a run's commit records (for --resume) have no meaning here
    full = {k: v for k, v in full.items() if not k.startswith("_adgrad/") or k.startswith("_adgrad/exact/")}
    assert sorted(data) == sorted(full) == ["E", "_adgrad/exact/dE_da_sum", "dE_da_sum", "dE_dx"]
    for name, ref in full.items():
        assert data[name].dtype == ref.dtype and data[name].shape == ref.shape, name
        assert data[name].tobytes() == ref.tobytes(), name            # bit for bit
    assert attrs["points"] == M and attrs["complete"]
    assert not {"shard", "row_start", "row_stop"} & set(attrs)
    for key, value in full_attrs.items():       # the run's attributes; times and chunking are the shards'
        if key not in ("started", "finished", "chunks_done"):
            assert np.array_equal(attrs[key], value), key
    assert json.loads(attrs["merged_from"]) == [os.path.relpath(p, out.parent) for p in shard_paths(d, n)]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("copy", [False, True], ids=["virtual", "copy"])
def test_merge_equals_single_run(run_dir, n, copy, tmp_path):
    out = run_dir / f"merged_{n}_{copy}.h5"
    # shards given out of order: merge orders them by rows
    res = invoke("merge", out, *reversed(shard_paths(run_dir, n)), *(["--copy"] if copy else []))
    assert res.exit_code == 0, res.output
    assert f"{n} shard(s), {M} points" in res.stderr
    assert_same_as_full(run_dir, out, n)
    with h5py.File(out, "r") as f:
        assert f["dE_dx"].is_virtual is (not copy)
        assert f["E"].is_virtual is (not copy)


def test_virtual_file_moves_with_its_shards(run_dir, tmp_path, monkeypatch):
    work = tmp_path / "a"
    shutil.copytree(run_dir, work)
    out = work / "out" / "merged.h5"            # a sibling directory: sources are ../shards/3/s<I>.h5
    out.parent.mkdir()
    assert invoke("merge", out, *shard_paths(work, 3)).exit_code == 0
    assert json.loads(h5py.File(out, "r").attrs["merged_from"])[0] == "../shards/3/out.shard0of3.h5"
    moved = tmp_path / "b" / "moved"
    shutil.move(work, moved)
    monkeypatch.chdir(tmp_path)                 # neither the old nor the new directory
    ref, _ = read(run_dir / "full.h5")
    data, _ = read(moved / "out" / "merged.h5")
    assert data["dE_dx"].tobytes() == ref["dE_dx"].tobytes()
    os.remove(shard_paths(moved, 3)[1])         # what merge's checks guard against: fill values
    with h5py.File(moved / "out" / "merged.h5", "r") as f:
        assert np.isnan(f["E"][M // 3:2 * M // 3]).all()


def edit(path, attrs=None, drop=(), datasets=None):
    """Change a copy of a shard in place: root attributes, dropped or replaced datasets."""
    with h5py.File(path, "r+") as f:
        f.attrs.update(attrs or {})
        for name in drop:
            del f[name]
        for name, data in (datasets or {}).items():
            del f[name]
            f[name] = data


def bad_sets(d, tmp):
    """name -> (shard paths, text the message must contain, file it must name)."""
    def copy_of(n, i, name=None):
        p = tmp / (name or f"c{n}_{i}.h5")
        shutil.copy(shard_paths(d, n)[i], p)
        return p
    s3 = shard_paths(d, 3)
    cases = {}
    cases["missing file"] = ([s3[0], tmp / "nope.h5", s3[2]], "shard file not found", tmp / "nope.h5")
    notes = tmp / "notes.h5"
    notes.write_text("not hdf5")
    cases["not hdf5"] = ([s3[0], notes, s3[2]], "not an HDF5 file", notes)
    cases["not a shard"] = ([d / "full.h5"], "not a shard file", d / "full.h5")
    p = copy_of(3, 1)
    edit(p, {"complete": False})
    cases["incomplete"] = ([s3[0], p, s3[2]], "incomplete", p)
    for key, value in (("model_sha256", "0" * 64), ("config_yaml", "other"), ("input_path", "/elsewhere.h5")):
        p = copy_of(3, 1, f"{key}.h5")
        edit(p, {key: value})
        cases[f"other {key}"] = ([s3[0], p, s3[2]], f"attribute '{key}' differs", p)
    p = copy_of(3, 2, "points.h5")
    edit(p, {"input_points": M + 1})
    cases["other input_points"] = ([s3[0], s3[1], p], "should hold rows", p)
    p = copy_of(3, 1, "dtype.h5")
    with h5py.File(p, "r") as f:
        e32 = f["E"][()].astype(np.float32)
        g = f["dE_dx"][()]
    edit(p, datasets={"E": e32})
    cases["other dtype"] = ([s3[0], p, s3[2]], "dataset 'E' is float32", p)
    p = copy_of(3, 1, "shape.h5")
    edit(p, datasets={"dE_dx": g[:, :2]})
    cases["other shape"] = ([s3[0], p, s3[2]], "dataset 'dE_dx' is float64 (2,)", p)
    p = copy_of(3, 1, "dropped.h5")
    edit(p, drop=["E"])
    cases["dataset missing"] = ([s3[0], p, s3[2]], "dataset 'E' is missing", p)
    s2 = shard_paths(d, 2)
    cases["other split"] = ([s3[0], s2[1]], "split the input differently", s2[1])
    cases["duplicate"] = ([s3[0], s3[1], copy_of(3, 1, "dup.h5"), s3[2]], "duplicate shard 1/3", tmp / "dup.h5")
    cases["same file twice"] = ([s3[0], s3[1], s3[1], s3[2]], "given twice", s3[1])
    cases["gap"] = ([s3[0], s3[2]], f"missing 1/3 (rows [{M // 3}, {2 * M // 3}))", None)
    p = copy_of(3, 1, "rows.h5")
    edit(p, {"row_start": 0})
    cases["rows off the split"] = ([s3[0], p, s3[2]], "should hold rows [34, 68), its attributes say [0, 68)", p)
    return cases


CASES = ["missing file", "not hdf5", "not a shard", "incomplete", "other model_sha256", "other config_yaml",
         "other input_path", "other input_points", "other dtype", "other shape", "dataset missing",
         "other split", "duplicate", "same file twice", "gap", "rows off the split"]


@pytest.fixture(scope="module")
def cases(run_dir, tmp_path_factory):
    return bad_sets(run_dir, tmp_path_factory.mktemp("bad"))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("copy", [False, True], ids=["virtual", "copy"])
def test_refusals(cases, case, copy, tmp_path):
    paths, text, names = cases[case]
    out = tmp_path / "out.h5"
    res = invoke("merge", out, *paths, *(["--copy"] if copy else []))
    assert res.exit_code == 2, (res.output, res.exception)
    assert res.stderr.startswith("error: ") and "Traceback" not in res.output
    assert text in res.stderr, res.stderr
    if names is not None:
        assert str(names) in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == []       # no OUT, no temporary file


def test_existing_output_needs_overwrite(run_dir, tmp_path):
    out = tmp_path / "out.h5"
    out.write_text("keep")
    res = invoke("merge", out, *shard_paths(run_dir, 2))
    assert res.exit_code == 2 and "--overwrite" in res.stderr and out.read_text() == "keep"
    res = invoke("merge", out, *shard_paths(run_dir, 2), "--overwrite")
    assert res.exit_code == 0, res.output
    assert_same_as_full(run_dir, out, 2)
    res = invoke("merge", shard_paths(run_dir, 2)[0], *shard_paths(run_dir, 2), "--overwrite")
    assert res.exit_code == 2 and "would replace one of the shards" in res.stderr


def test_more_shards_than_points(tmp_path):
    """M = 3 over 4 shards: shard 0 is empty and maps no source; the sum still merges exactly."""
    (tmp_path / "model.yaml").write_text(MODEL)
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    assert invoke("sample", tmp_path / "cfg.yaml", "-n", 3, "-o", tmp_path / "in.h5").exit_code == 0
    assert invoke("run", tmp_path / "cfg.yaml", "-q").exit_code == 0
    for i in range(4):
        assert invoke("run", tmp_path / "cfg.yaml", "-q", "--shard", f"{i}/4").exit_code == 0
    shards = [tmp_path / f"full.shard{i}of4.h5" for i in range(4)]
    with h5py.File(shards[0], "r") as f:
        assert f["E"].shape == (0,)
    ref, _ = read(tmp_path / "full.h5")
    for flag in ([], ["--copy"]):
        assert invoke("merge", tmp_path / "m.h5", *shards, "--overwrite", *flag).exit_code == 0
        data, _ = read(tmp_path / "m.h5")
        for name in ("E", "dE_dx", "dE_da_sum", "_adgrad/exact/dE_da_sum"):
            assert data[name].tobytes() == ref[name].tobytes(), (flag, name)


def test_help():
    text = " ".join(invoke("merge", "--help").output.split())
    for words in ("Join shard outputs", "virtual datasets", "relative to OUT's directory", "--copy", "--overwrite"):
        assert words in text
