"""Compact display of capture size lists: ``1, 2, 4, 8-256 step 8, 272-512 step 16 (51 sizes)``.

Display only (text, Markdown, the ticket YAML shown in HTML/Markdown). The JSON report
and ``--format yaml`` keep the full list (INTERFACE.md: ``graph_capture_sizes: [int]``).
A run is kept as a range when it has at least ``MIN_RUN`` members with one step, so
``1, 2, 4`` stays a list and an irregular list is printed as is.
"""

from __future__ import annotations

from collections.abc import Sequence

MIN_RUN = 4  # 3 would turn "8, 16, 24" into "8-24 step 8": no shorter, harder to read
SHOW_COUNT_FROM = 8  # below this the list itself is short enough to count by eye


def size_groups(sizes: Sequence[int]) -> list[tuple[int, int, int]]:
    """Greedy split of a sorted, de-duplicated list into ``(first, last, step)`` groups;
    a single size is ``(s, s, 0)``."""
    values = sorted({int(s) for s in sizes})
    out: list[tuple[int, int, int]] = []
    i = 0
    while i < len(values):
        j = i + 1
        if j < len(values):
            step = values[j] - values[i]
            while j + 1 < len(values) and values[j + 1] - values[j] == step:
                j += 1
            if j - i + 1 >= MIN_RUN:
                out.append((values[i], values[j], step))
                i = j + 1
                continue
        out.append((values[i], values[i], 0))
        i += 1
    return out


def compact_sizes(sizes: Sequence[int] | None) -> str | None:
    """The list as short text, or None when there is no list (callers leave the field out)."""
    if not sizes:
        return None
    parts = []
    for first, last, step in size_groups(sizes):
        if step == 0:
            parts.append(str(first))
        elif step == 1:
            parts.append(f"{first}-{last}")
        else:
            parts.append(f"{first}-{last} step {step}")
    n = len({int(s) for s in sizes})
    text = ", ".join(parts)
    return f"{text} ({n} sizes)" if n >= SHOW_COUNT_FROM else text


def expand_sizes(text: str) -> list[int]:
    """The inverse of :func:`compact_sizes` (for tests and for readers of a pasted ticket)."""
    body = text.rsplit(" (", 1)[0] if text.endswith(" sizes)") else text
    out: list[int] = []
    for part in body.split(", "):
        if "-" not in part:
            out.append(int(part))
            continue
        span, _, step = part.partition(" step ")
        first, last = (int(x) for x in span.split("-"))
        out.extend(range(first, last + 1, int(step) if step else 1))
    return out
