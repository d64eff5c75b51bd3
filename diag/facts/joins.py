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
    keys = [join_key(f) for f in facts] if profiles or snapshots else []
    for item in profiles:
        i = nearest_target(Path(item["path"]), keys)
        if i is not None:
            item["run"] = facts[i].run.id
    for snap in snapshots:
        i = nearest_target(Path(snap.path), keys)
        run = None if i is None else facts[i]
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
    keys = [join_key(f) for f in facts]
    for t in traces:
        i = trace_target(t, keys, tz)
        run = None if i is None else facts[i]
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


def trace_target(t: TraceAnalysis, keys: list[JoinKey], tz: tzinfo | None) -> int | None:
    """The index of the run a profiler trace joins (nearest folder; among runs there, the
    last one whose decode batches span the trace's steps, else :func:`nearest_target`)."""
    if not keys:
        return None
    folder = os.path.abspath(Path(t.path).parent)
    depth = [
        max(
            (len(os.path.commonpath([folder, os.path.abspath(Path(s).parent)])) for s in k.sources),
            default=-1,
        )
        for k in keys
    ]
    best = max(depth)
    near = [i for i, d in enumerate(depth) if d == best]
    if len(near) > 1 and not t.steps.empty and t.steps["epoch_s"].notna().any():
        lo = float(t.steps["epoch_s"].min()) + _tz_offset_s(tz, [t])
        hi = float(t.steps["epoch_s"].max()) + _tz_offset_s(tz, [t])
        spans = [
            i
            for i in near
            if (span := keys[i].batch_span) is not None and span[0] - 2 <= hi and span[1] + 2 >= lo
        ]
        if spans:
            return spans[-1]
    i = nearest_target(Path(t.path), [keys[i] for i in near])
    return near[-1] if i is None else near[i]


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


@dataclass(frozen=True)
class JoinKey:
    """What choosing a run for an artifact reads of the run (:func:`nearest_target`,
    :func:`trace_target`): kept beside packed runs, so that artifacts read apart from them
    (:mod:`diag.facts.deferred`) join the run one pass would join."""

    id: str
    sources: tuple[str, ...]
    profiled: bool  # --enable-profile-cuda-graph: tables or the "Memory Usage is saved" line
    batch_span: tuple[Any, Any] | None  # first and last decode batch stamp (None: no batch)


def join_key(f: RunFacts) -> JoinKey:
    """The run's :class:`JoinKey`."""
    profiled = bool(
        not f.tables["profile"].empty
        or f.config.profile_cuda_graph
        or (f.tables["advisory"]["topic"] == "snapshot_written").any()
    )
    span = None if f.batches.empty else (f.batches["ts"].min(), f.batches["ts"].max())
    return JoinKey(f.run.id, tuple(f.run.sources), profiled, span)


def nearest_target(path: Path, keys: list[JoinKey]) -> int | None:
    """The index of the run an artifact joins: deepest shared folder first; among runs in
    the same folder, one that profiled its capture wins, then the last run."""
    best: tuple[int, int, int] | None = None
    chosen = None
    for i, k in enumerate(keys):
        for src in k.sources:
            if src == "-":
                continue
            common = os.path.commonpath(
                [str(path.parent.resolve()), str(Path(src).parent.resolve())]
            )
            key = (len(Path(common).parts), int(k.profiled), i)
            if best is None or key > best:
                best, chosen = key, i
    return chosen
