"""Join the artifacts read apart from the logs (a snapshot, table or trace at a fleet's
root, :func:`diag.sources.groups.plan_groups` ``defer``) to the run one pass would join.

One artifact above every pod's folder would make the whole fleet one group, held unpacked
(peak memory growing with the fleet). Read apart instead, it is joined once every group is
read: its run is chosen among every run's :class:`~diag.facts.joins.JoinKey` with the same
rules as in one pass, and that run's facts are built again with all of its joins (its own
group's artifacts and the deferred ones, in reading order), so the report is one pass's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import tzinfo
from pathlib import Path
from typing import Any, Protocol

from diag.artifacts.trace import TraceAnalysis
from diag.facts.joins import JoinKey, join_runs, joined, nearest_target, trace_target
from diag.facts.packed import PackedRun
from diag.facts.record import RunFacts
from diag.model import Snapshot


class Held(Protocol):
    """A run as a group holds it (``diag.pipeline.HeldRun``)."""

    def facts(self) -> RunFacts: ...


class Part(Protocol):
    """What is read here of a group read (``diag.pipeline.GroupFacts``)."""

    runs: list[Any]  # of Held
    keys: list[JoinKey] | None
    profiles: list[dict[str, Any]]
    snapshots: list[Snapshot]
    traces: list[TraceAnalysis]


def join_deferred(parts: Sequence[Part], deferred: Sequence[bool], tz: tzinfo | None) -> None:
    """Join the deferred parts' artifacts to the runs of every part (all read, in reading
    order, each with its runs' ``keys``), rebuilding each run one of them joins."""
    keys: list[JoinKey] = []
    where: list[tuple[int, int]] = []  # (part, run) of each key
    for p, part in enumerate(parts):  # (a deferred file read as a log has runs too)
        assert part.keys is not None and len(part.keys) == len(part.runs)
        keys.extend(part.keys)
        where.extend((p, j) for j in range(len(part.keys)))
    targets: set[int] = set()
    for part, late in zip(parts, deferred, strict=True):
        if not late:
            continue
        for item in part.profiles:
            i = nearest_target(Path(item["path"]), keys)
            if i is not None:
                item["run"] = keys[i].id
        for snap in part.snapshots:
            i = nearest_target(Path(snap.path), keys)
            if i is not None and snap.pools:
                snap.run = keys[i].id
                targets.add(i)
        for t in part.traces:
            i = trace_target(t, keys, tz) if keys else None
            if i is not None:
                t.run = keys[i].id
                targets.add(i)
    for i in sorted(targets):
        p, j = where[i]
        _rebuild(parts, p, j, keys[i].id, tz)


def _rebuild(parts: Sequence[Part], p: int, j: int, rid: str, tz: tzinfo | None) -> None:
    """Run ``j`` of part ``p`` built again with every artifact joined to it: its notes
    without those of its own group's joins, then joined with all of them (a superset: a
    trace check it had it has again), packed again."""
    part = parts[p]
    held: Held = part.runs[j]
    f = held.facts()
    own_snaps = [s for s in part.snapshots if s.run == rid]
    own_traces = [t for t in part.traces if t.run == rid]
    snaps = [s for q in parts for s in q.snapshots if s.run == rid]
    traces = [t for q in parts for t in q.traces if t.run == rid]
    old = join_runs([f], [], own_snaps, own_traces, tz)[rid]
    kept = len(f.notes) - len(old.notes)
    assert f.notes[kept:] == old.notes, "a run's notes end with its joins' notes"
    new = join_runs([f], [], snaps, traces, tz)[rid]
    part.runs[j] = PackedRun.of(joined(replace(f, notes=f.notes[:kept]), new))
