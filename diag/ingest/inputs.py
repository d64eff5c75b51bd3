"""The one loop over inputs, and the one way a log file is scanned in this process.

:func:`logs_by_stream` opens every input once, in order: snapshots and table files are
loaded on the spot, unreadable inputs get their status, and each log file comes back
opened with the stream (rotated set) it belongs to. The serial path scans them right
there with :func:`scan_file`; the parallel path plans segments from them, and falls back
to :func:`scan_file` for a stream whose workers failed. :func:`close_stream` ends a
stream the same way on every path.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from diag.artifacts.trace import TraceAnalysis
from diag.ingest.artifacts import (
    holds_trace_events,
    load_server_info,
    load_snapshot,
    load_tables,
    load_trace,
)
from diag.ingest.hotpath.native import count_newlines
from diag.model import InputStatus, Snapshot, Stream
from diag.parsers.scan import StreamScanner
from diag.parsers.server_info import ServerInfo
from diag.sources.discover import InputFile
from diag.sources.readers import (
    Hole,
    InputError,
    LineAnchor,
    Sniff,
    Transcoded,
    iter_blocks,
    open_binary,
    raw_position,
    read_head,
    skip_nul_head,
    sniff,
)
from diag.sources.trace_sniff import looks_like_json, trace_by_name

ProgressFn = Callable[[int, int], None]  # (bytes done, bytes total)
StageFn = Callable[[str, int, int], None]  # (stage, done, total; 0: not counted)

PROGRESS_SECONDS = 0.5
PROGRESS_BYTES = 64 * 1024 * 1024


class Meter:
    """Throttled progress: every PROGRESS_SECONDS or PROGRESS_BYTES, and at each file end."""

    def __init__(self, fn: ProgressFn | None, total: int) -> None:
        self.fn = fn
        self.total = total
        self.done = 0
        self._t = time.monotonic()
        self._b = 0

    def set(self, done: int, force: bool = False) -> None:
        self.done = done
        if self.fn is None:
            return
        now = time.monotonic()
        if force or now - self._t >= PROGRESS_SECONDS or done - self._b >= PROGRESS_BYTES:
            self._t, self._b = now, done
            self.fn(min(done, self.total), self.total)

    def finish(self) -> None:
        self.set(self.done, force=True)


@dataclass
class Artifacts:
    """What the input loop loads besides logs."""

    snapshots: list[Snapshot] = field(default_factory=list)
    profiles: list[dict[str, Any]] = field(default_factory=list)  # standalone table files
    traces: list[TraceAnalysis] = field(default_factory=list)  # torch-profiler traces
    server_infos: list[ServerInfo] = field(default_factory=list)  # saved GET /server_info
    # path -> (line, byte offset) where each parallel segment of a plain log starts: the
    # evidence of a finding is read from there, not from the top of the file
    line_anchors: dict[str, tuple[LineAnchor, ...]] = field(default_factory=dict)


@dataclass
class LogFile:
    item: InputFile
    status: InputStatus
    gzip: bool
    size: int
    nul_count: int = 0  # NUL bytes the parallel path met, summed over the file's segments
    nul_first: int | None = None
    anchors: list[LineAnchor] = field(default_factory=list)  # its segments' starts (plain)


@dataclass
class Opened:
    """A log file, open, with its first bytes already read and sniffed."""

    stream: Any
    head: bytes
    error: str | None  # a read error met in the head (the file is partial)
    info: Sniff
    nul_skipped: int = 0  # NUL bytes of a hole the file starts with, jumped over before the head


def logs_by_stream(
    groups: dict[str, list[InputFile]],
    inputs: list[InputStatus],
    found: Artifacts,
    snapshot_limit: int,
    streams: list[Stream],
    skipped: Callable[[InputFile], None],
) -> Iterator[tuple[Stream, LogFile, Opened]]:
    """Every log file, opened, with its stream; the file is closed when the caller moves on.
    Every input gets its row in ``inputs``; non-log inputs are reported to ``skipped``."""
    for gid, members in groups.items():
        stream: Stream | None = None
        for item in members:
            status = InputStatus(item.path)
            inputs.append(status)
            opened = open_input(item, status, found, snapshot_limit)
            if opened is None:
                skipped(item)
                continue
            try:
                if stream is None:
                    # a rotated set (or a single file) is named by the set or the file
                    stream = Stream(gid if len(members) > 1 else item.path, opened.info.backend)
                    streams.append(stream)
                stream.sources.append(item.path)
                status.stream = stream.id
                # a decompressed or transcoded stream is read whole, never by byte ranges
                gz = isinstance(opened.stream, gzip.GzipFile | Transcoded)
                yield stream, LogFile(item, status, gz, size_of(item)), opened
            finally:
                close_quietly(opened.stream)


def _named_pickle(item: InputFile) -> bool:
    name = str(item.path).lower()
    return name.endswith((".pickle", ".pkl", ".pickle.gz", ".pkl.gz"))


def _json_start(head: bytes) -> bool:
    """Can ``head`` begin a JSON document? An SGLang log's first line ``[2025-06-10 08:00:00]
    ...`` opens like an array until its first element: a JSON value must follow the
    bracket, then ``,`` or ``]`` (or the head ends first). Without this every SGLang log was
    searched for ``"traceEvents"`` over its first 64 MiB (~0.15 s CPU a log)."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").decode("utf-8", "replace")
    if text[:1] == "{":
        return text[1:].lstrip(" \t\r\n")[:1] in ("", '"', "}")
    rest = text[1:].lstrip(" \t\r\n")
    if rest[:1] in ("", "]"):
        return True
    try:
        _, end = json.JSONDecoder().raw_decode(rest)
    except json.JSONDecodeError as e:
        return e.pos >= len(rest) - 1 or "Unterminated" in e.msg  # the head ends first
    after = rest[end:].lstrip(" \t\r\n")
    # (a number cut by the head's end, "1.5e": only number bytes follow)
    return after[:1] in ("", ",", "]") or after.strip("0123456789.eE+-") == ""


def _json_trace(item: InputFile, head: bytes) -> bool:
    """A JSON file whose first KB shows no trace marker (a writer put other keys first):
    a trace when named like one, or when ``"traceEvents"`` follows further in. JSON-lines
    logs (one object a line, as docker and k8s write them) are logs, not searched."""
    if item.fs_path is None or not looks_like_json(head) or head.count(b"\n{") >= 3:
        return False
    if trace_by_name(item.path):
        return True
    if not _json_start(head):
        return False
    with open_binary(item) as probe:
        return holds_trace_events(item, b"", probe)


def open_input(
    item: InputFile, status: InputStatus, found: Artifacts, snapshot_limit: int
) -> Opened | None:
    """Open an input and sniff it. Snapshots and table files are loaded here, unreadable or
    non-log inputs get their status; only a log comes back, opened, with its head bytes."""
    try:
        stream_obj = open_binary(item)
    except OSError as exc:
        status.status, status.reason = "skipped", os_reason(exc)
        return None
    keep = False
    if isinstance(stream_obj, Transcoded):
        status.notes.append(f"read as {stream_obj.codec.upper()} (by its {stream_obj.how})")
    try:
        head, err = read_head(stream_obj)
        skipped = 0
        if head and not head.strip(b"\x00"):  # a log that starts with a hole
            head, skipped, err = skip_nul_head(stream_obj, head)
            if not head and err is None:
                status.status, status.reason = "skipped", f"no text (only {skipped:,} NUL bytes)"
                return None
        if err is not None and not head:
            status.status, status.reason = "skipped", err
            return None
        info = sniff(head, compressed=False)
        if info.kind in ("log", "profile_table") and _named_pickle(item):
            # a text "pickle" (protocol 0/1, or no pickle at all) is never a snapshot torch
            # wrote, and never read as a log either: its name says what it claims to be
            status.kind = "memory_snapshot"
            status.status = "skipped"
            status.reason = "named as a pickle but not a binary pickle (protocol 2-5): not read"
            return None
        status.kind, status.backend = info.kind, info.backend
        if info.kind == "memory_snapshot":
            close_quietly(stream_obj)
            found.snapshots.append(load_snapshot(item, status, snapshot_limit))
            return None
        if info.kind == "profile_table":
            found.profiles.extend(load_tables(item, head, stream_obj, status))
            return None
        if info.kind == "log" and _json_trace(item, head):
            close_quietly(stream_obj)
            stream_obj = open_binary(item)  # the sniff read on; the trace is read from the start
            head, info.kind = b"", "trace"
        if info.kind == "server_info":
            doc = load_server_info(item, head, stream_obj, info.backend, status)
            if doc is not None:
                found.server_infos.append(doc)
            return None
        if info.kind == "trace":
            trace = load_trace(item, head, stream_obj, status)
            if trace is not None:
                found.traces.append(trace)
            return None
        if info.kind not in ("log", "metrics"):  # a metrics dump is read as its engine's lines
            status.status, status.reason = "skipped", info.reason
            if isinstance(stream_obj, Transcoded):  # say what it was read as
                status.reason = f"{info.reason} (read as {stream_obj.codec.upper()})"
            return None
        keep = True
        return Opened(stream_obj, head, err, info, skipped)
    except InputError as exc:
        status.status, status.reason = "skipped", str(exc)
        return None
    finally:
        if not keep:
            close_quietly(stream_obj)


def scan_file(scanner: StreamScanner, lf: LogFile, opened: Opened, meter: Meter, base: int) -> None:
    """Scan one opened log file into the scanner's sink; fills lines, events, partial."""
    status = lf.status
    sink = scanner.sink
    before = sink.count()
    errors: list[str] = []
    read = 0

    def tick(n: int) -> None:
        nonlocal read
        read += n
        pos = raw_position(opened.stream)
        meter.set(base + min(lf.size, read if pos is None else pos) if lf.size else base)

    nuls = NulCount()
    if opened.nul_skipped:
        nuls.count, nuls.first_line = opened.nul_skipped, 1
    try:
        status.lines = scanner.scan_blocks(
            lf.item.path, nuls.watch(iter_blocks(opened.stream, opened.head, errors)), on_block=tick
        )
        if nuls.count:
            status.notes.append(nuls.note())
        status.events = sink.count() - before
        if errors:
            status.status, status.reason = "partial", errors[0]
        if opened.error and status.status == "ok":
            status.status, status.reason = "partial", opened.error
    except InputError as exc:
        status.status, status.reason = "skipped", str(exc)


class NulCount:
    """NUL bytes in a stream (crash padding, copytruncate holes): the normaliser drops them,
    the input's notes say how many and from which line."""

    def __init__(self) -> None:
        self.count = 0
        self.first_line: int | None = None
        self._newlines = 0

    def watch(self, blocks: Iterator[bytes]) -> Iterator[bytes]:
        """The blocks without their NUL bytes (counted): a hole of any size is never a line
        that is held whole, and a hole jumped over (:class:`Hole`) counts as its NULs."""
        for block in blocks:
            if type(block) is Hole:
                if block.skipped:
                    self.count += block.skipped
                    if self.first_line is None:
                        self.first_line = self._newlines + 1
                continue
            if self.first_line is None:
                at = block.find(b"\x00")
                if at >= 0:
                    self.first_line = self._newlines + block.count(b"\n", 0, at) + 1
                else:
                    self._newlines += count_newlines(block)
            if self.first_line is not None:
                n = block.count(b"\x00")
                if n:
                    self.count += n
                    block = block.replace(b"\x00", b"")
                    if not block:
                        continue
            yield block

    def note(self) -> str:
        return nul_note(self.count, self.first_line)


def nul_note(count: int, first_line: int | None) -> str:
    return f"{count} NUL byte(s) dropped, the first on line {first_line}"


def close_stream(scanner: StreamScanner, last: InputStatus) -> None:
    """End of a stream: close the blocks still open; their events count for its last file."""
    before = scanner.sink.count()
    scanner.close()
    n = scanner.sink.count() - before
    if n:
        last.events = (last.events or 0) + n


def size_of(item: InputFile) -> int:
    if item.fs_path is None:
        return 0
    try:
        return os.path.getsize(item.fs_path)
    except OSError:
        return 0


def close_quietly(stream: Any) -> None:
    try:
        if (
            stream is not None
            and getattr(stream, "name", None) != "<stdin>"
            and stream is not getattr(sys.stdin, "buffer", None)
        ):
            stream.close()
    except OSError:
        pass


def os_reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()
