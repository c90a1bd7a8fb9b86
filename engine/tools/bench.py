"""`adgrad bench`: compute-only timings of a config's kernels on sampled points, and compile times.

Each variant (values only; values and derivatives by the config's modes, then by forward, reverse
and, where the model has hand-written derivatives, manual mode) is compiled once, run once to warm
up, then timed `repeat` times into preallocated arrays, the variants taking turns; the median is
reported. Compile time is
measured in fresh processes: cold with empty adgrad and numba caches, then cached from those."""
from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import numba
import numpy as np

from ..compile import compile_model, default_requests
from ..errors import DataError, JobError
from ..model import LoadedModel
from ..spec import as_request, derivative_name
from . import labelled, sample

@dataclass
class Timing:
    label: str
    modes: str
    seconds: float              # median over the repeats
    points: int

    @property
    def ns_per_point(self):
        return self.seconds / self.points * 1e9 if self.points else float("nan")

    @property
    def rate(self):
        return self.points / self.seconds if self.seconds > 0 else float("inf")


def variants(model: LoadedModel, derivatives, mode, values):
    """(label, derivative requests, mode, values) of every kernel worth timing."""
    out = [("values only", (), mode, values or None)]     # no values requested: time them all
    if not derivatives:
        return out
    out.append((f"values + derivatives ({mode})", tuple(derivatives), mode, values))
    forced = tuple(dataclasses.replace(d, mode=None) if hasattr(d, "mode") else d for d in derivatives)
    for m in ("forward", "reverse"):
        out.append((f"values + derivatives, {m}", forced, m, values))
    manual = tuple(_manual(model, d) for d in derivatives)
    if manual != tuple(derivatives):    # hand-written where the model has them, the rest as configured
        out.append(("values + derivatives, manual", manual, mode, values))
    return out


def _manual(model, req):
    """`req` (a DerivativeRequest or (of, wrt)) in manual mode if the model has its hand-written first
    derivative and it is not a jvp/vjp, else unchanged."""
    r = as_request(req)
    if r.vector or derivative_name(r.of, r.wrt[:1]) not in model.manual:
        return req
    return dataclasses.replace(r, mode="manual")


def time_kernels(model: LoadedModel, inputs: dict, derivatives, mode="auto", values=None, repeat=5, math="vector",
                 log=None):
    """Timing of every variant on `inputs` (name -> (M, *shape)) with numba's current thread count.
    Repeats are interleaved across the variants, so a change in the machine's load (other processes
    on shared cores) spreads over all of them instead of skewing one. `log`: compile_model's."""
    m = next(iter(inputs.values())).shape[0]
    runs = []
    for label, derivs, md, vals in variants(model, derivatives, mode, values):
        kernel = compile_model(model, derivs, mode=md, values=vals, math=math, log=labelled(log, label))
        args = {n: inputs[n] for n in kernel.graph.inputs}
        out = {n: np.empty((m,) + s) for n, s in kernel.output_shapes.items() if n not in kernel.reduced}
        kernel.evaluate(args, out=out)                      # warm-up: caches, page faults
        runs.append((label, kernel, args, out, []))
    for _ in range(repeat):
        for _, kernel, args, out, times in runs:
            t = time.perf_counter()
            kernel.evaluate(args, out=out)
            times.append(time.perf_counter() - t)
    return [Timing(label, ", ".join(f"{k}: {v}" for k, v in kernel.modes.items()) or "-",
                   statistics.median(times), m) for label, kernel, _, _, times in runs]


def sampled_inputs(model: LoadedModel, config, points: int, seed: int) -> dict:
    """`points` points for every kernel input (model inputs and jvp/vjp vectors), as `adgrad sample`
    would write them for `config` (or for the model alone)."""
    cols = sample.columns(model.spec, config)
    data = sample.Sampler(cols, seed).rows(0, points)
    datasets = config.input.datasets if config else {}
    inputs = {n: data[datasets.get(n, n)] for n in model.spec.inputs}
    dataset_of_input = set(datasets.get(n, n) for n in model.spec.inputs)
    inputs.update({c.dataset: data[c.dataset] for c in cols if c.dataset not in dataset_of_input})
    return inputs


def requests(model: LoadedModel, config):
    """(derivatives, mode, values, math) a run of `config` computes; for a bare model, every output's
    gradient with respect to every input."""
    if config is not None:
        return config.compute.derivatives, config.mode, list(config.compute.values), config.engine.math
    return default_requests(model), "auto", None, "vector"


COMPILE = """\
import sys, time
from adgrad.engine import compile_model
from adgrad.engine.model import build
from adgrad.engine.tools.bench import requests
from adgrad.engine.spec import load_config_file, load_model_file
if sys.argv[2] == "config":
    config = load_config_file(sys.argv[1])
    model = build(config.model).with_params(config.params)
else:
    config, model = None, build(load_model_file(sys.argv[1]))
derivatives, mode, values, math = requests(model, config)
t = time.perf_counter()
compile_model(model, derivatives, mode=mode, values=values, math=math)
print(time.perf_counter() - t)
"""


def compile_seconds(path, is_config: bool) -> tuple:
    """(cold, cached) seconds to compile what a run of `path` computes, each in a fresh process:
    cold with empty adgrad and numba caches, cached with the caches the cold run filled."""
    with tempfile.TemporaryDirectory(prefix="adgrad-bench-") as cache:
        env = {**os.environ, "ADGRAD_CACHE_DIR": cache, "NUMBA_CACHE_DIR": cache}
        out = []
        for _ in range(2):
            res = subprocess.run([sys.executable, "-c", COMPILE, os.fspath(path), "config" if is_config else "model"],
                                 env=env, capture_output=True, text=True)
            if res.returncode != 0:
                raise JobError(f"compiling {path} in a fresh process failed:\n{res.stderr.strip()}")
            out.append(float(res.stdout.split()[-1]))
    return tuple(out)


@dataclass
class Report:
    model: str
    points: int
    threads: int
    repeat: int
    timings: list
    compile_times: tuple | None     # (cold, cached) seconds
    math: str = "vector"            # the config's engine.math, which every kernel is compiled with


def bench(path, model: LoadedModel, config=None, points=100_000, repeat=5, threads=None, seed=0,
          compile_time=True, log=None) -> Report:
    """Time every kernel variant of `config` (or of the bare model at `path`) on sampled points. `log`:
    compile_model's for the timed kernels (the compile-time measurement's own processes say nothing)."""
    if threads:
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    elif config is not None and config.engine.threads:
        numba.set_num_threads(min(config.engine.threads, numba.config.NUMBA_NUM_THREADS))
    derivatives, mode, values, math = requests(model, config)
    try:
        inputs = sampled_inputs(model, config, points, seed)
        timings = time_kernels(model, inputs, derivatives, mode, values, repeat, math, log)
    except MemoryError:
        raise DataError(f"--points {points}: the sampled points and their results do not fit in memory; "
                        f"use fewer points") from None
    compiled = compile_seconds(path, config is not None) if compile_time else None
    return Report(model.name, points, numba.get_num_threads(), repeat, timings, compiled, math)


def format_table(rows, compile_times=None):
    w = max(len(r.label) for r in rows)
    wm = max(len(r.modes) for r in rows)
    lines = [f"{'kernel':<{w}}  {'modes':<{wm}}  {'ns/point':>10}  {'points/s':>13}"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(f"{r.label:<{w}}  {r.modes:<{wm}}  {r.ns_per_point:>10,.1f}  {r.rate:>13,.0f}")
    if compile_times:
        cold, cached = compile_times
        lines.append(f"compile: {cold:.3f} s cold (empty caches), {cached:.3f} s cached")
    return "\n".join(lines)

