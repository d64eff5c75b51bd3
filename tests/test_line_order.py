"""Event frames come out of ingest in line order within each source (diag.ingest.in_line_order):
run splitting then slices them instead of sorting a copy of every column."""

from __future__ import annotations

import numpy as np
import pandas as pd

from diag.ingest import in_line_order


def _frame(sources: list[str], lines: list[int]) -> pd.DataFrame:
    n = len(lines)
    return pd.DataFrame(
        {
            "source": pd.Categorical(sources),
            "line": pd.array(lines, dtype="Int64"),
            "ts": np.arange(n, dtype=float),
            "num_reqs": pd.array([i if i % 3 else None for i in range(n)], dtype="Int64"),
            "mode": pd.Categorical(["FULL", "NONE"] * (n // 2) + ["FULL"] * (n % 2)),
        }
    )


def test_block_rows_emitted_late_go_back_to_their_lines() -> None:
    # a table opened at line 10, its rows emitted after the step lines 12 and 14 of another process
    src = ["b.log"] * 3 + ["a.log"] * 5
    lines = [1, 2, 3, 12, 14, 10, 11, 13]
    before = _frame(src, lines)
    expect = before.copy()
    got = in_line_order(before)
    assert got["line"].tolist() == [1, 2, 3, 10, 11, 12, 13, 14]
    assert got["source"].tolist() == src  # b.log first: sources keep their order of appearance
    assert got.dtypes.to_dict() == expect.dtypes.to_dict()
    # every row moved whole: the same (line, ts, num_reqs, mode) tuples
    rows = sorted(expect.astype(object).itertuples(index=False, name=None), key=str)
    assert sorted(got.astype(object).itertuples(index=False, name=None), key=str) == rows
    assert isinstance(got.index, pd.RangeIndex)


def test_a_frame_in_order_is_returned_as_it_is() -> None:
    frame = _frame(["a.log"] * 4 + ["b.log"] * 2, [5, 6, 9, 40, 1, 2])
    assert in_line_order(frame) is frame
