"""The view model of the HTML report: small frozen records the templates read.

Templates hold no logic beyond loops and ifs over these; every value is plain text or a
number already formatted, and an unknown value is simply absent (``None`` fields are not
rendered), so nothing reaches the page as ``n/a``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

PanelKind = Literal[
    "kv-timeline",
    "batch-histogram",
    "batch-timeline",
    "batches",
    "throughput",
    "memory-budget",
    "capture-time",
    "frontier",
]


@dataclass(frozen=True)
class Card:
    """A tile: label, value, an optional second line (a long engine word goes there)."""

    label: str
    value: str
    sub: str | None = None
    cls: str = ""


@dataclass(frozen=True)
class Chart:
    """A drawn figure: its div id, what it shows, and the figure's own height in px."""

    id: str
    label: str
    kind: str
    height: int


@dataclass(frozen=True)
class SmallTable:
    """Few points as a table: the first column is a label, the others numbers."""

    kind: str
    caption: str
    columns: Sequence[str]
    rows: Sequence[Sequence[str]]


@dataclass(frozen=True)
class Panel:
    """One figure slot: a chart, a small table, or a sentence saying what is not logged."""

    kind: str
    chart: Chart | None = None
    table: SmallTable | None = None
    absent: str | None = None
    caption: str | None = None
    heading: str | None = None  # an <h3> before the panel (first panel of a group)
    fold: bool = False  # the table folded under its caption (reference material)


@dataclass(frozen=True)
class RunRow:
    """One line of the runs table (and the head of the run's section)."""

    index: int
    anchor: str
    id: str
    name: str
    worst: str | None
    engine: str
    version: str | None
    share: str | None
    capture: str | None
    kv_tokens: str | None
    counts: dict[str, int]
    codes: Sequence[str]
    summary: str  # what the run came to, without its id
    verdict_line: str  # the same with the run id, as the verdict box lists it
    verdict: str  # the run's verdict (diag.facts.verdict) and why
    verdict_reason: str
    badge: tuple[str, str]  # (severity class, label) of the verdict

    @property
    def quiet(self) -> bool:
        return not self.codes and self.verdict == "ok"


@dataclass(frozen=True)
class EvidenceLine:
    loc: str
    text: str


@dataclass(frozen=True)
class FindingCard:
    severity: str
    code: str
    name: str
    run: str
    anchor: str
    message: str
    remedies: Sequence[str]
    evidence: Sequence[EvidenceLine]
    evidence_label: str


@dataclass(frozen=True)
class FindingGroup:
    """One (code, cause) over every run it hits, for many-run reports."""

    severity: str
    code: str
    name: str
    message: str
    remedy: str | None
    runs: Sequence[tuple[str, str, str]]  # (anchor, name, "#n" as the runs table numbers it)
    # anchor, name, message, first remedy of each other run
    others: Sequence[tuple[str, str, str, str | None]] = field(default_factory=tuple)


@dataclass(frozen=True)
class FirstChange:
    anchor: str
    run_name: str
    code: str
    text: str
    more: str = ""  # "and 5 other runs" when several runs share this change
    cause: str | None = None  # the finding's cause: runs of different causes never share one
