"""The shared typed records every layer passes on: inputs, streams, snapshots, findings.

A leaf module (it imports nothing of diag), so that sources, ingest, facts, rules and
renderers can all name these types without importing each other. ``to_dict`` gives each
record's part of the ``graphdiag.report/1`` JSON (INTERFACE.md); keys and order are the
contract.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

InputKind = Literal[
    "log", "metrics", "server_info", "profile_table", "memory_snapshot", "trace", "unknown"
]
InputState = Literal["ok", "partial", "skipped"]
Severity = Literal["error", "warning", "info"]
PoolKind = Literal["default", "graph"]

SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}
GIB = 2**30


@dataclass
class InputStatus:
    """One row of the report's ``inputs``: every input gets one, with the reason if skipped."""

    path: str
    kind: str = "unknown"  # an InputKind
    backend: str = "unknown"  # vllm | sglang | unknown (diag.engines.Backend)
    status: str = "ok"  # an InputState
    reason: str | None = None
    lines: int | None = None
    events: int | None = None
    stream: str | None = None
    # what reading changed or could not follow: NUL bytes dropped, a symlinked folder not
    # followed, a log cut inside a traceback
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("stream")
        return d


@dataclass
class Stream:
    """The files of one rotated set, read as one log."""

    id: str
    backend: str
    sources: list[str] = field(default_factory=list)
    # log, or server_info: a document read as events, joined to a log's run beside it
    kind: str = "log"
    # where the year of year-less log lines came from (diag.ingest.clock)
    year_source: str = "unknown"  # log | mtime | unknown


# --------------------------------------------------------------------------- snapshots
@dataclass(frozen=True)
class PoolSummary:
    """One allocator pool: the default caching pool (0, 0) or a private (graph) pool."""

    pool_id: tuple[int, int]
    kind: str  # a PoolKind
    reserved_bytes: int
    allocated_bytes: int
    segments: int
    active_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool_id": [self.pool_id[0], self.pool_id[1]],
            "kind": self.kind,
            "reserved_bytes": self.reserved_bytes,
            "allocated_bytes": self.allocated_bytes,
            "segments": self.segments,
        }


@dataclass(frozen=True)
class TopAllocation:
    """A large live block and where it was allocated (innermost useful frames first)."""

    bytes: int
    frames: list[str]
    requested_bytes: int = 0
    pool_id: tuple[int, int] = (0, 0)
    state: str = "active_allocated"

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "frames": list(self.frames)}


@dataclass
class SnapshotSummary:
    """What graphdiag reports about one snapshot file."""

    path: str
    torch_format: str | None
    total_reserved_bytes: int
    total_allocated_bytes: int
    total_active_bytes: int
    peak_bytes: int | None
    oom_events: int
    pools: list[PoolSummary] = field(default_factory=list)
    top_allocations: list[TopAllocation] = field(default_factory=list)
    segments: int = 0
    devices: list[int] = field(default_factory=list)

    @property
    def graph_pool_bytes(self) -> int:
        """Bytes reserved by CUDA-graph (non-default) pools."""
        return sum(p.reserved_bytes for p in self.pools if p.kind == "graph")

    @property
    def default_pool_bytes(self) -> int:
        """Bytes reserved by the default caching pool."""
        return sum(p.reserved_bytes for p in self.pools if p.kind != "graph")

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": "ok",
            "torch_format": self.torch_format,
            "total_reserved_bytes": self.total_reserved_bytes,
            "total_allocated_bytes": self.total_allocated_bytes,
            "total_active_bytes": self.total_active_bytes,
            "peak_bytes": self.peak_bytes,
            "oom_events": self.oom_events,
            "pools": [p.to_dict() for p in self.pools],
            "top_allocations": [a.to_dict() for a in self.top_allocations],
        }


@dataclass
class Snapshot:
    """One snapshot input as the report lists it: its summary (or why it was skipped) and
    the run it was joined to. The graph-pool total is computed here, once, for every reader.

    ``snapshot["pools"]`` reads the JSON view (``to_dict``), for code and tests that treat
    the report's snapshots as the records INTERFACE.md describes.
    """

    path: str
    summary: SnapshotSummary | None = None
    reason: str | None = None  # why it was skipped (summary is None)
    run: str | None = None

    @property
    def status(self) -> str:
        return "ok" if self.summary is not None else "skipped"

    @property
    def pools(self) -> list[PoolSummary]:
        return self.summary.pools if self.summary is not None else []

    @property
    def graph_pool_bytes(self) -> int:
        return self.summary.graph_pool_bytes if self.summary is not None else 0

    @property
    def default_pool_bytes(self) -> int:
        return self.summary.default_pool_bytes if self.summary is not None else 0

    @property
    def graph_pool_gib(self) -> float:
        return self.graph_pool_bytes / GIB

    def to_dict(self) -> dict[str, Any]:
        if self.summary is None:
            return {"path": self.path, "status": "skipped", "reason": self.reason}
        out = self.summary.to_dict()
        out["path"] = self.path
        if self.run is not None:
            out["run"] = self.run
        return out

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)


# --------------------------------------------------------------------------- findings
@dataclass
class Evidence:
    path: str
    line: int  # 1-based; 0 where the input has no lines to point at (a profiler trace)
    text: str
    # text of a line at or shortly after ``line`` to point at instead (an exception line
    # below its traceback's header: diag.evidence moves there when it finds it)
    seek: str = field(default="", compare=False, repr=False)

    @property
    def where(self) -> str:
        """``path:line``, or the path alone where there is no line."""
        return f"{self.path}:{self.line}" if self.line > 0 else self.path

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "text": self.text}


@dataclass
class Finding:
    code: str
    name: str
    severity: str  # a Severity
    message: str
    evidence: list[Evidence] = field(default_factory=list)
    remediation: list[str] = field(default_factory=list)
    # the cause that picked the remedies (e.g. GD100's error cause); None: one for all
    cause: str | None = None
    # how much the finding costs a server, from its rule (a failure before a warning, a KV
    # squeeze before padding): the order findings are shown and acted on (finding_key)
    impact: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = {
            "code": self.code,
            "name": self.name,
            "severity": self.severity,
            "message": self.message,
            "evidence": [e.to_dict() for e in self.evidence],
            "remediation": list(self.remediation),
        }
        if self.cause is not None:
            out["cause"] = self.cause
        return out


def finding_key(f: Finding) -> tuple[int, int, str]:
    """Sort key of findings: most severe first, then the rule's impact, then the code."""
    return (SEVERITY_ORDER.get(f.severity, 9), -f.impact, f.code)


def first_change(findings: Sequence[Finding]) -> Finding | None:
    """The finding to act on first: the first in :func:`finding_key` order with a remedy.
    Renderers call this; none decides it on its own."""
    return next((f for f in sorted(findings, key=finding_key) if f.remediation), None)


def clean_json(value: Any) -> Any:
    """NaN -> None, numpy scalars -> Python, tuples -> lists, records -> their JSON view."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:  # most values: as they are
        return value
    if t is dict:
        return {k if type(k) is str else str(k): clean_json(v) for k, v in value.items()}
    if t is list or t is tuple:
        return [clean_json(v) for v in value]
    if t is float:
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, Snapshot):
        return clean_json(value.to_dict())
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if value is not None and type(value).__name__ == "NAType":
        return None
    return value


_SENTENCE_END = (".", ":", "!", "?", ")", "]", "'", '"')


def headline(message: str) -> str:
    """An error message's first line, with the lines a hard wrap cut it into joined back: a
    line that ends mid-sentence goes on in the next (a terminal's or a forum's fold), a line
    that ends a sentence ends the headline (SGLang's "Possible solutions" after it)."""
    lines = [ln.strip() for ln in message.strip().split("\n")]
    out = lines[0]
    for ln in lines[1:]:
        if not ln or out.endswith(_SENTENCE_END):
            break
        out = f"{out} {ln}"
    return out
