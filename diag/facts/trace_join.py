"""Trace-verified decode batches: each profiled step joined to the log's decode batch of the
same rank by time and batch size, and the run's counts as the trace shows them.

A log batch line is stamped to the second (SGLang ``[YYYY-mm-dd HH:MM:SS]``) and written
after its step, so a line matches the step of the same rank and batch size whose span
overlaps ``[t, t + 1 s)`` widened by ``TOLERANCE_S``, the nearest one where several do. The
log's stamps carry no zone: they are read as UTC (as everywhere in graphdiag) and shifted
by ``tz_offset_s`` (``--tz``) to meet the trace's epoch (``baseTimeNanoseconds`` + ``ts``).
Neither engine writes a step ordinal into its span (torch-traces.md §2), so time and shape
are all there is to join on.

A step served by a graph is ``graph`` or ``piecewise``; ``eager`` is eager; ``unverified``
(graph launches without GPU ops) proves nothing either way and is never a contradiction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from diag.artifacts.trace import VERDICTS, TraceAnalysis
from diag.facts.run_record import TraceVerified

TOLERANCE_S = 1.0
DECODE_MODES = frozenset({"DECODE"})
SERVED: dict[str, str] = {"graph": "graph", "piecewise": "graph", "eager": "eager"}
MATCH_COLUMNS = [
    "source",
    "line",
    "rank",
    "batch_size",
    "log_verdict",
    "logged",
    "trace",
    "step",
    "trace_verdict",
    "agree",
]


@dataclass(frozen=True)
class TraceCheck:
    """What the run's traces say about its decode batches."""

    traces: list[str]
    steps: dict[str, int]
    decode_steps: dict[str, int]
    graph_launches: int
    graph_launches_without_ops: int
    matches: pd.DataFrame
    tz_offset_s: float
    no_epoch: list[str] = field(default_factory=list)  # traces whose steps have no wall time

    @property
    def disagree(self) -> pd.DataFrame:
        return (
            self.matches[~self.matches["agree"].astype(bool)]
            if not self.matches.empty
            else self.matches
        )

    def record(self) -> TraceVerified:
        """The run record's ``trace_verified`` entry (beside ``batches``: logged / inferred)."""
        m = self.matches
        agree = int(m["agree"].sum()) if len(m) > 0 else 0
        return TraceVerified(
            traces=len(self.traces),
            steps=tuple(self.steps.items()),
            decode_steps=tuple(self.decode_steps.items()),
            graph_launches=self.graph_launches,
            graph_launches_without_ops=self.graph_launches_without_ops,
            matched_batches=len(m),
            agree=agree,
            disagree=len(m) - agree,
            tz_offset_s=self.tz_offset_s,
        )


def _rank_number(label: Any) -> float:
    """0 for an unlabelled line (only rank 0 prints batch lines), else the label's TP rank."""
    text = "" if label is None or (isinstance(label, float) and np.isnan(label)) else str(label)
    if not text:
        return 0
    m = re.search(r"TP(\d+)$", text) or re.search(r"(\d+)$", text)
    return float(m.group(1)) if m else float("nan")


def verify(
    batches: pd.DataFrame, traces: list[TraceAnalysis], tz_offset_s: float = 0.0
) -> TraceCheck:
    """Join the step traces of ``traces`` to the run's decode batches (``RunFacts.batches``)."""
    step_traces = [t for t in traces if t.kind == "step_trace"]
    steps: dict[str, int] = {
        v: sum(t.summary["steps"].get(v, 0) for t in step_traces) for v in VERDICTS
    }
    decode: dict[str, int] = dict.fromkeys(VERDICTS, 0)
    rows: list[dict[str, Any]] = []
    no_epoch: list[str] = []
    decided = batches[batches["verdict"].isin(["graph", "eager"])] if len(batches) > 0 else batches
    codes, labels = pd.factorize(decided["rank"]) if len(decided) else (np.zeros(0, int), [])
    # the rank number of each distinct label; code -1 (no label at all) takes the last: 0
    numbers = np.array([_rank_number(u) for u in labels] + [0], dtype=float)
    numbers[np.isnan(numbers)] = -1  # a label with no rank number in it joins no trace
    log_rank = numbers[codes] if len(decided) else np.zeros(0)
    log_t = decided["ts"].to_numpy(dtype=float) - tz_offset_s if len(decided) else np.zeros(0)
    log_bs = decided["batch_size"].to_numpy(dtype=float) if len(decided) else np.zeros(0)
    for t in step_traces:
        s = t.steps
        is_decode = (
            s["mode"].isin(list(DECODE_MODES)).to_numpy() if len(s) > 0 else np.zeros(0, bool)
        )
        for v, n in s.loc[is_decode, "verdict"].value_counts().items():
            decode[str(v)] += int(n)
        if len(s) == 0 or s["epoch_s"].isna().all():
            if len(s) > 0:
                no_epoch.append(t.path)
            continue
        start = s["epoch_s"].to_numpy(dtype=float)
        end = start + s["dur_us"].to_numpy(dtype=float) / 1e6
        bs = s["batch_size"].to_numpy(dtype=float, na_value=np.nan)
        rank = 0 if t.rank is None else t.rank
        window = (log_t >= np.nanmin(start) - 2 * TOLERANCE_S - 1.0) & (
            log_t <= np.nanmax(end) + 2 * TOLERANCE_S
        )
        for i in np.flatnonzero((log_rank == rank) & window):
            lo, hi = log_t[i] - TOLERANCE_S, log_t[i] + 1.0 + TOLERANCE_S
            cand = np.flatnonzero(is_decode & (bs == log_bs[i]) & (end >= lo) & (start <= hi))
            if not len(cand):
                continue
            j = int(cand[np.argmin(np.abs((start[cand] + end[cand]) / 2 - (log_t[i] + 0.5)))])
            row = decided.iloc[i]
            tv = str(s["verdict"].iloc[j])
            if tv not in SERVED:
                continue
            rows.append(
                {
                    "source": str(row["source"]),
                    "line": int(row["line"]),
                    "rank": rank,
                    "batch_size": int(log_bs[i]),
                    "log_verdict": str(row["verdict"]),
                    "logged": bool(row["logged"]),
                    "trace": t.path,
                    "step": str(s["step"].iloc[j]),
                    "trace_verdict": tv,
                    "agree": SERVED[tv] == str(row["verdict"]),
                }
            )
    return TraceCheck(
        [t.path for t in step_traces],
        steps,
        decode,
        sum(int(t.summary["graph_launches"]) for t in step_traces),
        sum(int(t.summary["graph_launches_without_ops"]) for t in step_traces),
        pd.DataFrame(rows, columns=MATCH_COLUMNS),
        tz_offset_s,
        no_epoch,
    )
