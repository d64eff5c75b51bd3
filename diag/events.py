"""The event model: typed, columnar event tables that every later stage reads.

Parsers emit events into an :class:`EventSink`; the sink keeps one column buffer per
field (numbers in ``array('d')``) so memory grows with relevant events, not with log
lines, and sinks from parallel workers merge by concatenation. ``EventSink.tables()``
turns the buffers into one pandas DataFrame per event kind.

Every row carries the common columns ``source`` (input path), ``line`` (1-based line
number in that input), ``ts`` (seconds since the epoch, NaN when the line has no
timestamp), ``rank`` ("TP0", "DP0-TP1", ... or "" when the line names none) and
``instance`` (the docker-compose service / k8s pod a collector's prefix names, or "":
it keeps servers interleaved in one file apart).

Column dtypes (the same on the bulk and the per-line path, see ``diag.event_frames``):
numbers nullable (Int64, boolean) or float64, strings object, except the categoricals
(``source``, ``rank``, ``instance``, ``engine``; request ``action``; graph_step ``mode`` and
``origin``) and request ``request_id`` (Arrow-backed ``str``: a new value on almost every row).
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from diag.event_frames import BulkPart, FieldType, build_frame, compact_bulk
from diag.lines.periodic import LINES
from diag.lines.spec import INT_DIGITS as INT_DIGITS
from diag.lines.spec import TEXT_DIGITS as TEXT_DIGITS

if TYPE_CHECKING:  # pragma: no cover
    # pandas is imported where frames are made: the scan workers never load it (the parent
    # imports it while they read, diag.ingest)
    import pandas as pd

COMMON_COLUMNS: tuple[str, ...] = ("source", "line", "ts", "rank", "instance")

#: the magnitude past which a field's value is dropped, per field type (NaN is "missing");
#: the digit limits are the line declarations' (diag.lines.spec)
FIELD_LIMITS: dict[str, float] = {"int": 10.0**INT_DIGITS, "bool": 2.0, "float": math.inf}


@dataclass(frozen=True)
class EventKind:
    """One event table: its name, its fields and what a row means."""

    name: str
    fields: tuple[tuple[str, FieldType], ...]
    doc: str

    @property
    def columns(self) -> tuple[str, ...]:
        return COMMON_COLUMNS + tuple(name for name, _ in self.fields)


#: a declared line field's type -> its column's type
_COLUMN_TYPE: dict[str, FieldType] = {"int": "int", "num": "float", "unum": "float", "bool": "bool"}


def _kind(kind_name: str, doc: str, **fields: FieldType) -> EventKind:
    """An event table: the fields named here, then every field a periodic line declares
    for it (:mod:`diag.lines.periodic`) that is not named here: a field is declared once,
    in its line, and its column follows (a field named in both must agree on its type)."""
    columns = dict(fields)
    for spec in LINES.values():
        if spec.table != kind_name:
            continue
        declared = [(n, _COLUMN_TYPE.get(t, "str")) for n, t in spec.fields()]
        for name, typ in [*declared, *((c, "str") for c, _ in spec.consts)]:
            if columns.setdefault(name, typ) != typ:
                raise ValueError(f"{kind_name}.{name}: {columns[name]} here, {typ} in {spec.name}")
    return EventKind(kind_name, tuple(columns.items()), doc)


EVENT_KINDS: dict[str, EventKind] = {
    k.name: k
    for k in (
        _kind(
            "startup",
            "A server start-up marker (config echo, launch banner); splits runs.",
            engine="str",
            marker="str",
        ),
        _kind("version", "The engine version as printed.", engine="str", version="str"),
        _kind(
            "config",
            "One effective configuration setting (server_args, engine config, CLI args).",
            engine="str",
            origin="str",
            key="str",
            value="json",
        ),
        _kind(
            "capture_begin",
            "A capture phase begins on a rank.",
            engine="str",
            phase="str",
            avail_mem_gib="float",
            sizes="json",
        ),
        _kind(
            "capture_end",
            "A capture phase ends on a rank.",
            engine="str",
            phase="str",
            time_s="float",
            mem_gib="float",
            avail_mem_gib="float",
        ),
        _kind(
            "capture_sizes",
            "A captured size list (batch sizes or token counts) or a count/largest summary.",
            engine="str",
            phase="str",
            mode="str",
            sizes="json",
            count="int",
            largest="int",
        ),
        _kind(
            "capture_progress",
            "A tqdm capture progress state.",
            engine="str",
            phase="str",
            mode="str",
            done="int",
            total="int",
            size="int",
            avail_mem_gib="float",
        ),
        _kind(
            "graph_mode",
            "The graph mode requested or in effect (vLLM cudagraph_mode, SGLang graph kind).",
            engine="str",
            mode="str",
            origin="str",
            downgraded="bool",
            text="str",
            backend="str",  # the attention backend that refused a mode (vLLM downgrades)
        ),
        _kind(
            "graph_disabled",
            "The engine says capture is off (eager mode, disabled flag, unsupported model).",
            engine="str",
            reason="str",
            text="str",
        ),
        _kind(
            "error",
            "An exception or error line: class and capture marks from the signature table, the phase of "
            "its innermost deciding frame (phase) and the phase the log lines had opened (log_phase); "
            "the engine raise site its text matches (site, package==version:path:line) and its cause.",
            engine="str",
            error_class="str",
            message="str",
            capture_related="bool",
            explicit_capture="bool",
            phase="str",
            log_phase="str",
            secondary="bool",
            reason="str",
            frame_cause="str",  # the cause its innermost frames name (engines/frame_causes.py)
            cause="str",
            site="str",
            graph_frame="str",  # an op that runs only in a graph: "phase|func" (phases.yaml graph)
        ),
        _kind(
            "phase",
            "A log line opened a start-up phase (diag/engines/data/phases.yaml markers) on a process.",
            engine="str",
            phase="str",
        ),
        _kind(
            "input_note",
            "Something about the input itself a reader must know (a log cut inside a traceback).",
            text="str",
        ),
        _kind(
            "sizing",
            "A KV / memory sizing figure as printed (name, value, unit).",
            engine="str",
            name="str",
            value="float",
            unit="str",
        ),
        _kind(
            "advisory",
            "An engine advisory about graph memory or KV capacity.",
            engine="str",
            topic="str",
            value="float",
            text="str",
        ),
        _kind(
            "decode_batch",
            "A periodic decode batch line (SGLang) with its graph flag when logged.",
            engine="str",
        ),
        _kind(
            "prefill_batch",
            "A prefill/extend batch line.",
            engine="str",
        ),
        _kind(
            "stats",
            "A periodic engine stats line (vLLM V0/V1 LoggingStatLogger).",
            engine="str",
            preemptions="int",
        ),
        _kind(
            "graph_step",
            "Per-step or per-interval graph dispatch as logged (vLLM DEBUG step lines, cudagraph-metrics rows).",
            engine="str",
        ),
        _kind(
            "iteration",
            "A per-iteration line (vLLM --enable-logging-iteration-details): the step's "
            "context (prefill) and generation (decode) requests and tokens; host time.",
            engine="str",
        ),
        _kind(
            "metric",
            "A graph counter sample of a /metrics scrape (SGLang cuda_graph_passes_total, vLLM "
            "cudagraph_iterations): its mode label, tp_rank, value and scrape index.",
            engine="str",
            name="str",
            mode="str",
            tp_rank="int",
            value="float",
            scrape="int",
        ),
        _kind(
            "request",
            "A request life-cycle line (received/added/finished/aborted).",
            engine="str",
        ),
        _kind(
            "retract",
            "KV pool full: requests retracted (SGLang) or preempted (vLLM).",
            engine="str",
            count="int",
            text="str",
        ),
        _kind(
            "profile",
            "A profiler operator table logged during capture (--enable-profile-cuda-graph).",
            engine="str",
            sort_by="str",
            rows="int",
            table="json",
        ),
        _kind(
            "benchmark",
            "A benchmark summary figure (TTFT/ITL/throughput) found in the log.",
            engine="str",
            name="str",
            value="float",
        ),
    )
}


def encode_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


class _Table:
    """Column buffers for one event kind."""

    __slots__ = ("kind", "cols", "types", "n", "_numeric", "_json", "_plain")

    def __init__(self, kind: EventKind) -> None:
        self.kind = kind
        self.types: dict[str, FieldType] = {
            "source": "str",
            "line": "int",
            "ts": "float",
            "rank": "str",
            "instance": "str",
            **dict(kind.fields),
        }
        self.cols: dict[str, Any] = {
            name: (array("d") if t in ("int", "float", "bool") else [])
            for name, t in self.types.items()
        }
        self.n = 0
        self._plan()

    def _plan(self) -> None:
        # per-column bound append methods grouped by conversion: the hot loop does no lookups
        self._numeric = [
            (n, self.cols[n].append, FIELD_LIMITS[t])
            for n, t in self.types.items()
            if t in FIELD_LIMITS
        ]
        self._json = [(n, self.cols[n].append) for n, t in self.types.items() if t == "json"]
        self._plain = [
            (n, self.cols[n].append)
            for n, t in self.types.items()
            if t not in ("int", "float", "bool", "json")
        ]

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.kind, self.cols, self.types, self.n)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.kind, self.cols, self.types, self.n = state
        self._plan()

    def append(self, values: Mapping[str, Any]) -> list[str]:
        """Add one row; returns what was dropped from it (a number past its field's range,
        ``FIELD_LIMITS``), each as the text of an input note (empty: nothing dropped)."""
        get = values.get
        nan = math.nan
        dropped: list[str] = []
        for name, add, limit in self._numeric:
            v = get(name)
            if v is None:
                add(nan)
                continue
            try:
                f = float(v)
            except OverflowError:  # an int of more than ~308 digits
                f = math.inf
            if -limit < f < limit or f != f:
                add(f)
            else:
                add(nan)
                dropped.append(_dropped_note(self.kind.name, name, self.types[name], v))
        for name, add in self._json:
            v = get(name)
            add(None if v is None else encode_json(v))
        for name, add in self._plain:
            add(get(name))
        self.n += 1
        return dropped

    def extend(self, other: _Table) -> None:
        for name in self.types:
            self.cols[name].extend(other.cols[name])
        self.n += other.n

    def frame(self) -> pd.DataFrame:
        """This table's frame (consumes the buffers)."""
        return build_frame(self.kind.name, self.kind.fields, self.n, self.cols, [])


@dataclass
class EventSink:
    """Where parsers put events. Cheap to append to, mergeable, picklable."""

    tables: dict[str, _Table] = field(default_factory=dict)
    bulk: dict[str, list[BulkPart]] = field(default_factory=dict)
    #: the rows in ``bulk``, kept as they come: ``count`` is asked before and after each
    #: file, and summing every part of a group of 200 pod logs each time was quadratic
    bulk_rows: int = 0

    def add_bulk(self, kind: str, columns: dict[str, Any], before: np.ndarray) -> None:
        """Rows read in bulk (Arrow or numpy columns, exactly the kind's); row i goes before
        per-line row ``before[i]`` of this sink. Kept in compact form (``compact_bulk``)."""
        compact = compact_bulk(kind, EVENT_KINDS[kind].fields, columns)
        self.bulk.setdefault(kind, []).append((compact, before))
        self.bulk_rows += len(before)

    def lines_emitted(self, kind: str) -> int:
        """Per-line rows of a kind so far (where the next bulk row would go)."""
        table = self.tables.get(kind)
        return 0 if table is None else table.n

    def emit(
        self,
        kind: str,
        source: str,
        line: int,
        ts: float | None,
        rank: str | None,
        instance: str = "",
        **fields: Any,
    ) -> None:
        table = self.tables.get(kind)
        if table is None:
            table = self.tables[kind] = _Table(EVENT_KINDS[kind])
        fields.update(source=source, line=line, ts=ts, rank=rank or "", instance=instance)
        for text in table.append(fields):
            self.emit("input_note", source, line, ts, rank, instance, text=text)

    def merge(self, other: EventSink) -> None:
        for name, parts in other.bulk.items():
            shift = self.lines_emitted(name)
            self.bulk.setdefault(name, []).extend((cols, at + shift) for cols, at in parts)
        self.bulk_rows += other.bulk_rows
        for name, table in other.tables.items():
            mine = self.tables.get(name)
            if mine is None:
                self.tables[name] = table
            else:
                mine.extend(table)

    def count(self) -> int:
        return sum(t.n for t in self.tables.values()) + self.bulk_rows

    def kinds(self) -> list[str]:
        """Kinds with rows, in EVENT_KINDS order (the same however the rows were merged)."""
        return [k for k in EVENT_KINDS if k in self.tables or k in self.bulk]

    def pop_frame(self, kind: str) -> pd.DataFrame:
        """The frame of a kind; its buffers are released as the frame is built."""
        table = self.tables.pop(kind, None)
        fields = EVENT_KINDS[kind].fields
        parts = self.bulk.pop(kind, [])
        self.bulk_rows -= sum(len(at) for _, at in parts)
        if table is None:
            return build_frame(kind, fields, 0, None, parts)
        return build_frame(kind, fields, table.n, table.cols, parts)

    def to_tables(self) -> EventTables:
        return EventTables({name: self.pop_frame(name) for name in self.kinds()})


def _dropped_note(kind: str, name: str, typ: str, value: Any) -> str:
    """The input note of a dropped number: which field, and what made it unreadable (no line
    number in the text, so the note of an input is said once however often it happens)."""
    if isinstance(value, bool) or not isinstance(value, int):
        what = "a number too large for a float64" if math.isinf(value) else f"the number {value}"
    elif abs(value) >= 10**TEXT_DIGITS:
        what = f"a number of more than {TEXT_DIGITS} digits"
    else:
        what = f"a {len(str(abs(value)))}-digit number"
    bound = f"at most {INT_DIGITS} digits" if typ == "int" else f"a {typ}"
    return f"{kind} {name}: {what} is past what the field holds ({bound}): dropped"


_EMPTY: dict[str, pd.DataFrame] = {}


def empty_frame(kind: str) -> pd.DataFrame:
    """The typed empty frame of a kind (shared: callers never modify frames in place)."""
    frame = _EMPTY.get(kind)
    if frame is None:
        frame = _EMPTY[kind] = _Table(EVENT_KINDS[kind]).frame()
    return frame


class EventTables(Mapping[str, "pd.DataFrame"]):
    """One DataFrame per event kind; a missing kind reads as an empty, typed frame."""

    def __init__(self, frames: Mapping[str, pd.DataFrame] | None = None) -> None:
        self._frames: dict[str, pd.DataFrame] = dict(frames or {})

    def __getitem__(self, kind: str) -> pd.DataFrame:
        if kind in self._frames:
            return self._frames[kind]
        if kind in EVENT_KINDS:
            return empty_frame(kind)
        raise KeyError(kind)

    def __iter__(self):
        return iter(sorted(self._frames))

    def __len__(self) -> int:
        return len(self._frames)

    def filter(self, mask_fn: Any) -> EventTables:
        """A new EventTables with each frame filtered by ``mask_fn(frame) -> bool Series``."""
        return EventTables(
            {k: f[mask_fn(f)].reset_index(drop=True) for k, f in self._frames.items()}
        )

    def total(self) -> int:
        return sum(len(f) for f in self._frames.values())

    def long(self, kinds: Iterable[str] | None = None) -> pd.DataFrame:
        """All events in one frame (kind + common columns + a JSON 'data' column)."""
        rows = []
        for kind in kinds or self:
            frame = self[kind]
            if frame.empty:
                continue
            data_cols = [c for c in frame.columns if c not in COMMON_COLUMNS]
            part = frame[list(COMMON_COLUMNS)].copy()
            part.insert(0, "kind", kind)
            part["data"] = [
                encode_json(
                    {c: _plain(v) for c, v in zip(data_cols, row, strict=True) if not _missing(v)}
                )
                for row in frame[data_cols].itertuples(index=False, name=None)
            ]
            rows.append(part)
        import pandas as pd

        if not rows:
            return pd.DataFrame(columns=["kind", *COMMON_COLUMNS, "data"])
        return pd.concat(rows, ignore_index=True).sort_values(["source", "line"], kind="stable")


def _missing(v: Any) -> bool:
    import pandas as pd

    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    return v
