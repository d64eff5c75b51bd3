"""Inputs that are not logs: allocator snapshots and standalone profiler-table files."""

from __future__ import annotations

from typing import Any

from diag.model import InputStatus, Snapshot
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
        status.status, status.reason = "skipped", str(exc)
        return Snapshot(item.path, reason=str(exc))
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
