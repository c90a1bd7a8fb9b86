"""`adgrad info`: what an adgrad HDF5 file holds and how it was made, from the file alone.

Works on run outputs, shard files, merged files (whose virtual sources are checked: a missing one
would read as fill values without any error) and `adgrad sample` point clouds."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import h5py

from ..errors import DataError
from ..store.output import record_problem
from .merge import EXACT, open_adgrad


@dataclass
class Report:
    lines: list
    missing_sources: list = field(default_factory=list)     # (dataset, source file, rows)
    damaged: str | None = None          # what is wrong with the commit record of an incomplete output


def describe(path, text=True) -> Report:
    """The summary of an adgrad file; raises DataError for a missing, unreadable or foreign file."""
    with open_adgrad(path) as f:
        a = dict(f.attrs)
        damaged = None
        if not a.get("complete", True) and "_adgrad" in f:
            # after kill -9 the root attributes lag; the commit record (engine/store/output.py) does not
            damaged = record_problem(f)
            if damaged is None:
                a["chunks_done"] = int(f["_adgrad/commit"][...].max())
        try:
            lines = [f"{path}: {_kind(a)}", *_status(a), *_provenance(a)]
        except (KeyError, ValueError, TypeError) as exc:     # json.JSONDecodeError is a ValueError
            raise DataError(f"{path}: not a well-formed adgrad file (its root attributes: "
                            f"{type(exc).__name__}: {exc})") from None
        report = Report(lines, damaged=damaged)
        if damaged:
            lines.append(f"  DAMAGED   the commit record: {damaged} (--resume refuses the file)")
        lines.append("datasets:")
        lines += _datasets(f, os.path.dirname(os.path.abspath(path)), report)
        if text:
            for key, title in (("model_yaml", "model"), ("config_yaml", "config")):
                if key in a:
                    lines.append(f"{title}:")
                    lines += ["  " + ln for ln in str(a[key]).rstrip("\n").splitlines()]
    return report


def _kind(a):
    if "complete" not in a:
        return "adgrad sample point cloud"
    state = "complete" if a["complete"] else "INCOMPLETE (finish it with adgrad run --resume)"
    if "shard" in a:
        return f"adgrad shard {a['shard']}, {state}"
    if "merged_from" in a:
        return f"adgrad output merged from {len(json.loads(a['merged_from']))} shard(s), {state}"
    return f"adgrad output, {state}"


def _status(a):
    out = []
    if "complete" in a:
        done = int(a.get("chunks_done", 0))
        if "merged_from" in a:          # each shard chunked its own rows
            progress = f"{done} in {len(json.loads(a['merged_from']))} shard(s)"
        else:
            total = _chunks_total(a)
            progress = f"{done}" + (f" / {total}" if total else "")
            if "chunk" in a:            # chunks finish in order: the first `done` are written
                progress += f" (rows done {min(int(a['points']), done * int(a['chunk']))})"
        out.append(f"  points    {int(a['points'])}; chunks done {progress}")
    else:
        ranges = json.loads(a.get("sample", "{}"))
        out.append(f"  points    {int(a['points'])}; seed {a.get('seed')}; uniform "
                   + ", ".join(f"{n} in [{lo:g}, {hi:g})" for n, (lo, hi) in ranges.items()))
    if "shard" in a:
        out.append(f"  shard     {a['shard']}: input rows [{int(a['row_start'])}, {int(a['row_stop'])}) "
                   f"of {int(a['input_points'])}")
    if "merged_from" in a:
        out.append("  sources   " + ", ".join(json.loads(a["merged_from"])))
    return out


def _chunks_total(a):
    if "chunks_total" in a:
        return int(a["chunks_total"])
    if "chunk" in a and int(a["chunk"]) > 0:
        return -(-int(a["points"]) // int(a["chunk"]))
    return None


def _provenance(a):
    out = []
    if "input_path" in a:
        out.append(f"  input     {a['input_path']}")
    if "modes" in a:
        modes = json.loads(a["modes"])
        out.append(f"  modes     {', '.join(f'{k}: {v}' for k, v in modes.items()) or 'none (values only)'}")
    if "threads" in a:
        out.append(f"  threads   {int(a['threads'])}")
    times = [f"{k} {a[k]}" for k in ("created", "started", "finished") if k in a]
    if times:
        out.append(f"  time      {', '.join(times)}")
    versions = [f"{k.removesuffix('_version')} {a[k]}" for k in ("adgrad_version", "numba_version",
                                                                  "numpy_version", "h5py_version") if k in a]
    out.append(f"  versions  {', '.join(versions)}")
    if "model_sha256" in a:
        out.append(f"  model     sha256 {a['model_sha256']}")
    return out


def _datasets(f, base_dir, report):
    exact = f.get(EXACT, {})
    rows = []
    for name, ds in f.items():
        if not isinstance(ds, h5py.Dataset):
            continue
        notes = []
        if name in exact:
            notes.append("summed over points (exact state kept)")
        elif ds.is_virtual:
            maps = ds.virtual_sources()
            gone = [m for m in maps if not _source_ok(m, base_dir)]
            notes.append(f"virtual, {len(maps)} source(s)" + (f", {len(gone)} MISSING" if gone else ""))
            for m in gone:
                lo, hi = m.vspace.get_select_bounds()
                report.missing_sources.append((name, m.file_name, (lo[0], hi[0] + 1)))
        elif ds.chunks:
            notes.append(f"chunks {ds.chunks}")
        if ds.compression:
            notes.append(ds.compression)
        rows.append((name, str(ds.shape), str(ds.dtype), "; ".join(notes)))
    w0 = max((len(r[0]) for r in rows), default=0)
    w1 = max((len(r[1]) for r in rows), default=0)
    return [f"  {n:<{w0}}  {s:<{w1}}  {t:<8} {note}".rstrip() for n, s, t, note in rows]


def _source_ok(vmap, base_dir):
    """A virtual source resolves like HDF5 resolves it: a relative name against the file's directory."""
    path = vmap.file_name if os.path.isabs(vmap.file_name) else os.path.join(base_dir, vmap.file_name)
    try:
        with h5py.File(path, "r") as src:
            return vmap.dset_name.lstrip("/") in src
    except OSError:
        return False
