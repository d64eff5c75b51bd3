"""The groups' compact facts made into one ``Report``, exactly as one pass makes it.

Every cross-run step of the analysis happens here, over all groups: advice pools the
runs of one server across groups (same stream or the same config echo), the rules read
it; then group by group the rules, the evidence lines and the recommendations, each run's
facts unpacked only while it is judged. Inputs, runs, profiles, snapshots and traces come
in reading order: groups are contiguous ranges of it (:mod:`diag.fleet.groups`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from diag.advise.fleet import FleetRun, fleet_run
from diag.advise.recommend import attach_recommendations
from diag.advise.run_advice import advise_runs
from diag.advise.traffic import RunEvidence
from diag.event_frames import release_freed_memory
from diag.events import EventTables
from diag.evidence import LineReader, read_all, resolve_evidence, rotation_chain
from diag.fleet.partial import GroupFacts, unpack
from diag.model import InputStatus
from diag.report import Report, RunReport
from diag.sources.discover import Problem

Tell = Callable[[str, int, int], None]


def merge_groups(
    problems: Sequence[Problem],
    parts: list[GroupFacts],
    rules_file: str | os.PathLike[str] | None,
    generated_at: str,
    tell: Tell,
    read: LineReader | None = None,
    starts_per_day: float | None = None,
) -> Report:
    """One report of every group's facts (each part's run list is let go once judged; a
    run's packed facts stay, as what its report unpacks them from). ``read``: how evidence
    lines are read (None: from the files here, seeking to the line anchors reading left)."""
    from diag.rules.engine import RuleEngine

    if read is None:
        anchors = {path: a for part in parts for path, a in part.line_anchors.items()}

        def read(wanted: Mapping[str, set[int]]) -> Mapping[str, Mapping[int, str]]:
            return read_all(wanted, anchors)

    inputs = [InputStatus(p.path, status="skipped", reason=p.reason) for p in problems]
    inputs += [i for part in parts for i in part.inputs]
    snapshots = [s for part in parts for s in part.snapshots]
    chain = rotation_chain([i.path for i in inputs if i.kind == "log"])
    engine = RuleEngine.load(rules_file)
    # advice first, from facts alone: the rules and every renderer quote it (issue 14)
    tell("advice (bucket sets)", 0, 0)
    lights = [r.light for part in parts for r in part.runs]
    evidence: dict[str, RunEvidence | None] = {}  # each run's, built once for both steps
    advice = advise_runs(lights, snapshots, evidence, starts_per_day)
    total = len(lights)
    fleet = total > 1
    # the fleet summary's per-run value (binned traffic) from the same evidence, each let go
    # once binned: none of it is held while the runs' frames are unpacked below
    fleet_of: dict[str, FleetRun] = {}
    for light in lights if fleet else ():
        fleet_of[light.run.id] = fleet_run(light, snapshots, evidence)
        evidence.pop(light.run.id, None)
    del evidence, lights
    release_freed_memory()
    runs: list[RunReport] = []
    for part in parts:
        mine: list[RunReport] = []
        for packed in part.runs:
            tell("rules per run", len(runs) + len(mine), total)
            f = packed.facts()
            got = advice.get(f.run.id)
            findings = engine.evaluate(f, snapshots, got)
            run_fleet = fleet_of[f.run.id] if fleet else None
            mine.append(RunReport(f, findings, advice=got, fleet=run_fleet, restore=packed.facts))
        part.runs = []
        tell("evidence", 0, 0)
        resolve_evidence(mine, read, chain)
        tell("recommendations", 0, 0)
        attach_recommendations(mine, snapshots, starts_per_day)
        runs += mine
    tables = [part.tables for part in parts]
    return Report(
        inputs,
        runs,
        [p for part in parts for p in part.run_profiles]
        + [p for part in parts for p in part.profiles],
        snapshots,
        JoinedTables([t for t in tables if t is not None]),
        generated_at,
        traces=[t for part in parts for t in part.traces],
    )


class JoinedTables(EventTables):
    """The event tables of every group, concatenated when first read (``Report.tables``;
    a fleet's analysis never needs them all at once)."""

    def __init__(self, packed: list[bytes | dict[str, pd.DataFrame]]) -> None:
        self._packed = packed
        self._joined: dict[str, pd.DataFrame] | None = None

    @property
    def _frames(self) -> dict[str, pd.DataFrame]:
        if self._joined is None:
            self._joined = concat_frames(
                [p if isinstance(p, dict) else unpack(p) for p in self._packed]
            )
        return self._joined

    @_frames.setter
    def _frames(self, frames: dict[str, pd.DataFrame]) -> None:
        self._joined = frames


def concat_frames(parts: Sequence[Mapping[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """Each kind's frames of all parts, rows in part order; categorical columns keep their
    dtype (categories in order of first appearance)."""
    if len(parts) == 1:
        return dict(parts[0])
    kinds: dict[str, list[pd.DataFrame]] = {}
    for part in parts:
        for kind, frame in part.items():
            kinds.setdefault(kind, []).append(frame)
    out: dict[str, pd.DataFrame] = {}
    for kind, frames in kinds.items():
        cats: dict[str, Any] = {}
        for col in frames[0].columns:
            if all(isinstance(f[col].dtype, pd.CategoricalDtype) for f in frames):
                cats[col] = pd.api.types.union_categoricals([f[col] for f in frames])
        joined = pd.concat(frames, ignore_index=True)
        for col, values in cats.items():
            joined[col] = values
        out[kind] = joined
    return out
