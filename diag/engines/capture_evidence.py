"""What an error's own text says about "raised in graph capture": data in
``data/capture_evidence.yaml`` plus the capture marks of ``data/errors.yaml``.

Four questions, each answered with the row that says it (so a finding can cite it): does the
text hold the engine's capture-failure advice block, a runtime code raised only while a stream
is capturing, words raised only while capturing, or words of a step outside capture.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import yaml

from diag.engines import errors as sigs
from diag.engines import native_sites
from diag.engines.errors import DATA

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class TextRow:
    """One row of capture_evidence.yaml: a text and the step that prints it."""

    id: str
    regex: re.Pattern[str]
    source: str
    phase: str | None = None  # for ``against`` rows: the step outside capture


@cache
def _rows() -> dict[str, tuple[TextRow, ...]]:
    raw = yaml.load((DATA / "capture_evidence.yaml").read_text(encoding="utf-8"), Loader=_LOADER)
    return {
        part: tuple(
            TextRow(r["id"], re.compile(r["regex"]), r["source"], r.get("phase")) for r in raw[part]
        )
        for part in ("advice", "against")
    }


def advice_rows() -> tuple[TextRow, ...]:
    return _rows()["advice"]


def against_rows() -> tuple[TextRow, ...]:
    return _rows()["against"]


def advice_block(text: str) -> TextRow | None:
    """The advice-block row the text holds (SGLang prints the block only after a failed capture)."""
    return next((r for r in advice_rows() if r.regex.search(text)), None)


def outside_capture(text: str) -> TextRow | None:
    """The row of a step outside capture whose words the text holds."""
    return next((r for r in against_rows() if r.regex.search(text)), None)


def capture_code(text: str) -> sigs.RuntimeCode | None:
    """The first runtime code the text quotes that is raised only while capturing."""
    return next((c for c in sigs.quoted_codes(text) if c.capture), None)


def capture_words(text: str) -> sigs.Signature | None:
    """The first hand-written signature raised only while capturing that the text matches."""
    if not sigs.judge(text).capture:
        return None
    return next(
        (s for s in sigs.signatures() if s.code is None and s.capture and s.regex.search(text)),
        None,
    )


def capture_check(text: str) -> native_sites.NativeVerdict | None:
    """The native check the text prints, where every release runs it only during capture."""
    found = native_sites.judge_printed(text)
    return found if found is not None and found.capture else None
