"""ExactSum: the correctly rounded exact sum, whatever the order, split or merge of the rows."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adgrad.engine.numeric.exactsum import STATE, ExactSum

finite = st.floats(allow_nan=False, allow_infinity=False)


def exact(values):
    """The correctly rounded sum by rational arithmetic (the oracle; fsum can overflow midway)."""
    total = sum(map(Fraction, values), Fraction(0))
    try:
        return float(total)
    except OverflowError:
        return math.inf if total > 0 else -math.inf


def summed(values, splits=()):
    """ExactSum of a 1-D list, added in pieces cut at `splits`, the pieces merged."""
    x = np.asarray(values, dtype=np.float64)
    acc = ExactSum(())
    for piece in np.split(x, sorted(splits)):
        part = ExactSum(())
        part.add(piece)
        acc.merge(part)
    return float(acc.value())


def same_bits(a, b):
    return np.float64(a).view(np.int64) == np.float64(b).view(np.int64) or (math.isnan(a) and math.isnan(b))


@settings(max_examples=300, deadline=None)
@given(st.lists(finite, max_size=40))
def test_equals_correctly_rounded_sum(values):
    assert same_bits(summed(values), exact(values))


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=1, max_size=30), st.randoms(use_true_random=False), st.data())
def test_order_and_split_do_not_change_bits(values, rnd, data):
    shuffled = list(values)
    rnd.shuffle(shuffled)
    cuts = data.draw(st.lists(st.integers(0, len(values)), max_size=4))
    assert same_bits(summed(shuffled, cuts), summed(values))


@pytest.mark.parametrize("values", [
    [1e308, 1e308, -1e308],                     # overflows midway, not at the end
    [1.7976931348623157e308, 1.7976931348623157e308],
    [-1.7976931348623157e308, -1e300],
    [5e-324, 5e-324, -5e-324],                  # subnormals
    [2.2250738585072014e-308, -5e-324],         # smallest normal minus the smallest subnormal
    [1.0, 1e-16, 1e-16],                        # cancellation and double rounding
    [1.0, 2.0**-53, 2.0**-106],                 # a tie broken by a tiny addend
    [2.0**53, 1.0, -(2.0**53)],
    [0.0, -0.0],
    [],
])
def test_hard_cases(values):
    assert same_bits(summed(values), exact(values))


def test_mixed_magnitudes_many_rows():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3000, 4)) * 10.0 ** rng.integers(-320, 300, (3000, 4))
    acc = ExactSum((2, 2))
    acc.add(x.reshape(3000, 2, 2))
    got = acc.value().reshape(4)
    for j in range(4):
        assert same_bits(got[j], exact(x[:, j]))
        assert same_bits(got[j], math.fsum(x[:, j]))


@pytest.mark.parametrize("values, expected", [
    ([1.0, math.inf], math.inf),
    ([-math.inf, 3.0, -math.inf], -math.inf),
    ([math.inf, -math.inf], math.nan),
    ([1.0, math.nan], math.nan),
    ([math.nan, math.inf], math.nan),
])
def test_infinities_and_nan(values, expected):
    assert same_bits(summed(values, [1]), expected)


def test_state_round_trip_and_merge():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((50, 3)) * 1e200, rng.standard_normal((70, 3))
    whole = ExactSum((3,))
    whole.add(np.concatenate([a, b]))
    left, right = ExactSum((3,)), ExactSum((3,))
    left.add(a)
    right.add(b)
    left = ExactSum.from_state(left.state())
    left.merge(ExactSum.from_state(right.state()))
    assert left.state().dtype == np.int64 and left.state().shape == (3, STATE)
    np.testing.assert_array_equal(left.state(), whole.state())    # canonical: same sum, same state
    np.testing.assert_array_equal(left.value(), whole.value())


def test_shape_checks():
    acc = ExactSum((2,))
    with pytest.raises(ValueError, match="rows of shape"):
        acc.add(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="merge"):
        acc.merge(ExactSum((3,)))
    with pytest.raises(ValueError, match="state"):
        ExactSum.from_state(np.zeros(5, dtype=np.int64))
