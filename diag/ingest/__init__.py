"""Ingestion: inputs -> event tables, snapshot summaries and standalone profiler tables.

Every input ends up in ``inputs`` with a status (ok / partial / skipped) and the reason,
so one unreadable file never stops the others and nothing is silently dropped.

* :mod:`diag.ingest.inputs`: the one loop over inputs and the one in-process file scan;
* :mod:`diag.ingest.parallel`: the same streams cut into segments for worker processes;
* :mod:`diag.ingest.artifacts`: snapshots and profiler-table files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from diag.artifacts.trace import TraceAnalysis
from diag.event_frames import column_index, release_freed_memory
from diag.events import EventSink, EventTables
from diag.ingest.clock import settle_years
from diag.ingest.hotpath import hotpath_enabled, make_scanner
from diag.ingest.inputs import (
    Artifacts,
    Meter,
    ProgressFn,
    StageFn,
    close_stream,
    logs_by_stream,
    scan_file,
    size_of,
)
from diag.ingest.owned import bounded_jobs
from diag.model import InputStatus, Snapshot, Stream
from diag.parsers.base import Context
from diag.parsers.registry import parsers_for
from diag.parsers.scan import StreamScanner
from diag.parsers.server_info import ServerInfo, emit_server_info
from diag.sources.discover import InputFile, Problem, discover
from diag.sources.readers import LineAnchor, detect_backend

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd  # (imported where used: the scan workers never load it)

SNAPSHOT_LIMIT_BYTES = 512 * 1024 * 1024
PARALLEL_MIN_BYTES = 64 * 1024 * 1024  # auto mode uses worker processes above this input size
AUTO_JOBS_MAX = 8


@dataclass
class Ingested:
    tables: EventTables
    inputs: list[InputStatus]
    streams: list[Stream]
    snapshots: list[Snapshot]
    profiles: list[dict[str, Any]]  # standalone table files
    traces: list[TraceAnalysis] = field(default_factory=list)  # torch-profiler traces
    line_anchors: dict[str, tuple[LineAnchor, ...]] = field(default_factory=dict)  # Artifacts'


def ingest(
    paths: Sequence[str],
    progress: ProgressFn | None = None,
    snapshot_limit: int = SNAPSHOT_LIMIT_BYTES,
    jobs: int | None = None,
    chunk_bytes: int | None = None,
    hotpath: bool | None = None,
    stage: StageFn | None = None,
) -> Ingested:
    """Read every input into event tables.

    ``jobs``: worker processes. None or 0 = auto: one per core (at most AUTO_JOBS_MAX) when
    the inputs total more than PARALLEL_MIN_BYTES, else 1; 1 = everything in this process.
    Both paths give identical results (tests/test_parallel.py). ``chunk_bytes``: size of
    the byte ranges big plain files are split into (default about eight per worker, 8-64
    MiB); tests set it small to force splits. stdin is always read in this process.
    ``hotpath``: read the periodic lines in bulk (:mod:`diag.ingest.hotpath`); None = on
    unless ``GRAPHDIAG_HOTPATH=0``; False = every line through the per-line parsers.
    ``stage``: told when reading is done and the event tables are built (a meter's second
    stage: that takes seconds on a big log, after the last byte).
    """
    files, problems = discover(paths)
    return ingest_files(
        files, problems, progress, snapshot_limit, jobs, chunk_bytes, hotpath, stage
    )


def ingest_files(
    files: Sequence[InputFile],
    problems: Sequence[Problem] = (),
    progress: ProgressFn | None = None,
    snapshot_limit: int = SNAPSHOT_LIMIT_BYTES,
    jobs: int | None = None,
    chunk_bytes: int | None = None,
    hotpath: bool | None = None,
    stage: StageFn | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> Ingested:
    """:func:`ingest` of files already discovered (one group of them, ``diag.fleet``).

    ``meanwhile``: the caller's own work (the analysis' imports), run once here while worker
    processes have segments to scan; not run when everything is read in this process."""
    use_hot = hotpath_enabled(hotpath)
    inputs: list[InputStatus] = [
        InputStatus(p.path, status="skipped", reason=p.reason) for p in problems
    ]
    groups: dict[str, list[InputFile]] = {}
    for f in files:
        groups.setdefault(f.group, []).append(f)
    total = sum(size_of(f) for f in files)
    meter = Meter(progress, total)
    n_jobs = resolve_jobs(jobs, total)
    if n_jobs > 1:  # no more workers than segments: a small log runs in this process
        from diag.ingest.parallel import chunk_size, segment_estimate

        chunk = chunk_bytes or chunk_size(total, n_jobs)
        gz = [f.path.endswith(".gz") for f in files]
        n_jobs = bounded_jobs(
            n_jobs,
            sum(segment_estimate(size_of(f), g, chunk) for f, g in zip(files, gz, strict=True)),
        )
    if n_jobs > 1 and files and all(f.fs_path is not None for f in files):
        from diag.ingest.parallel import ingest_parallel

        sink, streams, found = ingest_parallel(
            groups, inputs, meter, snapshot_limit, n_jobs, chunk_bytes, use_hot, meanwhile
        )
    else:
        sink, streams, found = _ingest_here(groups, inputs, meter, snapshot_limit, use_hot)
    if found.server_infos:  # each document's stream at its place in the reading order
        streams.extend(_read_server_info(info, sink, inputs) for info in found.server_infos)
        order = {f.path: i for i, f in enumerate(files)}
        streams.sort(key=lambda s: order.get(s.sources[0], len(files)))
    if stage is not None:
        stage("building the event tables", 0, 0)
    tables = _to_tables(sink)
    del sink
    time_notes = settle_years(tables, streams)
    _attach_notes(tables, inputs, time_notes)
    release_freed_memory()  # what reading and framing freed goes back before analysis
    return Ingested(
        tables, inputs, streams, found.snapshots, found.profiles, found.traces, found.line_anchors
    )


def _read_server_info(info: ServerInfo, sink: EventSink, inputs: list[InputStatus]) -> Stream:
    """A server-info document's events, as a stream of its own (it joins the run of a log
    beside it: diag.facts.runs)."""
    stream = Stream(info.path, info.backend, [info.path], kind="server_info")
    n = emit_server_info(info, Context(sink, info.backend))
    for status in inputs:
        if status.path == info.path:
            status.stream, status.events = stream.id, n
    return stream


def _attach_notes(
    tables: EventTables, inputs: list[InputStatus], more: dict[str, str] | None = None
) -> None:
    """Input notes that parsers found (a log cut inside a traceback), and ``more`` (source ->
    note: timestamps outside the years a log holds), onto their input's row."""
    notes = tables["input_note"]
    pairs = list(notes[["source", "text"]].itertuples(index=False, name=None))
    pairs.extend((more or {}).items())
    if not pairs:
        return
    by_path = {i.path: i for i in inputs}
    for src, text in pairs:
        status = by_path.get(str(src))
        if status is not None and text not in status.notes:
            status.notes.append(str(text))


def _ingest_here(
    groups: dict[str, list[InputFile]],
    inputs: list[InputStatus],
    meter: Meter,
    snapshot_limit: int,
    use_hot: bool = True,
) -> tuple[EventSink, list[Stream], Artifacts]:
    """Everything in this process: each stream read by one scanner, file after file."""
    sink = EventSink()
    streams: list[Stream] = []
    found = Artifacts()
    scanner: StreamScanner | None = None
    current: Stream | None = None
    last: InputStatus | None = None

    def skipped(item: InputFile) -> None:
        meter.set(meter.done + size_of(item), force=True)

    for stream, lf, opened in logs_by_stream(
        groups, inputs, found, snapshot_limit, streams, skipped
    ):
        if stream is not current:
            if scanner is not None and last is not None:
                close_stream(scanner, last)
            scanner = make_scanner(parsers_for(stream.backend), sink, stream.backend, use_hot)
            current = stream
        assert scanner is not None
        base = meter.done
        scan_file(scanner, lf, opened, meter, base)
        meter.set(base + lf.size, force=True)
        last = lf.status
    if scanner is not None and last is not None:
        close_stream(scanner, last)
    meter.finish()
    return sink, streams, found


def resolve_jobs(jobs: int | None, total_bytes: int) -> int:
    """The number of processes ``jobs`` asks for (None/0 = auto), never more than the cores
    (``ingest`` caps it at the number of segments too)."""
    if jobs is not None and jobs > 0:
        return bounded_jobs(jobs, jobs)
    if total_bytes <= PARALLEL_MIN_BYTES:
        return 1
    return bounded_jobs(AUTO_JOBS_MAX, AUTO_JOBS_MAX)


def _to_tables(sink: EventSink) -> EventTables:
    """``sink.to_tables()``, freeing each column buffer as soon as its frame exists."""
    frames = {}
    for name in sink.kinds():
        frames[name] = in_line_order(sink.pop_frame(name))
    return EventTables(frames)


def in_line_order(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame's rows in line order within each source (sources in order of appearance).

    Rows of a multi-line block (vLLM's CUDA-graph metrics table) are emitted when it closes,
    after the lines other processes interleaved into it; run splitting wants line order and
    sorting there copied every column of the kind on top of these frames (~120 MB on a 700 MB
    vLLM log). Here the frame is the sink's own: each column is reordered and the old one
    dropped in turn, so the copy is one column at a time."""
    import pandas as pd

    if len(frame) < 2 or "line" not in frame or frame["line"].hasnans:
        return frame
    line = frame["line"].to_numpy(dtype=np.int64)
    src = frame["source"]
    codes = src.cat.codes.to_numpy() if isinstance(src.dtype, pd.CategoricalDtype) else None
    if codes is None:
        codes = pd.factorize(src, use_na_sentinel=True)[0]
    first = np.full(int(codes.max()) + 2, len(codes), dtype=np.int64)
    np.minimum.at(first, codes + 1, np.arange(len(codes)))
    rank = np.argsort(np.argsort(first, kind="stable"), kind="stable")[codes + 1]
    if bool(((rank[1:] > rank[:-1]) | ((rank[1:] == rank[:-1]) & (line[1:] >= line[:-1]))).all()):
        return frame
    # stable: equal keys keep their order (one source: the line sort alone, the same order)
    one = bool((rank == rank[0]).all())
    perm = np.argsort(line, kind="stable") if one else np.lexsort((line, rank))
    del line, rank, codes, first
    cols: dict[str, Any] = {}
    for name in list(frame.columns):
        # the column's own array taken (a Series' take also takes and rebuilds its index)
        cols[name] = frame[name].array.take(perm)
        del frame[name]
    return pd.DataFrame(cols, columns=column_index(list(cols)), copy=False)


__all__ = [
    "PARALLEL_MIN_BYTES",
    "Ingested",
    "InputStatus",
    "ProgressFn",
    "StageFn",
    "Stream",
    "detect_backend",
    "in_line_order",
    "ingest",
    "ingest_files",
    "parsers_for",
    "resolve_jobs",
]
