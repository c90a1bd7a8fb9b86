"""HDF5 in and out: a checked chunk reader for the point cloud and a chunked writer for results.

Both keep h5py's conventions: the first axis of every dataset is the point axis, datasets are
chunked along it, and the output's root attributes say how the file was made."""
from __future__ import annotations

import h5py
import numpy as np

from ..errors import DataError


class InputReader:
    """The model's inputs in an HDF5 file, checked for presence, shape and point count up front."""

    def __init__(self, path, datasets: dict, shapes: dict):
        self.path = path
        try:
            self.file = h5py.File(path, "r")
        except (OSError, FileNotFoundError) as exc:
            raise DataError(f"{path}: cannot open input file ({_reason(exc)})") from None
        self.datasets, self.points = {}, None
        for name, dname in datasets.items():
            if dname not in self.file:
                have = ", ".join(sorted(self.file.keys())) or "nothing"
                self.close()
                raise DataError(f"{path}: dataset '{dname}' (input '{name}') not found; the file has: {have}")
            ds = self.file[dname]
            if not isinstance(ds, h5py.Dataset) or ds.shape[1:] != tuple(shapes[name]) or ds.ndim < 1:
                self.close()
                raise DataError(f"{path}: dataset '{dname}' has shape {getattr(ds, 'shape', None)}, but input "
                                f"'{name}' of shape {tuple(shapes[name])} needs (M, {', '.join(map(str, shapes[name]))})"
                                .replace(", )", ")"))
            if self.points is None:
                self.points = ds.shape[0]
            elif ds.shape[0] != self.points:
                self.close()
                raise DataError(f"{path}: dataset '{dname}' has {ds.shape[0]} points, but the other inputs have "
                                f"{self.points}; every input needs the same number of points")
            self.datasets[name] = ds
        if self.points is None:
            self.points = 0

    def read(self, start, stop):
        return {n: np.asarray(ds[start:stop], dtype=np.float64) for n, ds in self.datasets.items()}

    def close(self):
        self.file.close()


def _reason(exc):
    return getattr(exc, "strerror", None) or str(exc).split("(")[0].strip() or type(exc).__name__


class OutputWriter:
    """Creates every result dataset (M, *shape) chunked along the point axis; writes row blocks."""

    def __init__(self, path, shapes: dict, points: int, dtype="float64", compression="none",
                 chunk_rows=65536, attrs=None, reduced=frozenset()):
        self.path = path
        try:
            self.file = h5py.File(path, "w")
        except OSError as exc:
            raise DataError(f"{path}: cannot create output file ({_reason(exc)})") from None
        for k, v in (attrs or {}).items():
            self.file.attrs[k] = v
        self.file.attrs["complete"] = False
        self.file.attrs["chunks_done"] = 0
        comp = None if compression == "none" else compression
        self.ds = {}
        self.sums = {}
        for name in reduced:                         # summed over points: no point axis, written last
            self.sums[name] = self.file.create_dataset(name, shape=tuple(shapes[name]), dtype=dtype)
        for name, shape in shapes.items():
            if name in reduced:
                continue
            row = int(np.prod(shape)) * np.dtype(dtype).itemsize
            rows = max(1, min(points or 1, chunk_rows, (1 << 20) // max(row, 1)))
            self.ds[name] = self.file.create_dataset(name, shape=(points,) + tuple(shape), dtype=dtype,
                                                     chunks=(rows,) + tuple(shape), compression=comp)

    def write(self, start, stop, results: dict):
        for name, ds in self.ds.items():
            ds[start:stop] = results[name][: stop - start]

    def chunk_done(self, n):
        self.file.attrs["chunks_done"] = n
        self.file.flush()

    def finish(self, attrs, sums=None):
        for name, value in (sums or {}).items():
            self.sums[name][...] = value
        for k, v in attrs.items():
            self.file.attrs[k] = v
        self.file.attrs["complete"] = True       # last: nothing half-written is ever marked done
        self.file.flush()

    def close(self):
        self.file.close()
