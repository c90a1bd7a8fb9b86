"""A checksum of input rows, so that `adgrad run --resume` can tell that the rows its finished chunks
were computed from are still the rows of the input file.

digest(words, first) is the sum (mod 2^64) over i of splitmix64(words[i] + (first + i) * GOLDEN): every
64-bit word is mixed with its position, so a changed word or two swapped rows change the sum except
with probability about 2^-64, and the sum of a chunk read in several pieces (mapped from the file
between HDF5's index nodes) is the sum of the pieces' digests. It guards against an input changed by
mistake, not against one forged to collide (it is no cryptographic hash). It runs at memory speed
on one thread (the loop vectorizes; 29 GB/s measured on 80 MB of rows).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import cache  # noqa: F401  (before the cache=True functions below: they get adgrad's cache)

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)


@njit(nogil=True, cache=True)
def _digest(words, first):
    h = np.uint64(0)
    for i in range(words.size):
        m = words[i] + (np.uint64(first) + np.uint64(i)) * GOLDEN
        m = (m ^ (m >> np.uint64(30))) * M1
        m = (m ^ (m >> np.uint64(27))) * M2
        h += m ^ (m >> np.uint64(31))
    return h


def digest(rows, first_row=0):
    """The checksum of float64 C-contiguous `rows` (n, ...), the first of them row `first_row` of the
    chunk; a python int in [0, 2^64). Pieces' digests add (mod 2^64) to the digest of their union."""
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    words = rows.reshape(-1).view(np.uint64)
    per_row = rows[0].size if rows.ndim > 1 and len(rows) else 1
    return int(_digest(words, first_row * per_row))
