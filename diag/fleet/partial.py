"""One input group read into compact facts: what the merge needs of it, no event tables.

Reading a group is everything of ``analyze`` that only looks inside the group: ingest,
the run split, facts per run, and joining the group's snapshots, tables and traces to its
runs (:func:`diag.fleet.groups.group_files` keeps each artifact with every run it could
join). Advice pools runs across groups (same config echo), so rules and advice wait for
the merge; each run's event tables and frames are packed (zlib-pickled, about 7 KB for a
small pod log against 0.3 MB of pandas) until the merge reads them run by run.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import tzinfo
from typing import Any

import pandas as pd

from diag.artifacts.trace import TraceAnalysis
from diag.event_frames import release_freed_memory
from diag.events import EVENT_KINDS, EventTables, empty_frame
from diag.facts.record import RunFacts, build_facts
from diag.facts.runs import split_runs
from diag.fleet.groups import InputGroup
from diag.fleet.joins import attach_artifacts, attach_traces, run_profiles
from diag.ingest import Ingested, ProgressFn, StageFn, ingest_files
from diag.model import InputStatus, Snapshot
from diag.sources.readers import LineAnchor

_NO_ROWS = pd.DataFrame()


def pack(value: Any) -> bytes:
    return zlib.compress(pickle.dumps(value, protocol=5), 1)


def unpack(data: bytes) -> Any:
    return pickle.loads(zlib.decompress(data))


class PackedTables(EventTables):
    """Event tables kept packed kind by kind; the last frames read stay unpacked (runs are
    read one at a time, and advice reads only its few kinds of each)."""

    _last: list[tuple[PackedTables, dict[str, pd.DataFrame]]] = []  # (held, not by id)

    def __init__(self, frames: Mapping[str, pd.DataFrame]) -> None:
        self._packed = {kind: pack(frame) for kind, frame in frames.items()}

    def _cached(self) -> dict[str, pd.DataFrame]:
        for held, frames in PackedTables._last:
            if held is self:
                return frames
        frames = {}
        PackedTables._last[:] = [(self, frames)]
        return frames

    def __getitem__(self, kind: str) -> pd.DataFrame:
        if kind not in self._packed:
            if kind in EVENT_KINDS:
                return empty_frame(kind)
            raise KeyError(kind)
        frames = self._cached()
        if kind not in frames:
            frames[kind] = unpack(self._packed[kind])
        return frames[kind]

    @property
    def _frames(self) -> dict[str, pd.DataFrame]:
        return {kind: self[kind] for kind in self._packed}

    @_frames.setter
    def _frames(self, frames: dict[str, pd.DataFrame]) -> None:
        self._packed = {kind: pack(frame) for kind, frame in frames.items()}
        PackedTables._last.clear()

    def unpacked(self) -> EventTables:
        return EventTables({kind: unpack(data) for kind, data in self._packed.items()})


@dataclass
class PackedRun:
    """A run's facts with its frames packed: ``light`` is what advice reads (every field
    but the row frames); :meth:`facts` gives the run back whole."""

    light: RunFacts
    frames: bytes | None  # (batches, requests); None: ``light`` is the whole run, unpacked

    @classmethod
    def of(cls, f: RunFacts) -> PackedRun:
        tables = PackedTables(f.run.tables._frames)
        light = replace(f, run=replace(f.run, tables=tables), batches=_NO_ROWS, requests=_NO_ROWS)
        return cls(light, pack((f.batches, f.requests)))

    def facts(self) -> RunFacts:
        if self.frames is None:  # held live (a single group: nothing to bound)
            return self.light
        batches, requests = unpack(self.frames)
        # the event tables stay packed, each kind unpacked when first read: a report reads a
        # few kinds of a run (its phases, requests), and unpacking all ~12 each time cost a
        # fleet of 1,000 pods 24 ms a run per read (bench/many_files.py --command)
        return replace(self.light, batches=batches, requests=requests)


@dataclass
class GroupFacts:
    """One group, read: its inputs' statuses, runs, artifacts, and its event tables packed
    (``Report.tables``; None where they stay on a cluster worker; the frames themselves when
    the group is read unpacked)."""

    inputs: list[InputStatus]
    runs: list[PackedRun]
    run_profiles: list[dict[str, Any]]  # operator tables logged inside the runs
    profiles: list[dict[str, Any]]  # standalone table files
    snapshots: list[Snapshot]
    traces: list[TraceAnalysis] = field(default_factory=list)
    tables: bytes | dict[str, pd.DataFrame] | None = None
    line_anchors: dict[str, tuple[LineAnchor, ...]] = field(default_factory=dict)  # Ingested's


def read_group(
    group: InputGroup,
    tz: tzinfo | None = None,
    *,
    jobs: int | None = None,
    progress: ProgressFn | None = None,
    stage: StageFn | None = None,
    keep_tables: bool = True,
    packed: bool = True,
) -> GroupFacts:
    """Ingest one group and build its facts, artifacts joined (the steps of ``analyze``
    that stay inside a group)."""
    ing = ingest_files(group.files, (), progress, jobs=jobs, stage=stage)
    return group_facts(ing, tz, keep_tables, stage, packed)


def group_facts(
    ing: Ingested,
    tz: tzinfo | None = None,
    keep_tables: bool = True,
    stage: StageFn | None = None,
    packed: bool = True,
) -> GroupFacts:
    """The facts of what one group's ingest read, artifacts joined, frames packed.

    ``packed=False`` (the only group of an analysis: one large log, nothing to bound) keeps
    the runs and tables as they are: packing them would only cost time and a second copy."""
    if stage is not None:
        stage("splitting runs", 0, 0)
    split = split_runs(ing.tables, ing.streams)
    facts = []
    for i, run in enumerate(split):
        if stage is not None:
            stage("facts per run", i, len(split))
        facts.append(build_facts(run))
    release_freed_memory()  # the stages' temporaries, kept by the allocators otherwise
    attach_artifacts(facts, ing)
    attach_traces(facts, ing.traces, tz)
    return GroupFacts(
        ing.inputs,
        [PackedRun.of(f) if packed else PackedRun(f, None) for f in facts],
        run_profiles(facts),
        [dict(p) for p in ing.profiles],
        ing.snapshots,
        ing.traces,
        (pack(ing.tables._frames) if packed else ing.tables._frames) if keep_tables else None,
        ing.line_anchors,
    )
