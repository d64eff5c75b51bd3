"""Join a group's snapshots, standalone tables and profiler traces to its runs: the joins
are inputs of each run's facts (:class:`RunJoins`, :func:`joined`), not edits after them.

Each artifact joins the run whose logs share its deepest folder
(:func:`diag.sources.groups.group_files` keeps it in one group with every such run).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any

from diag.artifacts.trace import TraceAnalysis
from diag.facts.record import RunFacts, snapshot_graph_pool_gib
from diag.facts.trace_join import TraceCheck, verify
from diag.model import Snapshot


def run_profiles(facts: list[RunFacts]) -> list[dict[str, Any]]:
    """Operator tables logged inside the runs, in run order (the report lists them before
    the standalone table files)."""
    out: list[dict[str, Any]] = []
    for f in facts:
        for _, row in f.tables["profile"].iterrows():
            table = json.loads(row["table"])
            table["run"] = f.run.id
            out.append(table)
    return out


@dataclass(frozen=True)
class RunJoins:
    """What the artifacts and traces joined to a run add to its facts: inputs of the facts
    build (:func:`joined`), never edits of facts already built."""

    memory_check: dict[str, Any] | None = None  # the last snapshot's, see memory_check
    snapshot_graph_pool_gib: float | None = None
    trace_check: TraceCheck | None = None
    notes: tuple[str, ...] = ()


def join_runs(
    facts: list[RunFacts],
    profiles: list[dict[str, Any]],
    snapshots: list[Snapshot],
    traces: list[TraceAnalysis],
    tz: tzinfo | None,
) -> dict[str, RunJoins]:
    """Each run's joins: snapshots and standalone tables by folder, then profiler traces
    (the artifacts are told their run: ``run`` on each)."""
    notes: dict[str, list[str]] = {f.run.id: [] for f in facts}
    checks = _join_artifacts(facts, profiles, snapshots, notes)
    traced = _join_traces(facts, traces, tz, notes)
    return {
        f.run.id: RunJoins(
            checks.get(f.run.id),
            snapshot_graph_pool_gib(f.run.id, snapshots),
            traced.get(f.run.id),
            tuple(notes[f.run.id]),
        )
        for f in facts
    }


def joined(f: RunFacts, joins: RunJoins | None) -> RunFacts:
    """The run's facts with its joins (built once, at build time)."""
    if joins is None:
        return f
    check = joins.trace_check
    return replace(
        f,
        memory_check=joins.memory_check,
        snapshot_graph_pool_gib=joins.snapshot_graph_pool_gib,
        trace_check=check,
        record=f.record if check is None else replace(f.record, trace_verified=check.record()),
        notes=f.notes + joins.notes,
    )


def _join_artifacts(
    facts: list[RunFacts],
    profiles: list[dict[str, Any]],
    snapshots: list[Snapshot],
    notes: dict[str, list[str]],
) -> dict[str, dict[str, Any]]:
    """Join snapshots and standalone tables to the run whose logs sit in the same folder
    (nearest folder up the tree wins; ties go to the last run, the one that captured last)."""
    checks: dict[str, dict[str, Any]] = {}
    if not facts:
        return checks
    for item in profiles:
        run = _nearest_run(Path(item["path"]), facts)
        if run is not None:
            item["run"] = run.run.id
    for snap in snapshots:
        run = _nearest_run(Path(snap.path), facts)
        if run is None or not snap.pools:
            continue
        snap.run = run.run.id
        check = memory_check(run.record.capture_mem_gib, snap.graph_pool_gib, snap.path)
        checks[run.run.id] = check
        if check.get("disagrees"):
            notes[run.run.id].append(check["summary"])
    return checks


def _join_traces(
    facts: list[RunFacts],
    traces: list[TraceAnalysis],
    tz: tzinfo | None,
    notes: dict[str, list[str]],
) -> dict[str, TraceCheck]:
    """Join each profiler trace to a run (nearest folder; among runs there, the one whose
    decode batches span the trace's steps), then verify each run's batches against its
    traces: the record gets ``trace_verified``, the run notes what could not be joined."""
    checks: dict[str, TraceCheck] = {}
    if not facts or not traces:
        return checks
    by_run: dict[str, list[TraceAnalysis]] = {}
    for t in traces:
        run = _trace_run(t, facts, tz)
        if run is not None:
            t.run = run.run.id
            sizes = run.record.graph_capture_sizes
            t.log_capture_sizes = list(sizes) if sizes is not None else None
            by_run.setdefault(run.run.id, []).append(t)
    for f in facts:
        got = by_run.get(f.run.id)
        if not got:
            continue
        check = checks[f.run.id] = verify(f.batches, got, _tz_offset_s(tz, got))
        for path in check.no_epoch:
            notes[f.run.id].append(
                f"trace {path}: its time stamps are relative and it has no baseTimeNanoseconds, "
                "so its steps are not joined to log lines"
            )
        if (
            check.matches.empty
            and not check.no_epoch
            and any(not t.steps.empty for t in got if t.kind == "step_trace")
        ):
            notes[f.run.id].append(
                "no decode batch of the log matched a profiled step by time and batch size "
                "(same rank): if the log stamps local time, pass --tz with its zone"
            )
    return checks


def _tz_offset_s(tz: tzinfo | None, traces: list[TraceAnalysis]) -> float:
    """Seconds the log's wall clock is ahead of UTC at the traces' time (DST-aware)."""
    if tz is None:
        return 0.0
    times = [float(t.steps["epoch_s"].min()) for t in traces if not t.steps.empty]
    times = [x for x in times if x == x]
    at = datetime.fromtimestamp(times[0] if times else 0.0, timezone.utc)
    off = at.astimezone(tz).utcoffset()
    return off.total_seconds() if off is not None else 0.0


def _trace_run(t: TraceAnalysis, facts: list[RunFacts], tz: tzinfo | None) -> RunFacts | None:
    folder = os.path.abspath(Path(t.path).parent)
    depth = [
        max(
            (
                len(os.path.commonpath([folder, os.path.abspath(Path(s).parent)]))
                for s in f.run.sources
            ),
            default=-1,
        )
        for f in facts
    ]
    best = max(depth)
    near = [f for f, d in zip(facts, depth, strict=True) if d == best]
    if len(near) > 1 and not t.steps.empty and t.steps["epoch_s"].notna().any():
        lo = float(t.steps["epoch_s"].min()) + _tz_offset_s(tz, [t])
        hi = float(t.steps["epoch_s"].max()) + _tz_offset_s(tz, [t])
        spans = [
            f
            for f in near
            if not f.batches.empty
            and f.batches["ts"].min() - 2 <= hi
            and f.batches["ts"].max() + 2 >= lo
        ]
        if spans:
            return spans[-1]
    return _nearest_run(Path(t.path), near) or near[-1]


def memory_check(log_gib: float | None, snapshot_gib: float, path: str) -> dict[str, Any]:
    """The capture memory the log printed against the snapshot's CUDA-graph pools.

    They measure different things (the log: free-memory drop over the whole capture, incl.
    buffers; the snapshot: reserved bytes of the graph private pools at dump time), so only
    a gap above 20 % and 0.1 GiB is called a disagreement."""
    out: dict[str, Any] = {
        "log_capture_mem_gib": log_gib,
        "snapshot_graph_pool_gib": round(snapshot_gib, 3),
        "snapshot": path,
        "difference_gib": None,
        "disagrees": False,
    }
    if log_gib is not None:
        diff = round(snapshot_gib - log_gib, 3)
        out["difference_gib"] = diff
        out["disagrees"] = abs(diff) > max(0.1, 0.2 * max(abs(log_gib), snapshot_gib))
        if out["disagrees"]:
            out["summary"] = (
                f"capture memory disagrees: the log printed {log_gib} GiB, the snapshot's graph "
                f"pools hold {snapshot_gib:.2f} GiB ({path})"
            )
    return out


def _nearest_run(path: Path, facts: list[RunFacts]) -> RunFacts | None:
    """Deepest shared folder first; among runs in the same folder, one that profiled its
    capture (--enable-profile-cuda-graph: tables or the "Memory Usage is saved" line) wins,
    then the last run."""
    best: tuple[int, int, int] | None = None
    chosen = None
    for i, f in enumerate(facts):
        profiled = int(
            not f.tables["profile"].empty
            or f.config.profile_cuda_graph
            or (f.tables["advisory"]["topic"] == "snapshot_written").any()
        )
        for src in f.run.sources:
            if src == "-":
                continue
            common = os.path.commonpath(
                [str(path.parent.resolve()), str(Path(src).parent.resolve())]
            )
            key = (len(Path(common).parts), profiled, i)
            if best is None or key > best:
                best, chosen = key, f
    return chosen
