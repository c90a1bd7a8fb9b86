"""The chunk pipeline of `adgrad run`: read chunk k+2 and write chunk k while chunk k+1 is computed.

All h5py calls stay in the calling (main) thread; one worker thread runs the nogil kernel (on
`threads` threads: it and kernel.run_threads's pool), the non-finite check and the exact sums. Three
preallocated buffer sets rotate (one being read, one computed, one written: engine/store/slot.py),
so memory is set by the chunk size, not by the file. Chunks are committed in order, so a stop or a
crash leaves a prefix of finished chunks."""
from __future__ import annotations

import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..errors import JobError
from ..store.slot import Slot
from . import native as natives

SETS = 3        # slots in flight: read, compute, write


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


def bytes_per_point(kernel, dtype) -> int:
    """The buffer memory a point of a chunk takes: SETS slots of float64 input rows and of stored
    results, and the worker's float64 rows (reduced results; per-point ones stored narrower)."""
    entries = {n: max(1, int(np.prod(s))) for n, s in kernel.output_shapes.items()}
    per_point = sum(k for n, k in entries.items() if n not in kernel.reduced)
    reduced = sum(k for n, k in entries.items() if n in kernel.reduced)
    inputs = sum(max(1, v.size) for v in kernel.graph.inputs.values())
    wide = per_point if np.dtype(dtype) != np.float64 else 0
    return SETS * (8 * inputs + np.dtype(dtype).itemsize * per_point) + 8 * (wide + reduced)


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
    """What the worker hands back for a computed chunk."""
    rows: int
    bad: int                    # non-finite points
    first_bad: tuple | None     # (local row, "input dataset '...'" or "output '...'")
    sums: dict                  # name -> ExactSum of this chunk's rows
    digests: np.ndarray         # uint64 per input: the checksum of its rows (numeric/checksum.py)
    seconds: float


class _Compute:
    """The worker's step: a chunk's rows through the kernel, the non-finite check, the exact sums.
    Per-point results stored narrower than float64 are computed into float64 rows of the worker's
    own and rounded into the slot in one pass that checks what is stored."""

    def __init__(self, kernel, reader, dtype, rows, threads):
        self.kernel = kernel
        per_point = {n: s for n, s in kernel.output_shapes.items() if n not in kernel.reduced}
        self.sums = {n: np.empty((rows,) + kernel.output_shapes[n]) for n in kernel.reduced}
        self.wide = {n: np.empty((rows,) + s) for n, s in per_point.items()} if np.dtype(dtype) != np.float64 else {}
        self.workspace = kernel.workspace(threads)
        self.names = list(kernel.graph.inputs)
        self.labels = {name: f"input dataset '{ds.name.lstrip('/')}'" for name, ds in reader.datasets.items()}
        self.native = natives.is_native(kernel)     # an exported library: no numba helpers

    def __call__(self, slot, n):
        t0 = time.perf_counter()
        stored = {name: buf[:n] for name, buf in {**slot.outputs, **self.sums}.items()}
        computed = {**stored, **{name: buf[:n] for name, buf in self.wide.items()}}
        bad = np.empty(n, dtype=np.bool_)
        digests = np.zeros(len(self.names), dtype=np.uint64)

        def block(lo, hi, inputs):
            digests[:] += input_digests(inputs, self.names, lo, self.native)
            self.kernel.compute(inputs, {name: arr[lo:hi] for name, arr in computed.items()}, self.workspace,
                                bad[lo:hi])
        slot.each_input(block)
        if self.wide:                   # numba's helpers (imported here: a float64 run of a library has none)
            from ..kernel import run_rows
            from ..numeric.scalar import narrow
        for name, arr in self.wide.items():
            wide, rows = arr[:n].reshape(n, -1), stored[name].reshape(n, -1)
            run_rows(lambda next_row, block, w: narrow(next_row, block, wide, rows, bad), n, len(self.workspace))
        sums = {}
        if self.kernel.reduced:
            from ..numeric.exactsum import ExactSum
        for name in self.kernel.reduced:
            sums[name] = ExactSum(self.kernel.output_shapes[name])
            sums[name].add(stored[name])
        first_bad = self._first_bad(slot, stored, bad) if bad.any() else None
        return _Chunk(n, int(bad.sum()), first_bad, sums, digests, time.perf_counter() - t0)

    def _first_bad(self, slot, stored, bad):
        i = int(np.argmax(bad))
        rows = [(self.labels[name], row) for name, row in slot.input_row(i).items()] + \
               [(f"output '{name}'", arr[i]) for name, arr in stored.items()]
        return i, next(label for label, row in rows if not np.isfinite(row).all())


class _Stream:
    """The steps of the pipeline on the main thread, with their timings: start a chunk (read it into
    a slot, queue it for the worker), wait for it, write it, commit it."""

    def __init__(self, kernel, reader, out, plan, dtype, threads, on_chunk):
        self.reader, self.out, self.plan, self.on_chunk = reader, out, plan, on_chunk
        self.first = out.done
        size = min(plan.chunk, max(plan.rows, 1))
        per_point = {n: s for n, s in kernel.output_shapes.items() if n not in kernel.reduced}
        inputs = {name: v.shape for name, v in kernel.graph.inputs.items()}
        self.slots = [Slot(inputs, per_point, size, dtype) for _ in range(min(SETS, plan.chunks - self.first))]
        self.compute = _Compute(kernel, reader, dtype, size, threads)
        self.outcome = Outcome()
        self.t = self.outcome.timings
        self.nan_points = out.nan_points

    def start(self, worker, k):
        t0 = time.perf_counter()
        a, b = self.plan.bounds(k)
        slot = self.slots[(k - self.first) % SETS]
        self.reader.fill(slot, self.plan.row_start + a, self.plan.row_start + b)
        self.t.read += time.perf_counter() - t0
        return k, slot, worker.submit(self.compute, slot, b - a)

    def wait(self, future):
        t0 = time.perf_counter()
        done = future.result()
        self.t.wait += time.perf_counter() - t0
        self.t.compute += done.seconds
        return done

    def write(self, k, slot):
        t0 = time.perf_counter()
        self.out.write(slot, *self.plan.bounds(k))     # O_DIRECT: queued behind chunk k - 1's rows,
        self.t.write += time.perf_counter() - t0       # so the device never idles between chunks

    def commit(self, k, done, slot):
        t0 = time.perf_counter()
        for name, acc in done.sums.items():
            self.out.sums[name].merge(acc)
        self.nan_points += done.bad
        if self.out.digests is not None:           # (a file of an older adgrad resumed with --trust-input)
            self.out.digests[k] = done.digests
        self.out.commit(k + 1, self.nan_points, self.out.sums, slot)   # waits for chunk k's rows
        self.t.write += time.perf_counter() - t0
        self.outcome.points += done.rows
        self.on_chunk(self.plan.bounds(k)[1], self.plan.rows)

    def non_finite(self, k, done):
        a = self.plan.bounds(k)[0]
        row, where = done.first_bad
        return JobError(f"non-finite value at input row {self.plan.row_start + a + row} in {where} "
                        f"(engine.nan: error); {self.out.path} keeps the {k} chunk(s) before it "
                        f"(rows before {self.plan.row_start + a}) and is marked incomplete")


def input_digests(inputs: dict, names, first_row=0, native=False):
    """uint64 per input of `names`: the checksums of its rows first_row.. of a chunk; `native`: by
    numpy (job/native.py digest, the same values), for a run with no numba."""
    if native:
        digest = natives.digest
    else:
        from ..numeric.checksum import digest
    return np.array([digest(inputs[name], first_row) for name in names], dtype=np.uint64)


def stream(kernel, reader, out, plan: Plan, dtype, threads: int, nan_error: bool, should_stop, on_chunk) -> Outcome:
    """Compute chunks out.done .. plan.chunks - 1 of `plan` into `out`, committing each in order.

    The worker always has the next chunk queued, so it never waits for a commit (which waits for the
    device): chunk k is committed only after chunk k + 1's rows are queued for the device.
    should_stop() is asked once per chunk; once true, nothing new starts, and the chunks already
    computing are finished, written and committed. on_chunk(points_done, points_total) comes first
    and after every commit. With nan_error a non-finite point raises JobError naming its row and
    dataset (the chunks before it stay committed)."""
    run, n = _Stream(kernel, reader, out, plan, dtype, threads, on_chunk), plan.chunks
    on_chunk(min(run.first * plan.chunk, plan.rows), plan.rows)
    written, stopping = None, False
    with ThreadPoolExecutor(1, thread_name_prefix="adgrad-compute") as worker:
        flight = deque(run.start(worker, k) for k in range(run.first, min(n, run.first + 2)))
        while flight:
            k, slot, future = flight.popleft()
            done = run.wait(future)
            if done.bad and nan_error:
                if written:
                    run.commit(*written)
                raise run.non_finite(k, done)
            run.write(k, slot)
            if written:
                run.commit(*written)            # chunk k - 1, whose slot chunk k + 2 reuses
            written = (k, done, slot)
            stopping = stopping or should_stop()
            if k + 2 < n and not stopping:
                flight.append(run.start(worker, k + 2))
        if written:
            run.commit(*written)
    run.outcome.stopped = out.done < n
    return run.outcome
