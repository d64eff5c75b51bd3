"""Stream a torch-profiler (Kineto) Chrome-trace JSON, keeping only what graph replay needs.

A serving trace is 100-150 MB and 5-9 M events per rank; ``json.load`` of it holds ~3.4x
its size as Python objects (``/work/shared/formats/torch-traces.md`` §5). So the document
is read in blocks, and each event object is decoded on its own with the stdlib's C
decoder (``JSONDecoder.raw_decode`` at the event's offset): one small dict at a time,
dropped at once unless it is a launch, a GPU op, a step or capture span, or a capture
API call, of which only a few numbers per event are kept in typed arrays. Kineto writes
each event over several lines (kineto ``libkineto/src/output_json.cpp`` L237-259), so
lines are no unit; any key order and any whitespace are read, a bare event array too.

With the optional C extension (``_tracescan.c``) the event array is first walked in C: it
finds each event's bytes, drops the categories nothing here reads (python_function, flows:
most of a trace) and reads plain GPU ops' three numbers itself, so only launches and spans
reach the decoder, in runs of consecutive events (one decoder call a run). No dependency
was added: ijson/orjson are not installed here and the stdlib decoder behind a C pre-scan
reads a 1 GB trace within 2x of ``gzip -dc`` (``bench/trace_bench.py``); the all-Python
path stays as the oracle (``tests/test_traces_native.py``) and the fallback.

What cannot be decoded is skipped without building it (an event nested deeper than the
C decoder recurses, a string of 100 MB): a bounded scanner walks past it block by block,
the reason is kept as one line and the rest of the trace is read.
"""

from __future__ import annotations

import json
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal, TypeGuard

from diag.artifacts.trace_json import (
    DECODE,
    SEP,
    Buffer,
    Cut,
    Skipped,
    decode_value,
    skip_value,
)
from diag.sources.discover import InputFile
from diag.sources.readers import iter_blocks, open_binary

# Launch API names (kineto ``cupti_strings.cpp`` strips the ``_vNNNN`` suffix; torch-traces.md §1)
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "cudaGraphLaunch_ptsz", "hipGraphLaunch"})
# CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000: the only sign of a graph launch in traces
# whose callback names were not resolved (torch-traces.md §1)
GRAPH_LAUNCH_CBID = 311
# cudaLaunchKernel(ExC), cuLaunchKernel(Ex), hipLaunchKernel, hipModuleLaunchKernel,
# hipExtModuleLaunchKernel, the cooperative and per-thread-stream variants
EAGER_LAUNCH = re.compile(
    r"^(?:cuda|cu|hip)(?:Ext)?(?:Module)?Launch(?:Cooperative)?Kernel(?:ExC|Ex)?(?:_ptsz|_spt)?$"
)
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")  # ActivityType.h L82-110
SPAN_CATS = frozenset({"user_annotation", "cpu_op"})  # CPU-side spans (not gpu_user_annotation)
# span names kept: vLLM execute_*, SGLang step[...], torch ProfilerStep#N, capture spans
SPAN_PREFIXES = ("execute_", "step[", "ProfilerStep#", "capture_")
CaptureCall = Literal["begin", "end", "instantiate"]
CAPTURE_CALLS: tuple[tuple[str, CaptureCall], ...] = (
    ("StreamBeginCapture", "begin"),
    ("StreamEndCapture", "end"),
    ("GraphInstantiate", "instantiate"),
)
META_KEYS = (
    "schemaVersion",
    "distributedInfo",
    "baseTimeNanoseconds",
    "displayTimeUnit",
    "traceName",
    "cupti_version",
    "cuda_runtime_version",
    "hip_runtime_version",
    "roctracer_version",
    "vllm_version",
)

try:  # built by setup.py (optional: without a compiler every event is decoded in Python)
    from diag.artifacts import _tracescan  # type: ignore[attr-defined]  # (compiled, no stub)
except ImportError:  # pragma: no cover - installs without a compiler
    _tracescan = None

# what the C pre-scan never hands to the decoder: categories no analysis here reads (flows
# are not joined on, python_function makes most of a with_stack trace), and of the kept
# categories the events whose name can be nothing we keep ("INVALID": an unresolved
# callback name, whose cbid still counts)
DROP_CATS = tuple(
    c.encode()
    for c in (
        "python_function",
        "ac2g",
        "async_cpu_to_gpu",
        "cpu_instant_event",
        "gpu_user_annotation",
        "Trace",
    )
)
GPU_CATS_B = tuple(c.encode() for c in GPU_CATS)  # read in C where their fields are plain
_LAUNCH_WORDS = (b"Launch", b"Capture", b"GraphInstantiate", b"INVALID")
FILTERED_CATS = tuple(
    [(c.encode(), tuple(p.encode() for p in SPAN_PREFIXES)) for c in sorted(SPAN_CATS)]
    + [(c.encode(), _LAUNCH_WORDS) for c in sorted(LAUNCH_CATS)]
)

BLOCK_BYTES = 4 * 1024 * 1024
MAX_VALUE_CHARS = 16 * 1024 * 1024  # a value longer than this is walked past, not decoded
MAX_PROBLEMS = 5  # skipped events listed one line each; the count says the rest
# the reading budget: what is kept grows with the trace (24-41 bytes a GPU op or launch, a
# Python object a span), so a trace built to exhaust memory stops here with its reason. A
# serving trace of 5-9 M events per rank (torch-traces.md §5) keeps about a million.
MAX_KEPT = 3_000_000  # launches + GPU ops; real traces keep ~12 % of their events (~1 M of 9 M)
MAX_SPANS = 100_000  # step and capture spans, capture API calls
UNRESOLVED = ("", "INVALID")  # launch names that leave the decision to args.cbid


class TraceError(Exception):
    """A trace that cannot be read at all; the message is the one-line reason."""


class OverBudget(Exception):
    """The trace keeps more than the reading budget: what was read stands, the rest is not
    read; the message is the reason."""


def _budget(out: RawTrace) -> None:
    if len(out.o_corr) + len(out.l_corr) > MAX_KEPT:
        raise OverBudget(
            f"read up to the reading budget: the trace holds more than {MAX_KEPT:,} launches "
            "and GPU ops; the rest is not read"
        )
    if len(out.spans) + len(out.capture_calls) > MAX_SPANS:
        raise OverBudget(
            f"read up to the reading budget: the trace holds more than {MAX_SPANS:,} step "
            "and capture spans; the rest is not read"
        )


@dataclass
class Span:
    """A CPU-side annotation span: a step or a capture."""

    name: str
    pid: int
    tid: int
    ts: float  # µs, as in the trace
    dur: float


@dataclass
class RawTrace:
    """What the reader kept of one trace: typed columns, a few spans, the metadata."""

    path: str
    meta: dict[str, Any] = field(default_factory=dict)
    device_names: list[str] = field(default_factory=list)
    # launches: correlation, ts, dur (µs), pid, tid, 1 = graph launch / 0 = eager kernel launch
    l_corr: array = field(default_factory=lambda: array("q"))
    l_ts: array = field(default_factory=lambda: array("d"))
    l_dur: array = field(default_factory=lambda: array("d"))
    l_pid: array = field(default_factory=lambda: array("q"))
    l_tid: array = field(default_factory=lambda: array("q"))
    l_graph: array = field(default_factory=lambda: array("b"))
    # GPU ops (kernel, gpu_memcpy, gpu_memset): correlation, ts, dur (µs)
    o_corr: array = field(default_factory=lambda: array("q"))
    o_ts: array = field(default_factory=lambda: array("d"))
    o_dur: array = field(default_factory=lambda: array("d"))
    spans: list[Span] = field(default_factory=list)
    capture_calls: list[tuple[CaptureCall, int, float]] = field(
        default_factory=list
    )  # kind, pid, ts
    events: int = 0  # every event of traceEvents, kept or not
    missing: dict[str, int] = field(default_factory=dict)  # kept-category events missing a field
    problems: list[str] = field(default_factory=list)  # one line each: skipped values, cut ends
    has_events: bool = False  # a traceEvents array (or a bare event array) was found

    @property
    def complete(self) -> bool:
        return not self.problems


class _Keeper:
    """Sorts decoded events into the trace's columns; the per-event hot path."""

    def __init__(self, out: RawTrace) -> None:
        self.out = out
        self.launch_kind: dict[str, int] = {}  # name -> 1 graph, 0 eager, -1 other API
        self.capture_kind: dict[str, CaptureCall | None] = {}

    def miss(self, key: str) -> None:
        self.out.missing[key] = self.out.missing.get(key, 0) + 1

    def add(self, ev: Any) -> None:
        out = self.out
        if type(ev) is not dict or ev.get("ph") != "X":
            return
        cat = ev.get("cat")
        if cat in GPU_CATS:
            args = ev.get("args")
            corr = args.get("correlation") if type(args) is dict else None
            ts, dur = ev.get("ts"), ev.get("dur")
            if type(corr) is not int or not _num(ts) or not _num(dur):
                self.miss("GPU op without args.correlation, ts or dur")
                return
            out.o_corr.append(corr)
            out.o_ts.append(ts)
            out.o_dur.append(dur)
            if len(out.o_corr) + len(out.l_corr) > MAX_KEPT:
                _budget(out)
        elif cat in LAUNCH_CATS:
            self._launch(ev)
        elif cat in SPAN_CATS:
            name = ev.get("name")
            if type(name) is str and name.startswith(SPAN_PREFIXES):
                ts, dur = ev.get("ts"), ev.get("dur")
                if not _num(ts) or not _num(dur):
                    self.miss("step span without ts or dur")
                    return
                out.spans.append(Span(name, _int(ev.get("pid")), _int(ev.get("tid")), ts, dur))
                if len(out.spans) > MAX_SPANS:
                    _budget(out)

    def _launch(self, ev: dict[str, Any]) -> None:
        out = self.out
        name = ev.get("name")
        kind = self.launch_kind.get(name) if type(name) is str else None
        if kind is None:
            kind = _launch_kind(name)
            if type(name) is str:
                self.launch_kind[name] = kind
        args = ev.get("args")
        if (
            kind < 0
            and (name is None or name in UNRESOLVED)
            and type(args) is dict
            and args.get("cbid") == GRAPH_LAUNCH_CBID
        ):
            kind = 1
        if kind < 0:
            if type(name) is str:
                if name in self.capture_kind:
                    call = self.capture_kind[name]
                else:
                    call = next((k for key, k in CAPTURE_CALLS if key in name), None)
                    self.capture_kind[name] = call
                ts = ev.get("ts")
                if call is not None and _num(ts):
                    out.capture_calls.append((call, _int(ev.get("pid")), ts))
                    if len(out.capture_calls) > MAX_SPANS:
                        _budget(out)
            return
        corr = args.get("correlation") if type(args) is dict else None
        ts, dur = ev.get("ts"), ev.get("dur")
        if type(corr) is not int or not _num(ts) or not _num(dur):
            self.miss("launch without args.correlation, ts or dur")
            return
        out.l_corr.append(corr)
        out.l_ts.append(ts)
        out.l_dur.append(dur)
        out.l_pid.append(_int(ev.get("pid")))
        out.l_tid.append(_int(ev.get("tid")))
        out.l_graph.append(kind)
        if len(out.o_corr) + len(out.l_corr) > MAX_KEPT:
            _budget(out)


def _launch_kind(name: Any) -> int:
    if name in GRAPH_LAUNCH_NAMES:
        return 1
    if type(name) is str and EAGER_LAUNCH.match(name):
        return 0
    return -1


def _num(v: Any) -> TypeGuard[float]:
    return type(v) is float or type(v) is int


def _int(v: Any) -> int:
    """pid/tid as an int (Kineto writes ints; some writers strings, hashed stably here)."""
    if type(v) is int:
        return v
    if isinstance(v, str):
        return int.from_bytes(v.encode()[:7].ljust(7, b"\0"), "little") | (1 << 56)
    return -1


def read_trace(
    item: InputFile | str | Path,
    stream: BinaryIO | None = None,
    head: bytes = b"",
    native: bool = True,
) -> RawTrace:
    """Read one trace (plain or gzip, by magic), streamed; ``stream``/``head``: an already
    opened input and the bytes already read from it (the caller closes it). Raises
    :class:`TraceError` only when nothing of it is a trace; a cut or broken part is listed
    in ``problems``."""
    if not isinstance(item, InputFile):
        p = Path(item)
        item = InputFile(str(p), p, str(p), 0)
    out = RawTrace(item.path)
    own = stream is None
    if stream is None:
        try:
            stream = open_binary(item)
        except OSError as exc:
            raise TraceError((exc.strerror or str(exc)).lower()) from None
    errors: list[str] = []
    try:
        buf = Buffer(iter_blocks(stream, head, errors, BLOCK_BYTES))
        _document(buf, _Keeper(out), native and _tracescan is not None)
    except Cut as exc:
        out.problems.append(errors[0] if errors else str(exc))
    except OverBudget as exc:
        out.problems.append(str(exc))
    finally:
        if own:
            stream.close()
    if errors and errors[0] not in out.problems:
        out.problems.insert(0, errors[0])
    if not out.has_events:
        raise TraceError(
            out.problems[0]
            if out.problems and not out.meta
            else "a JSON document without traceEvents: not a trace"
        )
    return out


def _document(buf: Buffer, keep: _Keeper, native: bool) -> None:
    events = _events_native if native else _events
    first = buf.peek()
    if first == "[":
        buf.pos += 1
        keep.out.has_events = True
        events(buf, keep)
        return
    if first != "{":
        raise TraceError("not a JSON document" if first else "empty file")
    buf.pos += 1
    while True:
        c = buf.peek(SEP)
        if c == "}" or c == "":
            if c == "" and not keep.out.has_events:
                raise Cut("the document ends before traceEvents")
            return
        try:
            key = decode_value(buf, MAX_VALUE_CHARS)
        except Skipped as exc:
            keep.out.problems.append(str(exc))
            return
        if buf.peek() != ":":
            raise TraceError(f"not a JSON object at byte {buf.at()}")
        buf.pos += 1
        if key == "traceEvents" and buf.peek() == "[":
            buf.pos += 1
            keep.out.has_events = True
            events(buf, keep)
            continue
        try:
            value = decode_value(buf, MAX_VALUE_CHARS)
        except Skipped as exc:
            keep.out.problems.append(f"{key}: {exc}")
            continue
        if key in META_KEYS:
            keep.out.meta[key] = value
        elif key == "deviceProperties" and isinstance(value, list):
            keep.out.device_names = [
                str(d.get("name")) for d in value if isinstance(d, dict) and d.get("name")
            ]


def _events(buf: Buffer, keep: _Keeper) -> None:
    """The event array, one object at a time: the fast path decodes in place."""
    add = keep.add
    problems = keep.out.problems
    sep = SEP.match
    while True:
        s = buf.s
        pos = sep(s, buf.pos).end()  # type: ignore[union-attr]
        if pos < len(s) - 1 and s[pos] == "{":
            try:
                obj, end = DECODE(s, pos)
                if end < len(s):
                    buf.pos = end
                    keep.out.events += 1
                    if end - pos > MAX_VALUE_CHARS:
                        _note(keep.out, _too_big(buf.at(pos)))
                        continue
                    add(obj)
                    continue
            except (json.JSONDecodeError, RecursionError):
                pass
        buf.pos = pos
        c = buf.peek(SEP)
        if c == "]":
            buf.pos += 1
            return
        if c == "":
            raise Cut("the document ends inside traceEvents")
        keep.out.events += 1
        start = buf.at()
        try:
            obj = decode_value(buf, MAX_VALUE_CHARS)
        except Skipped as exc:
            if len(problems) < MAX_PROBLEMS:
                problems.append(f"an event skipped: {exc}")
            continue
        if buf.at() - start > MAX_VALUE_CHARS:
            _note(keep.out, _too_big(start))
            continue
        add(obj)


def _events_native(buf: Buffer, keep: _Keeper) -> None:
    """The event array with the C pre-scan: only the events it keeps are decoded, from
    their bytes; the same results as :func:`_events` (tests/test_traces_native.py,
    tests/test_trace_agreement.py). Where the scan meets what is not an event, or the end of
    the document inside the array, the rest goes to :func:`_events`: one recovery rule and
    one wording for both paths."""
    assert _tracescan is not None
    scan, add = _tracescan.scan, keep.add
    out = keep.out
    data = buf.take_bytes()
    base = buf.offset  # the document's bytes before ``data``'s first
    pos = 0
    consumed = 0  # bytes dropped before ``data``
    while True:
        ranges, pos, status, objects, (corr, ts, dur), big, big_at = scan(
            data, pos, DROP_CATS, FILTERED_CATS, GPU_CATS_B, MAX_VALUE_CHARS
        )
        out.events += objects
        if big:
            _note(out, _too_big(base + consumed + big_at))
        out.o_corr.frombytes(corr)
        out.o_ts.frombytes(ts)
        out.o_dur.frombytes(dur)
        _budget(out)
        r = memoryview(ranges).cast("q")
        for k in range(0, len(r), 3):
            for obj in _decode_run(out, data, r[k], r[k + 1], r[k + 2], base + consumed):
                add(obj)
        if status == 1:
            buf.put_bytes(data[pos:], consumed + pos)
            return
        if status == 2:  # not an event: the text reader skips it and reads on
            buf.put_bytes(data[pos:], consumed + pos)
            _events(buf, keep)
            return
        if len(data) - pos > MAX_VALUE_CHARS:
            start = base + consumed + pos
            data, pos, consumed = _skip_native(buf, data, pos, consumed)
            out.events += 1
            _note(out, _too_big(start))
            continue
        block = buf.next_block()
        if block is None:  # the document ends in the array: the text reader says where
            buf.put_bytes(data[pos:], consumed + pos)
            _events(buf, keep)
            return
        consumed += pos
        data, pos = data[pos:] + block, 0


def _decode_run(
    out: RawTrace, data: bytes, start: int, end: int, count: int, consumed: int
) -> list[Any]:
    """Consecutive kept events as one JSON array; one by one where that fails, so that
    one bad event costs only itself."""
    chunk = data[start:end]
    try:
        run = loads_bytes(b"[" + chunk + b"]") if count > 1 else [loads_bytes(chunk)]
        if len(run) == count:
            return run
    except (ValueError, RecursionError):
        pass
    text = chunk.decode("utf-8", "replace")
    objs: list[Any] = []
    pos = 0
    while True:
        pos = SEP.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= len(text):
            return objs
        try:
            obj, pos = DECODE(text, pos)
        except RecursionError:
            _note(out, "an event skipped: a value nested too deeply to decode")
        except json.JSONDecodeError as exc:
            _note(
                out,
                f"an event skipped: malformed JSON at byte "
                f"{consumed + start + len(text[:pos].encode())} ({exc.msg})",
            )
        else:
            objs.append(obj)
            continue
        sub = Buffer(iter((text[pos:].encode(),)))
        sub.more()
        try:
            skip_value(sub)
        except Cut:
            return objs
        text, pos = sub.s, sub.pos


def loads_bytes(chunk: bytes) -> Any:
    """``json.loads`` of UTF-8 bytes, invalid bytes replaced (as the Python path reads them)."""
    try:
        return json.loads(chunk)
    except UnicodeDecodeError:
        return json.loads(chunk.decode("utf-8", "replace"))


def _skip_native(buf: Buffer, data: bytes, pos: int, consumed: int) -> tuple[bytes, int, int]:
    """Walk past the value at ``pos`` in C, dropping each block once walked."""
    assert _tracescan is not None
    depth, in_string = 0, 0
    while True:
        pos, depth, in_string, done = _tracescan.skip(data, pos, depth, in_string)
        if done:
            return data, pos, consumed
        block = buf.next_block()
        if block is None:
            raise Cut("the document ends inside an event")
        consumed += pos
        data, pos = data[pos:] + block, 0


def _too_big(at: int) -> str:
    return f"an event skipped: a value of more than {MAX_VALUE_CHARS >> 20} MiB at byte {at}"


def _note(out: RawTrace, text: str) -> None:
    if len(out.problems) < MAX_PROBLEMS:
        out.problems.append(text)
