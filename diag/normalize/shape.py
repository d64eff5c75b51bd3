"""A stream's unlisted per-line prefix, learned from the structure of its lines.

A launcher nobody listed (journald's ``Dec 01 10:00:00 host python3[123]: ``, Rust tracing's
``2025-04-23T03:35:43.390Z  INFO crate::worker: VLLM: ``) puts the same *shape* of text before
every line: the digits change, the words do not. Two structures show where it ends:

- an engine header further into a line (:func:`diag.normalize.prefix.peel` reports what
  stood before it as ``LogLine.unlisted``);
- a traceback frame, ``File "...", line N, in f``, which Python prints at the start of its
  line after two spaces, so whatever stands before those two spaces is a prefix (before the
  one space that separates it, where a paste lost the indentation).

The shape (digits generalised, level words and padding free) is then stripped from the
header-less lines of the stream that start with it: the code and caret lines, exception
lines, tqdm bars and C++ error lines that carry no structure of their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from diag.normalize.prefix import LogLine

_LEVEL = re.compile(r"\b(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)\b")
_FRAME = re.compile(r'File "[^"]+", line \d+')
# text of a traceback itself, never part of a launcher's prefix (glued pastes put a frame
# after "Traceback (most recent call last):" on one line)
_NOT_A_PREFIX = re.compile(r'Traceback \(|File "|\w(?:Error|Exception)\b|During handling|\^')
MAX_SHAPES = 4  # distinct launchers in one stream (newest kept)
MAX_PREFIX = 120


def shape_of(prefix: str) -> str:
    """A regex for every prefix of this one's shape: digit runs and level words free, inner
    padding free, the separator after it exact."""
    core = prefix.rstrip()
    sep = prefix[len(core) :]
    out = []
    pos = 0
    for m in re.finditer(r"\d+|[ \t]+|" + _LEVEL.pattern, core):
        out.append(re.escape(core[pos : m.start()]))
        tok = m.group(0)
        out.append(r"\d+" if tok[0].isdigit() else r"[ \t]+" if tok[0] in " \t" else _LEVEL.pattern)
        pos = m.end()
    out.append(re.escape(core[pos:]))
    return "".join(out) + re.escape(sep)


@lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


@dataclass
class PrefixShapes:
    """Per-stream state: the unlisted prefix shapes seen so far (newest last)."""

    shapes: tuple[str, ...] = ()

    def learn(self, prefix: str) -> None:
        if not prefix.strip() or len(prefix) > MAX_PREFIX or _NOT_A_PREFIX.search(prefix):
            return
        pattern = shape_of(prefix)
        if pattern not in self.shapes:
            self.shapes = (*self.shapes, pattern)[-MAX_SHAPES:]


def unprefix(line: LogLine, state: PrefixShapes) -> None:
    """Learn the stream's unlisted prefix from ``line`` and strip a learned one from it."""
    if line.unlisted is not None:
        state.learn(line.unlisted)
        return
    if line.header is not None:
        return
    msg = line.msg
    if 'File "' in msg:
        m = _FRAME.search(msg)
        if m is not None and m.start() > 2 and msg[m.start() - 2 : m.start()] == "  ":
            state.learn(msg[: m.start() - 2])
        elif m is not None and m.start() > 1 and msg[m.start() - 1] == " ":
            state.learn(msg[: m.start()])  # a paste that lost the frame's indentation
    for pattern in reversed(state.shapes):
        m = _compiled(pattern).match(msg)
        if m is not None and m.end() > 0:
            line.unlisted = msg[: m.end()]
            line.msg = msg[m.end() :]
            return
