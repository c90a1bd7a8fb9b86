"""The buffers of one chunk in flight, which the job rotates (read -> compute -> write -> commit).

What is in them is storage's business: a chunk's input rows are read into the slot's buffers or
mapped from the file, possibly in several row ranges (HDF5 puts index nodes between data chunks),
and its output rows may still be on their way to the device when the next chunk is read. The job
only asks for the inputs a row range at a time and for the output buffers to fill."""
from __future__ import annotations

import numpy as np

from .direct import aligned_empty


def _buffers(shapes, n, dtype):
    """Page-aligned, so the output file can take the rows with O_DIRECT (direct.py)."""
    return {name: aligned_empty((n,) + tuple(shape), dtype) for name, shape in shapes.items()}


class Slot:
    def __init__(self, input_shapes: dict, output_shapes: dict, rows: int, dtype=np.float64):
        self.buffers = _buffers(input_shapes, rows, np.float64)    # the input rows, when read
        self.outputs = _buffers(output_shapes, rows, dtype)        # the per-point results to store
        self.blocks = []        # [(lo, hi, {name: input rows lo..hi})], set by InputReader.fill
        self.writes = []        # this chunk's output writes still in flight, set by OutputFile.write

    def each_input(self, fn):
        """fn(lo, hi, {name: rows lo..hi of every input}) for the chunk's rows, in order."""
        for lo, hi, rows in self.blocks:
            fn(lo, hi, rows)

    def input_row(self, i):
        """{name: row i of the chunk} of every input."""
        lo, _, rows = next(block for block in self.blocks if block[0] <= i < block[1])
        return {name: arr[i - lo] for name, arr in rows.items()}
