"""Ingestion: inputs -> event tables, snapshot summaries and standalone profiler tables.

Every input ends up in ``inputs`` with a status (ok / partial / skipped) and the reason,
so one unreadable file never stops the others and nothing is silently dropped.
"""

from __future__ import annotations

import gzip
import multiprocessing as mp
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from diag.events import EventSink, EventTables
from diag.parsers.base import LineParser
from diag.parsers.scan import StreamScanner, same_state
from diag.sources.discover import InputFile, discover
from diag.sources.readers import (
    BLOCK_BYTES,
    InputError,
    Sniff,
    detect_backend,
    iter_blocks,
    iter_lines,
    iter_range,
    open_binary,
    raw_position,
    read_head,
    sniff,
)

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
    from diag.parsers.benchmark import BenchmarkParser
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
    out.append(BenchmarkParser())
    return out


PARALLEL_MIN_BYTES = 64 * 1024 * 1024  # auto mode uses worker processes above this input size
AUTO_JOBS_MAX = 8
PROGRESS_SECONDS = 0.5
PROGRESS_BYTES = 64 * 1024 * 1024


def ingest(
    paths: Sequence[str],
    progress: ProgressFn | None = None,
    snapshot_limit: int = SNAPSHOT_LIMIT_BYTES,
    jobs: int | None = None,
    chunk_bytes: int | None = None,
) -> Ingested:
    """Read every input into event tables.

    ``jobs``: worker processes. None or 0 = auto: one per core (at most AUTO_JOBS_MAX) when
    the inputs total more than PARALLEL_MIN_BYTES, else 1; 1 = everything in this process.
    Both paths give identical results (tests/test_parallel.py). ``chunk_bytes``: size of
    the byte ranges big plain files are split into (default about eight per worker, 8-64
    MiB); tests set it small to force splits. stdin is always read in this process.
    """
    files, problems = discover(paths)
    inputs: list[InputStatus] = [
        InputStatus(p.path, status="skipped", reason=p.reason) for p in problems
    ]
    groups: dict[str, list[InputFile]] = {}
    for f in files:
        groups.setdefault(f.group, []).append(f)
    total = sum(_size(f) for f in files)
    meter = _Meter(progress, total)
    n_jobs = resolve_jobs(jobs, total)
    if n_jobs > 1 and files and all(f.fs_path is not None for f in files):
        return _ingest_parallel(groups, inputs, meter, snapshot_limit, n_jobs, chunk_bytes)
    sink = EventSink()
    streams: list[Stream] = []
    snapshots: list[dict[str, Any]] = []
    profiles: list[dict[str, Any]] = []
    for gid, members in groups.items():
        _scan_group(gid, members, sink, inputs, streams, snapshots, profiles, meter, snapshot_limit)
    meter.finish()
    return Ingested(_to_tables(sink), inputs, streams, snapshots, profiles)


def resolve_jobs(jobs: int | None, total_bytes: int) -> int:
    """The number of processes ``jobs`` asks for (None/0 = auto)."""
    if jobs is not None and jobs > 0:
        return jobs
    if total_bytes <= PARALLEL_MIN_BYTES:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, AUTO_JOBS_MAX))


class _Meter:
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


def _to_tables(sink: EventSink) -> EventTables:
    """``sink.to_tables()``, freeing each column buffer as soon as its frame exists."""
    frames = {}
    for name in list(sink.tables):
        frames[name] = sink.tables.pop(name).frame()
    return EventTables(frames)


# ---------------------------------------------------------------------- opening one input
def _open_log(
    item: InputFile,
    status: InputStatus,
    snapshots: list[dict[str, Any]],
    profiles: list[dict[str, Any]],
    snapshot_limit: int,
) -> tuple[Any, bytes, str | None, Sniff] | None:
    """Open an input and sniff it. Snapshots and table files are loaded here, unreadable or
    non-log inputs get their status; only a log comes back, opened, with its head bytes."""
    try:
        stream_obj = open_binary(item)
    except OSError as exc:
        status.status, status.reason = "skipped", _os_reason(exc)
        return None
    keep = False
    try:
        head, err = read_head(stream_obj)
        if err is not None and not head:
            status.status, status.reason = "skipped", err
            return None
        info = sniff(head, compressed=False)
        status.kind, status.backend = info.kind, info.backend
        if info.kind == "memory_snapshot":
            _close(stream_obj)
            snapshots.append(_load_snapshot(item, status, snapshot_limit))
            return None
        if info.kind == "profile_table":
            profiles.extend(_load_tables(item, head, stream_obj, status))
            return None
        if info.kind != "log":
            status.status, status.reason = "skipped", info.reason
            return None
        keep = True
        return stream_obj, head, err, info
    except InputError as exc:
        status.status, status.reason = "skipped", str(exc)
        return None
    finally:
        if not keep:
            _close(stream_obj)


def _new_stream(
    gid: str, members: list[InputFile], item: InputFile, info: Sniff, streams: list[Stream]
) -> Stream:
    """The stream a rotated set (or a single file) becomes, named by the set or the file."""
    stream = Stream(gid if len(members) > 1 else item.path, info.backend)
    streams.append(stream)
    return stream


# ---------------------------------------------------------------------- in this process
def _scan_group(
    gid: str,
    members: list[InputFile],
    sink: EventSink,
    inputs: list[InputStatus],
    streams: list[Stream],
    snapshots: list[dict[str, Any]],
    profiles: list[dict[str, Any]],
    meter: _Meter,
    snapshot_limit: int,
) -> None:
    """One rotated set, read as one stream by one scanner."""
    stream: Stream | None = None
    scanner: StreamScanner | None = None
    for item in members:
        status = InputStatus(item.path)
        inputs.append(status)
        base = meter.done
        opened = _open_log(item, status, snapshots, profiles, snapshot_limit)
        if opened is None:
            meter.set(base + _size(item), force=True)
            continue
        stream_obj, head, err, info = opened
        try:
            if scanner is None:
                stream = _new_stream(gid, members, item, info, streams)
                scanner = StreamScanner(parsers_for(info.backend), sink, info.backend)
            assert stream is not None
            stream.sources.append(item.path)
            status.stream = stream.id
            _scan_log(scanner, item, stream_obj, head, status, meter, base)
            if err and status.status == "ok":
                status.status, status.reason = "partial", err
        except InputError as exc:
            status.status, status.reason = "skipped", str(exc)
        finally:
            _close(stream_obj)
            meter.set(base + _size(item), force=True)
    if scanner is not None:
        before = sink.count()
        scanner.close()
        if inputs and sink.count() > before:
            last = next(s for s in reversed(inputs) if s.stream is not None)
            last.events = (last.events or 0) + sink.count() - before


def _scan_log(
    scanner: StreamScanner,
    item: InputFile,
    stream_obj: Any,
    head: bytes,
    status: InputStatus,
    meter: _Meter,
    base: int,
) -> None:
    """Scan one opened log file into the scanner's sink; fills lines, events, partial."""
    sink = scanner.sink
    before = sink.count()
    errors: list[str] = []
    size = _size(item)
    read = 0

    def tick(n: int) -> None:
        nonlocal read
        read += n
        pos = raw_position(stream_obj)
        meter.set(base + min(size, read if pos is None else pos) if size else base)

    status.lines = scanner.scan_blocks(
        item.path, iter_blocks(stream_obj, head, errors), on_block=tick
    )
    status.events = sink.count() - before
    if errors:
        status.status, status.reason = "partial", errors[0]


# ---------------------------------------------------------------------- worker processes
# Parallel design. Each stream (rotated set) is cut into segments: whole gzip files, and
# byte ranges of plain files that start at a line start (preferably right after a periodic
# batch/stats line, where no multi-line block is open) with their exact first line number,
# counted by the parent. Workers scan segments with a scanner restored from a state
# snapshot and return the events plus their end state. The first segment of a stream starts
# fresh and is kept small; later ones are speculatively given the latest verified state of
# their stream (after start-up, per-stream state rarely changes). The parent accepts
# segments strictly in order, and only if the state a segment started from equals the end
# state of its predecessor; otherwise it scans that segment again from the true state. So
# the result is the in-process result, row for row; speculation only costs time.

_SAFE_BOUNDARY = re.compile(
    rb"\n(?:\[\d{4}-\d\d-\d\d [^\]\n]*\]|(?:\([^)\n]*pid=\d+\) )?(?:INFO|DEBUG) \d\d-\d\d [^\n]*?\])"
    rb" [^\n]*?(?:Decode batch|Prefill batch|Avg prompt throughput|Running batch with)[^\n]*\n"
)
_BOUNDARY_WINDOW = 1 << 20


@dataclass(frozen=True)
class _Task:
    """One segment, as sent to a worker."""

    k: int
    file_no: int
    source: str
    fs_path: str
    gzip: bool
    start: int
    end: int | None
    first_lineno: int
    backend: str
    snap: bytes | None = None


@dataclass
class _Result:
    sink: EventSink
    lines: int
    errors: list[str]
    end_snap: bytes


_COUNTER: Any = None  # shared byte counter for progress, set in each worker


def _init_worker(counter: Any) -> None:
    global _COUNTER
    _COUNTER = counter
    # Ctrl-C reaches the whole process group: the parent handles it and ends the workers,
    # which must neither raise KeyboardInterrupt (tracebacks, a broken pool) nor run the
    # parent's SIGTERM handler they inherited through fork
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _scan_segment(task: _Task) -> _Result:
    """Worker: scan one segment from the given state."""
    sink = EventSink()
    scanner = StreamScanner(parsers_for(task.backend), sink, task.backend)
    if task.snap is not None:
        scanner.restore(task.snap)
    errors: list[str] = []
    counter = _COUNTER
    if task.gzip:
        stream = open_binary(InputFile(task.source, Path(task.fs_path), task.source, 0))
        last = [0]

        def tick_gz(_: int) -> None:
            pos = raw_position(stream)
            if counter is not None and pos is not None:
                with counter.get_lock():
                    counter.value += pos - last[0]
                last[0] = pos

        try:
            head, err = read_head(stream)
            lines = scanner.scan_blocks(
                task.source, iter_blocks(stream, head, errors), on_block=tick_gz
            )
            if err is not None:
                errors.append(err)
        finally:
            stream.close()
    else:

        def tick(n: int) -> None:
            if counter is not None:
                with counter.get_lock():
                    counter.value += n

        lines = scanner.scan_blocks(
            task.source,
            iter_range(task.fs_path, task.start, task.end),
            task.first_lineno,
            on_block=tick,
        )
    return _Result(sink, lines, errors, scanner.snapshot())


@dataclass
class _LogFile:
    item: InputFile
    status: InputStatus
    gzip: bool
    size: int


@dataclass
class _Plan:
    """One stream's segments and their in-order verification."""

    stream: Stream
    backend: str
    files: list[_LogFile] = field(default_factory=list)
    sink: EventSink = field(default_factory=EventSink)
    tail: EventSink = field(default_factory=EventSink)  # events of the final close()
    segments: Iterator[_Task] | None = None
    exhausted: bool = False
    dispatched: int = 0
    verified: int = 0
    verified_snap: bytes | None = None
    ready: bool = True  # may dispatch speculatively (False while the head or a re-scan runs)
    rerun: list[_Task] = field(default_factory=list)
    buffered: dict[int, tuple[_Task, _Result]] = field(default_factory=dict)
    failed: bool = False
    rescans: int = 0
    max_ahead: int = 4  # results held back waiting for an earlier segment (bounds memory)

    def next_task(self) -> _Task | None:
        if self.failed:
            return None
        if self.rerun:
            return self.rerun.pop(0)
        if not self.ready or self.exhausted or self.segments is None:
            return None
        if self.dispatched - self.verified > self.max_ahead:
            return None
        task = next(self.segments, None)
        if task is None:
            self.exhausted = True
            return None
        self.dispatched += 1
        if task.k == 0:
            self.ready = False  # later segments wait for the head's end state
            return task
        return replace(task, snap=self.verified_snap)

    def accept(self, task: _Task, res: _Result) -> None:
        lf = self.files[task.file_no]
        st = lf.status
        st.lines = (st.lines or 0) + res.lines
        st.events = (st.events or 0) + res.sink.count()
        if res.errors and st.status == "ok":
            st.status, st.reason = "partial", res.errors[0]
        self.sink.merge(res.sink)
        self.verified_snap = res.end_snap
        self.verified += 1
        self.ready = True

    def advance(self) -> None:
        """Accept buffered results in order; re-queue a segment whose start state was wrong."""
        while self.verified in self.buffered:
            task, res = self.buffered.pop(self.verified)
            expected = self.verified_snap
            if not (task.snap is None and expected is None) and (
                task.snap is None or expected is None or not same_state(task.snap, expected)
            ):
                self.rerun.append(replace(task, snap=expected))
                self.rescans += 1
                self.ready = False
                return
            self.accept(task, res)


def _segments(plan: _Plan, chunk: int, head_chunk: int) -> Iterator[_Task]:
    k = 0
    for file_no, lf in enumerate(plan.files):
        fs_path = str(lf.item.fs_path)
        if lf.gzip:
            ranges: Iterable[tuple[int, int | None, int]] = [(0, None, 1)]
        else:
            ranges = _split_plain(fs_path, lf.size, chunk, head_chunk if k == 0 else chunk)
        for start, end, first in ranges:
            yield _Task(k, file_no, lf.item.path, fs_path, lf.gzip, start, end, first, plan.backend)
            k += 1


def _split_plain(
    path: str, size: int, chunk: int, first: int
) -> Iterator[tuple[int, int | None, int]]:
    """(start, end, first line number) of a plain file's segments, counted as we go."""
    if size < first + chunk // 2:
        yield 0, None, 1
        return
    with open(path, "rb") as fh:
        start, lineno, target = 0, 1, first
        while size - target > chunk // 2:
            n = 0
            pos = start
            while pos < target:
                data = fh.read(min(BLOCK_BYTES, target - pos))
                if not data:
                    break
                n += data.count(b"\n")
                pos += len(data)
            found = _boundary(fh, pos)
            if found is None:
                break
            boundary, extra = found
            yield start, boundary, lineno
            lineno += n + extra
            start = boundary
            fh.seek(start)
            target = start + chunk
        yield start, None, lineno


def _boundary(fh: Any, pos: int) -> tuple[int, int] | None:
    """The first safe segment start at or after ``pos`` (the file is positioned there), and
    the newlines between; None at end of file."""
    window = fh.read(_BOUNDARY_WINDOW)
    m = _SAFE_BOUNDARY.search(window)
    if m is not None:
        return pos + m.end(), window.count(b"\n", 0, m.end())
    nl = window.find(b"\n")
    skipped = 0
    while nl < 0:  # one very long line: read on to its end
        if not window:
            return None
        skipped += len(window)
        window = fh.read(_BOUNDARY_WINDOW)
        nl = window.find(b"\n")
    return pos + skipped + nl + 1, 1


def _mp_context() -> Any:
    """fork where it is safe (cheap start, nothing to re-import), else forkserver/spawn."""
    methods = mp.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return mp.get_context("fork")
    return mp.get_context("forkserver" if "forkserver" in methods else "spawn")


def _ingest_parallel(
    groups: dict[str, list[InputFile]],
    inputs: list[InputStatus],
    meter: _Meter,
    snapshot_limit: int,
    jobs: int,
    chunk_bytes: int | None,
) -> Ingested:
    streams: list[Stream] = []
    snapshots: list[dict[str, Any]] = []
    profiles: list[dict[str, Any]] = []
    plans: list[_Plan] = []
    other_done = 0  # bytes of inputs that are not scanned by workers
    for gid, members in groups.items():
        plan: _Plan | None = None
        for item in members:
            status = InputStatus(item.path)
            inputs.append(status)
            opened = _open_log(item, status, snapshots, profiles, snapshot_limit)
            if opened is None:
                other_done += _size(item)
                meter.set(other_done, force=True)
                continue
            stream_obj, _head, _err, info = opened
            try:
                if plan is None:
                    plan = _Plan(_new_stream(gid, members, item, info, streams), info.backend)
                plan.stream.sources.append(item.path)
                status.stream = plan.stream.id
                plan.files.append(
                    _LogFile(item, status, isinstance(stream_obj, gzip.GzipFile), _size(item))
                )
            finally:
                _close(stream_obj)
        if plan is not None:
            plans.append(plan)

    log_bytes = sum(lf.size for p in plans for lf in p.files)
    chunk = chunk_bytes or max(8 << 20, min(64 << 20, log_bytes // (jobs * 8)))
    head_chunk = min(chunk, max(chunk // 16, 1 << 20))
    for p in plans:
        p.segments = _segments(p, chunk, head_chunk)
        p.max_ahead = 2 * jobs
    try:
        _run_pool(plans, jobs, meter, other_done)
    except (OSError, RuntimeError):  # no processes on this system: everything in here
        for p in plans:
            p.failed = True
    sink = EventSink()
    for p in plans:
        if p.failed:
            _rescan_here(p, meter)
        else:
            _finish(p)
        sink.merge(p.sink)
        sink.merge(p.tail)
    meter.set(meter.total, force=True)
    return Ingested(_to_tables(sink), inputs, streams, snapshots, profiles)


def _run_pool(plans: list[_Plan], jobs: int, meter: _Meter, other_done: int) -> None:
    ctx = _mp_context()
    counter = ctx.Value("q", 0)
    limit = jobs + 1  # one queued task per worker keeps them busy while results are merged
    inflight: dict[Future[_Result], tuple[_Plan, _Task]] = {}
    pool = ProcessPoolExecutor(
        max_workers=jobs, mp_context=ctx, initializer=_init_worker, initargs=(counter,)
    )
    try:
        with _signals_held():  # the first submissions fork the workers
            _fill(pool, plans, inflight, limit)
        while inflight:
            done, _ = wait(inflight, timeout=PROGRESS_SECONDS / 2, return_when=FIRST_COMPLETED)
            meter.set(other_done + int(counter.value))
            for fut in done:
                plan, task = inflight.pop(fut)
                try:
                    res = fut.result()
                except Exception:  # noqa: BLE001 - the stream is re-read in this process
                    plan.failed = True
                    continue
                if not plan.failed:
                    plan.buffered[task.k] = (task, res)
                    plan.advance()
            _fill(pool, plans, inflight, limit)
    except BaseException:  # Ctrl-C / SIGTERM (KeyboardInterrupt in the CLI): stop the workers now
        _stop(pool)
        raise
    pool.shutdown(wait=True)


def _fill(
    pool: ProcessPoolExecutor,
    plans: list[_Plan],
    inflight: dict[Future[_Result], tuple[_Plan, _Task]],
    limit: int,
) -> None:
    while len(inflight) < limit:
        picked = _pick(plans)
        if picked is None:
            return
        plan, task = picked
        inflight[pool.submit(_scan_segment, task)] = (plan, task)


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while workers are forked: a child must not run the parent's
    handlers before its initializer ignores them; the parent gets them right after."""
    if (
        not hasattr(signal, "pthread_sigmask")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what is queued and end the worker processes without waiting for them."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + 2
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()


def _pick(plans: list[_Plan]) -> tuple[_Plan, _Task] | None:
    for plan in plans:
        task = plan.next_task()
        if task is not None:
            return plan, task
    return None


def _finish(plan: _Plan) -> None:
    """End of a stream: close the blocks still open, as the in-process path does."""
    if plan.verified_snap is None:
        return
    scanner = StreamScanner(parsers_for(plan.backend), plan.tail, plan.backend)
    scanner.restore(plan.verified_snap)
    scanner.close()
    n = plan.tail.count()
    if n:
        last = plan.files[-1].status
        last.events = (last.events or 0) + n


def _rescan_here(plan: _Plan, meter: _Meter) -> None:
    """A stream whose workers failed: read it again in this process, from scratch."""
    plan.sink, plan.tail = EventSink(), EventSink()
    scanner = StreamScanner(parsers_for(plan.backend), plan.sink, plan.backend)
    for lf in plan.files:
        st = lf.status
        st.lines = st.events = None
        st.status, st.reason = "ok", None
        try:
            stream_obj = open_binary(lf.item)
        except OSError as exc:
            st.status, st.reason = "skipped", _os_reason(exc)
            continue
        try:
            head, err = read_head(stream_obj)
            _scan_log(scanner, lf.item, stream_obj, head, st, meter, meter.done)
            if err and st.status == "ok":
                st.status, st.reason = "partial", err
        finally:
            _close(stream_obj)
    before = plan.sink.count()
    scanner.close()
    if plan.sink.count() > before:
        last = plan.files[-1].status
        last.events = (last.events or 0) + plan.sink.count() - before


def _size(item: InputFile) -> int:
    if item.fs_path is None:
        return 0
    try:
        return os.path.getsize(item.fs_path)
    except OSError:
        return 0


def _close(stream: Any) -> None:
    try:
        if (
            stream is not None
            and getattr(stream, "name", None) != "<stdin>"
            and stream is not getattr(__import__("sys").stdin, "buffer", None)
        ):
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


def _load_tables(
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


__all__ = ["Ingested", "InputStatus", "Stream", "ingest", "detect_backend"]
