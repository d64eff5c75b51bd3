"""Evidence text: the exact log lines a finding points at.

Events keep (path, line) only, so millions of batch lines cost no text. After the rules
ran, the few lines findings cite are read back from their files in one pass per file.
stdin cannot be re-read: its evidence keeps the text the rule wrote.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from diag.ingest.hotpath.native import count_newlines
from diag.normalize.lines import clean
from diag.sources.discover import InputFile
from diag.sources.readers import lines_at, open_binary, read_head

if TYPE_CHECKING:  # pragma: no cover
    from diag.report import RunReport

MAX_TEXT = 400
LineReader = Callable[[Mapping[str, set[int]]], Mapping[str, Mapping[int, str]]]


def read_lines(path: str, wanted: set[int]) -> dict[int, str]:
    """The text of the given 1-based line numbers of a file (gz or plain)."""
    from pathlib import Path

    out: dict[int, str] = {}
    if not wanted or path == "-":
        return out
    item = InputFile(path, Path(path), path, 0)
    try:
        stream = open_binary(item)
    except OSError:
        return out
    try:
        head, _ = read_head(stream)
        errors: list[str] = []
        for n, raw in lines_at(stream, head, set(wanted), errors, count=count_newlines).items():
            text = clean(raw.decode("utf-8", "replace").rstrip("\r\n").replace("\r", " "))
            out[n] = text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."
    finally:
        stream.close()
    return out


def read_all(wanted: Mapping[str, set[int]]) -> dict[str, dict[int, str]]:
    """:func:`read_lines` of each file (path -> its wanted line numbers)."""
    return {path: read_lines(path, lines) for path, lines in wanted.items()}


def resolve_evidence(runs: list[RunReport], read: LineReader = read_all) -> None:
    """Fill each finding's evidence text from its file; ``read`` reads the files (a
    cluster reads them where they lie, ``diag.fleet.cluster``)."""
    wanted: dict[str, set[int]] = defaultdict(set)
    for run in runs:
        for finding in run.findings:
            for ev in finding.evidence:
                wanted[ev.path].add(ev.line)
    texts = read(wanted) if wanted else {}
    for run in runs:
        for finding in run.findings:
            for ev in finding.evidence:
                text = texts.get(ev.path, {}).get(ev.line)
                if text is not None:
                    ev.text = text
