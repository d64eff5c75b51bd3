"""The engines' raise sites: data in ``data/raise_atlas.json`` (``tools/gen_raise_atlas.py``).

Every ``raise``, ``assert`` and ``logger.error`` of vLLM's and SGLang's graph-capture and
graph-mode code, and the warnings there that say a capture failed (the engine caught it and
went on without that graph: ``warned_capture_failure``) (and a set outside it: weight loading, tokenizer, requests, KV sizing), read
from the released packages, each a template (its literal parts, a wildcard where the source
computes a value), its class, cause and whether the words alone say "capture" (``capture``:
the site is in capture code and no site outside it prints the same template). The signature
table (:mod:`diag.engines.errors`) reads the sites at its ``atlas:`` row, so there is one
vocabulary: a text matching a capture site is capture-explicit, its class the site's.

Matching runs on every error line, so it is two steps: one regex over each site's longest
literal (the prefilter, a lookahead so overlapping literals are all seen), then the few
sites whose literal is in the text, each by its own regex.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Literal

DATA = Path(__file__).resolve().parent / "data"
Scope = Literal["capture_code", "outside"]
Level = Literal["raise", "error", "warning", "advice"]
_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class Site:
    """One raise site: the message it prints (as literal parts between wildcards) and what it
    means."""

    source: str  # package==version:path:line (the first of the sites printing this template)
    parts: tuple[str, ...]
    exc_type: str | None  # the raised class, AssertionError for assert, None for a log call
    level: Level
    error_class: str
    cause: str
    capture: bool  # the words alone say capture (see the module docstring)
    scope: Scope
    func: str  # the enclosing function (Class.method)
    also: tuple[str, ...] = ()  # other sites / versions printing the same template

    @property
    def package(self) -> str:
        return self.source.split("==", 1)[0]

    @property
    def path(self) -> str:
        return self.source.split(":")[-2]

    @property
    def line(self) -> int:
        return int(self.source.split(":")[-1])

    @property
    def anchor(self) -> str:
        """The longest literal piece of one line: what a paste keeps whatever wraps it."""
        pieces = [p.strip() for part in self.first_line for p in part.split("\n")]
        return max(pieces, key=len)

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """The template's first line: literal parts (any whitespace run matches any other:
        pastes re-wrap), each wildcard any text on the line. A message of several lines is
        known by its first, as a line-by-line paste (or one cut after it) shows it."""
        parts = list(self.first_line)
        # a wildcard at either end adds nothing to a search but time: "<x> must be an int"
        # began ".*?must", which tries every start of a 100 KB line to its end (quadratic)
        while len(parts) > 1 and not parts[0].strip():
            parts.pop(0)
        while len(parts) > 1 and not parts[-1].strip():
            parts.pop()
        out = []
        for part in parts:
            words = [re.escape(w) for w in _WS.split(part.strip())]
            out.append(r"\s+".join(words) if part.strip() else r"\s*")
        return re.compile(".*?".join(out))

    @property
    def first_line(self) -> tuple[str, ...]:
        """The parts up to the message's first line break (all of them when that first line
        holds less than 12 characters of literal text: too little to know it by)."""
        for i, part in enumerate(self.parts):
            if "\n" in part.strip():
                head = (*self.parts[:i], part.strip().split("\n", 1)[0])
                return head if len("".join(head).strip()) >= 12 else self.parts
        return self.parts

    def render(self, values: tuple[str, ...] = ()) -> str:
        """The message with each wildcard filled (``values`` in order, then ``7``)."""
        fill = list(values) + ["7"] * len(self.parts)
        out = [self.parts[0]]
        for i, part in enumerate(self.parts[1:]):
            out += [fill[i], part]
        return "".join(out)


@cache
def _raw() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / "raise_atlas.json").read_text(encoding="utf-8"))
    return data


@cache
def sites() -> tuple[Site, ...]:
    """Every site of the atlas, capture sites first."""
    return tuple(
        Site(
            r["source"],
            tuple(r["parts"]),
            r["type"],
            r["level"],
            r["class"],
            r["cause"],
            bool(r["capture"]),
            r["scope"],
            r["func"],
            tuple(r.get("also", ())),
        )
        for r in _raw()["sites"]
    )


def packages() -> tuple[str, ...]:
    """The packages (``name==version``) the atlas was read from."""
    return tuple(_raw()["packages"])


_WORD = re.compile(r"\w+")


def _whole_words(parts: tuple[str, ...]) -> set[str]:
    """The words of a template that are whole words in any rendering: not at a part's edge
    that a wildcard extends."""
    out = set()
    last = len(parts) - 1
    for i, part in enumerate(parts):
        for m in _WORD.finditer(part):
            closed_left = m.start() > 0 or i == 0
            closed_right = m.end() < len(part) or i == last
            if closed_left and closed_right and len(m.group()) >= 4:
                out.add(m.group())
    return out


@cache
def _index() -> tuple[dict[str, tuple[Site, ...]], tuple[Site, ...]]:
    """Each error site under its rarest whole word (a text is tokenised once and looked up
    word by word: one regex over 900 literals costs 2 ms a line, this some microseconds);
    the few sites with no such word are checked by their anchor."""
    rows = [s for s in sites() if s.level != "warning" or s.capture]
    words = {id(s): _whole_words(s.first_line) for s in rows}
    freq: dict[str, int] = {}
    for ws in words.values():
        for w in ws:
            freq[w] = freq.get(w, 0) + 1
    by_word: dict[str, list[Site]] = {}
    loose = []
    for s in rows:
        ws = words[id(s)]
        if not ws:
            loose.append(s)
            continue
        key = min(ws, key=lambda w: (freq[w], -len(w), w))
        by_word.setdefault(key, []).append(s)
    return {w: tuple(v) for w, v in by_word.items()}, tuple(loose)


def matches(text: str) -> list[Site]:
    """The sites whose template the text holds, capture sites first (the atlas's order)."""
    by_word, loose = _index()
    cands = [s for w in set(_WORD.findall(text)) for s in by_word.get(w, ())]
    cands += [s for s in loose if s.anchor in text]
    if not cands:
        return []
    hits = [s for s in cands if s.regex.search(text)]
    order = _order()
    return sorted(hits, key=lambda s: order[s.source])


@cache
def _order() -> dict[str, int]:
    return {s.source: i for i, s in enumerate(sites())}


@cache
def warned_capture_failure(text: str) -> Site | None:
    """The engine site that logs this text as a warning saying a capture failed (the engine
    catches the failure and goes on without that graph), if any."""
    return next((s for s in matches(text) if s.level == "warning" and s.capture), None)


def advice_anchors() -> tuple[str, ...]:
    """The anchors of the advice blocks' lines: what a line parser must be handed to see one."""
    return tuple(sorted({s.anchor for s in sites() if s.level == "advice"}))
