"""Stream a torch-profiler (Kineto) Chrome-trace JSON, keeping only what graph replay needs.

A serving trace is 100-150 MB and 5-9 M events per rank; ``json.load`` of it holds ~3.4x
its size as Python objects (``/work/shared/formats/torch-traces.md`` §5). So the document
is read in blocks, and each event object is decoded on its own with the stdlib's C
decoder (``JSONDecoder.raw_decode`` at the event's offset): one small dict at a time,
dropped at once unless it is a launch, a GPU op, a step or capture span, or a capture
API call, of which only a few numbers per event are kept in typed arrays. Kineto writes
each event over several lines (kineto ``libkineto/src/output_json.cpp`` L237-259), so
lines are no unit; any key order and any whitespace are read, a bare event array too.

What cannot be decoded is skipped without building it (an event nested deeper than the
C decoder recurses, a string of 100 MB): a bounded scanner walks past it block by block,
the reason is kept as one line and the rest of the trace is read.
"""

from __future__ import annotations

import codecs
import json
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal, TypeGuard

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

BLOCK_BYTES = 4 * 1024 * 1024
MAX_VALUE_CHARS = 16 * 1024 * 1024  # a value longer than this is walked past, not decoded
_SEP = re.compile(r"[ \t\n\r,]*")
_WS = re.compile(r"[ \t\n\r]*")
_IN_STRING = re.compile(r'["\\]')
_STRUCTURE = re.compile(r'["{}\[\]]')
_SCALAR_END = re.compile(r"[,\]}]")


class TraceError(Exception):
    """A trace that cannot be read at all; the message is the one-line reason."""


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


class _Buffer:
    """Decoded text of the document, refilled block by block; consumed text is dropped."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self._blocks = blocks
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.s = ""
        self.pos = 0
        self.offset = 0  # characters dropped before ``s``
        self.eof = False

    def more(self) -> bool:
        """Append the next block; False at the end of the document."""
        if self.eof:
            return False
        for block in self._blocks:
            text = self._decoder.decode(block)
            if text:
                self._append(text)
                return True
        self._append(self._decoder.decode(b"", final=True))
        self.eof = True
        return False

    def _append(self, text: str) -> None:
        self.offset += self.pos
        self.s = self.s[self.pos :] + text
        self.pos = 0

    def peek(self, pattern: re.Pattern[str] = _WS) -> str:
        """The next character after what ``pattern`` skips ('' at the end)."""
        while True:
            self.pos = pattern.match(self.s, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.s):
                return self.s[self.pos]
            if not self.more():
                return ""

    def at(self) -> int:
        return self.offset + self.pos


class _Skipped(Exception):
    """A value walked past without decoding; the message says why."""


class _Cut(Exception):
    """The document ends (or breaks) inside a value."""


_DECODE = json.JSONDecoder().raw_decode


def _incomplete(buf: _Buffer, exc: json.JSONDecodeError) -> bool:
    return exc.pos >= len(buf.s) - 8 or exc.msg.startswith("Unterminated string")


def _value(buf: _Buffer) -> Any:
    """Decode the value at the cursor, refilling as needed; too big or too deep is skipped."""
    buf.peek()
    while True:
        try:
            obj, end = _DECODE(buf.s, buf.pos)
        except RecursionError:
            _skip(buf)
            raise _Skipped("a value nested too deeply to decode") from None
        except json.JSONDecodeError as exc:
            if buf.eof:
                raise _Cut(f"the document ends inside a value at character {buf.at()}") from None
            if not _incomplete(buf, exc):
                start = buf.at()
                _skip(buf)
                raise _Skipped(f"malformed JSON at character {start} ({exc.msg})") from None
            if len(buf.s) - buf.pos > MAX_VALUE_CHARS:
                start = buf.at()
                _skip(buf)
                raise _Skipped(
                    f"a value of more than {MAX_VALUE_CHARS >> 20} MiB at character {start}"
                ) from None
            buf.more()
            continue
        if end >= len(buf.s) and not buf.eof and not isinstance(obj, dict | list | str):
            buf.more()  # a number cut at the block's end decodes as a shorter one
            continue
        buf.pos = end
        return obj


def _skip(buf: _Buffer) -> None:
    """Walk past one value without building it: strings, nesting, escapes, across blocks."""
    first = buf.peek()
    if first not in '{["':
        while True:
            m = _SCALAR_END.search(buf.s, buf.pos)
            if m is not None:
                buf.pos = m.start()
                return
            buf.pos = len(buf.s)
            if not buf.more():
                raise _Cut("the document ends inside a value")
    depth = 0
    in_string = False
    while True:
        s, i = buf.s, buf.pos
        while True:
            m = (_IN_STRING if in_string else _STRUCTURE).search(s, i)
            if m is None:
                i = len(s)
                break
            c = m.group()
            if c == "\\":
                if m.end() >= len(s):  # the escaped character is in the next block
                    i = m.start()
                    break
                i = m.end() + 1
                continue
            i = m.end()
            if c == '"':
                in_string = not in_string
                if not in_string and depth == 0:
                    buf.pos = i
                    return
            elif c in "{[":
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    buf.pos = i
                    return
        buf.pos = i
        if not buf.more():
            raise _Cut("the document ends inside a value")


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
        out.events += 1
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

    def _launch(self, ev: dict[str, Any]) -> None:
        out = self.out
        name = ev.get("name")
        kind = self.launch_kind.get(name) if type(name) is str else None
        if kind is None:
            kind = _launch_kind(name)
            if type(name) is str:
                self.launch_kind[name] = kind
        args = ev.get("args")
        if kind < 0 and type(args) is dict and args.get("cbid") == GRAPH_LAUNCH_CBID:
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
    item: InputFile | str | Path, stream: BinaryIO | None = None, head: bytes = b""
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
        buf = _Buffer(iter_blocks(stream, head, errors, BLOCK_BYTES))
        _document(buf, _Keeper(out))
    except _Cut as exc:
        out.problems.append(errors[0] if errors else str(exc))
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


def _document(buf: _Buffer, keep: _Keeper) -> None:
    first = buf.peek()
    if first == "[":
        buf.pos += 1
        keep.out.has_events = True
        _events(buf, keep)
        return
    if first != "{":
        raise TraceError("not a JSON document" if first else "empty file")
    buf.pos += 1
    while True:
        c = buf.peek(_SEP)
        if c == "}" or c == "":
            if c == "" and not keep.out.has_events:
                raise _Cut("the document ends before traceEvents")
            return
        try:
            key = _value(buf)
        except _Skipped as exc:
            keep.out.problems.append(str(exc))
            return
        if buf.peek() != ":":
            raise TraceError(f"not a JSON object at character {buf.at()}")
        buf.pos += 1
        if key == "traceEvents" and buf.peek() == "[":
            buf.pos += 1
            keep.out.has_events = True
            _events(buf, keep)
            continue
        try:
            value = _value(buf)
        except _Skipped as exc:
            keep.out.problems.append(f"{key}: {exc}")
            continue
        if key in META_KEYS:
            keep.out.meta[key] = value
        elif key == "deviceProperties" and isinstance(value, list):
            keep.out.device_names = [
                str(d.get("name")) for d in value if isinstance(d, dict) and d.get("name")
            ]


def _events(buf: _Buffer, keep: _Keeper) -> None:
    """The event array, one object at a time: the fast path decodes in place."""
    add = keep.add
    problems = keep.out.problems
    sep = _SEP.match
    while True:
        s = buf.s
        pos = sep(s, buf.pos).end()  # type: ignore[union-attr]
        if pos < len(s) - 1 and s[pos] == "{":
            try:
                obj, end = _DECODE(s, pos)
                if end < len(s):
                    buf.pos = end
                    add(obj)
                    continue
            except (json.JSONDecodeError, RecursionError):
                pass
        buf.pos = pos
        c = buf.peek(_SEP)
        if c == "]":
            buf.pos += 1
            return
        if c == "":
            raise _Cut("the document ends inside traceEvents")
        try:
            add(_value(buf))
        except _Skipped as exc:
            keep.out.events += 1
            if len(problems) < 5:
                problems.append(f"an event skipped: {exc}")
