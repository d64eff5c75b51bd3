"""No input crashes the command: a number past its field's range is a dropped field with an
input note, a timestamp outside the years a log can hold is no timestamp, on both the bulk and
the per-line path, and every other line of the input is still read."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from diag.api import analyze
from diag.events import FIELD_LIMITS, INT_DIGITS, TEXT_DIGITS, EventSink
from diag.ingest import ingest
from diag.ingest.clock import LOG_YEARS
from tests.test_hotpath_oracle import assert_same_tables, both

SG = (
    "[2025-01-01 10:00:0{s}] Decode batch, #running-req: {bs}, #token: 5, token usage: 0.01, "
    "cuda graph: True, gen throughput (token/s): 1.0, #queue-req: 0, \n"
)
VL = (
    "INFO 01-01 10:00:0{s} [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: {run} reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%\n"
)


def test_the_sink_drops_numbers_past_their_type_with_a_note() -> None:
    sink = EventSink()
    cases = [10**INT_DIGITS, 10**INT_DIGITS - 1, -(10**400), 10**TEXT_DIGITS, 3, None]
    for i, v in enumerate(cases):
        sink.emit("decode_batch", "x.log", i + 1, None, "", batch_size=v, gen_throughput=math.inf)
    sink.emit("decode_batch", "x.log", 9, None, "", batch_size=1, gen_throughput=math.nan)
    tables = sink.to_tables()
    col = tables["decode_batch"]["batch_size"]
    assert col.isna().tolist() == [True, False, True, True, False, True, False]
    assert col.iloc[1] == 10**INT_DIGITS - 1 and col.iloc[4] == 3
    assert tables["decode_batch"]["gen_throughput"].isna().all()
    notes = tables["input_note"]
    texts = set(notes["text"])
    assert f"decode_batch batch_size: a {INT_DIGITS + 1}-digit number" in " ".join(texts)
    assert any("401-digit" in t for t in texts)
    assert any(f"more than {TEXT_DIGITS} digits" in t for t in texts)
    assert any("gen_throughput: a number too large for a float64" in t for t in texts)
    # one note per dropped value, on its line; NaN (missing) and None are not notes
    assert sorted(set(notes["line"].tolist())) == [1, 2, 3, 4, 5, 6]
    assert FIELD_LIMITS["int"] == 10.0**INT_DIGITS


def _write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("digits", [16, 400, 5000])
def test_a_huge_count_is_noted_and_the_rest_read_on_both_paths(tmp_path: Path, digits: int) -> None:
    big = "9" * digits
    sg = _write(tmp_path, "sg.log", SG.format(s=0, bs=big) + SG.format(s=1, bs=7))
    vl = _write(tmp_path, "vl.log", VL.format(s=0, run=big) + VL.format(s=5, run=7))
    for path, kind, col in ((sg, "decode_batch", "batch_size"), (vl, "stats", "running")):
        pure, hot = both([str(path)])
        assert_same_tables(pure, hot, path.name)
        frame = pure[kind]
        assert len(frame) == 2 and frame[col].isna().tolist() == [True, False]
        assert int(frame[col].iloc[1]) == 7
        status = ingest([str(path)], jobs=1).inputs[0]
        assert status.status == "ok"
        assert any(f"{kind} {col}: a " in n and "dropped" in n for n in status.notes), status.notes
        report = analyze([str(path)], generated_at="fixed")
        assert report.inputs[0].notes == status.notes


def test_a_header_past_the_years_a_log_holds_is_no_timestamp(tmp_path: Path) -> None:
    far = SG.format(s=0, bs=3).replace("[2025-", "[5025-")
    path = _write(tmp_path, "sg.log", far + SG.format(s=1, bs=4) + SG.format(s=2, bs=5))
    pure, hot = both([str(path)])
    assert_same_tables(pure, hot, "year 5025")
    status = ingest([str(path)], jobs=1)
    ts = status.tables["decode_batch"]["ts"].to_numpy()
    assert np.isnan(ts[0]) and not np.isnan(ts[1:]).any()
    (note,) = status.inputs[0].notes
    assert "year 5025 (line 1)" in note and f"{LOG_YEARS.stop - 1}" in note
    report = analyze([str(path)], generated_at="fixed")
    assert report.inputs[0].status == "ok"


def test_years_at_the_edges_of_the_range(tmp_path: Path) -> None:
    first, last = LOG_YEARS.start, LOG_YEARS.stop - 1
    text = (
        SG.format(s=0, bs=1).replace("[2025-01-01", f"[{first}-01-01")
        + SG.format(s=1, bs=2).replace("[2025-01-01", f"[{last}-12-31")
        + SG.format(s=2, bs=3).replace("[2025-01-01", f"[{last + 1}-01-01")
        + SG.format(s=3, bs=4).replace("[2025-01-01", f"[{first - 1}-12-31")
    )
    path = _write(tmp_path, "sg.log", text)
    got = ingest([str(path)], jobs=1)
    ts = got.tables["decode_batch"]["ts"].to_numpy()
    assert np.isnan(ts).tolist() == [False, False, True, True]
