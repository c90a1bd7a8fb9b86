"""One writer per output file: every command that writes one (run, sample, merge, export) holds an
advisory lock (fcntl.flock) on a hidden lock file beside it from before it decides whether it may
write the path (exists? --overwrite?) until the file is complete, so a second writer of the same
path is refused and told who holds it (command, pid and host are in the lock file).

The lock is named after the path with every symbolic link and `..` resolved, so two spellings of one
file (`-o ./sub/../out.h5`, a link to it, a linked directory) share one lock. The kernel releases a
flock when its holder dies, so the lock of a killed writer (kill -9 included) is simply taken over.
The lock file is removed by its holder; a locker that finds it has locked a file already removed
(another writer finished in between) locks the new one instead."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat

from ..errors import DataError, JobError


def lock_path(output):
    d, name = os.path.split(os.path.realpath(output))
    return os.path.join(d, f".{name}.lock")


@contextlib.contextmanager
def output_lock(output, command="adgrad"):
    """Hold the lock of `output` (a path to write) for the body; `command` (e.g. "adgrad sample") is
    what a refused second writer is told holds it. DataError if another process holds it or the lock
    file cannot be made (the output's directory is missing or not writable)."""
    output = os.fspath(output)
    path = lock_path(output)
    while True:
        try:        # never through a link, never blocking on a FIFO: the name is in a directory others may write
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            d = os.path.dirname(path)
            if not os.path.isdir(d):
                raise DataError(f"{output}: cannot create output file (No such file or directory): the "
                                f"directory {os.path.dirname(os.path.abspath(output))} does not exist (or is not "
                                f"a directory); create it first") from None
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):     # no room for even an empty file
                raise JobError(f"{output}: cannot write ({exc.strerror}); nothing was written") from None
            if exc.errno in (errno.ELOOP, errno.EISDIR):
                raise _foreign(output, path, "a symbolic link" if exc.errno == errno.ELOOP else "a directory")
            raise DataError(f"{output}: cannot create the lock file {path} ({exc.strerror})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:     # truncated below: never another file's
            os.close(fd)
            raise _foreign(output, path, "a hard link to another file" if stat.S_ISREG(st.st_mode) else
                           "not a regular file")
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
        with contextlib.suppress(OSError):     # (a full disk: the lock holds, only its note is lost)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{command}, pid {os.getpid()} on host {socket.gethostname()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)
        os.close(fd)


def _foreign(output, path, what):
    return DataError(f"{output}: the lock file {path} is {what}, which adgrad never makes; remove it if no adgrad "
                     f"command is writing {os.path.basename(output)}")


def _same_file(fd, path):
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
