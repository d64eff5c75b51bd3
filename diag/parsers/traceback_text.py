"""A traceback's text, whatever wraps it: the markup around a paste (quotes, fences, tags), the
``traceback.lark`` grammar that splits a block into chained sections (frames and exception),
and the lines a paste glued together. No events here: :mod:`diag.parsers.traceback` reads
the blocks and the error lines."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from lark import Lark, Token, Tree, UnexpectedInput

from diag.resources import grammar_text

# ---------------------------------------------------------------- markup around pastes
_QUOTE = re.compile(r"^\s*(?:>\s?)+")
_FENCE = re.compile(r"^\s*(?:```|~~~)\w*\s*")
_TAGS = re.compile(r"</?(?:pre|code|br|p|div|span)\b[^>]*>", re.I)
_QUOTES = {("`", "`"), ('"', '"'), ("'", "'"), ("\u201c", "\u201d")}  # one quoted line


def unmark(text: str) -> str:
    """A pasted line without the markup around it: > quotes, code fences, <pre> tags,
    backticks quoting one exception line (HTML entities are decoded once, by
    ``diag.normalize.lines.clean``: decoding again would turn a logged "&amp;lt;" into "<")."""
    if not text:
        return text
    if text.lstrip().startswith(">"):
        text = _QUOTE.sub("", text)
    if "```" in text or "~~~" in text:
        text = _FENCE.sub("", text).replace("```", "")
    if "<" in text and _TAGS.search(text):
        text = _TAGS.sub("", text)
    s = text.strip()
    if len(s) > 2 and (s[0], s[-1]) in _QUOTES and s[0] not in s[1:-1]:
        text = s[1:-1]
    return text


# ---------------------------------------------------------------- grammar
@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(grammar_text("traceback.lark"), parser="lalr", lexer="contextual")


@dataclass
class Section:
    """One traceback of a (possibly chained) block: its frames and its exception text."""

    frames: list[str] = field(default_factory=list)
    exception: str | None = None


@dataclass
class ParsedTraceback:
    sections: list[Section] = field(default_factory=list)

    @property
    def frames(self) -> list[str]:
        return [f for s in self.sections for f in s.frames]

    @property
    def exceptions(self) -> list[str]:
        return [s.exception for s in self.sections if s.exception is not None]


def parse_traceback(lines: list[str]) -> ParsedTraceback:
    """Sections of a traceback block: frames and exception per chained traceback (never raises)."""
    text = "\n".join(ln.rstrip() for ln in lines) + "\n"
    out = ParsedTraceback()
    try:
        tree = _parser().parse(text)
    except UnexpectedInput:
        return _fallback(lines)
    sec = Section()
    out.sections.append(sec)
    in_exc = False
    for node in tree.children:
        if not isinstance(node, Tree):
            continue
        kind = node.data
        tokens = [t for t in node.scan_values(lambda v: isinstance(v, Token))]
        first = str(tokens[0]).strip() if tokens else ""
        if kind in ("header", "chain"):
            if sec.frames or sec.exception is not None:
                sec = Section()
                out.sections.append(sec)
            in_exc = False
        elif kind == "frame":
            if sec.exception is not None:
                sec = Section()
                out.sections.append(sec)
            sec.frames.append(" ".join(str(t).strip() for t in tokens))
            in_exc = False
        elif kind == "exception":
            if sec.exception is not None:
                sec = Section()
                out.sections.append(sec)
            sec.exception = first
            in_exc = True
        elif kind == "text" and in_exc and sec.exception is not None:
            sec.exception += "\n" + first
    out.sections = [s for s in out.sections if s.frames or s.exception is not None]
    return out


def _fallback(lines: list[str]) -> ParsedTraceback:
    out = ParsedTraceback()
    sec = Section()
    out.sections.append(sec)
    code_due = False  # the line after a frame is its source line (kept with it, as the grammar)
    for ln in lines:
        s = ln.strip()
        if s.startswith('File "'):
            if sec.exception is not None:
                sec = Section()
                out.sections.append(sec)
            sec.frames.append(s)
            code_due = True
            continue
        if code_due and s and ln[:1].isspace() and not EXC_LINE.match(s):
            sec.frames[-1] += " " + s
            code_due = False
            continue
        code_due = False
        if EXC_LINE.match(s):
            if sec.exception is not None:
                sec = Section()
                out.sections.append(sec)
            sec.exception = s
        elif sec.exception is not None and s and not s.startswith(CHAIN_WORDS):
            sec.exception += "\n" + s
    return out


# ---------------------------------------------------------------- lines lost
EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*)?(?:Error|Exception|Failure|Interrupt)(?::\s|:$|$)")
CHAIN_WORDS = ("During handling of the above", "The above exception")
CONTINUATION = re.compile(r"^(?:\s|Traceback|During handling|The above exception|\^|~)")
_GLUED_FRAME = re.compile(r"\s+(?=File \"[^\"]+\", line \d+)")
_GLUED_CHAIN = re.compile(r"\s+(?=During handling of the above|The above exception was)")
_GLUED_EXC = re.compile(r"\s+(?=(?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|Failure):\s)")
MAX_BLOCK_LINES = 2000
MAX_FOREIGN_LINES = 200  # a per-line ERROR traceback waits this long for its process's next line


def split_glued(text: str) -> list[str]:
    """A traceback pasted with its line breaks lost, back into lines: before every
    ``File "..."`` frame and chain sentence, and before the exception after the last frame."""
    if 'File "' not in text:
        return [text]
    text = _GLUED_CHAIN.sub("\n", text)
    pieces: list[str] = []
    for part in text.split("\n"):
        frames = _GLUED_FRAME.split(part)
        last = frames[-1]
        m = _GLUED_EXC.search(last)
        if m and last.startswith('File "'):
            frames[-1:] = [last[: m.start()], last[m.end() :]]
        pieces.extend("  " + f if f.startswith('File "') else f for f in frames if f.strip())
    return pieces


# ---------------------------------------------------------------- block + parser
