"""The compiled kernel: a point function and its parallel batch drivers, and how to call them.

`evaluate` is the public, checked call (any arrays in, results out, reduced results summed exactly).
`compute` is the lean one the job calls per chunk: rows already laid out, one workspace per job, no
checks and no allocation.

The compiled drivers release the GIL; `run_threads` runs one on as many threads as the workspace has
rows (the calling thread and a pool), each taking blocks of rows from a shared counter. A call
on fewer than `serial_below` points (or with threads=1) runs on the calling thread alone, as waking
the pool costs tens of microseconds on idle cores and milliseconds on busy ones; its results are the
same bits (each point is the same point function's). Results whose arrays are not C-contiguous rows
(a caller's layout, e.g. the point axis last) go through the `strided` driver, which writes them in
place through small per-thread row buffers.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numba
import numpy as np
from numpy.lib.stride_tricks import as_strided

from .codegen.load import SITES_BLOCK, STRIDED_BLOCK, seal    # first: gives the numba helpers below adgrad's cache
from . import arguments  # noqa: I001
from .ir.core import Graph

SERIAL_BELOW = 1024         # points: a call on fewer runs serially on the calling thread
MIN_BLOCK = 16              # rows per block a thread takes (m / (64 * threads) for large m)
NO_FLAGS = np.empty(0, dtype=np.bool_)      # the drivers' `bad` when no point is to be checked


def input_rows(x, size):
    """x (m, *shape) as C-contiguous read-only rows (m, size). numba compiles one driver per array
    type, and rows mapped from a file are read-only: making every input read-only keeps it one."""
    rows = np.ascontiguousarray(np.asarray(x, dtype=np.float64).reshape(len(x), size))
    if rows.flags.writeable:
        rows = rows.view()
        rows.flags.writeable = False
    return rows


def strided(a, m, size, output=False):
    """(a flat float64 view of `a`'s memory from its first entry, size, entry stride, point stride), in
    elements, of an array the strided driver reads or writes in place (arguments.layout), else None."""
    lay = arguments.layout(a, m, size, output)
    if lay is None:
        return None
    si, sk = lay
    span = (m - 1) * si + (size - 1) * sk + 1 if m and size else 0
    return as_strided(a, shape=(span,), strides=(8,), writeable=output), size, sk, si


@dataclass
class CompiledKernel:
    model: object               # the LoadedModel (engine/model.py) it was compiled from
    graph: Graph                # the optimized graph: values and derivatives as outputs
    derivatives: list
    source: str
    module: object
    workspace_size: int
    output_shapes: dict = field(default_factory=dict)   # per point
    reduced: frozenset = frozenset()                      # results summed over all points
    scalarized: bool = False    # emitted as straight-line scalar code (engine/opt/scalarize.py)
    code_graph: Graph | None = None   # the graph the source was emitted from (scalarized or not)
    math: str = "vector"        # vector | libm (engine/codegen/vector.py)
    math_calls: tuple = ()      # (function, "vector" | "libm", where and why) per math call in the source
    serial_below: int = SERIAL_BELOW    # calls on fewer points run on the calling thread
    lanes: bool = False         # straight-line code run across points (engine/codegen/vector.py lanes_fit)
    in_output_rows: tuple = ()  # (value, output): values kept in an output's row (engine/codegen/plan.py staged)
    cold: bool = False          # compile_model compiled it (not in the compile cache, not loaded in this process)
    compile_seconds: float = 0.0    # how long compile_model took

    @property
    def point_kernel(self):
        return self.module.point

    @property
    def modes(self):
        return {d.name: d.mode for d in self.derivatives}

    def workspace(self, workers):
        """Scratch for calls by `workers` threads: a row of workspace_size floats each."""
        return np.zeros((max(1, workers), max(1, self.workspace_size)))

    def param_rows(self, params=None):
        values = {**self.model.param_values, **(params or {})}
        return [np.ascontiguousarray(np.asarray(values[n], dtype=np.float64).reshape(v.size))
                for n, v in self.graph.params.items()]

    def compute(self, inputs: dict, outputs: dict, workspace, nonfinite=None, params=None):
        """Every row of `inputs` ({name: (m, *shape)}) into `outputs` ({name: float64 (m, *shape)},
        every result, reduced ones per point too); nonfinite[i] (optional, bool (m,)) flags a row whose
        inputs or results hold a NaN or an infinity. C-contiguous results are written row by row, any
        others (layouts `strided` accepts) by the strided driver. One thread per workspace row (the
        job's `threads`, evaluate's numba thread count); fewer than serial_below rows, or a workspace
        of one row: on the calling thread. Nothing is checked."""
        names = list(self.graph.outputs)
        m = len(outputs[names[0]]) if names else 0
        if m < self.serial_below:
            workspace = workspace[:1]
        flags = NO_FLAGS if nonfinite is None else nonfinite
        if all(outputs[n].flags.c_contiguous for n in names):
            rows = [input_rows(inputs[n], v.size) for n, v in self.graph.inputs.items()]
            outs = [outputs[n].reshape(m, max(1, v.size)) for n, v in self.graph.outputs.items()]
            args = (*rows, *self.param_rows(params), *outs)
            return self._call(self.module.batch, m, [(*args, work, flags) for work in workspace])
        args, bufs, views = [m], [], []         # a lanes kernel's driver moves entries without row buffers
        for n, v in self.graph.inputs.items():
            size = max(1, v.size)
            args += strided(inputs[n], m, size) or strided(input_rows(inputs[n], size), m, size)
            if not self.lanes:
                bufs.append(np.empty((len(workspace), STRIDED_BLOCK, size)))
                views.append(bufs[-1].view())
                views[-1].flags.writeable = False
        args += self.param_rows(params)
        for n, v in self.graph.outputs.items():
            args += strided(outputs[n], m, max(1, v.size), output=True)
            if not self.lanes:
                bufs.append(np.empty((len(workspace), STRIDED_BLOCK, max(1, v.size))))
        self._call(self.module.strided, m, [(*args, work, *(b[w] for b in bufs), *(v[w] for v in views), flags)
                                            for w, work in enumerate(workspace)])

    def site_buffers(self, threads):
        """Per thread, the row buffers and workspace row of a site-energy kernel's `sites` driver
        (compile_model(sites=True)): (b_R, b_valid, b_s, b_sn, b_index, b_E, b_G, work)."""
        rows, width = SITES_BLOCK, self.graph.inputs["valid"].shape[0]
        return [(np.zeros((rows, 3 * width)), np.zeros((rows, width)), np.zeros((rows, 1)), np.zeros((rows, width)),
                 np.full((rows, width), -1, dtype=np.int32), np.zeros((rows, 1)), np.zeros((rows, 3 * width)), work)
                for work in self.workspace(threads)]

    def sites(self, parts, t0, t1, rows, pairs, species, params, results, buffers):
        """A site-energy kernel's `sites` driver (codegen/load.py SITES, engine/numeric/sites.py) on a thread
        per entry of `buffers` (site_buffers): rows t0 <= t < t1, by the parts `parts` (int64 row bounds),
        rows = (order, count) (int64: the atom of each row, each atom's pairs within the cutoff), pairs =
        (first (int64), J, code (int32), shifts, inside (uint8), p) of the neighbour list, species (float64,
        per atom), params (param_rows()), results = (energies (n,), forces (parts, n, 3), virial (parts, 3,
        3)), added to. Nothing is checked; other dtypes or layouts compile the driver again."""
        driver, args = self.module.sites, (np.zeros(1, dtype=np.int64), parts, t0, t1, *rows, *pairs, species,
                                           *params, *results)
        self._sealed(driver, lambda: run_threads(lambda w: driver(*args, *buffers[w]), len(buffers)))

    def _call(self, driver, m, args):
        """driver(next_row, block, *args[w]) on each thread w, args[w] being its arguments (its
        workspace row and buffers): the calling thread alone takes all m rows as one block when there
        is one workspace row, else run_threads."""
        self._sealed(driver, lambda: run_rows(lambda next_row, block, w: driver(next_row, block, *args[w]), m,
                                              len(args)))

    def _sealed(self, driver, run):
        """run(), a call of `driver`; if it compiled (or loaded) code, the module's sums recorded (seal)."""
        compiled = len(driver.overloads)
        run()
        if len(driver.overloads) != compiled:
            seal(self.module)

    def evaluate(self, inputs: dict, out: dict | None = None, params: dict | None = None, threads=None,
                 nonfinite: np.ndarray | None = None):
        """Evaluate at every point. `inputs`: name -> array (M, *shape), any float dtype and layout (a
        view with the point axis moved first, np.moveaxis(x, -1, 0) of x (*shape, M), is read in place
        when a point's entries are equally spaced). `params`: name -> value, overriding the model's
        for this call only (no recompile). `out`: optional preallocated arrays (M, *shape), filled in
        place: float64 C-contiguous ones row by row, and float64 views in another layout whose entries
        of a point are equally spaced (e.g. np.moveaxis(a, -1, 0) of a caller's a (*shape, M), felupe's
        (*shape, q, c) reshaped to (*shape, q*c)) written directly through small per-thread row
        buffers, with no array of the whole size copied; any other array is filled by one copy from
        float64 rows. For a reduced (summed) result an array (*shape) gets the correctly rounded sum,
        an ExactSum gets the rows added, and an array (M, *shape) gets the per-point rows.
        `threads`: numba threads for this call only (the caller's setting is restored after); fewer
        than `serial_below` points (default 1024) or threads=1 run on the calling thread, with no
        parallel launch, to the same bits. `nonfinite`: an optional bool array (M,), set to whether
        each point's inputs or float64 results hold a NaN or an infinity.
        Every argument is checked before anything runs (engine/arguments.py): an unknown name, a wrong
        shape, dtype or length, a read-only `out` or an `out` array that shares memory with an input or
        another out array is a ValueError (a wrong kind of object a TypeError), naming the argument.
        Returns {name: array or that ExactSum}."""
        owner = f"model '{self.model.name}'"
        m, inputs = arguments.inputs(inputs, self.graph.inputs, owner)
        out = arguments.outputs(out, self.output_shapes, self.reduced, m, owner)
        params = arguments.params(params, self.graph.params, self.model.tables, owner)
        threads = arguments.threads(threads)
        nonfinite = arguments.nonfinite(nonfinite, m)
        arguments.no_overlap(inputs, out)
        results, targets, finish = arguments.result_targets(m, out, self.output_shapes, self.reduced)
        before = numba.get_num_threads() if threads else None
        try:
            if threads:
                numba.set_num_threads(threads)
            workers = 1 if m < self.serial_below or threads == 1 else min(numba.get_num_threads(), m)
            self.compute(inputs, targets, self.workspace(workers), nonfinite, params)
        finally:
            if threads:
                numba.set_num_threads(before)
        for step in finish:
            step()
        return results


_pools = {}     # (pid, size) -> threads that run_threads adds to the calling one (a forked child has none)


def run_rows(call, m, workers):
    """call(next_row, block, w) on `workers` threads (run_threads): a driver over m rows that takes
    blocks of `block` rows from the shared counter next_row[0], the block size every driver uses (all
    m rows in one block on one thread)."""
    next_row = np.zeros(1, dtype=np.int64)
    block = m if workers == 1 else max(MIN_BLOCK, m // (64 * workers))
    run_threads(lambda w: call(next_row, block, w), workers)


def run_threads(call, workers):
    """call(w) on `workers` threads at once, w = 0 .. workers - 1 (0: the calling thread; the others
    from a pool), returning when every one has; an exception of any reaches the caller."""
    if workers == 1:
        return call(0)
    key = (os.getpid(), workers - 1)
    if key not in _pools:
        _pools[key] = ThreadPoolExecutor(workers - 1, thread_name_prefix="adgrad-kernel")
    others = [_pools[key].submit(call, w) for w in range(1, workers)]
    try:
        call(0)
    finally:
        for f in others:                # every thread is done before the arrays are handed back
            f.result()
