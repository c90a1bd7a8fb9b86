"""The chunk pipeline of `adgrad run`: read chunk k+1 and write chunk k-1 while chunk k is computed.

All h5py calls stay in the calling (main) thread; one worker thread runs the nogil kernel, the
non-finite check and the exact sums. Three preallocated buffer sets rotate (one being read, one
computed, one written), so memory is set by the chunk size, not by the file. Chunks are committed
in order, so a stop or a crash leaves a prefix of finished chunks."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numba
import numpy as np

from ..errors import JobError
from ..h5.direct import aligned_empty
from .exactsum import ExactSum

SETS = 3        # buffer sets in flight: read, compute, write


@dataclass
class Plan:
    """Rows [row_start, row_start + rows) of the input, in chunks of `chunk` rows."""
    row_start: int
    rows: int
    chunk: int

    @property
    def chunks(self):
        return -(-self.rows // self.chunk)

    def bounds(self, k):
        """Local rows [a, b) of chunk k."""
        return k * self.chunk, min(self.rows, (k + 1) * self.chunk)


@dataclass
class Timings:
    read: float = 0.0           # main thread, h5py reads
    compute: float = 0.0        # worker thread: kernel, non-finite check, sums
    write: float = 0.0          # main thread: h5py writes and commits
    wait: float = 0.0           # main thread idle, waiting for the worker

    def as_dict(self):
        return dict(self.__dict__)


@dataclass
class Outcome:
    points: int = 0             # computed in this call
    stopped: bool = False       # by a stop request, at a chunk boundary
    timings: Timings = field(default_factory=Timings)


@dataclass
class _Chunk:
    bad: int                    # non-finite points
    first_bad: tuple | None     # (local row, "input dataset '...'" or "output '...'")
    sums: dict                  # name -> ExactSum of this chunk's rows
    seconds: float


# a float32's exponent field: all ones is an infinity or a NaN (float64 rows are checked in the kernel)
FLOAT32_EXPONENT = 0x7F800000


@numba.njit(cache=True, nogil=True, parallel=True)
def _mark_nonfinite(bits, exponent, bad):
    """bad[i] |= row i of bits (n, k), floats viewed as integers, holds a NaN or an infinity. An
    integer max reduction, which vectorizes (a float test with an early exit does not)."""
    for i in numba.prange(bits.shape[0]):
        top = 0
        for j in range(bits.shape[1]):
            top = max(top, bits[i, j] & exponent)
        if top == exponent:
            bad[i] = True


def _buffers(shapes, n, dtype=np.float64):
    """Page-aligned, so the output file can take the rows with O_DIRECT (engine/h5/direct.py)."""
    return {name: aligned_empty((n,) + tuple(shape), dtype) for name, shape in shapes.items()}


def stream(kernel, reader, out, plan: Plan, dtype, threads: int, nan_error: bool, should_stop, on_chunk) -> Outcome:
    """Compute chunks out.done .. plan.chunks - 1 of `plan` into `out`, committing each in order.
    Per-point results are kept in the output's `dtype` (the worker casts; the writer only copies).

    The worker always has the next chunk queued, so it never waits for a commit (which waits for the
    device). should_stop() is asked once per chunk; once true, nothing new starts, and the chunks
    already computing are finished, written and committed. on_chunk(points_done, points_total) comes
    first and after every commit. With nan_error a non-finite point raises JobError naming its row and dataset (the chunks before it
    stay committed)."""
    outcome = Outcome()
    t = outcome.timings
    first, n = out.done, plan.chunks
    size = min(plan.chunk, max(plan.rows, 1))
    in_shapes = {name: v.shape for name, v in kernel.graph.inputs.items()}
    per_point = {name: shape for name, shape in kernel.output_shapes.items() if name not in kernel.reduced}
    sets = [(_buffers(in_shapes, size), _buffers(per_point, size, dtype)) for _ in range(min(SETS, n - first))]
    # per-point rows of the summed results live only in the worker: one set is enough
    rows = _buffers({name: kernel.output_shapes[name] for name in kernel.reduced}, size)
    labels = {name: f"input dataset '{ds.name.lstrip('/')}'" for name, ds in reader.datasets.items()}
    sums = out.sums
    nan_points = out.nan_points

    def compute(k):
        t0 = time.perf_counter()
        a, b = plan.bounds(k)
        inputs, results = sets[k % SETS]
        ins = {name: buf[: b - a] for name, buf in inputs.items()}
        outs = {name: buf[: b - a] for name, buf in {**results, **rows}.items()}
        bad = np.empty(b - a, dtype=np.bool_)
        with np.errstate(over="ignore"):    # a float32 overflow becomes inf, counted below as non-finite
            kernel.evaluate(ins, out=outs, threads=threads, nonfinite=bad)    # checks float64 rows
        arrays = [(labels[name], arr) for name, arr in ins.items()] + \
                 [(f"output '{name}'", arr) for name, arr in outs.items()]
        for _, arr in arrays:
            if arr.dtype == np.float32:     # stored narrower than computed: check what is stored
                _mark_nonfinite(arr.reshape(b - a, -1).view(np.int32), FLOAT32_EXPONENT, bad)
        first_bad = None
        if bad.any():
            i = int(np.argmax(bad))
            first_bad = (i, next(label for label, arr in arrays if not np.isfinite(arr[i]).all()))
        chunk_sums = {}
        for name in kernel.reduced:
            chunk_sums[name] = ExactSum(kernel.output_shapes[name])
            chunk_sums[name].add(outs[name])
        return _Chunk(int(bad.sum()), first_bad, chunk_sums, time.perf_counter() - t0)

    def read(k):
        t0 = time.perf_counter()
        a, b = plan.bounds(k)
        reader.read_into(plan.row_start + a, plan.row_start + b, sets[k % SETS][0])
        t.read += time.perf_counter() - t0

    def start(k):
        read(k)
        pending[k] = worker.submit(compute, k)

    on_chunk(min(first * plan.chunk, plan.rows), plan.rows)
    pending, stopping = {}, False
    with ThreadPoolExecutor(1, thread_name_prefix="adgrad-compute") as worker:
        for k in range(first, min(n, first + 2)):
            start(k)
        for k in range(first, n):
            if k not in pending:                # stopped: nothing after chunk k - 1 was started
                break
            t0 = time.perf_counter()
            done = pending.pop(k).result()
            t.wait += time.perf_counter() - t0
            t.compute += done.seconds
            a, b = plan.bounds(k)
            if done.bad and nan_error:
                row, where = done.first_bad
                raise JobError(f"non-finite value at input row {plan.row_start + a + row} in {where} "
                               f"(engine.nan: error); {out.path} keeps the {k} chunk(s) before it "
                               f"(rows before {plan.row_start + a}) and is marked incomplete")
            stopping = stopping or should_stop()
            t0 = time.perf_counter()
            out.write(a, b, sets[k % SETS][1])      # O_DIRECT rows go on in the background ...
            t.write += time.perf_counter() - t0
            if k + 2 < n and not stopping:
                start(k + 2)                        # ... while chunk k + 2 is read and queued behind k + 1
            t0 = time.perf_counter()
            for name, acc in done.sums.items():
                sums[name].merge(acc)
            nan_points += done.bad
            out.commit(k + 1, nan_points, sums)     # waits for the rows, then records the chunk
            t.write += time.perf_counter() - t0
            outcome.points += b - a
            on_chunk(b, plan.rows)
    outcome.stopped = out.done < n
    return outcome
