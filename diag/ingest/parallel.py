"""Scanning in worker processes: streams cut into segments, verified in order.

Each stream (rotated set) is cut into segments: whole gzip files, and byte ranges of plain
files that start at a line start (right after a periodic batch/stats line of the engine
spec, where no multi-line block is open) with their exact first line number, counted by
the parent. Workers scan segments with a scanner restored from a state snapshot and return
the events plus their end state. The first segment of a stream starts fresh and is kept
small; later ones are speculatively given the latest verified state of their stream (after
start-up, per-stream state rarely changes). The parent accepts segments strictly in order,
and only if the state a segment started from equals the end state of its predecessor;
otherwise it scans that segment again from the true state. So the result is the
in-process result, row for row; speculation only costs time.
"""

from __future__ import annotations

import multiprocessing as mp
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from diag.engines import ENGINES
from diag.events import EventSink
from diag.ingest.hotpath import make_scanner
from diag.ingest.hotpath.native import count_newlines
from diag.ingest.inputs import (
    PROGRESS_SECONDS,
    Artifacts,
    LogFile,
    Meter,
    NulCount,
    Opened,
    close_quietly,
    close_stream,
    logs_by_stream,
    nul_note,
    os_reason,
    scan_file,
    size_of,
)
from diag.ingest.owned import Leash, arrow_without_pandas, bounded_jobs, die_with_parent
from diag.model import InputStatus, Stream
from diag.parsers.registry import parsers_for
from diag.parsers.scan import same_state
from diag.sources.discover import InputFile
from diag.sources.readers import (
    BLOCK_BYTES,
    Sniff,
    iter_blocks,
    iter_range,
    open_binary,
    raw_position,
    read_head,
)

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

# a line that ends a periodic record of some engine: a safe place to cut a plain file
_SAFE_BOUNDARY = re.compile(
    rb"\n(?:"
    + b"|".join(spec.line_head for spec in ENGINES.values())
    + rb") [^\n]*?(?:"
    + b"|".join(re.escape(w) for spec in ENGINES.values() for w in spec.periodic_words)
    + rb")[^\n]*\n"
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
    hotpath: bool = True


@dataclass
class _Result:
    sink: EventSink
    lines: int
    errors: list[str]
    end_snap: bytes
    nul_count: int = 0
    nul_first: int | None = None  # line number in the file


_COUNTER: Any = None  # shared byte counter for progress, set in each worker


def _init_worker(
    counter: Any,
    backends: tuple[tuple[str, bool], ...],
    parent_pid: int,
    read_fd: int,
    write_fd: int,
) -> None:
    global _COUNTER
    _COUNTER = counter
    die_with_parent(parent_pid, read_fd, write_fd)
    # Ctrl-C reaches the whole process group: the parent handles it and ends the workers,
    # which must neither raise KeyboardInterrupt (tracebacks, a broken pool) nor run the
    # parent's SIGTERM handler they inherited through fork
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    arrow_without_pandas()
    _set_up_scanners(backends)


def _set_up_scanners(backends: tuple[tuple[str, bool], ...]) -> None:
    """The scanners' one-time set-up (RE2 patterns, C programs, literal sets: ~35 ms a
    backend), cached for the process: done by the parent before it forks the workers (it
    needs them for the streams' ends anyway) and inherited; a worker that was not forked
    does it here, while the first segment of each stream is still being read."""
    for backend, hotpath in backends:
        make_scanner(parsers_for(backend), EventSink(), backend, hotpath)


def _scan_segment(task: _Task) -> _Result:
    """Worker: scan one segment from the given state."""
    sink = EventSink()
    scanner = make_scanner(parsers_for(task.backend), sink, task.backend, task.hotpath)
    if task.snap is not None:
        scanner.restore(task.snap)
    errors: list[str] = []
    counter = _COUNTER
    nuls = NulCount()
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
                task.source, nuls.watch(iter_blocks(stream, head, errors)), on_block=tick_gz
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
            nuls.watch(iter_range(task.fs_path, task.start, task.end)),
            task.first_lineno,
            on_block=tick,
        )
    first = None if nuls.first_line is None else task.first_lineno + nuls.first_line - 1
    return _Result(sink, lines, errors, scanner.snapshot(), nuls.count, first)


@dataclass
class _Plan:
    """One stream's segments and their in-order verification."""

    stream: Stream
    backend: str
    files: list[LogFile] = field(default_factory=list)
    hotpath: bool = True
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
        if res.nul_count:
            lf.nul_count += res.nul_count
            lf.nul_first = lf.nul_first if lf.nul_first is not None else res.nul_first
        if not task.gzip:
            lf.anchors.append((task.first_lineno, task.start))
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


def chunk_size(log_bytes: int, jobs: int) -> int:
    """Byte ranges of about eight per worker, 8-64 MiB."""
    return max(8 << 20, min(64 << 20, log_bytes // (max(1, jobs) * 8)))


def segment_estimate(size: int, gz: bool, chunk: int) -> int:
    """About how many segments a file is cut into (gzip files are one)."""
    return 1 if gz else max(1, size // max(1, chunk))


def _segments(plan: _Plan, chunk: int, head_chunk: int, workers: int = 1) -> Iterator[_Task]:
    k = 0
    for file_no, lf in enumerate(plan.files):
        fs_path = str(lf.item.fs_path)
        if lf.gzip:
            ranges: Iterable[tuple[int, int | None, int]] = [(0, None, 1)]
        else:
            first = head_chunk if k == 0 else chunk
            ranges = _split_plain(fs_path, lf.size, chunk, first, workers)
        for start, end, first_line in ranges:
            yield _Task(
                k,
                file_no,
                lf.item.path,
                fs_path,
                lf.gzip,
                start,
                end,
                first_line,
                plan.backend,
                hotpath=plan.hotpath,
            )
            k += 1


def next_size(remaining: int, chunk: int, workers: int) -> int:
    """The byte size of the next segment of a file: ``chunk``, and near the file's end its
    remaining bytes shared among the workers (at least ``chunk // 4``; ``chunk // 8`` left
    ~10 MB more RSS after ingest on the 700 MB vLLM log, runs spread +-6 MB), so the workers
    end together: with whole chunks to the end one worker scanned the last one alone
    (0.2-0.3 s of the 700 MB SGLang log's wall time, loaded, the other worker idle)."""
    return max(chunk // 4, min(chunk, remaining // max(1, workers)))


def _split_plain(
    path: str, size: int, chunk: int, first: int, workers: int = 1
) -> Iterator[tuple[int, int | None, int]]:
    """(start, end, first line number) of a plain file's segments, counted as we go; sizes
    from :func:`next_size` after the first (``first`` bytes)."""
    if size < first + chunk // 2:
        yield 0, None, 1
        return
    # one buffer read into again and again: a fresh 8 MiB bytes per read was page-faulted in
    # each time (the parent counts every byte of every log: ~1 s of 700 MB in sys time)
    buf = bytearray(BLOCK_BYTES)
    view = memoryview(buf)
    with open(path, "rb") as fh:
        start, lineno, step = 0, 1, first
        target = first
        while size - target > step // 2:
            n = 0
            pos = start
            while pos < target:
                got = fh.readinto(view[: min(BLOCK_BYTES, target - pos)])
                if not got:
                    break
                n += count_newlines(view[:got])
                pos += got
            found = _boundary(fh, pos)
            if found is None:
                break
            boundary, extra = found
            yield start, boundary, lineno
            lineno += n + extra
            start = boundary
            fh.seek(start)
            step = next_size(size - start, chunk, workers)
            target = start + step
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


def ingest_parallel(
    groups: dict[str, list[InputFile]],
    inputs: list[InputStatus],
    meter: Meter,
    snapshot_limit: int,
    jobs: int,
    chunk_bytes: int | None,
    use_hot: bool = True,
    meanwhile: Callable[[], None] | None = None,
) -> tuple[EventSink, list[Stream], Artifacts]:
    """Scan every stream in worker processes; the result equals the in-process one.
    ``meanwhile`` runs here once the workers have segments queued (see :func:`_run_pool`)."""
    streams: list[Stream] = []
    found = Artifacts()
    plans: list[_Plan] = []
    other_done = 0  # bytes of inputs that are not scanned by workers

    def skipped(item: InputFile) -> None:
        nonlocal other_done
        other_done += size_of(item)
        meter.set(other_done, force=True)

    for stream, lf, _opened in logs_by_stream(
        groups, inputs, found, snapshot_limit, streams, skipped
    ):
        if not plans or plans[-1].stream is not stream:
            plans.append(_Plan(stream, stream.backend, hotpath=use_hot))
        plans[-1].files.append(lf)

    log_bytes = sum(lf.size for p in plans for lf in p.files)
    chunk = chunk_bytes or chunk_size(log_bytes, jobs)
    jobs = bounded_jobs(
        jobs, sum(segment_estimate(lf.size, lf.gzip, chunk) for p in plans for lf in p.files)
    )
    head_chunk = min(chunk, max(chunk // 16, 1 << 20))
    for p in plans:
        p.segments = _segments(p, chunk, head_chunk, jobs)
        p.max_ahead = 2 * jobs
    try:
        _run_pool(plans, jobs, meter, other_done, meanwhile)
    except (OSError, RuntimeError):  # no processes on this system: everything in here
        for p in plans:
            p.failed = True
    sink = EventSink()
    for p in plans:
        if p.failed:
            _rescan_here(p, meter)
        else:
            _finish(p)
            for lf in p.files:
                if lf.nul_count:
                    lf.status.notes.append(nul_note(lf.nul_count, lf.nul_first))
                if lf.anchors:
                    found.line_anchors[lf.item.path] = tuple(lf.anchors)
        sink.merge(p.sink)
        sink.merge(p.tail)
    meter.set(meter.total, force=True)
    return sink, streams, found


def _run_pool(
    plans: list[_Plan],
    jobs: int,
    meter: Meter,
    other_done: int,
    meanwhile: Callable[[], None] | None = None,
) -> None:
    """The workers fed segments in order until every stream is verified. ``meanwhile`` is
    called once, when the head segments are verified and the workers have more queued than
    they run (or nothing is left to queue): the segments queued then (up to ``max_ahead`` of
    each stream) keep them busy while this process does it."""
    ctx = _mp_context()
    backends = tuple(sorted({(p.backend, p.hotpath) for p in plans}))
    if ctx.get_start_method() == "fork":
        _set_up_scanners(backends)
    counter = ctx.Value("q", 0)
    limit = jobs + 1  # one queued task per worker keeps them busy while results are merged
    inflight: dict[Future[_Result], tuple[_Plan, _Task]] = {}
    leash = Leash()
    pool = ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(
            counter,
            backends,
            *leash.initargs(ctx.get_start_method() == "fork"),
        ),
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
            if meanwhile is not None and (
                len(inflight) >= limit or all(p.exhausted or p.failed for p in plans)
            ):
                _fill(pool, plans, inflight, 2 * limit)
                meanwhile()
                meanwhile = None
    except BaseException:  # Ctrl-C / SIGTERM (KeyboardInterrupt in the CLI): stop the workers now
        _stop(pool)
        leash.close()
        raise
    pool.shutdown(wait=True)
    leash.close()


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
    # (shutdown drops the pool's reference to its result queue: take the write end first)
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + 2
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(1.0)
    # A worker ended while sending its result leaves half a message in the result pipe, and
    # the pool's manager thread blocks reading the rest: the parent holds the pipe's write
    # end too, so no EOF ever comes, and interpreter exit joins that thread for ever. With
    # the workers gone, closing the parent's write end gives the reader its EOF; the pool
    # then tears itself down as broken (CPython's own path for a dead worker).
    if writer is not None and not any(proc.is_alive() for proc in procs):
        writer.close()


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
    scanner = make_scanner(parsers_for(plan.backend), plan.tail, plan.backend, plan.hotpath)
    scanner.restore(plan.verified_snap)
    close_stream(scanner, plan.files[-1].status)


def _rescan_here(plan: _Plan, meter: Meter) -> None:
    """A stream whose workers failed: read it again in this process, from scratch."""
    plan.sink, plan.tail = EventSink(), EventSink()
    scanner = make_scanner(parsers_for(plan.backend), plan.sink, plan.backend, plan.hotpath)
    for lf in plan.files:
        st = lf.status
        st.lines = st.events = None
        st.status, st.reason = "ok", None
        try:
            stream_obj = open_binary(lf.item)
        except OSError as exc:
            st.status, st.reason = "skipped", os_reason(exc)
            continue
        try:
            head, err = read_head(stream_obj)
            opened = Opened(stream_obj, head, err, Sniff("log", plan.backend, lf.gzip))
            scan_file(scanner, lf, opened, meter, meter.done)
        finally:
            close_quietly(stream_obj)
    close_stream(scanner, plan.files[-1].status)
