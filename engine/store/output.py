"""The crash-safe output file of a run.

It keeps h5py's conventions: the first axis of every dataset is the point axis, datasets are
chunked along it, and the output's root attributes say how the file was made.

The output file is laid out completely before the first chunk is computed: every dataset is created
with its storage allocated (uncompressed datasets; HDF5 cannot preallocate compressed chunks), so the
run afterwards only writes raw data into place and the file's metadata never changes until the end.
Progress is committed per chunk in /_adgrad:

    /_adgrad/commit            int64 (2,): two slots; each holds the number of finished chunks it records
    /_adgrad/slot_nan          int64 (2,): per slot, the non-finite points counted in those chunks
    /_adgrad/slots/<name>      int64 (2, *shape, STATE): per slot, the exact accumulator of a reduced result
    /_adgrad/exact/<name>      int64 (*shape, STATE): the final exact accumulator (written on completion)
    /_adgrad/input_digests     uint64 (chunks, inputs): per chunk, the checksum of each input's rows
                               (numeric/checksum.py), which --resume compares with the input file

A chunk is committed by flushing its rows, writing the state into the slot not holding the latest
commit, flushing, and only then writing that slot's chunk count (one 8-byte write) and flushing. A
process killed at any moment leaves the previous commit intact, and rows written after it are
simply written again, with the same bits, on resume. Chunks finish in order, so the finished chunks
are always the first `done` ones."""
from __future__ import annotations

import os

import h5py
import numpy as np

from ..errors import DataError, JobError
from .atomic import atomic_h5
from .direct import ALIGN, FILE_OPTIONS, DirectWriter
from .input import reason


def _early():
    """Storage allocated when the dataset is created, and never filled (every row gets written)."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    return {"dcpl": dcpl, "fill_time": "never"}


def _chunk_rows(rows, row_bytes, target=1 << 20):
    """Rows per HDF5 chunk: about `target` bytes and, where that costs at most half of it, a divisor
    of `rows` (the rows per adgrad chunk), so that every write covers whole HDF5 chunks; among those,
    preferably a whole number of ALIGN blocks, so that the rows can be written with O_DIRECT."""
    limit = max(1, min(rows, target // max(row_bytes, 1)))
    divisors = [d for d in range(limit, 0, -1) if rows % d == 0 and 2 * d >= limit]
    aligned = [d for d in divisors if d * row_bytes % ALIGN == 0]
    return (aligned or divisors or [limit])[0]


def staging_path(path):
    """Where an --overwrite run writes until it completes: beside `path`, hidden, so the previous
    complete file stays until the new one replaces it (and --resume finds an interrupted one)."""
    d, name = os.path.split(os.path.abspath(path))
    return os.path.join(d, f".{name}.overwrite")


class OutputFile:
    """An adgrad output file open for writing: per-point datasets, reduced sums, the commit record."""

    def __init__(self, path, file):
        self.path, self.file = path, file
        self.identity = _identity(file, path)
        reduced = _check_record(path, file)
        self.per_point = {n: ds for n, ds in file.items() if isinstance(ds, h5py.Dataset) and n not in reduced}
        self.direct = DirectWriter(path, self.per_point)
        if self.direct.fd is not None and _ident(os.fstat(self.direct.fd)) != self.identity:
            self.direct.close()
            raise self._replaced(path)
        self.digests = file["_adgrad"].get("input_digests")     # None in a file of an older adgrad
        commit = file["_adgrad/commit"][...]
        self._slot = int(np.argmax(commit))         # the slot holding the latest commit
        self.done = int(commit[self._slot])
        self.nan_points = int(file["_adgrad/slot_nan"][self._slot]) if self.done else 0
        # the exact sums of the committed chunks; the pipeline adds each new chunk before committing it
        self.sums = {n: _exact().ExactSum.from_state(file["_adgrad/slots"][n][self._slot]) if self.done
                     else _exact().ExactSum(file[n].shape) for n in reduced}

    @classmethod
    def create(cls, path, shapes: dict, reduced, rows: int, dtype, compression, chunk_rows, attrs: dict,
               inputs=()):
        """Lay out the whole file under a temporary name, then rename it to `path` and open it. The
        chunks of the run are `chunk_rows` rows each; `inputs` names the model's inputs."""
        comp = None if compression == "none" else compression
        with atomic_h5(path, **FILE_OPTIONS) as f:
            for k, v in attrs.items():
                f.attrs[k] = v
            f.attrs.update({"complete": False, "chunks_done": 0, "nan_points": 0, "finished": ""})
            meta = f.create_group("_adgrad")
            meta.create_dataset("commit", shape=(2,), dtype=np.int64, data=np.zeros(2, np.int64))
            meta.create_dataset("slot_nan", shape=(2,), dtype=np.int64, data=np.zeros(2, np.int64))
            exact, slots = meta.create_group("exact"), meta.create_group("slots")
            chunks = -(-rows // chunk_rows)
            digests = meta.create_dataset("input_digests", shape=(chunks, len(inputs)), dtype=np.uint64, **_early())
            digests.attrs["inputs"] = list(inputs)
            for name, shape in shapes.items():
                shape = tuple(shape)
                if name in reduced:      # summed over points: no point axis
                    f.create_dataset(name, shape=shape, dtype=dtype, **_early())
                    state = _exact().STATE
                    exact.create_dataset(name, shape=shape + (state,), dtype=np.int64, **_early())
                    slots.create_dataset(name, shape=(2,) + shape + (state,), dtype=np.int64, **_early())
                    continue
                per_chunk = _chunk_rows(min(rows or 1, chunk_rows), int(np.prod(shape)) * np.dtype(dtype).itemsize)
                f.create_dataset(name, shape=(rows,) + shape, dtype=dtype, chunks=(per_chunk,) + shape,
                                 maxshape=None if rows else (None,) + shape, compression=comp,
                                 **({} if comp else _early()))
        return cls.open(path)

    @classmethod
    def open(cls, path):
        try:   # no chunk cache: whole HDF5 chunks go straight from our buffers to the file, one copy less
            file = h5py.File(path, "r+", rdcc_nbytes=0)
        except OSError as exc:
            raise DataError(f"{path}: cannot open the output file for writing ({reason(exc)})") from None
        try:
            return cls(path, file)
        except BaseException:
            file.close()
            raise

    @property
    def attrs(self):
        return self.file.attrs

    def write(self, slot, start, stop):
        """Rows [start, stop) of the file from the first stop - start rows of the slot's outputs,
        which stay untouched until the commit of this slot (O_DIRECT writes may be in flight)."""
        n, slot.writes = stop - start, []
        for name, ds in self.per_point.items():
            if n and (f := self.direct.write(name, start, stop, slot.outputs[name])) is not None:
                slot.writes.append(f)
            elif n:
                ds.write_direct(slot.outputs[name], np.s_[0:n], np.s_[start:stop])

    def commit(self, done: int, nan_points: int, sums: dict, slot=None):
        """Record `done` finished chunks with their counts and exact sums, once the rows of `slot`
        (the last of them; default: every write so far) are on the device. Writes reach the file in
        order, so those of earlier chunks are there too."""
        self.direct.wait(None if slot is None else slot.writes)     # the rows first
        self.check_in_place()
        self.file.flush()
        slot = 1 - self._slot
        self.file["_adgrad/slot_nan"][slot] = nan_points
        for name, acc in sums.items():
            self.file["_adgrad/slots"][name][slot] = acc.state()
        self.file.flush()                           # then the state, into the slot not in use
        self.file["_adgrad/commit"][slot] = done    # then the commit itself: one 8-byte write
        self.file.flush()
        self._slot, self.done, self.nan_points = slot, done, nan_points

    def finish(self, attrs: dict):
        """Write the sums and exact states of the last commit, then the attributes, `complete` last."""
        for name, acc in self.sums.items():
            self.file[name][...] = acc.value()
            self.file["_adgrad/exact"][name][...] = acc.state()
        self.file.flush()
        self.stop(attrs)
        self.check_in_place()
        self.file.attrs["complete"] = True      # last: nothing half-written is ever marked done
        self.file.flush()

    def fits(self, shapes: dict, reduced, rows: int, chunks: int):
        """Refuse to resume a file whose datasets or commit record do not fit the run: `shapes` of every
        result (reduced ones without the point axis), `rows` per dataset, `chunks` in all. Only a
        damaged or hand-edited file fails this (the run's attributes matched already)."""
        have = {n: (ds.shape, n in self.sums) for n, ds in self.file.items() if isinstance(ds, h5py.Dataset)}
        want = {n: ((tuple(s) if n in reduced else (rows,) + tuple(s)), n in reduced) for n, s in shapes.items()}
        if have != want:
            raise DataError(f"{self.path}: cannot resume: the file's datasets {_layout(have)} are not the run's "
                            f"{_layout(want)} (a damaged or edited file); pass --overwrite to start again")
        if self.digests is not None and self.digests.shape[0] != chunks:
            raise DataError(f"{self.path}: cannot resume: the file records the checksums of {self.digests.shape[0]} "
                            f"chunks, but the run has {chunks} (a damaged or edited file); pass --overwrite to start "
                            f"again")
        if self.done > chunks:
            raise DataError(f"{self.path}: cannot resume: its commit record counts {self.done} chunks done, but the "
                            f"run has {chunks} (a damaged or edited file); pass --overwrite to start again")

    def check_in_place(self, path=None):
        """The file being written is still the one at `path` (default: its own path). Every adgrad writer
        holds the output's lock, so only another program can have removed or replaced it; the rows
        written since would have gone to a file nobody can read, so the run must not end well."""
        path = path or self.path
        try:
            now = _ident(os.stat(path))
        except FileNotFoundError:
            now = None
        if now != self.identity:
            raise self._replaced(path)

    @staticmethod
    def _replaced(path):
        return JobError(f"{path}: the output file was removed or replaced by another program while this run "
                        f"wrote it, so its rows are lost; nothing else may write an output while adgrad does: "
                        f"run again")

    def stop(self, attrs: dict):
        """Bring the root attributes up to date with the last commit (the file stays incomplete)."""
        self.file.attrs.update({**attrs, "chunks_done": self.done, "nan_points": self.nan_points})
        self.file.flush()

    def close(self):
        self.direct.close()
        self.file.close()


def _ident(st):
    return st.st_dev, st.st_ino


def _identity(file, path):
    """(device, inode) of the file h5py has open: from its descriptor where h5py has one (sec2, the
    default driver), else from the path just opened."""
    if file.driver == "sec2":
        return _ident(os.fstat(file.id.get_vfd_handle()))
    return _ident(os.stat(path))


def _layout(datasets):
    return "{" + ", ".join(f"{n} {s}" + (" summed" if r else "") for n, (s, r) in sorted(datasets.items())) + "}"


def _check_record(path, file):
    """The names of the reduced results, once /_adgrad is known to be sound (record_problem)."""
    problem = record_problem(file)
    if problem:
        raise DataError(f"{path}: not an adgrad output file that can be resumed ({problem}); pass --overwrite to "
                        f"start again")
    return list(file["_adgrad/exact"])


def record_problem(file):
    """What is wrong with an output file's /_adgrad (the commit record and the exact sums' slots), or
    None: checked before it is read, so that reading cannot fail half-way (an IndexError on a commit
    count past the end, say), and so that `adgrad info` does not report a damaged count."""
    def dataset(name, shape):
        ds = file.get(name)
        if not isinstance(ds, h5py.Dataset):
            return f"no /{name}"
        if ds.shape != shape or ds.dtype.kind not in "iu":
            return f"/{name} is {ds.dtype} {ds.shape}, expected integers of shape {shape}"
        return None
    problem = dataset("_adgrad/commit", (2,)) or dataset("_adgrad/slot_nan", (2,))
    if problem:
        return problem
    if file["_adgrad/commit"][...].min() < 0 or file["_adgrad/slot_nan"][...].min() < 0:
        return "/_adgrad/commit or /_adgrad/slot_nan holds a negative count"
    digests = file.get("_adgrad/input_digests")
    if digests is not None and (not isinstance(digests, h5py.Dataset) or digests.ndim != 2
                                or digests.dtype != np.uint64):
        return "/_adgrad/input_digests is not a uint64 (chunks, inputs) dataset"
    if digests is not None and int(file["_adgrad/commit"][...].max()) > digests.shape[0]:
        return (f"/_adgrad/commit counts {int(file['_adgrad/commit'][...].max())} chunks done, but the file has "
                f"{digests.shape[0]}")
    for group in ("_adgrad/exact", "_adgrad/slots"):
        if not isinstance(file.get(group), h5py.Group):
            return f"no group /{group}"
    for name in file["_adgrad/exact"]:
        ds = file.get(name)
        if not isinstance(ds, h5py.Dataset):
            return f"/_adgrad/exact/{name} sums a dataset /{name} that the file does not have"
        state = _exact().STATE
        problem = dataset(f"_adgrad/exact/{name}", ds.shape + (state,)) or \
            dataset(f"_adgrad/slots/{name}", (2,) + ds.shape + (state,))
        if problem:
            return problem
    return None


def _exact():
    """numeric/exactsum, which imports numba: only a run with summed results needs it, so a run of an
    exported library without them starts without numba (adgrad run --native)."""
    from ..numeric import exactsum
    return exactsum
