"""A run's facts and event tables held packed between the facts stage and the rules.

A fleet reads group after group (:func:`diag.pipeline.analyze`): each run's event tables and
row frames are packed (zlib-pickled, about 7 KB for a small pod log against 0.3 MB of
pandas) until the rules read them run by run, and the groups' tables are joined only when a
reader first asks (``Report.tables``). One group alone is held as it is (:func:`live`).
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from diag.events import EVENT_KINDS, EventTables, empty_frame
from diag.facts.record import RunFacts
from diag.spill import Held, Spilled, spill


class _NoRows(pd.DataFrame):  # type: ignore[misc]
    """The empty rows of a run's light facts, pickled as a reference to the one instance
    (an empty DataFrame pickled by value cost ~30 us to read back, twice a load)."""

    def __reduce__(self) -> str:
        return "_NO_ROWS"


_NO_ROWS = _NoRows()


def pack(value: Any) -> bytes:
    return zlib.compress(pickle.dumps(value, protocol=5), 1)


def unpack(data: bytes) -> Any:
    return pickle.loads(zlib.decompress(data))


class PackedTables(EventTables):
    """Event tables kept packed, all kinds in one blob, unpacked whole on the first read;
    the last run's frames read stay unpacked (runs are read one at a time). One blob, not
    one a kind: each packed DataFrame carries ~1.2 KB of its own metadata, so a small pod's
    11 kinds took 13.9 KB packed one by one against 5.1 KB together (bench/many_files.py)."""

    _last: list[tuple[PackedTables, dict[str, pd.DataFrame]]] = []  # (held, not by id)

    def __init__(self, frames: Mapping[str, pd.DataFrame]) -> None:
        self._kinds = tuple(frames)
        self._packed = pack(dict(frames))

    def _cached(self) -> dict[str, pd.DataFrame]:
        for held, last in PackedTables._last:
            if held is self:
                return last
        frames: dict[str, pd.DataFrame] = unpack(self._packed)
        PackedTables._last[:] = [(self, frames)]
        return frames

    def __getitem__(self, kind: str) -> pd.DataFrame:
        if kind not in self._kinds:
            if kind in EVENT_KINDS:
                return empty_frame(kind)
            raise KeyError(kind)
        return self._cached()[kind]

    @property
    def _frames(self) -> dict[str, pd.DataFrame]:
        return dict(self._cached())

    @_frames.setter
    def _frames(self, frames: dict[str, pd.DataFrame]) -> None:
        self._kinds = tuple(frames)
        self._packed = pack(dict(frames))
        PackedTables._last.clear()

    def unpacked(self) -> EventTables:
        return EventTables(unpack(self._packed))


@dataclass(frozen=True)
class PackedRun:
    """A run's facts with its frames packed: ``light`` is what advice reads (every field
    but the row frames), spilled past the runs read last (:class:`diag.spill.Held`: a
    fleet's runs are all held from their reading to their report); :meth:`facts` gives the
    run back whole."""

    held: Held[RunFacts]
    frames: Spilled | None  # (batches, requests); None: ``light`` is the whole run, unpacked

    @classmethod
    def of(cls, f: RunFacts) -> PackedRun:
        tables = PackedTables(f.run.tables._frames)
        light = replace(f, run=replace(f.run, tables=tables), batches=_NO_ROWS, requests=_NO_ROWS)
        return cls(Held(light), spill((f.batches, f.requests)))

    @property
    def light(self) -> RunFacts:
        return self.held.get()

    @property
    def packed(self) -> bool:
        """Are the facts kept packed (so that :meth:`facts` can give them again without
        holding them)? Not for a single group's runs, held live."""
        return self.frames is not None

    def facts(self) -> RunFacts:
        if self.frames is None:  # held live (a single group: nothing to bound)
            return self.light
        batches, requests = self.frames.load()
        # the event tables stay packed until a reader asks for a kind (most reads of a run
        # need none: advice and the fleet summary read ``light``)
        return replace(self.light, batches=batches, requests=requests)


def live(f: RunFacts) -> PackedRun:
    return PackedRun(Held(f, bounded=False), None)


class JoinedTables(EventTables):
    """The event tables of every group, concatenated when first read (``Report.tables``;
    a fleet's analysis never needs them all at once: each group's are spilled)."""

    def __init__(self, packed: list[Spilled | dict[str, pd.DataFrame]]) -> None:
        self._packed = packed
        self._joined: dict[str, pd.DataFrame] | None = None

    @property
    def _frames(self) -> dict[str, pd.DataFrame]:
        if self._joined is None:
            self._joined = concat_frames(
                [p if isinstance(p, dict) else p.load() for p in self._packed]
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
