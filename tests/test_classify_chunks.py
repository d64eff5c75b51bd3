"""The batch classification built a chunk of step rows at a time (issue 37: no whole-column
temporaries on a 700 MB log) is the one built in one piece: every column, its values and
its dtype, whatever the chunk boundaries, mixed rows and sizes too large for float32; and
the run's figures summed from it a chunk at a time are those summed in one piece."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.events import EventTables
from diag.facts import classify as cls
from diag.facts.agreement import agreement
from diag.facts.steps import StepTiming, from_tables

counts = st.one_of(st.none(), st.integers(-1, 600))
WINDOWS = [
    cls.Window("enabled", (1, 2, 4, 8, 16, 32, 64, 128, 256)),
    cls.Window("enabled", (1, 8, 16), padding=False),
    cls.Window("disabled", None),
    cls.Window("unknown", None),
]


def _steps(rows: list[tuple]) -> pd.DataFrame:
    n = len(rows)
    return pd.DataFrame(
        {
            "source": pd.Series(["a.log"] * n, dtype="category"),
            "line": pd.array(range(1, n + 1), dtype="Int64"),
            "ts": np.arange(n, dtype=float),
            "rank": pd.Series([f"TP{i % 2}" for i in range(n)], dtype="category"),
            "mode": pd.Series([r[3] for r in rows], dtype="category"),
            "num_reqs": pd.array([r[0] for r in rows], dtype="Int64"),
            "num_tokens": pd.array([r[1] for r in rows], dtype="Int64"),
            "padded_tokens": pd.array([r[2] for r in rows], dtype="Int64"),
            "uniform": pd.array([r[4] for r in rows], dtype="boolean"),
            "count": pd.array([r[5] for r in rows], dtype="Int64"),
        }
    )


def _both(frame: pd.DataFrame, window: cls.Window, monkeypatch: pytest.MonkeyPatch) -> None:
    def classified(chunk: int) -> pd.DataFrame:
        monkeypatch.setattr(cls, "_CHUNK", chunk)
        return cls.classify_batches(
            from_tables(EventTables({"graph_step": frame}), StepTiming()), window
        )

    whole, chunked = classified(1 << 30), classified(3)
    pd.testing.assert_frame_equal(chunked, whole)
    assert list(chunked.columns) == cls.COLUMNS

    def figures(batches: pd.DataFrame, chunk: int) -> tuple:
        monkeypatch.setattr(cls, "_CHUNK", chunk)
        batches = batches.copy()  # (a frame of its own: the readers keep a small frame's figures)
        return (
            cls.batch_counts(batches),
            cls.padding_waste(batches),
            cls.batch_shape(batches),
            cls.rank_summaries(batches),
            agreement(batches, 8),
            agreement(batches, None),
        )

    assert figures(whole, 3) == figures(whole, 1 << 30)  # the summaries, summed a chunk at a time


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            counts,
            counts,
            counts,
            st.sampled_from(["FULL", "NONE", "PIECEWISE", ""]),
            st.sampled_from([True, False, None]),
            st.sampled_from([None, 1, 1, 2]),
        ),
        min_size=1,
        max_size=25,
    ),
    st.sampled_from(range(len(WINDOWS))),
)
def test_chunks_classify_as_one_piece(rows: list[tuple], w: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        _both(_steps(rows), WINDOWS[w], mp)


def test_a_size_float32_cannot_hold_makes_the_column_float64(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    big = (1 << 24) + 9  # (a logged padded size float32 rounds, and so does its padding)
    rows = [(4, 4, 4, "FULL", True, 1)] * 7 + [(4, 4, big, "FULL", True, 1)]
    frame = _steps(rows)
    _both(frame, WINDOWS[0], monkeypatch)
    got = cls.classify_batches(
        from_tables(EventTables({"graph_step": frame}), StepTiming()), WINDOWS[0]
    )
    assert got["bucket"].dtype == np.float64 and got["bucket"].iloc[-1] == big
    assert got["padded"].dtype == np.float64 and got["padded"].iloc[-1] == big - 4
    small = cls.classify_batches(
        from_tables(EventTables({"graph_step": _steps(rows[:7])}), StepTiming()), WINDOWS[0]
    )
    assert small["bucket"].dtype == np.float32 and small["padded"].dtype == np.float32
