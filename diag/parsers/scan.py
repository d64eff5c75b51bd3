"""The scanner: physical lines in, events out, for one stream (a rotated set).

Hot path: one compiled bytes regex (the union of every active parser's literal anchors)
decides whether a physical line is looked at at all. Only candidate lines are decoded,
split into logical lines, stripped of prefixes and handed to parsers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from diag.events import EventSink
from diag.normalize.lines import split_logical
from diag.normalize.prefix import peel
from diag.parsers.base import Block, Context, LineParser


def anchor_regex(parsers: Sequence[LineParser]) -> re.Pattern[bytes]:
    anchors = sorted({a for p in parsers for a in p.anchors}, key=lambda a: (-len(a), a))
    return re.compile(b"|".join(re.escape(a.encode()) for a in anchors))


@dataclass
class StreamScanner:
    """Scans the files of one stream in order with shared parser state."""

    parsers: Sequence[LineParser]
    sink: EventSink
    backend: str
    ctx: Context = field(init=False)
    blocks: list[Block] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ctx = Context(self.sink, self.backend)
        self._anchor = anchor_regex(self.parsers)

    def scan(self, source: str, lines: Iterable[bytes], first_lineno: int = 1) -> int:
        """Scan one file's physical lines; returns how many there were."""
        search = self._anchor.search
        lineno = first_lineno - 1
        for raw in lines:
            lineno += 1
            if not self.blocks and search(raw) is None:
                continue
            self._handle(source, lineno, raw)
        return lineno - first_lineno + 1

    def _handle(self, source: str, lineno: int, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\n")
        for logical in split_logical(text):
            line = peel(source, lineno, logical)
            if self.blocks and self._offer(line):
                continue
            for parser in self.parsers:
                block = parser.feed(line, self.ctx)
                if block is not None:
                    self.blocks.append(block)
                    if block.done:
                        self._close(block)

    def _offer(self, line) -> bool:  # type: ignore[no-untyped-def]
        taken = False
        for block in list(self.blocks):
            if block.offer(line):
                taken = True
            if block.done:
                self._close(block)
            if taken:
                break
        # a line no open block wants closes the blocks that expect contiguity
        return taken

    def _close(self, block: Block) -> None:
        self.blocks.remove(block)
        block.finish(self.ctx)

    def close(self) -> None:
        """End of stream: finish blocks cut off by the end of input."""
        for block in list(self.blocks):
            self._close(block)
