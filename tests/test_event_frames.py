"""Bulk rows (Arrow columns, as the hot path hands them over) interleaved with per-line rows
give the frame the per-line path gives for the same rows: values, order and dtypes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
from pandas.testing import assert_frame_equal

from diag.events import EventSink

ROWS = [  # (line, ts, rank, request_id, action, prompt_tokens, max_new_tokens)
    (1, 10.0, "TP0", "r-b", "received", None, None),
    (2, 11.0, "", "r-a", "received", 12, None),
    (3, None, "TP1", None, "finished", None, 7),
    (4, 13.5, "TP0", "r-b", "finished", None, 3),
    (5, 14.0, "TP0", "r-c", "aborted", None, None),
    (6, 15.0, "TP1", "r-a", "finished", None, 9),
    (7, 16.0, "", "é-d", "received", 5, None),
]
BULK = {0, 3, 4, 6}  # rows read in bulk, the others per line


def _emit(sink: EventSink, row: tuple) -> None:
    line, ts, rank, rid, action, pt, mt = row
    sink.emit(
        "request", "a.log", line, ts, rank, engine="sglang", request_id=rid, action=action,
        prompt_tokens=pt, max_new_tokens=mt,
    )  # fmt: skip


def _bulk(sink: EventSink, rows: list[tuple], before: list[int]) -> None:
    sink.add_bulk("request", _columns(rows), np.array(before, np.int64))


def _columns(rows: list[tuple]) -> dict:
    n = len(rows)
    col = list(zip(*rows, strict=True))

    def const(v: str) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([v]))

    return {
        "source": const("a.log"),
        "line": pa.array(col[0], pa.int64()),
        "ts": pa.array(col[1], pa.float64()),
        "rank": pa.array(col[2], pa.string()).dictionary_encode(),
        "instance": const(""),
        "engine": const("sglang"),
        "request_id": pa.array(col[3], pa.string()),
        "action": pa.array(col[4], pa.string()).dictionary_encode(),
        "prompt_tokens": pa.array(col[5], pa.int64()),
        "max_new_tokens": pa.array(col[6], pa.int64()),
    }


def test_bulk_and_line_rows_interleave_like_the_per_line_path() -> None:
    oracle = EventSink()
    for row in ROWS:
        _emit(oracle, row)
    mixed = EventSink()
    bulk_rows, before = [], []
    for i, row in enumerate(ROWS):
        if i in BULK:
            bulk_rows.append(row)
            before.append(mixed.lines_emitted("request"))
        else:
            _emit(mixed, row)
    _bulk(mixed, bulk_rows[:2], before[:2])  # two blocks
    _bulk(mixed, bulk_rows[2:], before[2:])
    want, got = oracle.pop_frame("request"), mixed.pop_frame("request")
    assert_frame_equal(got, want)
    assert got["line"].tolist() == [r[0] for r in ROWS]
    assert str(got["request_id"].dtype) == "str"
    assert got["request_id"].isna().tolist() == [r[3] is None for r in ROWS]
    assert isinstance(got["action"].dtype, pd.CategoricalDtype)
    assert list(got["action"].cat.categories) == ["aborted", "finished", "received"]
    assert got["max_new_tokens"].isna().sum() == 4


def test_a_bulk_column_with_no_value_is_missing_everywhere() -> None:
    sink = EventSink()
    rows = [r[:5] + (None, None) for r in ROWS[:3]]
    _bulk(sink, rows, [0, 0, 0])
    frame = sink.pop_frame("request")
    assert str(frame["prompt_tokens"].dtype) == "Int64"
    assert frame["prompt_tokens"].isna().all()
    assert pd.isna(frame["ts"].iloc[2])


def test_compact_columns_handed_over_directly_give_the_same_frame() -> None:
    from diag.event_frames import BulkCodes, BulkNumbers

    rows = ROWS[:4]
    arrow = EventSink()
    _bulk(arrow, rows, [0, 0, 0, 0])
    cols = _columns(rows)
    cols["line"] = BulkNumbers(np.array([r[0] for r in rows], np.int64), None)
    cols["rank"] = BulkCodes(("TP1", "TP0", ""), np.array([1, 2, 0, 1], np.int32))
    cols["max_new_tokens"] = BulkNumbers(
        np.array([0, 0, 7, 3], np.int64), np.array([True, True, False, False])
    )
    direct = EventSink()
    direct.add_bulk("request", cols, np.zeros(4, np.int64))
    assert_frame_equal(direct.pop_frame("request"), arrow.pop_frame("request"))
