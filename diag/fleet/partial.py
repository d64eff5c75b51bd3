"""One input group read into compact facts: what the merge needs of it, no event tables.

Reading a group is the pipeline's stages that only look inside the group
(:func:`diag.pipeline.group_stages`: ingest, the run split, facts per run with the group's
snapshots, tables and traces joined to its runs; :func:`diag.fleet.groups.group_files`
keeps each artifact with every run it could join). Advice pools runs across groups (same config echo), so rules and advice wait for
the merge; each run's event tables and frames are packed (zlib-pickled, about 7 KB for a
small pod log against 0.3 MB of pandas) until the merge reads them run by run.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import tzinfo
from typing import Any

import pandas as pd

from diag.events import EVENT_KINDS, EventTables, empty_frame
from diag.facts.record import RunFacts
from diag.fleet.groups import InputGroup
from diag.ingest import Ingested, ProgressFn, StageFn
from diag.pipeline import GroupFacts as GroupFacts  # re-exported: the driver reads it here
from diag.pipeline import group_stages, ingest_stage, inputs_stage, quiet

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
    """Stages 1-4 of the pipeline on one group (ingest, runs, facts with joins), packed."""
    ing = ingest_stage(inputs_stage(group.files), jobs=jobs, progress=progress, stage=stage)
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
    tables = (pack(ing.tables._frames) if packed else ing.tables._frames) if keep_tables else None
    return group_stages(
        ing,
        tz,
        PackedRun.of if packed else _live,
        tables,
        quiet if stage is None else stage,
    )


def _live(f: RunFacts) -> PackedRun:
    return PackedRun(f, None)
