"""Helpers shared by the vLLM parser tests: scan lines through the real scanner, read events back."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from diag.events import EventSink, EventTables
from diag.parsers.scan import StreamScanner
from diag.parsers.traceback import ErrorParser
from diag.parsers.vllm import VLLMParser


def scan_bytes(lines: Iterable[bytes], source: str = "test.log") -> EventTables:
    sink = EventSink()
    scanner = StreamScanner([VLLMParser(), ErrorParser()], sink, "vllm")
    scanner.scan(source, lines)
    scanner.close()
    return sink.to_tables()


def scan(lines: Sequence[str]) -> EventTables:
    """Physical lines -> events, through the real scanner (split on \\n only, as a file is)."""
    data = ("\n".join(lines) + "\n").encode("utf-8")
    return scan_bytes(line + b"\n" for line in data.split(b"\n")[:-1])


def scan_file(path: Path) -> EventTables:
    with open(path, "rb") as fh:
        return scan_bytes(fh, str(path))


def rank0(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["rank"].isin(["", "TP0", "DP0", "DP0-TP0"])]


def sizing(t: EventTables, name: str) -> list[float]:
    f = t["sizing"]
    return [float(v) for v in f[f["name"] == name]["value"]]


def first_sizing(t: EventTables, name: str) -> float | None:
    values = sizing(t, name)
    return values[0] if values else None


def config(t: EventTables, key: str, origin: str | None = None) -> Any:
    f = t["config"]
    f = f[f["key"] == key]
    if origin is not None:
        f = f[f["origin"] == origin]
    assert not f.empty, f"config {key!r} ({origin}) missing"
    value = f["value"].iloc[-1]
    return (
        None if value is None else json.loads(value)
    )  # a None setting is stored as a missing value


def close(a: float | None, b: float | None, tol: float = 1e-6) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


def size_count(t: EventTables) -> int | None:
    counts = [int(c) for c in t["capture_sizes"]["count"].dropna()]
    counts += [int(c) for c in t["capture_progress"]["total"].dropna()]
    return max(counts) if counts else None


CAPTURE_KINDS = ("capture_begin", "capture_end", "capture_progress", "capture_sizes")
