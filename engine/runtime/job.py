"""`adgrad run`: a config -> compiled kernel -> chunks of the input file -> the output file.

Every check that can fail on user input (spec, params, input datasets, output path) runs before the
output file is created, so a bad config never leaves a file behind."""
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

from ..api import compile_model
from ..errors import DataError, JobError
from ..h5.io import InputReader, OutputWriter
from ..model import build
from ..spec import Config

VERSION = "0.1.0"


@dataclass
class Summary:
    points: int
    seconds: float
    modes: dict
    nan_points: int
    output: str
    threads: int
    timings: dict = field(default_factory=dict)

    @property
    def rate(self):
        return self.points / self.seconds if self.seconds > 0 else float("inf")


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def prepare(config: Config):
    """The model with the config's param overrides and the kernel for the requested results."""
    model = build(config.model).with_params(config.param_overrides)
    t0 = time.perf_counter()
    kernel = compile_model(model, config.derivatives, mode=config.mode, values=list(config.values))
    return model, kernel, time.perf_counter() - t0


def run(config: Config, output=None, threads=None, chunk=None, overwrite=False, progress=None) -> Summary:
    """Run the job a config describes. `progress(done, total)` is called after every chunk."""
    t_start = time.perf_counter()
    if config.input_path is None:
        raise DataError(f"{config.path}: the config has no input: section (input.path names the HDF5 point cloud)")
    out_path = output or config.output_path
    if out_path is None:
        raise DataError(f"{config.path}: no output path: set output.path in the config or pass -o")
    if os.path.exists(out_path) and not overwrite:
        raise DataError(f"{out_path}: output file exists; pass --overwrite to replace it")
    model, kernel, t_compile = prepare(config)
    shapes = {n: v.shape for n, v in kernel.graph.inputs.items()}
    # model inputs map through input.datasets; a jvp direction or vjp cotangent names its dataset itself
    reader = InputReader(config.input_path, {n: config.datasets.get(n, n) for n in shapes}, shapes)
    threads = threads or config.threads or numba.config.NUMBA_NUM_THREADS
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    chunk = chunk or config.chunk
    m = reader.points
    attrs = {
        "adgrad_version": VERSION, "model_yaml": config.model.text, "config_yaml": config.text,
        "model_sha256": hashlib.sha256(config.model.text.encode()).hexdigest(),
        "input_path": os.path.abspath(config.input_path), "points": m,
        "modes": json.dumps(kernel.modes), "threads": numba.get_num_threads(), "started": now(),
        "numba_version": numba.__version__, "numpy_version": np.__version__, "h5py_version": h5py.__version__,
    }
    timings = {"compile": t_compile, "read": 0.0, "compute": 0.0, "write": 0.0}
    nan_points = 0
    try:
        writer = OutputWriter(out_path, kernel.output_shapes, m, config.dtype, config.compression, chunk, attrs,
                              reduced=kernel.reduced)
    except Exception:
        reader.close()
        raise
    try:
        buffers = {n: np.empty((min(chunk, max(m, 1)),) + s) for n, s in kernel.output_shapes.items()
                   if n not in kernel.reduced}
        sums = {n: np.zeros(kernel.output_shapes[n]) for n in kernel.reduced}
        for k, start in enumerate(range(0, m, chunk)):
            stop = min(m, start + chunk)
            t = time.perf_counter()
            inputs = reader.read(start, stop)
            timings["read"] += time.perf_counter() - t
            t = time.perf_counter()
            outs = {n: b[: stop - start] for n, b in buffers.items()}
            outs.update({n: np.empty(s.shape) for n, s in sums.items()})
            kernel.evaluate(inputs, out=outs)
            for n, s in sums.items():     # chunk sums added in chunk order: deterministic
                s += outs.pop(n)
            bad = _nonfinite_rows(inputs, outs)
            timings["compute"] += time.perf_counter() - t
            if bad.any():
                if config.nan == "error":
                    row = start + int(np.argmax(bad))
                    where = _first_nonfinite(inputs, outs, row - start)
                    raise JobError(f"non-finite value at row {row} in '{where}' (engine.nan: error); "
                                   f"{out_path} holds rows before chunk {k} and is marked incomplete")
                nan_points += int(bad.sum())
            t = time.perf_counter()
            writer.write(start, stop, outs)
            writer.chunk_done(k + 1)
            timings["write"] += time.perf_counter() - t
            if progress:
                progress(stop, m)
        writer.finish({"finished": now()}, sums)
    finally:
        writer.close()
        reader.close()
    return Summary(m, time.perf_counter() - t_start, kernel.modes, nan_points, out_path,
                   numba.get_num_threads(), timings)


def _nonfinite_rows(inputs, outs):
    bad = None
    for arr in list(inputs.values()) + list(outs.values()):
        rows = ~np.isfinite(arr.reshape(arr.shape[0], -1)).all(axis=1) if arr.size else np.zeros(arr.shape[0], bool)
        bad = rows if bad is None else bad | rows
    return bad


def _first_nonfinite(inputs, outs, i):
    for name, arr in list(inputs.items()) + list(outs.items()):
        if not np.isfinite(arr[i]).all():
            return name
    return "?"
