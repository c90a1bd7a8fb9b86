"""Write an HDF5 file all or nothing: build it under a temporary name beside the target, then rename."""
from __future__ import annotations

import contextlib
import os
import tempfile

import h5py

from ..errors import DataError


@contextlib.contextmanager
def atomic_h5(path):
    """Yield an h5py.File opened for writing at a temporary path in `path`'s directory; on success it is
    closed and renamed to `path` (os.replace, atomic on one file system); on any failure, including
    Ctrl-C, it is removed, so `path` is either the old file or the complete new one."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as exc:
        raise DataError(f"{path}: cannot create output file ({exc.strerror})") from None
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
