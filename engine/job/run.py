"""`adgrad run`: a config -> compiled kernel -> chunks of the input file -> the output file.

Every check that can fail on user input (spec, params, input datasets, output path, a --resume that
does not fit the file) runs before the output file is created or changed, so a bad config never
leaves a file behind. The chunks themselves stream through job/pipeline.py."""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import time
from dataclasses import dataclass, field

import h5py
import numba
import numpy as np

from ..compile import compile_model
from ..errors import DataError, JobError, os_reason
from ..store import guard
from ..store.input import InputReader, input_identity
from ..store.lock import output_lock
from ..store.output import OutputFile, staging_path
from ..model import build
from ..spec import Config
from ..version import __version__
from . import shard as shards
from .pipeline import Plan, stream
from .signals import stop_on_signals

# root attributes that must match for --resume, and what a mismatch means
RESUME_KEYS = {
    "model_sha256": "the model text",
    "params_sha256": "the param values (a params file or an override)",
    "config_sha256": "the config text",
    "kernel_sha256": "the generated kernel (another adgrad version?)",
    "input_path": "the input path",
    "input_size": "the input file's size",
    "input_mtime_ns": "the input file's modification time",
    "input_fingerprint": "the input file's contents",
    "input_points": "the number of input points",
    "shard": "the shard (--shard or the SLURM array task)",
    "chunk": "the points per chunk (--chunk)",
}


class Interrupted(JobError):
    """The job stopped at a chunk boundary on SIGTERM or Ctrl-C; the file can be resumed."""


@dataclass
class Summary:
    points: int                 # rows of the output file
    computed: int               # points computed by this call (fewer after --resume)
    seconds: float
    modes: dict
    nan_points: int
    output: str
    threads: int
    threading_layer: str
    timings: dict = field(default_factory=dict)

    @property
    def rate(self):
        return self.computed / self.seconds if self.seconds > 0 else float("inf")


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def prepare(config: Config):
    """The model with the config's param overrides and the kernel for the requested results."""
    model = build(config.model).with_params(config.params)
    t0 = time.perf_counter()
    kernel = compile_model(model, config.compute.derivatives, mode=config.mode, values=list(config.compute.values),
                           math=config.engine.math)
    # the run calls the driver that also flags non-finite points: compile (or load) it now
    kernel.evaluate({n: np.empty((0,) + v.shape) for n, v in kernel.graph.inputs.items()},
                    nonfinite=np.empty(0, dtype=np.bool_))
    return model, kernel, time.perf_counter() - t0


def output_path(config: Config, output=None, shard=None):
    """Where the run writes: -o or output.path, with `.shard<I>of<N>` for a shard."""
    path = output or config.output.path
    if path is None:
        raise DataError(f"{config.path}: no output path: set output.path in the config or pass -o")
    return shard.path(path) if shard else path


def run(config: Config, output=None, threads=None, chunk=None, overwrite=False, resume=False, shard=None,
        progress=None, resume_hint="adgrad run CONFIG --resume") -> Summary:
    """Run the job a config describes. `shard`: "I/N" (default: the SLURM array task, if any).
    `progress(done, total)` follows every chunk. `resume_hint` is the command a stopped run suggests."""
    t_start = time.perf_counter()
    if config.input.path is None:
        raise DataError(f"{config.path}: the config has no input: section (input.path names the HDF5 point cloud)")
    if overwrite and resume:
        raise DataError("--overwrite and --resume exclude each other")
    part = shards.parse(shard) if shard else shards.from_slurm()
    out_path = output_path(config, output, part)
    reads = guard.config_files(config)
    guard.check_inputs(reads)
    guard.check_output(out_path, reads, "--resume" if resume else "--overwrite")
    with output_lock(out_path):
        return _locked(config, out_path, overwrite, resume, part, threads, chunk, progress, resume_hint, t_start)


def _locked(config, out_path, overwrite, resume, part, threads, chunk, progress, resume_hint, t_start):
    """The run, as the one writer of out_path. Replacing an existing file (--overwrite) writes to its
    staging path and renames it over the old file only when complete: a run that fails or stops
    leaves the old results in place, and --resume finishes the staged file."""
    exists, stage = os.path.exists(out_path), staging_path(out_path)
    if exists and not (overwrite or resume):
        raise DataError(f"{out_path}: output file exists; pass --overwrite to replace it or --resume to finish it")
    if resume and os.path.exists(stage):
        target, resuming = stage, True          # an --overwrite that was stopped: finish it
    elif overwrite and exists:
        target, resuming = stage, False
    else:
        target, resuming = out_path, exists and resume
    try:
        summary = _job(config, target, resuming, part, threads, chunk, progress, resume_hint, t_start)
    except (Interrupted, JobError) as exc:
        if target == stage:
            raise type(exc)(f"{exc} (writing {stage}; {out_path} keeps its previous results until this "
                            f"run completes)") from None
        raise
    if target == stage:
        os.replace(stage, out_path)
        summary.output = out_path
    return summary


def _job(config, target, resuming, part, threads, chunk, progress, resume_hint, t_start):
    with stop_on_signals() as should_stop:
        model, kernel, t_compile = prepare(config)
        shapes = {n: v.shape for n, v in kernel.graph.inputs.items()}
        # model inputs map through input.datasets; a jvp direction or vjp cotangent names its dataset itself
        reader = InputReader(config.input.path, {n: config.input.datasets.get(n, n) for n in shapes}, shapes)
        try:
            return _run(config, model, kernel, reader, target, resuming, part, threads, chunk,
                        should_stop, progress, resume_hint, t_start, t_compile)
        finally:
            reader.close()


def _run(config, model, kernel, reader, out_path, resuming, part, threads, chunk, should_stop, progress,
         resume_hint, t_start, t_compile):
    m = reader.points
    row_start, row_stop = part.rows(m) if part else (0, m)
    threads = _threads(config.engine.threads if threads is None else threads)
    attrs = _provenance(config, model, kernel, m, part, (row_start, row_stop), threads)
    if resuming:
        out = OutputFile.open(out_path)
        try:
            chunk = _check_resumable(out, attrs, chunk)
        except DataError:
            out.close()
            raise
    else:
        chunk = chunk or config.engine.chunk
        if should_stop():
            raise Interrupted(f"stopped by {should_stop.signal} before the run started; nothing was written")
        out = OutputFile.create(out_path, kernel.output_shapes, kernel.reduced, row_stop - row_start,
                                config.output.dtype, config.output.compression, chunk,
                                {**attrs, "chunk": chunk, "started": now()})
    plan = Plan(row_start, row_stop - row_start, chunk)
    try:
        outcome = stream(kernel, reader, out, plan, config.output.dtype, threads, config.engine.nan == "error",
                         should_stop, progress or (lambda done, total: None))
        if outcome.stopped:
            out.stop({"threads": threads})
            done = min(out.done * chunk, plan.rows)
            raise Interrupted(f"stopped by {should_stop.signal} after {out.done} of {plan.chunks} chunks "
                              f"({done} of {plan.rows} points); {out_path} keeps them and is marked "
                              f"incomplete; resume with: {resume_hint}")
        out.finish({"threads": threads, "finished": now()})
    except Interrupted:
        raise
    except JobError:                    # a non-finite point with engine.nan: error
        out.stop({"threads": threads})
        raise
    except OSError as exc:
        raise JobError(f"{out_path}: I/O failure ({os_reason(exc)}); the finished chunks are kept and the file "
                       f"is marked incomplete; resume with: {resume_hint}") from None
    finally:
        out.close()
    timings = {"compile": t_compile, **outcome.timings.as_dict()}
    return Summary(plan.rows, outcome.points, time.perf_counter() - t_start, kernel.modes, out.nan_points,
                   out_path, threads, numba.threading_layer(), timings)


def _threads(requested):
    """numba threads for `requested` (0 = all cores, capped there)."""
    available = numba.config.NUMBA_NUM_THREADS
    return available if not requested else min(requested, available)


def _sha(data: bytes):
    return hashlib.sha256(data).hexdigest()


def _provenance(config, model, kernel, m, part, rows, threads):
    params = hashlib.sha256()
    for name in sorted(model.param_values):
        value = np.ascontiguousarray(model.param_values[name], dtype=np.float64)
        params.update(f"{name}{value.shape}".encode() + value.tobytes())
    attrs = {
        "adgrad_version": __version__, "model_yaml": config.model.text, "config_yaml": config.text,
        "model_sha256": _sha(config.model.text.encode()), "config_sha256": _sha(config.text.encode()),
        "params_sha256": params.hexdigest(), "kernel_sha256": _sha(kernel.source.encode()),
        "input_path": os.path.abspath(config.input.path), "input_points": m, **input_identity(config.input.path),
        "points": rows[1] - rows[0], "modes": json.dumps(kernel.modes), "threads": threads,
        "numba_version": numba.__version__, "numpy_version": np.__version__, "h5py_version": h5py.__version__,
    }
    if part:
        attrs.update({"shard": part.label, "row_start": rows[0], "row_stop": rows[1]})
    return attrs


def _check_resumable(out, attrs, chunk):
    """The chunk size to resume with, once the file is known to be this run's, unfinished."""
    have = out.attrs
    if have.get("complete", False):
        raise DataError(f"{out.path}: the file is complete already; nothing to resume "
                        f"(pass --overwrite to compute it again)")
    want = {**attrs, "chunk": chunk or int(have.get("chunk", 0))}
    for key, what in RESUME_KEYS.items():
        if key not in want and key not in have:
            continue
        if key not in want or key not in have or _differs(want[key], have[key]):
            raise DataError(f"{out.path}: cannot resume: {what} changed since the file was started "
                            f"({key}: {have.get(key, 'none')!r} in the file, now {want.get(key, 'none')!r}); "
                            f"pass --overwrite to start again")
    return want["chunk"]


def _differs(a, b):
    return str(a) != str(b.decode() if isinstance(b, bytes) else b)
