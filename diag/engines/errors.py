"""Error signatures, shared by every engine: data in ``data/errors.yaml``, one row per message.

Each row is a regex over an exception's text (or any error line), the capture-error class it
means, whether the text can only be raised while a stream is capturing (``capture``) and
whether it is a follow-on error (``secondary``, CUDA 901), with the source it was read from.
The first matching row with a class decides the class; prefixes and phases play no part here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import yaml

ErrorClass = Literal["oom", "stream_capture_invalid", "unsupported_op", "distributed", "other"]
ERROR_CLASSES: tuple[ErrorClass, ...] = (
    "oom",
    "stream_capture_invalid",
    "unsupported_op",
    "distributed",
    "other",
)
DATA = Path(__file__).resolve().parent / "data"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 100x faster at start-up


@dataclass(frozen=True)
class Signature:
    """One error message as its library prints it."""

    id: str
    error_class: ErrorClass | None  # None: marks the text as capture-explicit only
    regex: re.Pattern[str]
    source: str
    capture: bool = False
    secondary: bool = False
    message: str | None = None  # the exact message, where the row is one message


@dataclass(frozen=True)
class Verdict:
    """What the signatures say of one text."""

    error_class: ErrorClass
    capture: bool  # some matching row is raised only during capture
    secondary: bool  # the class-giving row is a follow-on error
    signature: str | None  # id of the class-giving row


@cache
def signatures() -> tuple[Signature, ...]:
    raw = yaml.load((DATA / "errors.yaml").read_text(encoding="utf-8"), Loader=_LOADER)
    out = []
    for row in raw["signatures"]:
        cls = row.get("class")
        if cls is not None and cls not in ERROR_CLASSES:
            raise ValueError(f"errors.yaml: {row['id']}: unknown class {cls!r}")
        out.append(
            Signature(
                row["id"],
                cls,
                re.compile(row["regex"]),
                row["source"],
                bool(row.get("capture", False)),
                bool(row.get("secondary", False)),
                row.get("message"),
            )
        )
    return tuple(out)


@cache
def _any_signature() -> re.Pattern[str]:
    """One pattern that hits wherever some row with a class or a capture mark would."""
    return re.compile("|".join(f"(?:{s.regex.pattern})" for s in signatures()))


def judge(text: str) -> Verdict:
    """The class of an error text (``other`` when no row names one) and its capture marks."""
    cls: ErrorClass | None = None
    capture = secondary = False
    sig_id = None
    if _any_signature().search(text) is None:
        return Verdict("other", False, False, None)
    for sig in signatures():
        if sig.regex.search(text) is None:
            continue
        capture = capture or sig.capture
        if cls is None and sig.error_class is not None:
            cls, secondary, sig_id = sig.error_class, sig.secondary, sig.id
    return Verdict(cls or "other", capture, secondary, sig_id)


def capture_only(text: str) -> bool:
    """Whether the text names an error that is raised only while capturing."""
    return any(s.capture and s.regex.search(text) for s in signatures())


def recognised(text: str) -> bool:
    """Whether some signature row (with a class other than ``other``, or a capture mark) hits."""
    v = judge(text)
    return v.capture or v.error_class != "other"
