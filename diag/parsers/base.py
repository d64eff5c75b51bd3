"""The parser extension point: small line parsers plus multi-line blocks.

A :class:`LineParser` declares literal ``anchors``; the scanner hands it only logical
lines whose physical line contains one of them (the cheap prefilter that keeps the hot
path off everything else). ``feed`` emits events and may return a :class:`Block` that
wants the following lines (a traceback, a profiler table, a metrics table). Open
blocks see every line first, prefiltered or not, until they report they are done.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from typing import Any, ClassVar, TypeVar

from diag.events import EventSink
from diag.lines.spec import TEXT_DIGITS, digits_int
from diag.normalize.prefix import LogLine

S = TypeVar("S")


class Context:
    """What a parser may touch while scanning one stream: the sink and per-stream state.

    Each parser family keeps its state in a dataclass of its own (``state_of(VllmState)``),
    so its fields are typed and no two families share a key. ``state`` is what the scanner
    snapshots and restores between segments (dataclasses compare and pickle by value)."""

    def __init__(self, sink: EventSink, backend: str) -> None:
        self.sink = sink
        self.backend = backend
        self.state: dict[type, Any] = {}
        #: rows read in bulk that a block gives back when it finishes (``add_bulk``): held
        #: here while the hot path walks a region, which places them among its own bulk
        #: rows in emission order; None: straight to the sink
        self.held: list[tuple[str, dict[str, Any], Any]] | None = None

    def state_of(self, kind: type[S]) -> S:
        """This stream's state of one parser family, made with its defaults on first use."""
        st = self.state.get(kind)
        if st is None:
            st = self.state[kind] = kind()
        return st

    def emit(self, kind: str, line: LogLine, **fields: Any) -> None:
        self.sink.emit(kind, line.source, line.lineno, line.ts, line.rank, line.instance, **fields)

    def add_bulk(self, kind: str, columns: dict[str, Any], before: Any) -> None:
        """Rows read in bulk, emitted now (``EventSink.add_bulk``'s placement)."""
        if self.held is not None:
            self.held.append((kind, columns, before))
        else:
            self.sink.add_bulk(kind, columns, before)


class Block(ABC):
    """A multi-line construct being collected."""

    done: bool = False

    @abstractmethod
    def offer(self, line: LogLine) -> bool:
        """Take ``line`` if it continues the block; set ``done`` when the block is complete."""

    @abstractmethod
    def finish(self, ctx: Context) -> None:
        """Emit the block's events (also called for blocks cut off at end of input)."""


class BulkRows(ABC):
    """A block whose rows the hot path may read in bulk while it is open: a table whose
    header row decides what each cell is. It says how many rows of its declaration
    (``row``, a ``periodic`` name) it takes now, and keeps them, to place them among its own
    rows when it finishes (the per-line path's order)."""

    row: ClassVar[str]
    key: str  # the writer it continues (``LogLine.key``): rows of another are not its own

    @abstractmethod
    def bulk_room(self) -> int:
        """How many of the next lines it takes as declared rows now (0: none, per line)."""

    @abstractmethod
    def take_bulk(self, columns: dict[str, Any], n: int) -> None:
        """``n`` rows read in bulk (the event kind's columns, a ``line`` column among them)."""


class LineParser(ABC):
    """One family of log lines (an engine, or lines common to all engines)."""

    engine: ClassVar[str] = "common"
    anchors: ClassVar[tuple[str, ...]] = ()
    #: declared table rows (``periodic`` names) it reads outside any block as a one-row
    #: table in the declared cell order: the hot path may read those in bulk too
    loose_rows: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def feed(self, line: LogLine, ctx: Context) -> Block | None:
        """Parse one prefiltered logical line."""

    def reads_every_line(self, ctx: Context) -> bool:
        """Whether, in this state, any of its lines may change the parser's state; the hot
        path (``diag.ingest.hotpath``) then hands it every line it does not read in bulk,
        and the lines it read in bulk to :meth:`note_bulk`."""
        return False

    def note_bulk(self, line: LogLine, ctx: Context) -> None:
        """While :meth:`reads_every_line`: what ``feed`` reads from a line the hot path
        consumed beyond the bulk row itself (the row is the same as ``feed`` would emit)."""
        return None


# ------------------------------------------------------------------ small shared helpers
NUM = r"-?\d[\d,]*(?:\.\d+)?"


def num(text: str | None) -> float | None:
    """'2,925,232' -> 2925232.0; None/'' -> None."""
    if text is None or text == "" or not text.isascii():  # ASCII digits only, as in bulk
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def to_int(text: str | None) -> int | None:
    """'2,925,232' -> 2925232, exactly (no float rounding); None/'' -> None."""
    if text is None or text == "":
        return None
    t = text.replace(",", "")
    digits = t[1:] if t[:1] == "-" else t
    if digits.isascii() and digits.isdigit():
        return digits_int(t)
    v = num(text)
    if v is None or math.isnan(v):
        return None
    if math.isinf(v):
        return -(10**TEXT_DIGITS) if v < 0 else 10**TEXT_DIGITS
    return int(v)


def parse_int_list(text: str) -> list[int] | None:
    """'[1, 2, 4, ...]' -> [1, 2, 4]; elided or empty lists give what is there."""
    values = [int(x) for x in re.findall(r"-?\d+", text)]
    return values or None
