"""Periodic lines behind a prefix the engine did not write, read with the kinds' matchers.

A collector or launcher (docker ``--timestamps``, Docker Desktop, compose ``svc | ``,
``kubectl --prefix``, torchrun ``[rankN]:``, a quote, an unlisted launcher such as journald or
a pasted file path) puts text before the engine's header, and so do process prefixes the
header readers leave out (two of them, a Ray actor's before python logging), so the anchored
matchers refuse the line. Here each such candidate (a line the per-line prefilter chose that holds a kind's
literal) is peeled by :func:`diag.normalize.prefix.peel` itself, once, in Python: that gives
its timestamp, rank, instance and bare message exactly as on the per-line path. The messages
are then read together by the same matchers (C or RE2) behind a fixed header of the engine,
whose timestamp and rank are replaced by peel's.

A line stays per line when the prefix (or the header) holds a trigger of any active parser
(its anchors), when it is not plain (the normaliser would repair it), or when its message is
not one the kinds accept. A launcher prefix no row lists is learned by the stream on the
per-line path (``diag.normalize.shape``): ``Read.learn`` names those lines so the scanner's
walk learns it at the same place.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from diag.ingest.hotpath.kinds import Kind
from diag.normalize.prefix import peel
from diag.parsers.scan import is_plain

#: the header each engine's messages are read behind: one every header reader of the engine
#: accepts (ts, rank and instance are peel's)
CANON = {"sglang": b"[2000-01-01 00:00:00] ", "vllm": b"INFO 01-01 00:00:00 [x.py:1] "}
#: the ``LogLine.header`` values whose messages the engine's kinds read
HEADERS = {"sglang": ("sglang", "pylog"), "vllm": ("vllm",)}


class Reader(Protocol):
    """What of ``extract.HotPath`` the prefixed lines are read with."""

    backend: str
    literal_search: Callable[[bytes], re.Match[bytes] | None]  # a kind's literal in a line
    anchor_search: Callable[[str], re.Match[str] | None]  # an active parser's anchor

    def kind_rows(
        self, block: bytes | memoryview
    ) -> tuple[np.ndarray, list[tuple[Kind, np.ndarray, Any, pa.Array, dict[str, Any]]], Any]: ...


@dataclass
class Read:
    """Rows of prefixed lines: (kind, line indices, ts, rank, instance, fields) per kind."""

    rows: list[tuple[Kind, np.ndarray, np.ndarray, pa.Array, pa.Array, dict[str, Any]]]
    consumed: np.ndarray
    #: consumed line index -> the unlisted prefix peel found on it (None: a listed wrapper)
    learn: dict[int, str | None] = field(default_factory=dict)


def _dict(values: list[str]) -> pa.Array:
    return pa.array(values, pa.string()).dictionary_encode()


def read(
    hot: Reader, block: bytes | memoryview, offsets: np.ndarray, lines: np.ndarray
) -> Read | None:
    """The prefixed lines among ``lines`` (indices into ``block``) the kinds accept."""
    headers = HEADERS.get(hot.backend)
    if headers is None:
        return None
    literal, trigger = hot.literal_search, hot.anchor_search
    cand: list[int] = []
    peeled: list[Any] = []
    msgs: list[bytes] = []
    for i in lines.tolist():
        raw = bytes(block[offsets[i] : offsets[i + 1]])
        if literal(raw) is None:
            continue
        body = raw[:-1] if raw.endswith(b"\n") else raw
        if body.endswith(b"\r"):  # split_logical ends the line there
            body = body[:-1]
        if not is_plain(body):
            continue
        text = body.decode("utf-8", "replace")
        line = peel("", 0, text)
        if (line.wrapper is None and line.proc is None) or line.header not in headers:
            continue
        if trigger(text[: len(text) - len(line.msg)]) is not None:
            continue
        cand.append(i)
        peeled.append(line)
        msgs.append(line.msg.encode())
    if not cand:
        return None
    head = CANON[hot.backend]
    synthetic = b"".join(head + m + b"\n" for m in msgs)
    _, found, _ = hot.kind_rows(synthetic)
    at = np.array(cand, np.int64)
    rows = []
    consumed: list[np.ndarray] = []
    learn: dict[int, str | None] = {}
    for kind, idx, _ts, _rank, fields in found:
        got = [peeled[j] for j in idx.tolist()]
        ts = np.array([np.nan if ln.ts is None else ln.ts for ln in got], np.float64)
        rank = _dict([ln.rank or "" for ln in got])
        instance = _dict([ln.instance for ln in got])
        rows.append((kind, at[idx], ts, rank, instance, fields))
        consumed.append(at[idx])
        for j in idx.tolist():
            learn[cand[j]] = peeled[j].unlisted
    if not rows:
        return None
    return Read(rows, np.sort(np.concatenate(consumed)), learn)
