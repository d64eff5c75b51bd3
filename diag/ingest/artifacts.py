"""Inputs that are not logs: allocator snapshots, standalone profiler-table files, traces, server info."""

from __future__ import annotations

from typing import Any

from diag.artifacts.trace import TraceAnalysis
from diag.model import InputStatus, Snapshot
from diag.parsers.server_info import ServerInfo
from diag.sources.discover import InputFile
from diag.sources.readers import iter_lines


def load_snapshot(item: InputFile, status: InputStatus, limit: int) -> Snapshot:
    from diag.artifacts.snapshot import SnapshotError
    from diag.artifacts.snapshot import load_snapshot as summarise

    if item.fs_path is None:
        status.status, status.reason = "skipped", "memory snapshots cannot be read from stdin"
        return Snapshot(item.path, reason=status.reason)
    try:
        summary = summarise(item.fs_path, max_bytes=limit)
    except SnapshotError as exc:
        status.status, status.reason = "skipped", exc.reason  # (the path is the input's)
        return Snapshot(item.path, reason=exc.reason)
    status.events = len(summary.pools)
    return Snapshot(item.path, summary)


def load_tables(
    item: InputFile, head: bytes, stream: Any, status: InputStatus
) -> list[dict[str, Any]]:
    from diag.artifacts.profiler_table import find_tables

    errors: list[str] = []
    text_lines = [
        b.decode("utf-8", "replace").rstrip("\r\n") for b in iter_lines(stream, head, errors)
    ]
    status.lines = len(text_lines)
    tables = find_tables(text_lines, item.path)
    status.events = len(tables)
    if not tables:
        status.status, status.reason = "skipped", "no profiler table found"
    elif errors or any(not t.complete for t in tables):
        status.status, status.reason = "partial", errors[0] if errors else "table cut mid-row"
    return [t.to_dict() for t in tables]


DEEP_SNIFF_BYTES = 64 * 1024 * 1024  # how far a JSON document is searched for its events key


def load_trace(
    item: InputFile, head: bytes, stream: Any, status: InputStatus
) -> TraceAnalysis | None:
    """A torch-profiler trace, read streamed and analysed; its raw columns are dropped here.
    A trace cut short or with broken events is ``partial`` (the first reason, the others in
    notes); one with no event array at all is skipped with its reason."""
    from diag.artifacts.trace import analyse
    from diag.artifacts.trace_reader import TraceError, read_trace
    from diag.ingest.hotpath.native import native_enabled

    status.kind = "trace"
    try:  # GRAPHDIAG_NATIVE=0 reads every event in Python, as it does every log line
        raw = read_trace(item, stream, head, native=native_enabled())
    except TraceError as exc:
        status.status, status.reason = "skipped", str(exc)
        return None
    result = analyse(raw)
    status.events = raw.events
    if result.problems:
        status.status, status.reason = "partial", result.problems[0]
        status.notes.extend(result.problems[1:])
    return result


def holds_trace_events(item: InputFile, head: bytes, stream: Any) -> bool:
    """A JSON document whose first KB shows no trace key (other keys were written first):
    is there a ``"traceEvents"`` key within its first DEEP_SNIFF_BYTES? Reads the stream."""
    from diag.sources.readers import iter_blocks

    errors: list[str] = []
    tail = b""
    seen = 0
    for block in iter_blocks(stream, head, errors):
        if b'"traceEvents"' in tail + block[:32]:
            return True
        if b'"traceEvents"' in block:
            return True
        tail = block[-32:]
        seen += len(block)
        if seen > DEEP_SNIFF_BYTES:
            return False
    return False


SERVER_INFO_MAX_BYTES = 64 * 1024 * 1024  # a /server_info dump is KBs; more is not one


def load_server_info(
    item: InputFile, head: bytes, stream: Any, backend: str, status: InputStatus
) -> ServerInfo | None:
    """A saved ``GET /server_info`` document, parsed whole; one that does not parse as a JSON
    object, or is too big to be one, is skipped with the reason."""
    import json

    from diag.sources.readers import iter_blocks

    errors: list[str] = []
    parts: list[bytes] = []
    size = 0
    for block in iter_blocks(stream, head, errors):
        parts.append(block)
        size += len(block)
        if size > SERVER_INFO_MAX_BYTES:
            status.status = "skipped"
            status.reason = f"server info larger than {SERVER_INFO_MAX_BYTES >> 20} MiB: not read"
            return None
    text = b"".join(parts).decode("utf-8", "replace").lstrip("\ufeff")
    status.lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    try:
        doc = json.loads(text)
    except ValueError as exc:
        status.status = "skipped"
        status.reason = f"server info is not valid JSON ({errors[0] if errors else exc})"
        return None
    if not isinstance(doc, dict):
        status.status, status.reason = "skipped", "server info is not a JSON object"
        return None
    if errors:
        status.status, status.reason = "partial", errors[0]
    return ServerInfo(item.path, backend, doc, text)
