"""The start-up phase model of each engine: data in ``data/phases.yaml``.

``place(frames)`` walks a traceback's frames from the outermost inward and keeps the phase of
the innermost *decisive* frame. Graph wrappers (vLLM ``CUDAGraphWrapper.__call__``, SGLang
``replay``) never decide: they run eagerly during memory profiling, capture and serving,
unless a row's ``code`` regex names the source line of their capture branch (the line a
traceback prints under the frame): that line runs only while a graph is captured.
Dispatch frames (engine-core init, worker RPC loops) carry whatever phase they call.
Graph frames (an op that runs only inside a captured or replayed graph) never decide either:
``graph_frame`` names them, and the run's own lines say which of the two it was.
``LogMarkers`` say which phase a log line opens, for errors no frame places.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import yaml

Phase = Literal[
    "args",
    "weights",
    "memory_profiling",
    "kv_allocation",
    "backend_init",  # the attention backends built after the KV pool, before any capture
    "capture_decode",
    "capture_piecewise",
    "capture_draft",
    "warmup_after_capture",
    "serving",
    "request",  # one request's handler (the HTTP / serving layer): not a phase of the server
    "unknown",
]
REQUEST_PHASE = "request"  # frames of one request's handler (diag/facts/request_errors.py)
CAPTURE_PHASES: frozenset[str] = frozenset({"capture_decode", "capture_piecewise", "capture_draft"})
Role = Literal["decisive", "wrapper", "dispatch", "graph"]
DATA = Path(__file__).resolve().parent / "data"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 100x faster at start-up

# 'File "/x/y.py", line 12, in func  code line' (the parser joins a frame and its code line)
_FRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+, in (?P<func>[\w<>.]+)(?P<code>.*)')


@dataclass(frozen=True)
class FrameRule:
    phase: str | None
    role: Role
    file: re.Pattern[str]
    func: re.Pattern[str]
    versions: str
    source: str
    code: re.Pattern[str] | None = None  # the frame's source line must start with a match

    def matches(self, path: str, func: str, code: str = "") -> bool:
        if self.code is not None and self.code.match(code) is None:
            return False
        return self.file.search(path) is not None and self.func.fullmatch(func) is not None


@dataclass(frozen=True)
class LogMarker:
    phase: str
    anchors: tuple[str, ...]  # literals one of which a matching line holds (a cheap prefilter)
    regex: re.Pattern[str]
    versions: str
    source: str
    says: tuple[str, ...] = ()  # lines its source prints (what the row is tested against)


@dataclass(frozen=True)
class PhaseTable:
    """One engine's phases: the frames that place an exception and the lines that open one."""

    engine: str
    markers: tuple[LogMarker, ...]

    @property
    def frames(self) -> tuple[FrameRule, ...]:
        """Compiled on first use: the scan needs the markers for every line, the frame rules
        only once a traceback is placed (their ~240 regexes were 8 ms of every start)."""
        return _frame_rules(self.engine)

    def frame_role(self, path: str, func: str, code: str = "") -> FrameRule | None:
        for rule in self.frames:
            if rule.matches(path, func, code):
                return rule
        return None


def _file_regex(pattern: str) -> re.Pattern[str]:
    body = ".*".join(re.escape(part) for part in pattern.split("**"))
    return re.compile(r"(?:^|/)" + body.replace(r"\*", "[^/]*") + "$")


@cache
def _raw() -> dict[str, object]:
    data: dict[str, object] = yaml.load(
        (DATA / "phases.yaml").read_text(encoding="utf-8"), Loader=_LOADER
    )
    return data


def phase_order() -> tuple[str, ...]:
    order = _raw()["phase_order"]
    assert isinstance(order, list)
    return tuple(str(p) for p in order)


@cache
def phase_table(engine: str) -> PhaseTable:
    """The phase table of ``vllm`` or ``sglang`` (an empty one for anything else)."""
    raw = _raw().get(engine)
    if not isinstance(raw, dict):
        return PhaseTable(engine, ())
    markers = tuple(
        LogMarker(
            r["phase"],
            tuple(r["anchors"]),
            re.compile(r["regex"]),
            str(r.get("versions", "")),
            r["source"],
            tuple(r.get("says", ())),
        )
        for r in raw.get("markers", [])
    )
    return PhaseTable(engine, markers)


@cache
def _frame_rules(engine: str) -> tuple[FrameRule, ...]:
    raw = _raw().get(engine)
    if not isinstance(raw, dict):
        return ()
    return tuple(
        FrameRule(
            r["phase"],
            r["role"],
            _file_regex(r["file"]),
            re.compile(r["func"]),
            str(r.get("versions", "")),
            r["source"],
            re.compile(r["code"]) if r.get("code") else None,
        )
        for r in raw.get("frames", [])
    )


def split_frame(frame: str) -> tuple[str, str] | None:
    """(path, function) of a frame line, None if it is not one."""
    parts = split_frame_code(frame)
    return parts[:2] if parts else None


def split_frame_code(frame: str) -> tuple[str, str, str] | None:
    """(path, function, source line) of a frame ('' when the traceback printed no line)."""
    m = _FRAME.search(frame)
    if m is None:
        return None
    return m.group("path").replace("\\", "/"), m.group("func"), m.group("code").strip()


def _frame_rules_of(frames: list[str], engines: tuple[str, ...]) -> Iterator[tuple[FrameRule, str]]:
    """Each frame's matching rule (outermost first) with the frame's function; a frame inside
    one engine's package is read with that engine's table only."""
    for frame in frames:
        parts = split_frame_code(frame)
        if parts is None:
            continue
        own = _package_engine(parts[0])
        for table in [phase_table(e) for e in engines if own is None or e == own]:
            rule = table.frame_role(*parts)
            if rule is not None:
                yield rule, parts[1]
                break


def place(frames: list[str], engines: tuple[str, ...] = ("vllm", "sglang")) -> str | None:
    """The phase of the innermost decisive frame (outermost first in ``frames``), or None.

    A wrapper's capture line (a row with ``code``) says a graph was being captured, not which
    one: an outer frame that already named a capture phase (piecewise, draft) keeps it."""
    phase: str | None = None
    for rule, _ in _frame_rules_of(frames, engines):
        if rule.role == "decisive" and not (rule.code and phase in CAPTURE_PHASES):
            phase = rule.phase
    return phase


def graph_frame(
    frames: list[str], engines: tuple[str, ...] = ("vllm", "sglang")
) -> tuple[FrameRule, str] | None:
    """The innermost frame that runs only inside a graph, captured or replayed (role
    ``graph``): at start-up it places the error in that graph's capture, while serving in its
    replay (diag/facts/attribution.py weighs it against the run's serving lines). The rule
    and the frame's function."""
    found: tuple[FrameRule, str] | None = None
    for rule, func in _frame_rules_of(frames, engines):
        if rule.role == "graph":
            found = rule, func
    return found


@cache
def _packages() -> tuple[tuple[str, str], ...]:
    """("/package/", engine) for every package of phases.yaml ``packages``."""
    raw = _raw()["packages"]
    assert isinstance(raw, dict)
    return tuple((f"/{pkg}/", str(engine)) for engine, pkgs in raw.items() for pkg in pkgs)


def _package_engine(path: str) -> str | None:
    for marker, engine in _packages():
        if marker in path:
            return engine
    return None


def engine_of_frames(frames: list[str]) -> str | None:
    """The engine whose package (or plugin package) the frames run in (``.../vllm/...``,
    ``.../vllm_ascend/...``, ``.../sglang/...``)."""
    for frame in reversed(frames):
        parts = split_frame(frame)
        if parts is None:
            continue
        own = _package_engine(parts[0])
        if own is not None:
            return own
    return None
