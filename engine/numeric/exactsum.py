"""Exact, order-independent sums of float64 rows: one fixed-point superaccumulator per element.

Every finite double is an integer multiple of 2**-1074, so a sum of doubles is an integer number of
such units. Each element keeps that integer in LIMBS signed 64-bit limbs of 32 bits each (limb j
weighs 2**(32*j - 1074)), plus counts of NaN, +inf and -inf. Adding a double adds at most three
32-bit pieces, so a limb can take 2**30 additions before its 31 bits of headroom run out; `add`
propagates carries well before that. The sum is exact, so its correctly rounded value is the same
bits whatever the order of the rows, the chunking, the thread count, the shard split or a resume.

The state (limbs in canonical form: every limb in [0, 2**32) but the top one, which carries the
sign; then the three counts) is an int64 array of shape (*shape, STATE) that is stored in HDF5 and
merged by adding."""
from __future__ import annotations

import numba
import numpy as np

from . import cache  # noqa: F401  (before the cache=True functions below: they get adgrad's cache)

LIMBS = 70              # 2240 bits: 2**-1074 .. 2**1024 and 2**100 units of headroom above
NAN, POS_INF, NEG_INF = LIMBS, LIMBS + 1, LIMBS + 2
STATE = LIMBS + 3
_NORMALIZE_EVERY = 1 << 28      # rows between carry propagations (limb growth < 2**33 per row)


@numba.njit(cache=True, nogil=True)
def _normalize(acc):
    """Propagate carries so limbs 0..LIMBS-2 lie in [0, 2**32); the top limb keeps the sign."""
    for e in range(acc.shape[0]):
        for j in range(LIMBS - 1):
            carry = acc[e, j] >> 32         # floor division by 2**32, also for negative limbs
            acc[e, j] -= carry << 32
            acc[e, j + 1] += carry


@numba.njit(cache=True, nogil=True)
def _add_rows(acc, bits):
    """acc (size, STATE) += every row of bits (n, size), the float64 rows viewed as int64."""
    n, size = bits.shape
    for i in range(n):
        if i % _NORMALIZE_EVERY == _NORMALIZE_EVERY - 1:
            _normalize(acc)
        for e in range(size):
            b = bits[i, e]
            field = (b >> 52) & 0x7FF
            frac = b & 0xFFFFFFFFFFFFF
            if field == 0x7FF:                  # inf or NaN: counted, not summed
                if frac != 0:
                    acc[e, NAN] += 1
                elif b < 0:
                    acc[e, NEG_INF] += 1
                else:
                    acc[e, POS_INF] += 1
                continue
            if field == 0:                      # zero or subnormal: frac * 2**-1074
                mant, shift = frac, 0
                if mant == 0:
                    continue
            else:                               # (2**52 + frac) * 2**(field - 1075)
                mant, shift = frac | (1 << 52), field - 1
            j, r = shift >> 5, shift & 31
            lo = (mant & 0xFFFFFFFF) << r       # < 2**63
            hi = (mant >> 32) << r              # < 2**52
            p0 = lo & 0xFFFFFFFF
            p1 = (lo >> 32) + (hi & 0xFFFFFFFF)
            p2 = hi >> 32
            if b < 0:
                acc[e, j] -= p0
                acc[e, j + 1] -= p1
                acc[e, j + 2] -= p2
            else:
                acc[e, j] += p0
                acc[e, j + 1] += p1
                acc[e, j + 2] += p2
    _normalize(acc)


class ExactSum:
    """The exact sum of float64 arrays of one shape; `value()` rounds it once, correctly."""

    def __init__(self, shape: tuple):
        self.shape = tuple(int(s) for s in shape)
        self._acc = np.zeros((int(np.prod(self.shape, dtype=np.int64)), STATE), dtype=np.int64)

    def add(self, rows: np.ndarray) -> None:
        """Add every row of `rows` (n, *shape), exactly."""
        rows = np.ascontiguousarray(rows, dtype=np.float64)
        if rows.shape[1:] != self.shape:
            raise ValueError(f"ExactSum of shape {self.shape} cannot add rows of shape {rows.shape[1:]}")
        _add_rows(self._acc, rows.reshape(rows.shape[0], self._acc.shape[0]).view(np.int64))

    def merge(self, other: "ExactSum") -> None:
        """Add another accumulator of the same shape, exactly."""
        if other.shape != self.shape:
            raise ValueError(f"cannot merge an ExactSum of shape {other.shape} into one of shape {self.shape}")
        self._acc += other._acc         # canonical limbs < 2**32 each: no overflow
        _normalize(self._acc)

    def value(self) -> np.ndarray:
        """The correctly rounded sum (round half to even); NaN if any NaN or both infinities."""
        out = np.empty(self._acc.shape[0])
        for e, row in enumerate(self._acc):
            nan, pos, neg = (int(c) for c in row[LIMBS:])
            if nan or (pos and neg):
                out[e] = np.nan
            elif pos or neg:
                out[e] = np.inf if pos else -np.inf
            else:
                out[e] = _round(sum(int(limb) << (32 * j) for j, limb in enumerate(row[:LIMBS])))
        return out.reshape(self.shape)

    def state(self) -> np.ndarray:
        """int64 (*shape, STATE): limbs in canonical form, then the NaN, +inf and -inf counts."""
        return self._acc.reshape(self.shape + (STATE,)).copy()

    @classmethod
    def from_state(cls, state: np.ndarray) -> "ExactSum":
        state = np.asarray(state)
        if state.dtype != np.int64 or state.ndim < 1 or state.shape[-1] != STATE:
            raise ValueError(f"an ExactSum state is int64 (*shape, {STATE}), got {state.dtype} {state.shape}")
        acc = cls(state.shape[:-1])
        acc._acc[...] = state.reshape(acc._acc.shape)
        _normalize(acc._acc)
        return acc


def _round(units: int) -> float:
    """units * 2**-1074 rounded to the nearest double (CPython's int / int is correctly rounded)."""
    try:
        return units / (1 << 1074)
    except OverflowError:
        return float("inf") if units > 0 else float("-inf")
