"""`adgrad run`: a config -> compiled kernel -> chunks of the input file -> the output file.

Every check that can fail on user input (spec, params, input datasets, output path, a --resume that
does not fit the file) runs before the output file is created or changed, so a bad config never
leaves a file behind. The chunks themselves stream through job/pipeline.py. With `native` (a library
of `adgrad export`, job/native.py) the run compiles nothing and imports no compiler once the library
is known to be the config's kernel."""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field

import h5py
import numpy as np

from ..errors import DataError, JobError
from ..limits import DEFAULT_CHUNK
from ..store import guard
from ..store.atomic import io_errno, io_reason
from ..store.input import InputReader, input_identity
from ..store.lock import output_lock
from ..store.output import OutputFile, staging_path
from ..spec import Config
from ..version import __version__
from . import native as natives
from . import shard as shards
from .pipeline import Plan, bytes_per_point, stream
from .resume import check_resumable, verify_input
from .signals import Interrupted, stop_on_signals

__all__ = ["run", "prepare", "Interrupted", "Summary"]

@dataclass
class Summary:
    points: int                 # rows of the output file
    computed: int               # points computed by this call (fewer after --resume)
    seconds: float              # the whole call, compile included
    modes: dict
    nan_points: int
    output: str
    threads: int
    timings: dict = field(default_factory=dict)
    compile_seconds: float = 0.0    # of `seconds`: compiling (or loading) the kernel, and numba's first calls
    compiled: bool = False      # something was compiled, not loaded from a cache
    native: str | None = None   # the library that computed the results (--native), else None (numba)

    @property
    def run_seconds(self):
        """The run without the compile: input, compute, output."""
        return max(self.seconds - self.compile_seconds, 0.0)

    @property
    def rate(self):
        """Points per second of the run without the compile (a first run's compile is not the throughput)."""
        return self.computed / self.run_seconds if self.run_seconds > 0 else float("inf")


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def prepare(config: Config, log=None):
    """The model with the config's param overrides, the kernel for the requested results, and the
    seconds it took to compile (or load) it. `log`: compile_model's (a line before a compile, one after)."""
    t0 = time.perf_counter()
    from ..model import build
    model = build(config.model).with_params(config.params)
    kernel = _kernel(config, model, log)
    return model, kernel, time.perf_counter() - t0


def __getattr__(name):
    """compile_model, imported at its first use (PEP 562): a run of a native library never imports the
    compiler. (A module attribute, so that a test can replace it.)"""
    if name == "compile_model":
        from ..compile import compile_model
        globals()["compile_model"] = compile_model
        return compile_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _kernel(config, model, log=None):
    compile_model = sys.modules[__name__].compile_model     # (this module's __getattr__ at the first call)
    return compile_model(model, config.compute.derivatives, mode=config.mode, values=list(config.compute.values),
                         math=config.engine.math, log=log)


def input_shapes(config: Config, model):
    """Input name -> shape of what a run of `config` reads per point: the model's inputs and each jvp's
    direction or vjp's cotangent (the kernel's inputs, known before it is compiled)."""
    g = model.graph
    shapes = {n: v.shape for n, v in g.inputs.items()}
    for req in config.compute.derivatives:
        if req.vector is not None:      # the config loader checked the names; a clash is compile_model's error
            of_wrt = {**g.inputs, **g.params}[req.wrt[0]] if req.kind == "jvp" else g.outputs[req.of]
            shapes.setdefault(req.vector, of_wrt.shape)
    return shapes


def output_path(config: Config, output=None, shard=None):
    """Where the run writes: -o or output.path, with `.shard<I>of<N>` for a shard."""
    path = output or config.output.path
    if path is None:
        raise DataError(f"{config.path}: no output path: set output.path in the config or pass -o")
    return shard.path(path) if shard else path


@dataclass
class Request:
    """What the caller asked of the run beyond its config."""
    threads: int | None = None          # None: engine.threads
    chunk: int | None = None            # None: engine.chunk (or the file's, on --resume)
    memory: int | None = None           # bytes of chunk buffers; None: engine.memory
    overwrite: bool = False
    resume: bool = False
    trust_input: bool = False           # --resume without reading the finished chunks' input again
    progress: object = None             # progress(done, total) after every chunk
    resume_hint: str = "adgrad run CONFIG --resume"
    log: object = None                  # log(line) before the kernel is compiled and after (compile_model's)
    native: object = None               # a NativeKernel (engine/export/native.py) to run instead of numba's


def run(config: Config, output=None, shard=None, **options) -> Summary:
    """Run the job a config describes. `shard`: "I/N" (default: the SLURM array task, if any);
    `options`: the fields of Request."""
    t_start = time.perf_counter()
    req = Request(**options)
    if config.input.path is None:
        raise DataError(f"{config.path}: the config has no input: section (input.path names the HDF5 point cloud)")
    if req.overwrite and req.resume:
        raise DataError("--overwrite and --resume exclude each other")
    part = shards.parse(shard) if shard else shards.from_slurm()
    out_path = output_path(config, output, part)
    reads = guard.config_files(config)
    guard.check_inputs(reads)
    guard.check_output(out_path, reads, "--resume" if req.resume else "--overwrite")
    with output_lock(out_path, "adgrad run"):
        return _locked(config, out_path, part, req, t_start)


def _locked(config, out_path, part, req, t_start):
    """The run, as the one writer of out_path. Replacing an existing file (--overwrite) writes to its
    staging path and renames it over the old file only when complete: a run that fails or stops
    leaves the old results in place, and --resume finishes the staged file."""
    exists, stage = os.path.exists(out_path), staging_path(out_path)
    if exists and not (req.overwrite or req.resume):
        raise DataError(f"{out_path}: output file exists; pass --overwrite to replace it or --resume to finish it")
    if req.resume and os.path.exists(stage):
        target, resuming = stage, True          # an --overwrite that was stopped: finish it
    elif req.overwrite and exists:
        target, resuming = stage, False
    else:
        target, resuming = out_path, exists and req.resume
    try:
        return _job(config, target, resuming, part, req, t_start, out_path if target == stage else None)
    except (Interrupted, JobError) as exc:
        if target == stage:
            raise type(exc)(f"{exc} (writing {stage}; {out_path} keeps its previous results until this "
                            f"run completes)") from None
        raise


def _job(config, target, resuming, part, req, t_start, publish):
    """The input checked (found, its datasets and shapes) before the kernel is compiled: a wrong input
    is an error at once, not after a compile."""
    with stop_on_signals() as should_stop:
        if req.native is not None:
            return _native_job(config, target, resuming, part, req, t_start, publish, should_stop)
        t0 = time.perf_counter()       # the compiler's imports, the model built and its kernel: compile time
        from ..model import build
        model = build(config.model).with_params(config.params)
        shapes = input_shapes(config, model)
        reader = _reader(config, shapes)
        try:
            from numba.core import event as numba_event
            kernel = _kernel(config, model, req.log)
            t_compile = time.perf_counter() - t0
            assert shapes == {n: v.shape for n, v in kernel.graph.inputs.items()}, "input_shapes and the kernel differ"
            # numba compiles (or loads from its cache) the run's own helpers and any other signature of the
            # kernel's drivers at their first call, in the chunk loop: that is compile time too, not the run's
            held, compiled = numba_event.TimingListener(), numba_event.TimingListener()
            with numba_event.install_listener("numba:compiler_lock", held), \
                    numba_event.install_listener("numba:compile", compiled):
                summary = _run(config, natives.params_sha256(model.param_values), kernel, reader, target, resuming,
                               part, req, should_stop, t_start, t_compile, publish)
        finally:
            reader.close()
    jit, t = (held.duration if held.done else 0.0), summary.timings
    summary.compile_seconds = t["compile"] = t_compile + jit
    for phase in ("compute", "wait"):   # the worker compiled, the main thread waited for it
        t[phase] = max(t[phase] - jit, 0.0)
    summary.compiled = kernel.cold or compiled.done
    return summary


def _native_job(config, target, resuming, part, req, t_start, publish, should_stop):
    """_job with the library req.native: its model and results checked against the config, the input
    against its inputs, then its kernel against the config's (job/native.py: the first time, a
    compile); no numba kernel."""
    t0, kernel = time.perf_counter(), req.native
    natives.check_results(config, kernel)
    shapes = {n: v.shape for n, v in kernel.graph.inputs.items()}
    reader = _reader(config, shapes)
    try:
        params_sha, cold = natives.prepare(config, kernel, lambda: prepare(config, req.log)[:2])
        summary = _run(config, params_sha, kernel, reader, target, resuming, part, req, should_stop, t_start,
                       time.perf_counter() - t0, publish)
    finally:
        reader.close()
    summary.compiled, summary.native = cold, kernel.library
    return summary


def _reader(config, shapes):
    """The input file's datasets of `shapes`' inputs: a model input's through input.datasets; a jvp
    direction or vjp cotangent names its dataset itself."""
    return InputReader(config.input.path, {n: config.input.datasets.get(n, n) for n in shapes}, shapes)


def _open(config, params_sha, kernel, reader, out_path, resuming, part, req, should_stop):
    """The output file to write, laid out or (resuming) checked against this run; and the plan."""
    m = reader.points
    row_start, row_stop = part.rows(m) if part else (0, m)
    threads = _threads(config.engine.threads if req.threads is None else req.threads, kernel)
    attrs = _provenance(config, params_sha, kernel, m, part, (row_start, row_stop), threads)
    if resuming:
        out = OutputFile.open(out_path)
        try:
            chunk = check_resumable(out, attrs, req.chunk)
            plan = Plan(row_start, row_stop - row_start, chunk)
            out.fits(kernel.output_shapes, kernel.reduced, plan.rows, plan.chunks)
            if not req.trust_input:
                verify_input(out, reader, plan, list(kernel.graph.inputs), should_stop, natives.is_native(kernel))
        except (DataError, Interrupted):
            out.close()
            raise
        return out, plan, threads
    chunk = _chunk(config, kernel, req)
    if should_stop():
        raise Interrupted(f"stopped by {should_stop.signal} before the run started; nothing was written")
    out = OutputFile.create(out_path, kernel.output_shapes, kernel.reduced, row_stop - row_start,
                            config.output.dtype, config.output.compression, chunk,
                            {**attrs, "chunk": chunk, "started": now()}, inputs=list(kernel.graph.inputs))
    return out, Plan(row_start, row_stop - row_start, chunk), threads


def _run(config, params_sha, kernel, reader, out_path, resuming, part, req, should_stop, t_start, t_compile, publish):
    """The chunks into out_path; once complete, renamed to `publish` if given (an --overwrite run's
    staged file). Success is reported only if the finished file is still the one at its final path."""
    out, plan, threads = _open(config, params_sha, kernel, reader, out_path, resuming, part, req, should_stop)
    try:
        outcome = stream(kernel, reader, out, plan, config.output.dtype, threads, config.engine.nan == "error",
                         should_stop, req.progress or (lambda done, total: None))
        if outcome.stopped:
            out.stop({"threads": threads})
            done = min(out.done * plan.chunk, plan.rows)
            raise Interrupted(f"stopped by {should_stop.signal} after {out.done} of {plan.chunks} chunks "
                              f"({done} of {plan.rows} points); {out_path} keeps them and is marked "
                              f"incomplete; resume with: {req.resume_hint}")
        out.finish({"threads": threads, "finished": now()})
        if publish:
            os.replace(out_path, publish)
        out.check_in_place(publish)
    except Interrupted:
        raise
    except JobError:                    # a non-finite point with engine.nan: error, or the file replaced
        out.stop({"threads": threads})
        raise
    except (OSError, RuntimeError) as exc:      # (h5py raises RuntimeError for some failed metadata writes)
        if not isinstance(exc, OSError) and io_errno(exc) is None:
            raise
        raise JobError(f"{out_path}: I/O failure ({io_reason(exc)}); the finished chunks are kept and the file "
                       f"is marked incomplete; resume with: {req.resume_hint}") from None
    finally:
        out.close()
    timings = {"compile": t_compile, **outcome.timings.as_dict()}
    return Summary(plan.rows, outcome.points, time.perf_counter() - t_start, kernel.modes, out.nan_points,
                   publish or out_path, threads, timings, t_compile, kernel.cold)


def _chunk(config, kernel, req):
    """Points per chunk: --chunk or engine.chunk, checked against the memory budget (--memory or
    engine.memory); without either, as many as fit the budget, at most DEFAULT_CHUNK."""
    budget = req.memory or config.engine.memory
    per_point = bytes_per_point(kernel, config.output.dtype)
    chunk = req.chunk or config.engine.chunk
    what = f"a chunk of {chunk:,} points ({'--chunk' if req.chunk else 'engine.chunk'})" if chunk else "one point"
    if chunk is None:
        chunk = min(DEFAULT_CHUNK, budget // per_point)
    if chunk < 1 or chunk * per_point > budget:
        raise DataError(f"{config.path}: {what} needs {_size(max(chunk, 1) * per_point)} of buffers "
                        f"({_size(per_point)} per point, three chunks in flight), more than the memory budget of "
                        f"{_size(budget)}; lower engine.chunk (--chunk) or raise engine.memory (--memory)")
    return chunk


def _size(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _threads(requested, kernel):
    """Threads for `requested` (0 = all cores, capped there): numba's count, or a library's (the same)."""
    if natives.is_native(kernel):
        available = kernel.max_threads
    else:
        import numba
        available = numba.config.NUMBA_NUM_THREADS
    return available if not requested else min(requested, available)


def _sha(data: bytes):
    return hashlib.sha256(data).hexdigest()


def _versions():
    """The numba, numpy and h5py versions for the output file; numba's read without importing it for a
    run of a library (it is the numba the library was checked against)."""
    if "numba" in sys.modules:
        numba_version = sys.modules["numba"].__version__
    else:
        from importlib.metadata import PackageNotFoundError, version
        try:
            numba_version = version("numba")
        except PackageNotFoundError:
            numba_version = ""
    return {"numba_version": numba_version, "numpy_version": np.__version__, "h5py_version": h5py.__version__}


def _provenance(config, params_sha, kernel, m, part, rows, threads):
    kernel_sha = kernel.kernel_sha256 if natives.is_native(kernel) else _sha(kernel.source.encode())
    attrs = {
        "adgrad_version": __version__, "model_yaml": config.model.text, "config_yaml": config.text,
        "model_sha256": _sha(config.model.text.encode()), "config_sha256": _sha(config.text.encode()),
        "params_sha256": params_sha, "kernel_sha256": kernel_sha,
        "input_path": os.path.abspath(config.input.path), "input_points": m, **input_identity(config.input.path),
        "points": rows[1] - rows[0], "modes": json.dumps(kernel.modes), "threads": threads, **_versions(),
    }
    if part:
        attrs.update({"shard": part.label, "row_start": rows[0], "row_stop": rows[1]})
    return attrs
