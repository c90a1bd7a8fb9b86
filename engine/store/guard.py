"""Never write over what a command reads (or, for merge, what its shards were computed from): the files
a run, a sample or a merge reads, and the check that an output path is none of them (by device and
inode, after following links, so `-o ./sub/../in.h5`, a hard link or a symbolic link to the input are
all caught), is a regular file or absent, and that every input is a regular file (a FIFO would block
the reader forever)."""
from __future__ import annotations

import os
import stat

from ..errors import DataError
from ..spec import H5Ref, PotentialRef, TableRef


def model_files(model, overrides=None):
    """(path, what) of the model file and every file its params (and a config's overrides) read."""
    files = [(model.path, "the model file")]
    for decl in [*model.params.values(), *(overrides or {}).values()]:
        v = decl.value
        if isinstance(v, TableRef):
            v = v.values
        if isinstance(v, H5Ref):
            files.append((v.file, f"the file of params.{decl.name}"))
        elif isinstance(v, PotentialRef):
            files += [(f, f"the potential file of params.{decl.name}") for f in v.files]
    return files


def config_files(config):
    """(path, what) of every file `adgrad run CONFIG` reads."""
    files = [(config.path, "the config file"), *model_files(config.model, config.params)]
    if config.input.path is not None:
        files.append((config.input.path, "the input file"))
        files += virtual_sources(config.input.path)
    return files


def virtual_sources(path):
    """(path, what) of the source files of the virtual datasets in an HDF5 file (a merged output).
    A missing source is an error: h5py would read its rows as the fill value."""
    import h5py
    out = []
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return out              # never open a FIFO (h5py would block holding the GIL); check_inputs says why
        f = h5py.File(path, "r")
    except OSError:
        return out                  # not readable as HDF5: the reader reports it
    with f:
        base = os.path.dirname(os.path.abspath(path))
        for ds in _datasets(f):
            if not ds.is_virtual:
                continue
            for src in ds.virtual_sources():
                if src.file_name == ".":
                    continue
                p = src.file_name if os.path.isabs(src.file_name) else os.path.join(base, src.file_name)
                if not os.path.exists(p):
                    raise DataError(f"{path}: dataset '{ds.name}' is virtual and its source file {p} is missing "
                                    f"(its rows would read as the fill value)")
                out.append((p, f"a source of the virtual dataset '{ds.name}' in {path}"))
    return out


def _datasets(f):
    found = []
    f.visititems(lambda name, obj: found.append(obj) if hasattr(obj, "is_virtual") else None)
    return found


def check_inputs(files):
    """Every file read must exist as a regular file (not a directory, FIFO or device)."""
    for path, what in files:
        try:
            st = os.stat(path)
        except OSError:
            continue                # a missing file is reported by whoever opens it, with its context
        if not stat.S_ISREG(st.st_mode):
            raise DataError(f"{path}: {what} is not a regular file ({_kind(st.st_mode)})")


def check_output(out, files, flag="--overwrite"):
    """The output path is a regular file or absent, and none of the files read (device and inode)."""
    try:
        st = os.stat(out)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DataError(f"{out}: cannot use as output ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"{out}: the output path is {_kind(st.st_mode)}, not a file")
    for path, what in files:
        try:
            other = os.stat(path)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            raise DataError(f"{out}: the output would replace {what} ({path}); refused even with {flag}: "
                            f"choose another output path")


def _kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"
