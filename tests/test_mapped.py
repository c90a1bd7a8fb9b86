"""Input rows mapped from the file (engine/h5/mapped.py): the pieces hold exactly what h5py reads,
cut where any dataset changes place in the file; layouts that cannot be mapped are read by h5py;
and a run gives the same bits either way."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

from adgrad.engine.store import mapped
from adgrad.engine.store.input import InputReader
from adgrad.engine.job.run import prepare
from adgrad.engine.job.run import run as run_job
from adgrad.engine.spec import load_config_file


def write(path, **datasets):
    """name=(array, h5py create_dataset options); the datasets are written together in 7 uneven
    slices, as a streaming writer would, so chunks of different datasets and index nodes interleave."""
    with h5py.File(path, "w", rdcc_nbytes=0) as f:      # no chunk cache: chunks reach the file as written
        dsets = {name: f.create_dataset(name, shape=data.shape, dtype=opts.pop("dtype", data.dtype), **opts)
                 for name, (data, opts) in datasets.items()}
        cuts = np.linspace(0, len(next(iter(datasets.values()))[0]), 8).astype(int)
        for a, b in zip(cuts, cuts[1:]):
            for name, (data, _) in datasets.items():
                dsets[name][a:b] = data[a:b]
    return path


def reader(path, **names):
    with h5py.File(path, "r") as f:
        shapes = {n: f[d].shape[1:] for n, d in names.items()}
    return InputReader(str(path), names, shapes)


def buffers(r, n):
    return {name: np.full((n,) + ds.shape[1:], np.nan) for name, ds in r.datasets.items()}


def check_pieces(r, start, stop):
    """reader.rows(start, stop) covers [start, stop) in order with h5py's values."""
    pieces = [p for p in r.rows(start, stop, buffers(r, stop - start)) if p[1] > p[0]]
    assert [lo for lo, _, _ in pieces] == [0] + [hi for _, hi, _ in pieces[:-1]] if pieces else stop == start
    assert not pieces or pieces[-1][1] == stop - start
    for lo, hi, views in pieces:
        for name, ds in r.datasets.items():
            np.testing.assert_array_equal(views[name], ds[start + lo: start + hi])
            assert views[name].dtype == np.float64 and views[name].flags.c_contiguous
    return pieces


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_contiguous_dataset_is_one_mapped_piece(tmp_path, rng):
    x = rng.standard_normal((1000, 3, 2))
    r = reader(write(tmp_path / "a.h5", x=(x, {})), x="x")
    assert r.mapped.usable
    for start, stop in [(0, 1000), (0, 1), (999, 1000), (123, 457), (500, 500)]:
        pieces = check_pieces(r, start, stop)
        assert len(pieces) == (stop > start)
    r.close()


def test_chunked_datasets_are_cut_where_either_changes_place(tmp_path, rng):
    """Two datasets with different chunk sizes, written alternately: chunks of x and y interleave
    in the file, so each run of rows of one dataset is short and the pieces follow both."""
    x, y = rng.standard_normal((5000, 4)), rng.standard_normal((5000,))
    path = write(tmp_path / "b.h5", x=(x, {"chunks": (300, 4)}), y=(y, {"chunks": (128,)}))
    r = reader(path, x="x", y="y")
    assert r.mapped.usable and len(r.mapped.runs["x"][0]) > 1      # x's rows lie in several places
    for _ in range(30):
        start = int(rng.integers(0, 5000))
        stop = int(rng.integers(start, min(5000, start + 2500) + 1))
        check_pieces(r, start, stop)
    assert len(check_pieces(r, 0, 5000)) > 1
    r.close()


def test_too_scattered_rows_are_read_by_h5py(tmp_path, rng, monkeypatch):
    x = rng.standard_normal((4000, 2))
    path = write(tmp_path / "c.h5", x=(x, {"chunks": (10, 2)}), y=(x[:, 0].copy(), {"chunks": (10,)}))
    r = reader(path, x="x", y="y")
    monkeypatch.setattr(mapped, "MAX_PIECES", 2)
    bufs = buffers(r, 500)
    pieces = r.rows(1000, 1500, bufs)
    assert len(pieces) == 1 and np.shares_memory(pieces[0][2]["x"], bufs["x"])     # read into the buffer
    np.testing.assert_array_equal(pieces[0][2]["x"], x[1000:1500])
    r.close()


def test_offsets_that_do_not_hold_the_rows_are_not_trusted(tmp_path, rng, monkeypatch):
    """The mapped first and last rows are compared with h5py's before any mapping is used."""
    x = rng.standard_normal((300, 2))
    path = write(tmp_path / "f.h5", x=(x, {}))
    runs = mapped._runs
    monkeypatch.setattr(mapped, "_runs", lambda ds: (lambda r: (r[0], [o + 16 for o in r[1]], r[2]))(runs(ds)))
    r = reader(path, x="x")
    assert not r.mapped.usable and r.mapped.fd is None
    check_pieces(r, 0, 300)
    r.close()


def test_a_failing_mmap_falls_back_to_h5py(tmp_path, rng, monkeypatch):
    x = rng.standard_normal((300, 2))
    r = reader(write(tmp_path / "g.h5", x=(x, {})), x="x")
    assert r.mapped.usable

    def refuse(*args, **kwargs):
        raise OSError(19, "No such device")
    monkeypatch.setattr(mapped.mmap, "mmap", refuse)
    bufs = buffers(r, 100)
    pieces = r.rows(100, 200, bufs)
    assert len(pieces) == 1 and np.shares_memory(pieces[0][2]["x"], bufs["x"])
    np.testing.assert_array_equal(pieces[0][2]["x"], x[100:200])
    r.close()
    r = reader(tmp_path / "g.h5", x="x")
    assert not r.mapped.usable                 # and a new reader falls back from the start
    r.close()


@pytest.mark.parametrize("opts", [
    {"dtype": np.float32},                              # converted on the way in
    {"dtype": ">f8"},                                   # not the machine's byte order
    {"chunks": (100, 2), "compression": "gzip"},        # filtered
    {"chunks": (100, 1)},                               # a row split over chunks
])
def test_layouts_that_cannot_be_mapped_are_read_by_h5py(tmp_path, rng, opts):
    x = rng.standard_normal((700, 2))
    r = reader(write(tmp_path / "d.h5", x=(x, dict(opts))), x="x")
    assert not r.mapped.usable
    pieces = check_pieces(r, 50, 650)
    assert len(pieces) == 1
    np.testing.assert_array_equal(pieces[0][2]["x"], x[50:650].astype(opts.get("dtype", np.float64)))
    r.close()


def test_one_dataset_that_cannot_be_mapped_means_h5py_reads_all(tmp_path, rng):
    x, y = rng.standard_normal((300, 2)), rng.standard_normal((300,))
    r = reader(write(tmp_path / "e.h5", x=(x, {}), y=(y, {"dtype": np.float32})), x="x", y="y")
    assert not r.mapped.usable
    check_pieces(r, 0, 300)
    r.close()


MODEL = """\
adgrad: 1
name: pieces
inputs:
  x: {shape: [3]}
  s: {}
outputs:
  E: s * sum(exp(-x) * x**2) + log(s)
"""

CONFIG = """\
adgrad: 1
model: model.yaml
input: {path: in.h5, datasets: {x: x, s: s}}
output: {path: OUT}
compute:
  values: [E]
  derivatives:
    - {of: E, wrt: x}
    - {of: E, wrt: s, reduce: sum}
engine: {chunk: 1000, nan: NAN}
"""


def run(tmp_path, name, nan="propagate"):
    (tmp_path / f"{name}.yaml").write_text(CONFIG.replace("OUT", f"{name}.h5").replace("NAN", nan))
    return run_job(load_config_file(str(tmp_path / f"{name}.yaml")), threads=2)


def test_run_on_mapped_pieces_equals_run_on_h5py_reads(tmp_path, rng, monkeypatch):
    """Chunks of 1000 rows over HDF5 chunks of 128 and 300 rows that interleave in the file: most
    of the run's chunks are several pieces, each computed by its own kernel call."""
    (tmp_path / "model.yaml").write_text(MODEL)
    x, s = rng.standard_normal((6000, 3)), rng.uniform(0.5, 2, 6000)
    x[4321, 1] = np.nan
    write(tmp_path / "in.h5", x=(x, {"chunks": (128, 3)}), s=(s, {"chunks": (300,)}))
    counts, rows = [], InputReader.rows
    monkeypatch.setattr(InputReader, "rows", lambda self, *a: counts.append(len(p := rows(self, *a))) or p)
    run(tmp_path, "mapped")
    assert len(counts) == 6 and max(counts) > 1
    kernel = prepare(load_config_file(str(tmp_path / "mapped.yaml")))[1]
    assert len(kernel.module.batch.signatures) == 1     # mapped (read-only) rows: no second compile
    monkeypatch.setattr(mapped.MappedRows, "usable", property(lambda self: False))
    run(tmp_path, "read")
    with h5py.File(tmp_path / "mapped.h5", "r") as a, h5py.File(tmp_path / "read.h5", "r") as b:
        for name in ("E", "dE_dx", "dE_ds_sum"):
            assert a[name][()].tobytes() == b[name][()].tobytes(), name
        assert a.attrs["nan_points"] == b.attrs["nan_points"] == 1
        np.testing.assert_allclose(a["E"][:10], s[:10] * (np.exp(-x[:10]) * x[:10] ** 2).sum(1) + np.log(s[:10]))


def test_nan_error_names_the_row_inside_a_later_piece(tmp_path, rng):
    (tmp_path / "model.yaml").write_text(MODEL)
    x, s = rng.standard_normal((3000, 3)), rng.uniform(0.5, 2, 3000)
    s[2777] = np.inf
    write(tmp_path / "in.h5", x=(x, {"chunks": (128, 3)}), s=(s, {"chunks": (300,)}))
    with pytest.raises(Exception, match=r"non-finite value at input row 2777 in input dataset 's'"):
        run(tmp_path, "strict", nan="error")
