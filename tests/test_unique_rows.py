"""The fleet bins' row grouping (diag.advise.fleet.unique_rows) equals numpy's row-wise unique."""

from __future__ import annotations

import numpy as np
import pytest

from diag.advise.fleet import unique_rows


@pytest.mark.parametrize("seed", range(5))
def test_same_rows_order_and_inverse_as_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 2000
    cols = [
        rng.integers(-1, 300, n),  # requests, -1 not shown
        rng.choice([-1, 8, 16, 512, 8192], n),  # tokens
        rng.integers(-1, 2, n),  # graph flag
        rng.integers(0, 2, n),  # mixed
        rng.integers(0, 3, n),  # usage class
    ]
    cols = [c.astype(np.int64) for c in cols]
    want_u, want_inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    got_u, got_inv = unique_rows(cols)
    assert np.array_equal(got_u, want_u)
    assert np.array_equal(got_inv, want_inv.reshape(-1))


def test_ranges_too_wide_for_one_key_fall_back() -> None:
    big = np.array([0, 2**40, 5, 2**40], dtype=np.int64)
    cols = [big, big[::-1].copy(), np.array([1, 0, 1, 0], dtype=np.int64)]
    want_u, want_inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    got_u, got_inv = unique_rows(cols)
    assert np.array_equal(got_u, want_u) and np.array_equal(got_inv, want_inv.reshape(-1))
