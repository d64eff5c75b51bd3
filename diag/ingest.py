"""Ingestion: inputs -> event tables, snapshot summaries and standalone profiler tables.

Every input ends up in ``inputs`` with a status (ok / partial / skipped) and the reason,
so one unreadable file never stops the others and nothing is silently dropped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from diag.events import EventSink, EventTables
from diag.parsers.base import LineParser
from diag.parsers.scan import StreamScanner
from diag.sources.discover import InputFile, discover
from diag.sources.readers import InputError, detect_backend, iter_lines, open_binary, read_head, sniff

SNAPSHOT_LIMIT_BYTES = 512 * 1024 * 1024


@dataclass
class InputStatus:
    """One row of the report's ``inputs``."""

    path: str
    kind: str = "unknown"
    backend: str = "unknown"
    status: str = "ok"
    reason: str | None = None
    lines: int | None = None
    events: int | None = None
    stream: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("stream")
        return d


@dataclass
class Stream:
    """The files of one rotated set, read as one log."""

    id: str
    backend: str
    sources: list[str] = field(default_factory=list)


@dataclass
class Ingested:
    tables: EventTables
    inputs: list[InputStatus]
    streams: list[Stream]
    snapshots: list[dict[str, Any]]
    profiles: list[dict[str, Any]]  # standalone table files


ProgressFn = Callable[[int, int], None]  # (bytes done, bytes total)


def parsers_for(backend: str) -> list[LineParser]:
    from diag.parsers.sglang import SGLangParser
    from diag.parsers.traceback import ErrorParser

    out: list[LineParser] = []
    if backend in ("sglang", "unknown"):
        out.append(SGLangParser())
    if backend in ("vllm", "unknown"):
        try:
            from diag.parsers.vllm import VLLMParser
        except ImportError:  # pragma: no cover - during development only
            pass
        else:
            out.append(VLLMParser())
    out.append(ErrorParser())
    return out


def ingest(paths: Sequence[str], progress: ProgressFn | None = None,
           snapshot_limit: int = SNAPSHOT_LIMIT_BYTES) -> Ingested:
    files, problems = discover(paths)
    inputs: list[InputStatus] = [InputStatus(p.path, status="skipped", reason=p.reason) for p in problems]
    groups: dict[str, list[InputFile]] = {}
    for f in files:
        groups.setdefault(f.group, []).append(f)
    sink = EventSink()
    streams: list[Stream] = []
    snapshots: list[dict[str, Any]] = []
    profiles: list[dict[str, Any]] = []
    total = sum(_size(f) for f in files)
    done = 0
    for gid, members in groups.items():
        stream: Stream | None = None
        scanner: StreamScanner | None = None
        for item in members:
            status = InputStatus(item.path)
            inputs.append(status)
            try:
                stream_obj = open_binary(item)
            except OSError as exc:
                status.status, status.reason = "skipped", _os_reason(exc)
                continue
            try:
                head, err = read_head(stream_obj)
                if err is not None and not head:
                    status.status, status.reason = "skipped", err
                    continue
                info = sniff(head, compressed=False)
                status.kind, status.backend = info.kind, info.backend
                if info.kind == "memory_snapshot":
                    _close(stream_obj)
                    snapshots.append(_load_snapshot(item, status, snapshot_limit))
                    continue
                if info.kind == "profile_table":
                    profiles.extend(_load_tables(item, head, stream_obj, status))
                    continue
                if info.kind != "log":
                    status.status, status.reason = "skipped", info.reason
                    continue
                if scanner is None:
                    backend = info.backend
                    stream = Stream(gid if len(members) > 1 else item.path, backend)
                    streams.append(stream)
                    scanner = StreamScanner(parsers_for(backend), sink, backend)
                assert stream is not None
                stream.sources.append(item.path)
                status.stream = stream.id
                before = sink.count()
                errors: list[str] = []
                status.lines = scanner.scan(item.path, iter_lines(stream_obj, head, errors))
                status.events = sink.count() - before
                if errors:
                    status.status, status.reason = "partial", errors[0]
                elif err:
                    status.status, status.reason = "partial", err
            except InputError as exc:
                status.status, status.reason = "skipped", str(exc)
            finally:
                _close(stream_obj)
                done += _size(item)
                if progress is not None:
                    progress(done, total)
        if scanner is not None:
            before = sink.count()
            scanner.close()
            if inputs and sink.count() > before:
                last = next(s for s in reversed(inputs) if s.stream is not None)
                last.events = (last.events or 0) + sink.count() - before
    return Ingested(sink.to_tables(), inputs, streams, snapshots, profiles)


def _size(item: InputFile) -> int:
    if item.fs_path is None:
        return 0
    try:
        return os.path.getsize(item.fs_path)
    except OSError:
        return 0


def _close(stream: Any) -> None:
    try:
        if stream is not None and getattr(stream, "name", None) != "<stdin>" and stream is not getattr(
                __import__("sys").stdin, "buffer", None):
            stream.close()
    except OSError:
        pass


def _os_reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _load_snapshot(item: InputFile, status: InputStatus, limit: int) -> dict[str, Any]:
    from diag.artifacts.snapshot import SnapshotError, load_snapshot

    if item.fs_path is None:
        status.status, status.reason = "skipped", "memory snapshots cannot be read from stdin"
        return {"path": item.path, "status": "skipped", "reason": status.reason}
    try:
        summary = load_snapshot(item.fs_path, max_bytes=limit)
    except SnapshotError as exc:
        status.status, status.reason = "skipped", str(exc)
        return {"path": item.path, "status": "skipped", "reason": str(exc)}
    out = summary.to_dict()
    out["path"] = item.path
    status.events = len(out.get("pools", []))
    return out


def _load_tables(item: InputFile, head: bytes, stream: Any, status: InputStatus) -> list[dict[str, Any]]:
    from diag.artifacts.profiler_table import find_tables

    errors: list[str] = []
    text_lines = [b.decode("utf-8", "replace").rstrip("\r\n") for b in iter_lines(stream, head, errors)]
    status.lines = len(text_lines)
    tables = find_tables(text_lines, item.path)
    status.events = len(tables)
    if not tables:
        status.status, status.reason = "skipped", "no profiler table found"
    elif errors or any(not t.complete for t in tables):
        status.status, status.reason = "partial", errors[0] if errors else "table cut mid-row"
    return [t.to_dict() for t in tables]


__all__ = ["Ingested", "InputStatus", "Stream", "ingest", "detect_backend"]
