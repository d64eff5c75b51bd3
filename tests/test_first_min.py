"""The first row at a column's minimum found a chunk at a time (issue 37: numpy's argmin
copies a whole read-only event column first) is argmin's row, ties and chunk edges included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diag.facts.access as access


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=40), st.integers(1, 9), st.booleans())
def test_first_min_is_argmin(values: list[int], rows: int, read_only: bool) -> None:
    a = np.array(values, dtype=np.int64)
    a.flags.writeable = not read_only
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(access, "_ROWS", rows)
        assert access.first_min(a) == int(a.argmin())


def test_first_min_of_nothing_raises_as_argmin() -> None:
    with pytest.raises(ValueError):
        access.first_min(np.zeros(0, dtype=np.int64))
