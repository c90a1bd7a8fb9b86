"""Write an HDF5 file all or nothing: build it under a temporary name beside the target, then rename.

The temporary name holds the writer's host and pid: a process killed (kill -9) while writing leaves
its temporary file, and the next write of the same target on that host removes it once that pid is
gone. (Another host's files are left alone: on a shared file system its pids mean nothing here.)"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import socket

import h5py

from ..errors import DataError, JobError, os_reason

NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def io_errno(exc):
    """The errno of a failed write: an OSError's, or the one HDF5 names in the text of the RuntimeError
    h5py raises when a metadata write fails (laying out a large file on a full disk: "... file write
    failed: ..., errno = 28, error message = ..."); None for anything else."""
    if isinstance(exc, OSError):
        return exc.errno or None
    if isinstance(exc, RuntimeError):
        m = re.search(r"\berrno = (\d+)", str(exc))
        return int(m.group(1)) if m else None
    return None


def io_reason(exc):
    """A failed write's reason in a few words (HDF5's own text runs over lines)."""
    n = io_errno(exc)
    return os.strerror(n) if n else os_reason(exc)


@contextlib.contextmanager
def atomic_h5(path, **options):
    """Yield an h5py.File (with h5py.File `options`) opened for writing at a temporary path in `path`'s
    directory; on success it is closed and renamed to `path` (os.replace, atomic on one file system);
    on any failure, including Ctrl-C, it is removed, so `path` is either the old file or the complete
    new one. The file gets the usual permissions (0666 less the umask), as h5py.File(path, "w") would."""
    directory, name = os.path.split(os.path.abspath(path))
    host = _host()
    _remove_stale(directory, name, host)
    tmp = os.path.join(directory, f".{name}.{host}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # "x": never clobbers another process's temporary file. No chunk cache: a write that cannot reach
        # the disk fails in the body, not later in h5py's clean-up of a dataset (a traceback it prints)
        f = h5py.File(tmp, "x", **{"rdcc_nbytes": 0, **options})
    except OSError as exc:
        raise DataError(f"{path}: cannot create output file ({os_reason(exc)})") from None
    try:
        failed = None
        try:
            yield f
        except (OSError, RuntimeError) as exc:      # the disk, quota or file size limit is full:
            if io_errno(exc) not in NO_SPACE:       # reported below, in one line
                raise
            failed = exc
        finally:
            try:
                f.close()
            except (OSError, RuntimeError) as exc:  # the last flush: a full disk often shows only here
                failed = failed or exc
        if failed is not None:         # (another error in the body propagates as it is)
            raise JobError(f"{path}: cannot write ({io_reason(failed)}); nothing was written") from None
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def _host():
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())


def _remove_stale(directory, name, host):
    """Remove the temporary files of `name` that dead processes of this host left."""
    pattern = re.compile(re.escape(f".{name}.{host}.") + r"(\d+)\.[0-9a-f]{8}\.tmp")
    with contextlib.suppress(OSError):
        for entry in os.listdir(directory):
            m = pattern.fullmatch(entry)
            if m and not _alive(int(m.group(1))):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(directory, entry))


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:         # another user's live process
        return True
    return True
