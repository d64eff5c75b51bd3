"""Batches per graph mode from an engine's /metrics counters (``source: metrics``).

SGLang counts every forward pass by mode (``decode_cuda_graph``, ``decode_none``,
``prefill_cuda_graph``, ``prefill_none``; diag.parsers.prometheus); vLLM's proposed
``cudagraph_iterations`` by runtime mode (FULL, PIECEWISE: graphs; NONE: eager). The last
scrape gives totals since the server started; consecutive scrapes give each window's delta.
Rank 0's series (tp_rank 0, else the lowest rank) stand for the server, as the log's do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from diag.events import EventTables
from diag.facts.run_record import BatchCounts, RunRecord

#: mode label -> (runner, graph?)
_MODES: dict[str, tuple[str, bool]] = {
    "decode_cuda_graph": ("decode", True),
    "decode_none": ("decode", False),
    "prefill_cuda_graph": ("prefill", True),
    "prefill_none": ("prefill", False),
    "FULL": ("decode", True),
    "PIECEWISE": ("decode", True),
    "NONE": ("decode", False),
}


@dataclass(frozen=True)
class Window:
    """One scrape's totals (or the delta since the previous scrape) per runner."""

    scrape: int
    decode_graph: int
    decode_eager: int
    prefill_graph: int
    prefill_eager: int

    def to_json(self) -> dict[str, int]:
        return self.__dict__.copy()


@dataclass(frozen=True)
class MetricCounts:
    totals: Window  # the last scrape (since start)
    windows: tuple[Window, ...]  # deltas between consecutive scrapes
    has_prefill: bool

    def to_json(self) -> dict[str, object]:
        return {
            "scrapes": self.totals.scrape + 1,
            "totals": self.totals.to_json(),
            "windows": [w.to_json() for w in self.windows],
        }


def _scrape(rows: pd.DataFrame, i: int) -> Window:
    part = rows[rows["scrape"] == i]
    got = {("decode", True): 0, ("decode", False): 0, ("prefill", True): 0, ("prefill", False): 0}
    for mode, value in zip(part["mode"], part["value"], strict=True):
        key = _MODES.get(str(mode))
        if key is not None and not pd.isna(value):
            got[key] += int(round(float(value)))
    return Window(
        i, got["decode", True], got["decode", False], got["prefill", True], got["prefill", False]
    )


def metric_counts(tables: EventTables) -> MetricCounts | None:
    frame = tables["metric"]
    if len(frame) == 0:
        return None
    ranks = frame["tp_rank"].dropna()
    rows = frame[frame["tp_rank"] == ranks.min()] if len(ranks) else frame
    scrapes = sorted(int(s) for s in rows["scrape"].dropna().unique())
    if not scrapes:
        return None
    per = [_scrape(rows, s) for s in scrapes]
    windows = tuple(
        Window(
            b.scrape,
            b.decode_graph - a.decode_graph,
            b.decode_eager - a.decode_eager,
            b.prefill_graph - a.prefill_graph,
            b.prefill_eager - a.prefill_eager,
        )
        for a, b in zip(per, per[1:], strict=False)
    )
    has_prefill = bool(rows["mode"].astype(str).str.startswith("prefill").any())
    return MetricCounts(per[-1], windows, has_prefill)


def with_metric_counts(record: RunRecord, counted: MetricCounts) -> RunRecord:
    """Where no line gives decode batches, the /metrics counters do (``source: metrics``);
    graph passes counted show graphs were on."""
    tot = counted.totals
    if tot.decode_graph + tot.prefill_graph and record.graph_mode == "unknown":
        record = replace(record, graph_mode="enabled")
    if record.batches.source != "none":
        return record
    decided = tot.decode_graph + tot.decode_eager
    return replace(
        record,
        batches=BatchCounts(tot.decode_graph, tot.decode_eager, 0, "metrics"),
        captured_share=tot.decode_graph / decided if decided else None,
    )
