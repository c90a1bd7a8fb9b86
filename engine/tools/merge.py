"""`adgrad merge`: join the shard files of one run into one output file.

A shard file (`adgrad run --shard I/N`) has the datasets of a full run restricted to its rows
[I*M//N, (I+1)*M//N), root attributes `shard` ("I/N"), `row_start`, `row_stop`, `input_points` (M),
and for every reduced dataset (a sum over points) the exact accumulator state in /_adgrad/exact/<name>.

A virtual dataset reads fill values wherever a source is missing, with no error, so everything is
checked before anything is written: each file is a complete shard, all come from the same run, and
their rows cover [0, M) exactly once. The result is built under a temporary name and renamed."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import h5py
import numpy as np

from ..errors import DataError
from ..numeric.exactsum import ExactSum
from ..store import guard
from ..store.atomic import atomic_h5
from ..store.lock import output_lock

EXACT = "_adgrad/exact"
SHARD_ATTRS = ("shard", "row_start", "row_stop", "input_points")
SAME_RUN = ("model_sha256", "config_yaml", "params_sha256", "input_path", "input_fingerprint", "input_points")
COPY_BYTES = 64 << 20           # --copy moves at most this much per read


def open_adgrad(path, role="file", kind="file"):
    """An adgrad HDF5 file open for reading; a DataError names the path if it is missing, not HDF5
    or not written by adgrad."""
    if not os.path.exists(path):
        raise DataError(f"{path}: {role} not found")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise DataError(f"{path}: not an HDF5 file ({exc})") from None
    if "adgrad_version" not in f.attrs:
        f.close()
        raise DataError(f"{path}: not an adgrad {kind} (no adgrad_version attribute)")
    return f


@dataclass
class Shard:
    path: str
    index: int
    count: int
    row_start: int
    row_stop: int
    attrs: dict
    per_point: dict             # name -> (shape per point, dtype)
    reduced: dict               # name -> (shape, dtype)

    @property
    def label(self):
        return f"{self.index}/{self.count}"


def read_shard(path) -> Shard:
    """The layout of one shard file, refusing anything that is not a complete adgrad shard."""
    with open_adgrad(path, "shard file", "output file") as f:
        attrs = dict(f.attrs)
        missing = [a for a in SHARD_ATTRS if a not in attrs]
        if missing:
            raise DataError(f"{path}: not a shard file (no {', '.join(missing)} attribute; written without --shard?)")
        try:
            index, count = (int(p) for p in str(attrs["shard"]).split("/"))
        except ValueError:
            raise DataError(f"{path}: shard attribute {attrs['shard']!r} is not 'I/N'") from None
        if not attrs.get("complete", False):
            raise DataError(f"{path}: shard {index}/{count} is incomplete (complete = False, "
                            f"{attrs.get('chunks_done', 0)} chunks done); finish it with adgrad run --resume")
        m = int(attrs["input_points"])
        start, stop = int(attrs["row_start"]), int(attrs["row_stop"])
        if not (0 <= index < count and (start, stop) == (index * m // count, (index + 1) * m // count)):
            raise DataError(f"{path}: shard {index}/{count} of {m} points should hold rows "
                            f"[{index * m // count}, {(index + 1) * m // count}), its attributes say [{start}, {stop})")
        exact = f.get(EXACT, {})
        per_point, reduced = {}, {}
        for name, ds in f.items():
            if not isinstance(ds, h5py.Dataset):
                continue
            if name in exact:
                reduced[name] = (ds.shape, ds.dtype)
                continue
            if ds.ndim < 1 or ds.shape[0] != stop - start:
                raise DataError(f"{path}: dataset '{name}' has shape {ds.shape}, but the shard holds "
                                f"{stop - start} rows")
            per_point[name] = (ds.shape[1:], ds.dtype)
    return Shard(os.fspath(path), index, count, start, stop, attrs, per_point, reduced)


def check_set(shards: list) -> list:
    """The shards in row order, once it is certain they are one run's complete, disjoint cover (every
    shard's rows were checked against I*M//N, so N distinct indices cover [0, M) exactly once)."""
    first = shards[0]
    for s in shards[1:]:
        for key in SAME_RUN:
            if not _same(s.attrs.get(key), first.attrs.get(key)):
                raise DataError(f"{s.path}: not from the same run as {first.path}: attribute '{key}' differs")
        if s.count != first.count:
            raise DataError(f"{s.path}: shard {s.label}, but {first.path} is shard {first.label}: "
                            f"they split the input differently")
        for what in ("per_point", "reduced"):
            mine, theirs = getattr(s, what), getattr(first, what)
            if mine != theirs:
                raise DataError(f"{s.path}: datasets differ from {first.path}: {_layout_diff(mine, theirs)}")
    by_index = {}
    for s in shards:
        if os.path.realpath(s.path) in {os.path.realpath(o.path) for o in by_index.values()}:
            raise DataError(f"{s.path}: the same file is given twice")
        if s.index in by_index:
            raise DataError(f"{s.path}: duplicate shard {s.label}, also in {by_index[s.index].path} "
                            f"(rows [{s.row_start}, {s.row_stop}) overlap)")
        by_index[s.index] = s
    ordered = sorted(shards, key=lambda s: s.row_start)
    if len(ordered) != first.count:
        m, n = int(first.attrs["input_points"]), first.count
        absent = [i for i in range(n) if i not in by_index]
        rows = ", ".join(f"{i}/{n} (rows [{i * m // n}, {(i + 1) * m // n}))" for i in absent)
        raise DataError(f"{len(ordered)} shard(s) given, but the run has {n}: missing {rows}; "
                        f"rows not covered would read as fill values")
    return ordered


def _same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _layout_diff(mine, theirs):
    """The first difference between two {name: (shape, dtype)} layouts, in words."""
    for n in sorted(set(mine) | set(theirs)):
        if n not in theirs:
            return f"extra dataset '{n}'"
        if n not in mine:
            return f"dataset '{n}' is missing"
        if mine[n] != theirs[n]:
            (s1, d1), (s2, d2) = mine[n], theirs[n]
            return f"dataset '{n}' is {d1} {tuple(s1)} here, {d2} {tuple(s2)} there (shape per row for per-point data)"


@dataclass
class Merged:
    path: str
    points: int
    shards: int
    datasets: int
    virtual: bool


def merge(out, paths, copy=False, overwrite=False) -> Merged:
    """Join the shard files `paths` into `out`: virtual datasets with source paths relative to `out`'s
    directory (move the set together), or with `copy` a physical file. Equal, bit for bit, to a run
    without shards, with its root attributes (no shard attributes; `merged_from` lists the sources)."""
    out = os.fspath(out)
    if not paths:
        raise DataError("no shard files given")
    reads = [(os.fspath(p), "one of the shards") for p in paths]
    guard.check_inputs(reads)
    guard.check_output(out, reads + [v for p in paths for v in guard.virtual_sources(os.fspath(p))])
    shards = check_set([read_shard(os.fspath(p)) for p in paths])
    guard.check_output(out, recorded_inputs(shards))
    with output_lock(out, "adgrad merge"):
        if os.path.exists(out) and not overwrite:
            raise DataError(f"{out}: output file exists; pass --overwrite to replace it")
        return _write(out, shards, copy)


def recorded_inputs(shards):
    """(path, what) of the point cloud the shards were computed from (each records it in `input_path`),
    and of the sources of its virtual datasets, if it is a merged file itself: what merge must not
    write over, though it never reads them."""
    out = []
    for path in dict.fromkeys(str(s.attrs["input_path"]) for s in shards if "input_path" in s.attrs):
        out.append((path, "the input file the shards were computed from"))
        try:
            out += guard.virtual_sources(path)
        except DataError:
            pass                # one of its sources is gone: nothing there to protect
    return out


def _write(out, shards, copy):
    first = shards[0]
    m = int(first.attrs["input_points"])
    out_dir = os.path.dirname(os.path.abspath(out))
    rel = [os.path.relpath(os.path.abspath(s.path), out_dir) for s in shards]
    attrs = {k: v for k, v in first.attrs.items() if k not in SHARD_ATTRS[:3]}
    attrs.update(points=m, input_points=m, complete=True, merged_from=json.dumps(rel))
    for key in ("chunks_done", "nan_points"):
        if key in first.attrs:
            attrs[key] = sum(int(s.attrs[key]) for s in shards)
    for key, pick in (("started", min), ("finished", max)):
        stamps = [str(s.attrs[key]) for s in shards if key in s.attrs]
        if stamps:
            attrs[key] = pick(stamps)       # ISO 8601 UTC strings sort in time order
    with atomic_h5(out) as f:
        for name, (shape, dtype) in first.per_point.items():
            if copy:
                _copy_rows(f, name, shards, m)
            else:
                layout = h5py.VirtualLayout(shape=(m,) + shape, dtype=dtype)
                for s, src in zip(shards, rel):
                    if s.row_stop > s.row_start:
                        layout[s.row_start:s.row_stop] = h5py.VirtualSource(
                            src, name, shape=(s.row_stop - s.row_start,) + shape)
                fill = np.nan if np.issubdtype(dtype, np.floating) else 0
                f.create_virtual_dataset(name, layout, fillvalue=fill)   # a lost source reads NaN, not 0
        for name, (shape, dtype) in first.reduced.items():
            total = None
            for s in shards:
                with h5py.File(s.path, "r") as sf:
                    part = ExactSum.from_state(sf[EXACT][name][()])
                if total is None:
                    total = part
                else:
                    total.merge(part)
            f.create_dataset(name, data=total.value().astype(dtype))
            f.create_dataset(f"{EXACT}/{name}", data=total.state())
        f.attrs.update(attrs)
    return Merged(out, m, len(shards), len(first.per_point) + len(first.reduced), not copy)


def _copy_rows(f, name, shards, m):
    """A physical dataset for `name`, laid out as the shards' (chunks, compression), filled in slices."""
    with h5py.File(shards[0].path, "r") as sf:
        src = sf[name]
        shape, dtype = src.shape[1:], src.dtype
        chunks = src.chunks and (min(src.chunks[0], max(m, 1)),) + src.chunks[1:]
        dst = f.create_dataset(name, shape=(m,) + shape, dtype=dtype, chunks=chunks,
                               compression=src.compression, compression_opts=src.compression_opts,
                               shuffle=src.shuffle)
    step = max(1, COPY_BYTES // max(1, int(np.prod(shape)) * dtype.itemsize))
    for s in shards:
        with h5py.File(s.path, "r") as sf:
            src = sf[name]
            for a in range(0, s.row_stop - s.row_start, step):
                b = min(s.row_stop - s.row_start, a + step)
                dst[s.row_start + a:s.row_start + b] = src[a:b]
