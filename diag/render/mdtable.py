"""Text made safe for one cell of a GitHub-flavoured Markdown table (also pasted into Jira).

A cell ends at a newline or an unescaped ``|``; inline HTML would be interpreted. So:
whitespace runs (newlines included) become one space, ``|`` becomes ``\\|`` (GFM
unescapes it before inline parsing, also inside code spans), ``<``/``>``/``&`` become
entities, and an empty cell is a single space so the row keeps its column count.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_WS = re.compile(r"\s+")
MAX_CELL = 400  # a cell longer than this is a paragraph: the evidence block below has it


def md_cell(value: object, limit: int = MAX_CELL) -> str:
    text = "" if value is None else str(value)
    text = _WS.sub(" ", text).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    return text or " "


def md_row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(md_cell(c) for c in cells) + " |"


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    return [md_row(list(header)), "|" + "---|" * len(header), *(md_row(r) for r in rows)]
