"""Capture stalls per rank: a rank that began a runner's capture and logged no end of it.

Every SGLang rank logs its own ``Capture ... begin`` / ``end`` pair per runner
(sglang==0.5.23:srt/model_executor/model_runner_components/cuda_graph_setup.py:683-700,
757-791), and every vLLM worker its ``Graph capturing finished``: a rank whose end never
comes while the other ranks ended theirs, or while the log went on, or with the log ending
there, is stuck in capture (a collective waiting on a peer, a custom all-reduce hang, a JIT
compile). No error says so; the engine waits. The stall names the rank, the runner, how far
its progress bar got and how long the rank has been silent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from diag.engines.runners import PHASE_RUNNER
from diag.events import EventTables
from diag.facts.access import Row, records


@dataclass(frozen=True)
class CaptureStall:
    """One rank stuck in one runner's capture."""

    rank: str
    runner: str
    model: str
    path: str
    line: int  # the rank's begin line
    position: str | None  # how far the capture got ("bar 3/8, bs=24"), None: not shown
    silent_s: float | None  # from the rank's last line to the run's last line
    others: tuple[str, ...]  # ranks that ended the same capture

    def sentence(self) -> str:
        where = f"{self.model} {self.runner} capture"
        got = f", last at {self.position}" if self.position else ""
        quiet = (
            f"; silent for {self.silent_s:g} s while the log went on"
            if self.silent_s
            else "; the log ends there"
        )
        peers = f"; {', '.join(self.others)} ended it" if self.others else ""
        return (
            f"{self.rank} began the {where} at line {self.line} of {self.path} and logged no "
            f"end{got}{quiet}{peers}"
        )


def _order(row: Row) -> int:
    return int(row.get("_order", row["line"]))


def _last_ts(tables: EventTables, rank: str | None) -> float | None:
    """The latest stamp of the run's lines (of ``rank``'s own lines when given)."""
    best = -math.inf
    for frame in tables._frames.values():
        if len(frame) == 0 or "ts" not in frame.columns:
            continue
        ts = frame["ts"].to_numpy(dtype=float, na_value=np.nan)
        if rank is not None:
            ts = ts[(frame["rank"].astype(object) == rank).to_numpy(dtype=bool)]
        if len(ts) and not np.isnan(ts).all():
            best = max(best, float(np.nanmax(ts)))
    return None if best == -math.inf else best


def _position(tables: EventTables, phase: str, after: int) -> str | None:
    """Rank 0's bar of this capture (bars carry no rank): its last state after the begin."""
    bars = [
        r
        for r in records(tables["capture_progress"])
        if r.get("phase") == phase and _order(r) >= after
    ]
    if not bars:
        return None
    last = max(bars, key=_order)
    parts = []
    done, total = last.get("done"), last.get("total")
    if done is not None and total is not None and not pd.isna(done) and not pd.isna(total):
        parts.append(f"bar {int(done)}/{int(total)}")
    size = last.get("size")
    if size is not None and not pd.isna(size):
        parts.append(f"size {int(size)}")
    return ", ".join(parts) or None


def capture_stalls(tables: EventTables) -> tuple[CaptureStall, ...]:
    """Every (rank, runner) whose last capture begin has no end on that rank after it, on
    logs whose lines name their rank (an untagged single-rank log cut in capture is the
    run's unfinished-capture note instead)."""
    begins = [
        r for r in records(tables["capture_begin"]) if isinstance(r.get("rank"), str) and r["rank"]
    ]
    if not begins:
        return ()
    ends = records(tables["capture_end"])
    serving = any(
        not tables[k].empty for k in ("decode_batch", "prefill_batch", "stats", "iteration")
    )
    if not ends and serving:
        return ()  # an era that logs no end of capture (SGLang <= 0.3.6), and it served
    last: dict[tuple[str, str], Row] = {}
    for row in begins:
        key = (row["rank"], str(row.get("phase") or ""))
        if key not in last or _order(row) > _order(last[key]):
            last[key] = row
    run_end: list[float | None] = []  # the run's last stamp, read once a stall is found
    out = []
    for (rank, phase), row in sorted(last.items(), key=lambda kv: _order(kv[1])):
        at = _order(row)
        same = [e for e in ends if str(e.get("phase") or "") == phase and _order(e) > at]
        if any(e.get("rank") == rank for e in same):
            continue
        runner, model = PHASE_RUNNER.get(phase, ("decode", "target"))
        rank_end = _last_ts(tables, rank)
        if not run_end:
            run_end.append(_last_ts(tables, None))
        end = run_end[0]
        silent = (
            round(end - rank_end, 3)
            if end is not None and rank_end is not None and end > rank_end
            else None
        )
        others = tuple(sorted({str(e["rank"]) for e in same if e.get("rank")}))
        is_rank0 = all(
            int(n) == 0 for n in "".join(c if c.isdigit() else " " for c in rank).split()
        )
        out.append(
            CaptureStall(
                rank=rank,
                runner=runner,
                model=model,
                path=str(row["source"]),
                line=int(row["line"]),
                position=_position(tables, phase, at) if is_rank0 else None,
                silent_s=silent,
                others=others,
            )
        )
    return tuple(out)
