"""``distinct`` (sorting) gives what ``np.unique`` gives (hashing, in numpy 2.3 and later)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from topology.arrays import distinct

SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=40)


@given(
    hnp.arrays(
        st.sampled_from([np.int64, np.int32, np.uint32]),
        SHAPES,
        elements=st.integers(0, 2**31 - 1).map(lambda x: x % 97 if x % 3 else x),  # repeats
    )
)
def test_integers_as_np_unique(values: np.ndarray) -> None:
    got = distinct(values)
    want = np.unique(values)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)


@given(hnp.arrays(np.float64, SHAPES, elements=st.floats(-1e6, 1e6, allow_nan=False)))
def test_floats_without_nan_as_np_unique(values: np.ndarray) -> None:
    assert np.array_equal(distinct(values), np.unique(values))


def test_the_input_is_left_as_it_was() -> None:
    values = np.array([3, 1, 3, 2])
    assert distinct(values).tolist() == [1, 2, 3]
    assert values.tolist() == [3, 1, 3, 2]
