"""The compiled kernel: a point function and its parallel batch drivers, and how to call them.

`evaluate` is the public, checked call (any arrays in, results out, reduced results summed exactly).
`compute` is the lean one the job calls per chunk: rows already laid out, one workspace per job, no
checks and no allocation.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np

from .codegen.load import seal
from .ir.core import Graph
from .numeric.exactsum import ExactSum


def input_rows(x, size):
    """x (m, *shape) as C-contiguous read-only rows (m, size). numba compiles one driver per array
    type, and rows mapped from a file are read-only: making every input read-only keeps it one."""
    rows = np.ascontiguousarray(np.asarray(x, dtype=np.float64).reshape(len(x), size))
    if rows.flags.writeable:
        rows = rows.view()
        rows.flags.writeable = False
    return rows


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
        """Every row of `inputs` ({name: (m, *shape)}) into `outputs` ({name: float64 C-contiguous
        (m, *shape)}, every result, reduced ones per point too); nonfinite[i] (optional, bool (m,))
        flags a row whose inputs or results hold a NaN or an infinity. Nothing is checked."""
        rows = [input_rows(inputs[n], v.size) for n, v in self.graph.inputs.items()]
        outs = [outputs[n].reshape(len(outputs[n]), max(1, v.size)) for n, v in self.graph.outputs.items()]
        driver = self.module.batch if nonfinite is None else self.module.batch_checked
        compiled = len(driver.signatures)
        args = (*rows, *self.param_rows(params), *outs, workspace) + (() if nonfinite is None else (nonfinite,))
        driver(*args)
        if len(driver.signatures) != compiled:      # this call compiled (or loaded) code: record its sums
            seal(self.module)

    def evaluate(self, inputs: dict, out: dict | None = None, params: dict | None = None, threads=None,
                 nonfinite: np.ndarray | None = None):
        """Evaluate at every point. `inputs`: name -> array (M, *shape). `out`: optional preallocated
        arrays (M, *shape), float64 C-contiguous ones are filled in place; for a reduced (summed)
        result an array (*shape) gets the correctly rounded sum, an ExactSum gets the rows added, and
        an array (M, *shape) gets the per-point rows. `nonfinite`: an optional bool array (M,), set
        to whether each point's inputs or float64 results hold a NaN or an infinity.
        Returns {name: array or that ExactSum}."""
        m = self._points(inputs)
        results, targets, finish = self._targets(m, {} if out is None else out)
        if threads:
            numba.set_num_threads(threads)
        self.compute(inputs, targets, self.workspace(min(numba.get_num_threads(), m or 1)), nonfinite, params)
        for step in finish:
            step()
        return results

    def _points(self, inputs):
        """The number of points, once every input is present with its shape and the same count."""
        m = None
        for name, v in self.graph.inputs.items():
            if name not in inputs:
                raise KeyError(f"missing input '{name}'")
            shape = np.shape(inputs[name])
            if tuple(shape[1:]) != v.shape:
                raise ValueError(f"input '{name}' must have shape (M, *{v.shape}), got {shape}")
            if m is None:
                m = shape[0]
            elif shape[0] != m:
                raise ValueError(f"input '{name}' has {shape[0]} points, others have {m}")
        return m

    def _targets(self, m, out):
        """(results to return, float64 rows the driver fills, steps that finish the results)."""
        results, targets, finish = {}, {}, []
        for name, shape in self.output_shapes.items():
            full, dst = (m,) + shape, out.get(name)
            if name in self.reduced and (dst is None or isinstance(dst, ExactSum) or dst.shape == shape):
                rows = targets[name] = np.empty(full)          # per-point rows, summed exactly below
                results[name] = np.empty(shape) if dst is None else dst
                finish.append(lambda dst=results[name], rows=rows: _sum_into(dst, rows))
                continue
            if dst is None:
                dst = np.empty(full)
            elif dst.shape != full:
                raise ValueError(f"out['{name}'] must have shape {full}, got {dst.shape}")
            results[name] = dst
            if dst.dtype == np.float64 and dst.flags.c_contiguous:
                targets[name] = dst
            else:                       # compute in float64, then cast/copy into the caller's array
                rows = targets[name] = np.empty(full)
                finish.append(lambda dst=dst, rows=rows: dst.__setitem__(Ellipsis, rows))
        return results, targets, finish


def _sum_into(dst, rows):
    if isinstance(dst, ExactSum):       # the caller accumulates across calls (chunks, shards)
        dst.add(rows)
    else:                               # exact, so the same bits whatever the order or thread count
        acc = ExactSum(dst.shape)
        acc.add(rows)
        dst[...] = acc.value()
