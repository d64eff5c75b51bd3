"""Cause and class from a traceback's frames: data in ``data/frame_causes.yaml``.

A message such as ``CUDA error: invalid argument`` names no component; the innermost frames
do (``custom_all_reduce.py ... register_graph_buffers``). The remedy then starts where the
engine's own switch for that component is (``--disable-custom-all-reduce``), not with memory
settings. Read at one point of the traceback parser, so each error event carries it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import yaml

from diag.engines.phases import DATA, split_frame_code


@dataclass(frozen=True)
class FrameCause:
    cause: str
    error_class: str
    over: frozenset[str]  # the message classes it may replace
    file: re.Pattern[str]
    func: re.Pattern[str]
    code: re.Pattern[str] | None
    source: str

    def matches(self, path: str, func: str, code: str) -> bool:
        if self.code is not None and self.code.match(code) is None:
            return False
        return self.file.search(path) is not None and self.func.fullmatch(func) is not None


def _file_regex(pattern: str) -> re.Pattern[str]:
    """phases.yaml's path-suffix form: '*' any characters but '/', '**' any."""
    parts = [re.escape(p).replace(r"\*", "[^/]*") for p in pattern.split("**")]
    return re.compile(r"(?:^|/)" + ".*".join(parts) + "$")


@cache
def _table() -> tuple[int, tuple[FrameCause, ...]]:
    raw = yaml.safe_load((DATA / "frame_causes.yaml").read_text(encoding="utf-8"))
    rows = tuple(
        FrameCause(
            str(r["cause"]),
            str(r["class"]),
            frozenset(r["over"]),
            _file_regex(r["file"]),
            re.compile(r["func"]),
            re.compile(r["code"]) if r.get("code") else None,
            str(r["source"]),
        )
        for r in raw["rows"]
    )
    return int(raw["depth"]), rows


def frame_cause(frames: list[str]) -> FrameCause | None:
    """The row of the innermost matching frame among the innermost ``depth`` (outermost
    first in ``frames``), or None."""
    depth, rows = _table()
    for frame in reversed(frames[-depth:]):
        parts = split_frame_code(frame)
        if parts is None:
            continue
        for row in rows:
            if row.matches(*parts):
                return row
    return None


def class_and_cause(message_class: str, frames: list[str]) -> tuple[str, str | None]:
    """The error class with the frames read too, and the frames' cause (None: they name
    none, or the message's class is more precise than the row may replace)."""
    row = frame_cause(frames)
    if row is None or message_class not in row.over:
        return message_class, None
    return row.error_class, row.cause
