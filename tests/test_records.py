"""Rows of an event frame as facts modules read them (diag.facts.access.records): the very
values pandas' ``to_dict("records")`` gives, of every dtype event tables hold, and boxed
once per frame."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from diag.api import parse_events
from diag.facts.access import box_rows, box_value, records

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"


def _same(a: Any, b: Any) -> bool:
    """Equal value of the same type (NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    return bool(a is b or a == b or (a != a and b != b))


def _assert_same_rows(frame: pd.DataFrame) -> None:
    want = frame.to_dict("records")
    got = box_rows(frame)
    assert len(got) == len(want)
    for at, (w, g) in enumerate(zip(want, got, strict=True)):
        assert list(g) == list(w)
        bad = {k: (w[k], g[k]) for k in w if not _same(w[k], g[k])}
        assert not bad, bad
        one = {k: box_value(frame[k], at) for k in w}  # a single value read alike
        bad = {k: (w[k], one[k]) for k in w if not _same(w[k], one[k])}
        assert not bad, bad
    lazy = records(frame)  # the shared rows (a column boxed on its first read)
    assert len(lazy) == len(want)
    for w, row in zip(want, lazy, strict=True):
        assert list(row) == list(w) and len(row) == len(w)
        bad = {k: (w[k], row[k]) for k in w if not _same(w[k], row[k])}
        assert not bad, bad
        assert row.get("no such column") is None and "no such column" not in row


def test_every_dtype_with_missing_values() -> None:
    frame = pd.DataFrame(
        {
            "source": pd.Categorical(["a.log", None, "b.log"]),
            "line": pd.array([1, None, 3], dtype="Int64"),
            "ts": [1.5, np.nan, 2.0],
            "flag": pd.array([True, None, False], dtype="boolean"),
            "text": ["s", None, np.float64(2.5)],  # a numpy scalar in an object column
            "_order": np.array([1, 2, 3], dtype="int64"),
            "plain": [True, False, True],
            "sizes": pd.Categorical([1, 2, None]),
            "when": pd.to_datetime(["2025-01-01", None, "2025-01-02"]),
        }
    )
    _assert_same_rows(frame)
    assert type(box_rows(frame)[2]["text"]) is float  # boxed as pandas boxes it


@pytest.mark.parametrize(
    "incident",
    [
        "sglang-2026-every-runner",
        "sglang-2026-dp-rank-eager",
        "issue24-vllm-squeezed-small-batches",
    ],
)
def test_real_format_event_frames(incident: str) -> None:
    tables = parse_events([str(INCIDENTS / incident)], jobs=1)
    read = [f for f in tables._frames.values() if not f.empty]
    assert len(read) >= 5
    for frame in read:
        _assert_same_rows(frame)


def test_boxed_once_per_frame() -> None:
    frame = pd.DataFrame({"line": pd.array([1, 2], dtype="Int64"), "phase": ["decode", "verify"]})
    first = records(frame)
    assert records(frame) is first  # the same frame: its rows held
    copy = frame.copy()
    assert records(copy) is not first and records(copy) == first  # another frame: its own
    assert [dict(r) for r in first] == [
        {"line": 1, "phase": "decode"},
        {"line": 2, "phase": "verify"},
    ]
    assert records(frame.iloc[:0]) == ()
