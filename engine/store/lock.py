"""One writer per output: an advisory lock (fcntl.flock) on a hidden lock file beside the output,
holding the writer's pid and host, so a second run to the same path is refused and names the first.

The kernel releases a flock when its holder dies, so the lock of a killed run (kill -9 included) is
simply taken over. The lock file is removed by its holder; a locker that finds it has locked a file
already removed (another writer finished in between) locks the new one instead."""
from __future__ import annotations

import contextlib
import fcntl
import os
import socket

from ..errors import DataError


def lock_path(output):
    d, name = os.path.split(os.path.abspath(output))
    return os.path.join(d, f".{name}.lock")


@contextlib.contextmanager
def output_lock(output):
    path = lock_path(output)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            d = os.path.dirname(path)
            if not os.path.isdir(d):
                raise DataError(f"{output}: the output's directory {d} does not exist (or is not a "
                                f"directory); create it first") from None
            raise DataError(f"{output}: cannot create the lock file {path} ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataError(f"{output}: another adgrad run is writing this output ({holder}); wait for it to "
                            f"finish or choose another output path") from None
        if _same_file(fd, path):
            break
        os.close(fd)            # the holder we waited for removed the file: lock the current one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
        os.close(fd)


def _same_file(fd, path):
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
