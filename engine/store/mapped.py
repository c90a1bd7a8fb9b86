"""Input rows mapped from the file instead of copied out of it: the kernel reads the page cache itself.

h5py copies every input byte from the page cache into our buffer. For EAM's 800 bytes a point that
copy costs the I/O thread about a fifth of the kernel's own CPU time, on the cores the kernel
needs. Where a dataset's rows lie in the file as plain native float64 (contiguous, or chunked by
whole rows, unfiltered), the rows of a chunk are mapped read-only instead, and MADV_POPULATE_READ
brings the pages in (from the page cache, or from the disk if they are not cached) in the calling
I/O thread, so the kernel in the worker never waits on a page fault. A read error there raises
OSError, and h5py reads those rows instead (and reports the error if it persists); only a page
that the system evicts and then fails to read again would end the process with SIGBUS.

HDF5 puts index nodes between data chunks now and then, so a run of rows may lie in several
places: each place becomes a piece of its own, and the kernel runs once per piece. Datasets that
cannot be mapped, or rows that lie in too many places, are read with h5py as before.

A mapping lives as long as the arrays that view it (numpy holds a reference to the mmap). The input
file must not be truncated during a run (as with any reader, --resume refuses a changed input)."""
from __future__ import annotations

import bisect
import mmap
import os
import sys

import h5py
import numpy as np

from .direct import chunk_offsets

MAX_PIECES = 64             # per chunk of rows; beyond that the kernel calls cost more than a copy
MADV_POPULATE_READ = 22     # Linux 5.14+: fault the pages in, and fail (unlike MAP_POPULATE) if it cannot
NATIVE_F8 = np.dtype(np.float64)


def _runs(ds):
    """(first rows, file offsets) of the runs of rows lying back to back in the file, or None."""
    dcpl = ds.id.get_create_plist()
    if ds.dtype != NATIVE_F8 or dcpl.get_nfilters() or dcpl.get_external_count() or ds.shape[0] == 0:
        return None
    row_bytes = NATIVE_F8.itemsize * int(np.prod(ds.shape[1:]))
    layout = dcpl.get_layout()
    if layout == h5py.h5d.CONTIGUOUS:
        offset = ds.id.get_offset()
        pieces = [] if offset is None else [(0, offset)]
    elif layout == h5py.h5d.CHUNKED and ds.chunks[1:] == ds.shape[1:]:
        offsets = chunk_offsets(ds)
        if offsets is None:
            return None
        step = ds.chunks[0]
        pieces = [(i * step, off) for i, off in enumerate(offsets)
                  if i == 0 or off != offsets[i - 1] + step * row_bytes]
    else:
        return None
    if not pieces or any(off % NATIVE_F8.itemsize for _, off in pieces):
        return None
    return [row for row, _ in pieces], [off for _, off in pieces], row_bytes


class MappedRows:
    """Rows of the datasets that can be mapped; `pieces` maps a range of rows, or says it cannot."""

    def __init__(self, path, datasets: dict):
        self.datasets, self.runs, self.fd = datasets, {}, None
        if sys.byteorder != "little" or not sys.platform.startswith("linux"):
            return
        runs = {name: _runs(ds) for name, ds in datasets.items()}
        if any(r is None or datasets[name].file.userblock_size for name, r in runs.items()):
            return                  # all or nothing: one h5py read serves the chunk either way
        self.runs = runs
        try:
            self.fd = os.open(path, os.O_RDONLY)
            for name, ds in datasets.items():     # HDF5 addresses are file offsets: check, do not assume
                rows = ds.shape[0]
                for a in (0, rows - 1):
                    [(_, _, offset)] = self._parts(name, a, a + 1)
                    if not np.array_equal(self._map(name, a, a + 1, offset), ds[a:a + 1], equal_nan=True):
                        raise OSError("mapped rows differ from h5py's")
        except OSError:             # no mmap on this file system, a kernel before 5.14, or not what we assume
            self.close()

    @property
    def usable(self):
        return bool(self.runs)

    def _parts(self, name, start, stop):
        """[(first row, end row, file offset)] of rows [start, stop) of one dataset, one per place."""
        firsts, offsets, row_bytes = self.runs[name]
        out = []
        k = bisect.bisect_right(firsts, start) - 1
        while start < stop:
            end = min(stop, firsts[k + 1]) if k + 1 < len(firsts) else stop
            out.append((start, end, offsets[k] + (start - firsts[k]) * row_bytes))
            start, k = end, k + 1
        return out

    def _map(self, name, start, end, offset):
        """Rows [start, end) of one dataset, lying from `offset` on in the file, as a read-only array."""
        row_bytes = self.runs[name][2]
        base = offset - offset % mmap.ALLOCATIONGRANULARITY
        m = mmap.mmap(self.fd, offset - base + (end - start) * row_bytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ,
                      offset=base)
        m.madvise(MADV_POPULATE_READ)       # pages in now, in this thread; an I/O error raises here
        rows = np.frombuffer(m, NATIVE_F8, (end - start) * row_bytes // NATIVE_F8.itemsize, offset - base)
        return rows.reshape((end - start,) + self.datasets[name].shape[1:])

    def pieces(self, start, stop):
        """[(lo, hi, {name: rows})]: rows [start, stop) of every dataset mapped from the file, cut
        where any of them changes place; lo and hi count from start. None if too scattered (or the
        mapping fails: h5py reads those rows instead)."""
        parts = {name: self._parts(name, start, stop) for name in self.runs}
        cuts = sorted({a for p in parts.values() for a, _, _ in p} | {stop})
        if len(cuts) - 1 > MAX_PIECES:
            return None
        try:
            maps = {name: [(a, self._map(name, a, b, off)) for a, b, off in p] for name, p in parts.items()}
        except OSError:
            return None
        out = []
        for lo, hi in zip(cuts, cuts[1:]):      # each cut lies inside one mapped part of every dataset
            views = {}
            for name, mapped in maps.items():
                while len(mapped) > 1 and mapped[1][0] <= lo:
                    mapped.pop(0)
                first, rows = mapped[0]
                views[name] = rows[lo - first: hi - first]
            out.append((lo - start, hi - start, views))
        return out

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
        self.runs, self.fd = {}, None
