"""The groups' compact facts made into one ``Report``, exactly as one pass makes it.

What a fleet adds to the pipeline's last stages (:func:`diag.pipeline.judge`: advice
across groups, then rules and report group by group): the evidence lines read by the line
anchors every group's ingest left, and the groups' event tables joined when first read.
Inputs, runs, profiles, snapshots and traces come in reading order: groups are contiguous
ranges of it (:mod:`diag.fleet.groups`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from diag.events import EventTables
from diag.evidence import LineReader, read_all
from diag.fleet.partial import unpack
from diag.pipeline import GroupFacts, Tell, judge
from diag.report import Report
from diag.sources.discover import Problem


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
    if read is None:
        anchors = {path: a for part in parts for path, a in part.line_anchors.items()}

        def read(wanted: Mapping[str, set[int]]) -> Mapping[str, Mapping[int, str]]:
            return read_all(wanted, anchors)

    tables = JoinedTables([part.tables for part in parts if part.tables is not None])
    return judge(problems, parts, tables, rules_file, generated_at, read, tell, starts_per_day)


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
