"""The HDF5 point cloud a run reads: its datasets checked up front, then chunks of rows read into a
slot's buffers by h5py, or mapped from the file where its layout allows (mapped.py)."""
from __future__ import annotations

import hashlib
import os

import h5py
import numpy as np

from ..errors import DataError
from .mapped import MappedRows

FINGERPRINT_BYTES = 1 << 20     # hashed from each end of the input file


class InputReader:
    """The model's inputs in an HDF5 file, checked for presence, shape and point count up front."""

    def __init__(self, path, datasets: dict, shapes: dict):
        self.path, self.mapped = path, None
        # what to add to a dataset's values as they are read (spec.DatasetName: -1 for LAMMPS's 1-based types)
        self.offsets = {name: d.offset for name, d in datasets.items() if getattr(d, "offset", 0.0)}
        try:
            self.file = h5py.File(path, "r")
        except OSError as exc:
            raise DataError(f"{path}: cannot open input file ({reason(exc, path)})") from None
        self.datasets, self.points = {}, None
        for name, dname in datasets.items():
            if dname not in self.file:
                have = ", ".join(sorted(self.file.keys())) or "nothing"
                self.close()
                raise DataError(f"{path}: dataset '{dname}' (input '{name}') not found; the file has: {have}")
            ds = self.file[dname]
            if not isinstance(ds, h5py.Dataset):
                self.close()
                raise DataError(f"{path}: '{dname}' (input '{name}') is {_kind(ds)}, not a dataset")
            if ds.shape[1:] != tuple(shapes[name]) or ds.ndim < 1:
                self.close()
                need = f"(M, {', '.join(map(str, shapes[name]))})".replace(", )", ")")
                raise DataError(f"{path}: dataset '{dname}' has shape {ds.shape}, but input '{name}' of shape "
                                f"{tuple(shapes[name])} needs {need}")
            if ds.dtype.kind not in "fiub":
                self.close()
                raise DataError(f"{path}: dataset '{dname}' (input '{name}') has dtype {ds.dtype}; inputs are "
                                f"real numbers (float, integer or boolean datasets, read as float64)")
            if self.points is None:
                self.points = ds.shape[0]
            elif ds.shape[0] != self.points:
                self.close()
                raise DataError(f"{path}: dataset '{dname}' has {ds.shape[0]} points, but the other inputs have "
                                f"{self.points}; every input needs the same number of points")
            self.datasets[name] = ds
        if self.points is None:
            self.points = 0
        self.mapped = MappedRows(path, self.datasets)

    def read(self, start, stop):
        """Rows [start, stop) of every input as new float64 arrays."""
        rows = {n: np.asarray(ds[start:stop], dtype=np.float64) for n, ds in self.datasets.items()}
        for name, offset in self.offsets.items():
            rows[name] += offset        # (only these: adding 0.0 to the others copied them, and made -0.0 +0.0)
        return rows

    def rows(self, start, stop, buffers: dict):
        """Rows [start, stop) of every input as [(lo, hi, {name: rows lo..hi})], lo and hi counted
        from start: pieces mapped from the file where it allows (engine/h5/mapped.py), else one
        piece read into the first stop - start rows of the float64 `buffers`."""
        if self.mapped.usable and (pieces := self.mapped.pieces(start, stop)) is not None:
            for _, _, views in pieces:          # the file's rows are read-only: shifted rows are copies
                views.update({name: views[name] + offset for name, offset in self.offsets.items()})
            return pieces
        n = stop - start
        for name, ds in self.datasets.items():
            if n:
                ds.read_direct(buffers[name], np.s_[start:stop], np.s_[0:n])
                if name in self.offsets:
                    buffers[name][:n] += self.offsets[name]
        return [(0, n, {name: buf[:n] for name, buf in buffers.items()})]

    def fill(self, slot, start, stop):
        """Rows [start, stop) of every input into `slot` (engine/store/slot.py)."""
        slot.blocks = []            # unmap the slot's previous rows before mapping new ones
        slot.blocks = self.rows(start, stop, slot.buffers)

    def close(self):
        if self.mapped is not None:
            self.mapped.close()
        self.file.close()


def input_identity(path) -> dict:
    """Size, mtime and a hash of both ends of the input file: what --resume compares to detect a change."""
    st = os.stat(path)
    h = hashlib.sha256(str(st.st_size).encode())
    with open(path, "rb") as f:
        h.update(f.read(FINGERPRINT_BYTES))
        f.seek(max(0, st.st_size - FINGERPRINT_BYTES))
        h.update(f.read(FINGERPRINT_BYTES))
    return {"input_size": st.st_size, "input_mtime_ns": st.st_mtime_ns, "input_fingerprint": h.hexdigest()}


def reason(exc, path=None):
    """Why h5py could not open a file, in a few words: its errno's text (h5py puts HDF5's whole
    multi-line message in strerror), or that the file is not HDF5."""
    if getattr(exc, "errno", None):
        return os.strerror(exc.errno)
    if path is not None and os.path.isfile(path) and not h5py.is_hdf5(path):
        return "not an HDF5 file"
    return str(exc).split("(")[0].strip() or type(exc).__name__


def _kind(obj):
    return "a group" if isinstance(obj, h5py.Group) else f"a {type(obj).__name__}"


