"""Streamed JSON: a text buffer refilled block by block, one value decoded at a time, and
a walk past a value without building it (strings, nesting, escapes, across blocks).

The generic half of the trace reader (:mod:`diag.artifacts.trace_reader`): nothing here
knows what an event is. A value longer than ``limit`` characters, or nested deeper than
the C decoder recurses, is walked past and reported as :class:`Skipped`.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from typing import Any

SEP = re.compile(r"[ \t\n\r,]*")
WS = re.compile(r"[ \t\n\r]*")
_IN_STRING = re.compile(r'["\\]')
_STRUCTURE = re.compile(r'["{}\[\]]')
_SCALAR_END = re.compile(r"[,\]}]")
DECODE = json.JSONDecoder().raw_decode


class Buffer:
    """Decoded text of the document, refilled block by block; consumed text is dropped."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self._blocks = blocks
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.s = ""
        self.pos = 0
        self.offset = 0  # bytes dropped before ``s``: positions are bytes on both trace paths
        self.eof = False

    def more(self) -> bool:
        """Append the next block; False at the end of the document."""
        if self.eof:
            return False
        for block in self._blocks:
            text = self._decoder.decode(block)
            if text:
                self._append(text)
                return True
        self._append(self._decoder.decode(b"", final=True))
        self.eof = True
        return False

    def _append(self, text: str) -> None:
        self.offset += _utf8_len(self.s[: self.pos])
        self.s = self.s[self.pos :] + text
        self.pos = 0

    def take_bytes(self) -> bytes:
        """What is left of the text, back as bytes (with the decoder's pending bytes): the
        C scanner reads the event array as bytes, straight from the blocks."""
        pending, _ = self._decoder.getstate()
        rest = self.s[self.pos :].encode("utf-8", "surrogatepass") + pending
        self._decoder.reset()
        self.offset += _utf8_len(self.s[: self.pos])
        self.s, self.pos = "", 0
        return rest

    def next_block(self) -> bytes | None:
        block = next(self._blocks, None)
        if block is None:
            self.eof = True
        return block

    def put_bytes(self, rest: bytes, consumed: int) -> None:
        """Back to text: ``rest`` is what follows the bytes taken, ``consumed`` bytes on (after
        the event array, or where the C scan hands a break over to the text reader)."""
        self.eof = False
        self.offset += consumed
        self.s, self.pos = self._decoder.decode(rest), 0

    def peek(self, pattern: re.Pattern[str] = WS) -> str:
        """The next character after what ``pattern`` skips ('' at the end)."""
        while True:
            self.pos = pattern.match(self.s, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.s):
                return self.s[self.pos]
            if not self.more():
                return ""

    def at(self, pos: int | None = None) -> int:
        """The byte position of ``pos`` (the cursor by default) in the document (an invalid
        byte counts as its replacement character's three)."""
        return self.offset + _utf8_len(self.s[: self.pos if pos is None else pos])


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class Skipped(Exception):
    """A value walked past without decoding; the message says why."""


class Cut(Exception):
    """The document ends (or breaks) inside a value."""


def _incomplete(buf: Buffer, exc: json.JSONDecodeError) -> bool:
    return exc.pos >= len(buf.s) - 8 or exc.msg.startswith("Unterminated string")


def decode_value(buf: Buffer, limit: int) -> Any:
    """Decode the value at the cursor, refilling as needed; too big or too deep is skipped."""
    buf.peek()
    while True:
        try:
            obj, end = DECODE(buf.s, buf.pos)
        except RecursionError:
            skip_value(buf)
            raise Skipped("a value nested too deeply to decode") from None
        except json.JSONDecodeError as exc:
            if buf.eof:
                raise Cut(f"the document ends inside a value at byte {buf.at()}") from None
            if not _incomplete(buf, exc):
                start = buf.at()
                skip_value(buf)
                raise Skipped(f"malformed JSON at byte {start} ({exc.msg})") from None
            if len(buf.s) - buf.pos > limit:
                start = buf.at()
                skip_value(buf)
                raise Skipped(f"a value of more than {limit >> 20} MiB at byte {start}") from None
            buf.more()
            continue
        if end >= len(buf.s) and not buf.eof and not isinstance(obj, dict | list | str):
            buf.more()  # a number cut at the block's end decodes as a shorter one
            continue
        buf.pos = end
        return obj


def skip_value(buf: Buffer) -> None:
    """Walk past one value without building it: strings, nesting, escapes, across blocks."""
    first = buf.peek()
    if first in "}]":  # a stray closer where a value belongs: it is the value walked past
        buf.pos += 1  # (never zero characters: the caller would meet it again, forever)
        return
    if first not in '{["':
        while True:
            m = _SCALAR_END.search(buf.s, buf.pos)
            if m is not None:
                buf.pos = m.start()
                return
            buf.pos = len(buf.s)
            if not buf.more():
                raise Cut("the document ends inside a value")
    depth = 0
    in_string = False
    while True:
        s, i = buf.s, buf.pos
        while True:
            m = (_IN_STRING if in_string else _STRUCTURE).search(s, i)
            if m is None:
                i = len(s)
                break
            c = m.group()
            if c == "\\":
                if m.end() >= len(s):  # the escaped character is in the next block
                    i = m.start()
                    break
                i = m.end() + 1
                continue
            i = m.end()
            if c == '"':
                in_string = not in_string
                if not in_string and depth == 0:
                    buf.pos = i
                    return
            elif c in "{[":
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    buf.pos = i
                    return
        buf.pos = i
        if not buf.more():
            raise Cut("the document ends inside a value")
