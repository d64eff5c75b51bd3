"""The KV/queue timeline of the HTML report, binned for long logs (issue 15: a 700 MB log
made a 186 MB report). The binned path must draw what the per-sample frame holds: per time
bin the highest KV usage, the most running and waiting requests, the sum of evictions, for
the first rank only. The reference below bins ``first_rank(load_frame(...))`` with pandas."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from diag.facts.load import first_rank, load_frame, load_timeline
from diag.ingest import ingest

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"


def _two_rank_log(path: Path, minutes: int) -> Path:
    """SGLang serving lines of TP0 and TP1 (TP1 busier, so mixing ranks would show), with
    prefill lines, some without usage, and KV-pool retractions."""
    rng = np.random.default_rng(7)
    lines = []
    for second in range(minutes * 60):
        stamp = f"2025-11-03 {9 + second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}"
        for rank, extra in (("TP0", 0), ("TP1", 40)):
            run = int(rng.integers(1, 120)) + extra
            usage = rng.uniform(0.1, 0.99)
            lines.append(
                f"[{stamp} {rank}] Decode batch. #running-req: {run}, #token: {run * 900}, "
                f"token usage: {usage:.2f}, gen throughput (token/s): {run * 60.5:.2f}, "
                f"#queue-req: {int(rng.integers(0, 30))}"
            )
        if second % 7 == 0:
            lines.append(
                f"[{stamp} TP0] Prefill batch. #new-seq: 2, #new-token: 1753, #cached-token: 0, "
                f"token usage: 0.30, #running-req: {int(rng.integers(1, 200))}, #queue-req: 3"
            )
        if second % 97 == 0:
            lines.append(
                f"[{stamp} TP0] KV cache pool is full. Retract requests. #retracted_reqs: "
                f"{int(rng.integers(1, 9))}, #new_token_ratio: 0.4000 -> 0.7000"
            )
    path.write_text("\n".join(lines) + "\n")
    return path


def _reference(frame: pd.DataFrame, max_points: int) -> pd.DataFrame:
    timed = frame[frame["ts"].notna()]
    lo, hi = timed["ts"].min(), timed["ts"].max()
    width = (hi - lo) / max_points
    bin_no = np.minimum(((timed["ts"] - lo) / width).astype(int), max_points - 1)
    agg = timed.groupby(bin_no).agg(
        kv_usage=("kv_usage", "max"),
        running=("running", "max"),
        waiting=("waiting", "max"),
        evicted=("evicted", "sum"),
    )
    agg.insert(0, "ts", lo + (agg.index.to_numpy() + 0.5) * width)
    return agg.reset_index(drop=True)


@pytest.mark.parametrize("max_points", [7, 60, 500])
def test_binned_timeline_keeps_each_bins_peak(tmp_path: Path, max_points: int) -> None:
    tables = ingest([str(_two_rank_log(tmp_path / "server.log", 20))]).tables
    samples = first_rank(load_frame(tables))
    assert set(samples["rank"]) == {"TP0"} and len(samples) > 1000
    frame, width, stamps = load_timeline(tables, max_points)
    assert width is not None and len(frame) <= max_points
    assert set(frame["rank"]) == {"TP0"}
    np.testing.assert_array_equal(np.sort(stamps), np.sort(samples["ts"].to_numpy()))
    want = _reference(samples, max_points)
    got = frame[["ts", "kv_usage", "running", "waiting", "evicted"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert frame["evicted"].sum() == samples["evicted"].sum() > 0  # no retraction lost


def test_short_logs_keep_every_sample() -> None:
    tables = ingest([str(INCIDENTS / "sglang-kv-squeeze")]).tables
    frame, width, stamps = load_timeline(tables, 5000)
    assert width is None
    pd.testing.assert_frame_equal(frame, first_rank(load_frame(tables)))
    assert len(stamps) == len(frame)


def test_html_timeline_of_a_long_log_is_binned(tmp_path: Path) -> None:
    """The report of a long log stays small, and its KV panel says the points are bins."""
    from diag import api
    from diag.render import plots
    from diag.render.html import render_html
    from diag.render.html_page import unpack_figure

    log = _two_rank_log(tmp_path / "server.log", 90)
    report = api.analyze([str(log)])
    assert len(first_rank(load_frame(report.runs[0].facts.tables))) > plots.MAX_TIMELINE_POINTS
    page = render_html(report)
    blocks = re.findall(r'class="gd-figure"[^>]*>(.*?)</script>', page, re.S)
    titles = [json.dumps(unpack_figure(b)["layout"]) for b in blocks]  # large ones are packed
    assert any("each point is the highest of its" in t for t in titles)
    assert len(page) < 3_000_000  # plotly.js's basic bundle (1.2 MB) and the binned charts


@given(st.lists(st.floats(0, 4e9, allow_nan=False), max_size=50), st.integers(0, 3))
def test_bulk_iso_stamps_read_as_the_per_stamp_ones(stamps: list[float], decimals: int) -> None:
    """The wall-clock x of a chart, formatted in bulk, is the per-stamp formatting, at log
    precisions (s, ms) and at full float precision (the rounding edges of .xxx9995)."""
    from diag.render.axes import _iso, iso_stamps

    for ts in (stamps, [round(t, decimals) for t in stamps]):
        assert iso_stamps(np.array(ts)) == [_iso(t) for t in ts]
