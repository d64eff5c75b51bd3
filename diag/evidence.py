"""Evidence text: the exact log lines a finding points at.

Events keep (path, line) only, so millions of batch lines cost no text. After the rules
ran, the few lines findings cite are read back from their files in one pass per file, or,
in a plain file read in parallel, from the segment start before each (its line anchors).
stdin cannot be re-read: its evidence keeps the text the rule wrote.
"""

from __future__ import annotations

import bisect
import gzip
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from diag.ingest.hotpath.native import count_newlines
from diag.normalize.lines import clean
from diag.sources.discover import InputFile, rotation_key
from diag.sources.readers import LineAnchor, lines_at, open_binary, read_head

if TYPE_CHECKING:  # pragma: no cover
    from diag.report import RunReport

MAX_TEXT = 400
SEEK_LINES = 80  # how far below a traceback's first line its exception line is looked for
LineReader = Callable[[Mapping[str, set[int]]], Mapping[str, Mapping[int, str]]]


def read_lines(path: str, wanted: set[int], anchors: Sequence[LineAnchor] = ()) -> dict[int, str]:
    """The text of the given 1-based line numbers of a file (gz or plain). ``anchors``: line
    starts of a plain file known from its reading (``Ingested.line_anchors``): each wanted
    line is read from the last anchor before it, not from the top (the cited lines of a
    700 MB log lie anywhere in it)."""
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
        errors: list[str] = []
        found: dict[int, bytes] = {}
        if anchors and not isinstance(stream, gzip.GzipFile):
            for (lineno, offset), lines in _by_anchor(wanted, anchors):
                stream.seek(offset)
                found.update(lines_at(stream, b"", lines, errors, None, count_newlines, lineno))
        else:
            head, _ = read_head(stream)
            found = lines_at(stream, head, set(wanted), errors, count=count_newlines)
        for n, raw in found.items():
            text = clean(raw.decode("utf-8", "replace").rstrip("\r\n").replace("\r", " "))
            out[n] = text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."
    finally:
        stream.close()
    return out


def _by_anchor(
    wanted: set[int], anchors: Sequence[LineAnchor]
) -> list[tuple[LineAnchor, set[int]]]:
    """The wanted lines grouped under the last anchor at or before each (the file's top,
    line 1 at byte 0, before the first anchor), anchors in file order."""
    marks = sorted({(1, 0), *anchors})
    starts = [line for line, _ in marks]
    groups: dict[int, set[int]] = {}
    for n in wanted:
        groups.setdefault(max(bisect.bisect_right(starts, n) - 1, 0), set()).add(n)
    return [(marks[i], groups[i]) for i in sorted(groups)]


def read_all(
    wanted: Mapping[str, set[int]], anchors: Mapping[str, Sequence[LineAnchor]] | None = None
) -> dict[str, dict[int, str]]:
    """:func:`read_lines` of each file (path -> its wanted line numbers), from the files'
    line anchors where reading them left some."""
    known = anchors or {}
    return {path: read_lines(path, lines, known.get(path, ())) for path, lines in wanted.items()}


def resolve_evidence(
    runs: list[RunReport], read: LineReader = read_all, chain: Mapping[str, str] | None = None
) -> None:
    """Fill each finding's evidence text from its file; ``read`` reads the files (a
    cluster reads them where they lie, ``diag.fleet.cluster``). ``chain``: each file's
    successor in its rotated set, where a traceback cut by rotation goes on."""
    after = chain or {}
    wanted: dict[str, set[int]] = defaultdict(set)
    for run in runs:
        for finding in run.findings:
            for ev in finding.evidence:
                wanted[ev.path].add(ev.line)
                if ev.seek and ev.line > 0:
                    wanted[ev.path].update(range(ev.line + 1, ev.line + SEEK_LINES))
                    # a traceback cut by rotation ends in a later file: each file holds at
                    # least a line, so the reach is SEEK_LINES files at most
                    for following in _successors(after, ev.path, SEEK_LINES):
                        wanted[following].update(range(1, SEEK_LINES))
    texts = read(wanted) if wanted else {}
    for run in runs:
        for finding in run.findings:
            for ev in finding.evidence:
                lines = texts.get(ev.path, {})
                if ev.seek and ev.line > 0:
                    found = _sought(lines, ev.line, ev.seek, SEEK_LINES)
                    if found is not None:
                        ev.line = found
                    else:  # on through the rotated set, within what is left of the reach
                        reach = ev.line + SEEK_LINES - 1 - max(lines, default=ev.line)
                        for following in _successors(after, ev.path, SEEK_LINES):
                            more = texts.get(following, {})
                            rest = _sought(more, 1, ev.seek, reach) if reach > 0 else None
                            if rest is not None:
                                ev.path, ev.line, lines = following, rest, more
                                break
                            reach -= max(more, default=0)
                text = lines.get(ev.line)
                if text is not None:
                    ev.text = text


def rotation_chain(paths: Sequence[str]) -> dict[str, str]:
    """Each file's successor within its rotated set (``paths`` in reading order, oldest
    first, as discovery orders a set: ``diag.sources.discover.rotation_key``)."""
    from pathlib import PurePath

    def chain_of(path: str) -> str:
        p = PurePath(path)
        return str(p.parent / rotation_key(p.name)[0])

    return {a: b for a, b in zip(paths, paths[1:], strict=False) if chain_of(a) == chain_of(b)}


def _successors(after: Mapping[str, str], path: str, most: int) -> list[str]:
    """The files after ``path`` in its rotated set, the next first, ``most`` at most."""
    out: list[str] = []
    while len(out) < most and (path := after.get(path, "")):
        out.append(path)
    return out


def _sought(lines: Mapping[int, str], start: int, seek: str, reach: int) -> int | None:
    """The first of ``reach`` lines from ``start`` on holding ``seek`` (the exception line of
    the traceback that begins there); None when none within reach does."""
    for n in range(start, start + reach):
        text = lines.get(n)
        if text is not None and seek in text:
            return n
    return None
