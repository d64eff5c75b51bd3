"""The start-up timeline of a run: weights, memory profiling, KV allocation, compile, each
runner's capture, readiness and the first request served, each with its duration and the
line that shows it (INTERFACE.md's ``startup``).

Stages come from the phase markers (diag/engines/data/phases.yaml), the engines' capture
begin/end lines (one stage per runner, rank 0's; the engine's own ``elapsed`` where it prints
one), vLLM's ``init engine ... (compilation: X s)`` and the first serving line. A stage the
engine does not time lasts until the next stage begins. ``first_request``'s seconds are the
time from the first start-up line to it (the time to first service).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from diag.engines.runners import PHASE_RUNNER
from diag.events import EventTables
from diag.facts.access import Row, box_value, col, first_min, is_rank0, records

#: phase markers -> timeline stages (capture phases come from the capture lines instead)
_MARKER_STAGE = {
    "weights": "weights",
    "memory_profiling": "memory_profile",
    "kv_allocation": "kv_alloc",
    "serving": "ready",
}
#: durations the engine prints or reports (``sizing`` rows) -> their stage: vLLM's compile
#: time; a server-info document's weight loading and KV allocation (diag.parsers.server_info)
_TIMED = {"compilation_s": "compile", "weights_s": "weights", "kv_alloc_s": "kv_alloc"}
#: start-up order of the stages: ties (one line, or a document's keys, showing two) go by it
_STAGE_RANK = {
    name: i
    for i, name in enumerate(("weights", "memory_profile", "kv_alloc", "compile", "capture"))
}
_SERVING = ("prefill_batch", "decode_batch", "iteration", "graph_step", "request")


@dataclass(frozen=True)
class Stage:
    """One start-up stage."""

    stage: str  # weights | memory_profile | kv_alloc | compile | capture | ready | first_request
    runner: str | None  # capture: "target decode", "draft extend", ...; else None
    start: float | None  # epoch seconds of its first line
    seconds: float | None
    path: str
    line: int
    order: int  # the line's place in the run (sorting)
    timed_by: str  # "engine" (printed), "lines" (to the next stage), "since_start"

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "runner": self.runner,
            "start": self.start,
            "seconds": self.seconds,
            "evidence": {"path": self.path, "line": self.line},
        }


def _first_row(frame: pd.DataFrame, skip_received: bool) -> Row | None:
    """The table's earliest row (by ``_order``, else ``line``): only the fields a stage
    reads, boxed as :func:`~diag.facts.access.records` boxes them (a big log's decode table
    has millions of rows; a copy of even one row of a small one cost ~0.4 ms, 5 tables a run)."""
    if len(frame) == 0:
        return None
    names = frame.columns
    order = np.asarray(col(frame, "_order" if "_order" in names else "line"))
    if skip_received and "action" in names:  # (positions: no filtered copy)
        rows = np.flatnonzero(np.asarray(col(frame, "action") != "received", dtype=bool))
        if not len(rows):
            return None
        at = int(rows[order[rows].argmin()])
    else:
        at = first_min(order)  # (an event column: read-only)
    return {c: box_value(col(frame, c), at) for c in _STAGE_FIELDS if c in names}


#: the fields of a row a stage reads (:class:`Stage`)
_STAGE_FIELDS = ("source", "line", "ts", "_order")


def _ts(row: Row) -> float | None:
    v = row.get("ts")
    return None if v is None or pd.isna(v) else float(v)


def _order(row: Row) -> int:
    return int(row.get("_order", row["line"]))


def _rank0(rows: Sequence[Row]) -> Sequence[Row]:
    mine = [r for r in rows if is_rank0(r.get("rank") if isinstance(r.get("rank"), str) else None)]
    return mine or rows


def _runner_name(phase: str) -> str:
    if phase in PHASE_RUNNER:
        runner, model = PHASE_RUNNER[phase]
        return f"{model} {runner}"
    return "every graph set" if phase in ("all", "metrics") else phase


def _captures(tables: EventTables) -> list[Stage]:
    begins = _rank0(records(tables["capture_begin"]))
    ends = _rank0(records(tables["capture_end"]))
    out = []
    for b in begins:
        phase = str(b.get("phase") or "")
        end = next(
            (
                e
                for e in sorted(ends, key=_order)
                if _order(e) > _order(b) and e.get("phase") == phase
            ),
            None,
        )
        secs, timed = None, "lines"
        if end is not None and end.get("time_s") is not None and not pd.isna(end["time_s"]):
            secs, timed = round(float(end["time_s"]), 3), "engine"
        elif end is not None and _ts(end) is not None and _ts(b) is not None:
            secs = round(float(_ts(end) - _ts(b)), 3)  # type: ignore[operator]
        out.append(
            Stage(
                "capture",
                _runner_name(phase),
                _ts(b),
                secs,
                str(b["source"]),
                int(b["line"]),
                _order(b),
                timed if secs is not None else "lines",
            )
        )
    # a server-info document times each runner's capture with no begin line
    # (diag.parsers.server_info): its stages carry the engine's seconds, no start
    marks = tables["startup"]
    documents = (
        set()
        if len(marks) == 0 or "marker" not in marks.columns
        else {
            str(s)
            for s, m in zip(
                col(marks, "source").tolist(), col(marks, "marker").tolist(), strict=True
            )
            if m == "server_info"
        }
    )
    begun = {str(b.get("phase") or "") for b in begins}
    for e in ends:
        phase = str(e.get("phase") or "")
        secs = e.get("time_s")
        if (
            str(e["source"]) in documents
            and phase not in begun
            and secs is not None
            and not pd.isna(secs)
        ):
            out.append(
                Stage(
                    "capture",
                    _runner_name(phase),
                    None,
                    round(float(secs), 3),
                    str(e["source"]),
                    int(e["line"]),
                    _order(e),
                    "engine",
                )
            )
    return out


def startup_timeline(tables: EventTables) -> tuple[Stage, ...]:
    """The run's start-up stages in order (empty where the log shows none)."""
    stages: list[Stage] = []
    seen: set[str] = set()
    for row in sorted(_rank0(records(tables["phase"])), key=_order):
        stage = _MARKER_STAGE.get(str(row.get("phase")))
        if stage is None or stage in seen:
            continue
        seen.add(stage)
        stages.append(
            Stage(
                stage,
                None,
                _ts(row),
                None,
                str(row["source"]),
                int(row["line"]),
                _order(row),
                "lines",
            )
        )
    stages += _captures(tables)
    for name, stage in _TIMED.items():
        sizing = [r for r in records(tables["sizing"]) if r.get("name") == name]
        if sizing and stage not in seen:
            r = sizing[0]
            stages.append(
                Stage(
                    stage,
                    None,
                    None,
                    round(float(r["value"]), 3),
                    str(r["source"]),
                    int(r["line"]),
                    _order(r),
                    "engine",
                )
            )
    if not stages:
        return ()
    stages.sort(key=lambda s: (s.order, _STAGE_RANK.get(s.stage, len(_STAGE_RANK))))
    first = next((s.start for s in stages if s.start is not None), None)
    served = [f for k in _SERVING if (f := _first_row(tables[k], k == "request")) is not None]
    if served:
        r = min(served, key=_order)
        t = _ts(r)
        stages.append(
            Stage(
                "first_request",
                None,
                t,
                round(t - first, 3) if t is not None and first is not None else None,
                str(r["source"]),
                int(r["line"]),
                _order(r),
                "since_start",
            )
        )
    return tuple(_fill(stages))


def _fill(stages: list[Stage]) -> list[Stage]:
    """A stage the engine does not time lasts until the next stage with a stamp begins."""
    out = []
    for i, s in enumerate(stages):
        if s.seconds is None and s.start is not None and s.stage not in ("ready",):
            nxt = next((n.start for n in stages[i + 1 :] if n.start is not None), None)
            if nxt is not None and nxt >= s.start:
                s = Stage(
                    s.stage,
                    s.runner,
                    s.start,
                    round(nxt - s.start, 3),
                    s.path,
                    s.line,
                    s.order,
                    "lines",
                )
        out.append(s)
    return out


def capture_share(stages: tuple[Stage, ...]) -> tuple[float, float] | None:
    """(capture seconds, start-up seconds to the first request or readiness): GD140's share."""
    cap = sum(s.seconds or 0.0 for s in stages if s.stage == "capture")
    starts = [s.start for s in stages if s.start is not None]
    end = next((s.start for s in stages if s.stage == "first_request"), None) or next(
        (s.start for s in stages if s.stage == "ready"), None
    )
    if not cap or not starts or end is None or end <= min(starts):
        return None
    return cap, end - min(starts)
