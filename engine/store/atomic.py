"""Write an HDF5 file all or nothing: build it under a temporary name beside the target, then rename."""
from __future__ import annotations

import contextlib
import errno
import os
import secrets

import h5py

from ..errors import DataError, JobError, os_reason

NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


@contextlib.contextmanager
def atomic_h5(path, **options):
    """Yield an h5py.File (with h5py.File `options`) opened for writing at a temporary path in `path`'s directory; on success it is
    closed and renamed to `path` (os.replace, atomic on one file system); on any failure, including
    Ctrl-C, it is removed, so `path` is either the old file or the complete new one. The file gets the
    usual permissions (0666 less the umask), as h5py.File(path, "w") would give it."""
    directory, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        f = h5py.File(tmp, "x", **options)     # "x": never clobbers another process's temporary file
    except OSError as exc:
        raise DataError(f"{path}: cannot create output file ({os_reason(exc)})") from None
    try:
        failed = None
        try:
            yield f
        except OSError as exc:          # the disk or quota is full: reported below, in one line
            if exc.errno not in NO_SPACE:
                raise
            failed = exc
        finally:
            try:
                f.close()
            except OSError as exc:      # the last flush: a full disk often shows only here
                failed = failed or exc
        if failed is not None:         # (another error in the body propagates as it is)
            raise JobError(f"{path}: cannot write ({os_reason(failed)}); nothing was written") from None
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
