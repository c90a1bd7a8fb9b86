"""The chunk pipeline of `adgrad run`: read chunk k+2 and write chunk k while chunk k+1 is computed.

All h5py calls stay in the calling (main) thread; one worker thread runs the nogil kernel, the
non-finite check and the exact sums. Three preallocated buffer sets rotate (one being read, one
computed, one written), so memory is set by the chunk size, not by the file. Inputs that the file
lays out plainly are mapped rather than read into their buffers (engine/h5/mapped.py). Chunks are
committed in order, so a stop or a crash leaves a prefix of finished chunks."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numba
import numpy as np

from ..errors import JobError
from ..h5.direct import aligned_empty
from ..numeric.exactsum import ExactSum

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
    read: float = 0.0           # main thread: h5py reads, or mapping the rows
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
    rows: int
    bad: int                    # non-finite points
    first_bad: tuple | None     # (local row, "input dataset '...'" or "output '...'")
    sums: dict                  # name -> ExactSum of this chunk's rows
    seconds: float


@numba.njit(cache=True, nogil=True, parallel=True)
def _narrow(wide, narrow, bad):
    """narrow[i] = wide[i] rounded to float32, and bad[i] |= that row holds a NaN or an infinity (a
    float32 overflow becomes inf): one pass while the row is in cache. The test is an integer max
    over the exponent bits, which vectorizes (a float test with an early exit does not)."""
    exponent = np.int32(0x7F800000)     # all ones: an infinity or a NaN
    for i in numba.prange(wide.shape[0]):
        for j in range(wide.shape[1]):
            narrow[i, j] = wide[i, j]
        bits = narrow[i].view(np.int32)
        top = np.int32(0)
        for j in range(bits.shape[0]):
            top = max(top, bits[j] & exponent)
        if top == exponent:
            bad[i] = True


def _buffers(shapes, n, dtype=np.float64):
    """Page-aligned, so the output file can take the rows with O_DIRECT (engine/h5/direct.py)."""
    return {name: aligned_empty((n,) + tuple(shape), dtype) for name, shape in shapes.items()}


def stream(kernel, reader, out, plan: Plan, dtype, threads: int, nan_error: bool, should_stop, on_chunk) -> Outcome:
    """Compute chunks out.done .. plan.chunks - 1 of `plan` into `out`, committing each in order.
    Per-point results are kept in the output's `dtype` (the worker rounds them from float64 rows of
    its own; the writer only copies).

    The worker always has the next chunk queued, so it never waits for a commit (which waits for the
    device). should_stop() is asked once per chunk; once true, nothing new starts, and the chunks
    already computing are finished, written and committed. on_chunk(points_done, points_total) comes
    first and after every commit. With nan_error a non-finite point raises JobError naming its row
    and dataset (the chunks before it stay committed)."""
    outcome = Outcome()
    t = outcome.timings
    first, n = out.done, plan.chunks
    size = min(plan.chunk, max(plan.rows, 1))
    in_shapes = {name: v.shape for name, v in kernel.graph.inputs.items()}
    per_point = {name: shape for name, shape in kernel.output_shapes.items() if name not in kernel.reduced}
    sets = [(_buffers(in_shapes, size), _buffers(per_point, size, dtype)) for _ in range(min(SETS, n - first))]
    # per-point rows of the summed results, and float64 rows of results stored narrower, live only
    # in the worker: one set is enough
    rows = _buffers({name: kernel.output_shapes[name] for name in kernel.reduced}, size)
    wide = _buffers(per_point, size) if np.dtype(dtype) != np.float64 else {}
    labels = {name: f"input dataset '{ds.name.lstrip('/')}'" for name, ds in reader.datasets.items()}
    sums = out.sums
    nan_points = out.nan_points

    pieces = [None] * SETS      # per buffer set: the input rows of its chunk, from reader.rows

    def compute(k):
        t0 = time.perf_counter()
        a, b = plan.bounds(k)
        outs = {name: buf[: b - a] for name, buf in {**sets[k % SETS][1], **rows}.items()}
        computed = {**outs, **{name: buf[: b - a] for name, buf in wide.items()}}
        bad = np.empty(b - a, dtype=np.bool_)
        for lo, hi, ins in pieces[k % SETS]:
            kernel.evaluate(ins, out={name: arr[lo:hi] for name, arr in computed.items()}, threads=threads,
                            nonfinite=bad[lo:hi])       # checks the inputs and the float64 rows
        for name, arr in wide.items():      # stored narrower than computed: check what is stored
            _narrow(arr[: b - a].reshape(b - a, -1), outs[name].reshape(b - a, -1), bad)
        first_bad = None
        if bad.any():
            i = int(np.argmax(bad))
            lo, _, ins = next(piece for piece in pieces[k % SETS] if piece[0] <= i < piece[1])
            arrays = [(labels[name], arr[i - lo]) for name, arr in ins.items()] + \
                     [(f"output '{name}'", arr[i]) for name, arr in outs.items()]
            first_bad = (i, next(label for label, row in arrays if not np.isfinite(row).all()))
        chunk_sums = {}
        for name in kernel.reduced:
            chunk_sums[name] = ExactSum(kernel.output_shapes[name])
            chunk_sums[name].add(outs[name])
        return _Chunk(b - a, int(bad.sum()), first_bad, chunk_sums, time.perf_counter() - t0)

    def read(k):
        t0 = time.perf_counter()
        a, b = plan.bounds(k)
        pieces[k % SETS] = None         # unmap chunk k - 3's rows before mapping chunk k's
        pieces[k % SETS] = reader.rows(plan.row_start + a, plan.row_start + b, sets[k % SETS][0])
        t.read += time.perf_counter() - t0

    def start(k):
        read(k)
        pending[k] = worker.submit(compute, k)

    def commit(k, done, writes):
        nonlocal nan_points
        t0 = time.perf_counter()
        for name, acc in done.sums.items():
            sums[name].merge(acc)
        nan_points += done.bad
        out.commit(k + 1, nan_points, sums, writes)    # waits for chunk k's rows, then records it
        t.write += time.perf_counter() - t0
        outcome.points += done.rows
        on_chunk(plan.bounds(k)[1], plan.rows)

    on_chunk(min(first * plan.chunk, plan.rows), plan.rows)
    pending, stopping, written = {}, False, None
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
                if written:
                    commit(*written)
                row, where = done.first_bad
                raise JobError(f"non-finite value at input row {plan.row_start + a + row} in {where} "
                               f"(engine.nan: error); {out.path} keeps the {k} chunk(s) before it "
                               f"(rows before {plan.row_start + a}) and is marked incomplete")
            t0 = time.perf_counter()
            writes = out.write(a, b, sets[k % SETS][1])    # O_DIRECT: queued behind chunk k - 1's rows,
            t.write += time.perf_counter() - t0             # so the device never idles between chunks
            if written:
                commit(*written)                # chunk k - 1, whose buffers chunk k + 2 reuses
            written = (k, done, writes)
            stopping = stopping or should_stop()
            if k + 2 < n and not stopping:
                start(k + 2)                    # read, and queued behind k + 1
        if written:
            commit(*written)
    outcome.stopped = out.done < n
    return outcome
