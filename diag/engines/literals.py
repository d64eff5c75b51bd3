"""The literals a regex's every match holds (ripgrep's "required literals"): a line without
one of them cannot match, so a parser may anchor on them instead of running the regex.

Read from the pattern's parse tree (``re._parser``): a sequence's longest literal run, an
alternation's literals branch by branch (every branch must give some), a group or a repeat
taken at least once as its content. Case-insensitive parts give none. Each literal is cut to
its first words (``MAX_ANCHOR`` characters at most): a hard-wrapped paste keeps the start of
a message on its first line.
"""

from __future__ import annotations

import re
import re._constants as sre
import re._parser as sre_parse
from collections.abc import Iterable
from typing import Any

MIN_ANCHOR = 4
MAX_ANCHOR = 24


def required_literals(pattern: str) -> frozenset[str] | None:
    """Literals one of which every match of ``pattern`` contains; None where none is known."""
    try:
        tree = sre_parse.parse(pattern)
    except re.error:
        return None
    found = _sequence(list(tree), bool(tree.state.flags & re.I))
    return frozenset(_cut(s) for s in found) if found else None


def _cut(literal: str) -> str:
    if len(literal) <= MAX_ANCHOR:
        return literal
    head = literal[:MAX_ANCHOR]
    space = head.rfind(" ", MIN_ANCHOR)
    return head[:space] if space > 0 else head


def _sequence(items: list[tuple[Any, Any]], icase: bool) -> set[str] | None:
    """The best literal set of a sequence: the one whose shortest literal is longest."""
    best: tuple[int, set[str]] | None = None
    run: list[str] = []

    def offer(cands: set[str] | None) -> None:
        nonlocal best
        if cands and min(map(len, cands)) >= MIN_ANCHOR:
            score = min(map(len, cands))
            if best is None or score > best[0]:
                best = (score, cands)

    for op, av in items:
        if op is sre.LITERAL and not icase:
            run.append(chr(av))
            continue
        offer({"".join(run)} if run else None)
        run = []
        if op is sre.SUBPATTERN:
            offer(_sequence(list(av[3]), icase or bool(av[1] & re.I)))
        elif op is sre.BRANCH:
            alts = [_sequence(list(b), icase) for b in av[1]]
            if all(alts):
                offer(set().union(*alts))  # type: ignore[arg-type]
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and av[0] >= 1:
            offer(_sequence(list(av[2]), icase))
    offer({"".join(run)} if run else None)
    return best[1] if best else None


def fewest(anchors: Iterable[str]) -> tuple[str, ...]:
    """The same any-of test with fewer literals: an anchor that holds another is dropped (a
    line holding it holds the shorter one too)."""
    ordered = sorted(set(anchors), key=lambda a: (len(a), a))
    kept: list[str] = []
    for a in ordered:
        if not any(k in a for k in kept):
            kept.append(a)
    return tuple(sorted(kept))
