"""Errors and tracebacks, common to every engine, and their capture-error class.

Tracebacks are collected as blocks (every line prefixed in vLLM, only the first in
SGLang) and parsed with the ``traceback.lark`` grammar into frames and exception lines.
Each exception becomes an ``error`` event with its class; whether it is a *capture*
error is decided later per run from the capture phase, but what the text itself says
(an explicit "Capture cuda graph failed", frames inside the capture code) is recorded
here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from lark import Lark, Token, Tree, UnexpectedInput

from diag.normalize.prefix import LogLine
from diag.parsers.base import Block, Context, LineParser
from diag.resources import grammar_text

# ---------------------------------------------------------------- classification
_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|HIP out of memory|"
    r"out of memory\. Tried to allocate|cudaErrorMemoryAllocation|Not enough memory\. Please try to increase",
    re.I,
)
_UNSUPPORTED = re.compile(
    r"Cannot call \S+ during CUDA graph capture|not supported (?:in|during|with) (?:CUDA )?graph|"
    r"is not supported for CUDA graph|does not support (?:CUDA ?graph|cudagraph)|"
    r"NotImplemented(?:Error)|Unsupported(?:Op|Operator)|operation not supported",
    re.I,
)
_STREAM = re.compile(
    r"cudaErrorStreamCapture\w*|operation not permitted when stream is capturing|"
    r"operation failed due to a previous error during capture|capture(?:d)? (?:is|was) invalidated|"
    r"CUDA graph capturing detected at an inappropriate time|stream is capturing|"
    r"cudaStreamCaptureStatusInvalidated|operation would make the legacy stream depend on a capturing",
    re.I,
)
_DISTRIBUTED = re.compile(
    r"\bNCCL\b|nccl|\bgloo\b|all_reduce|all-reduce|allreduce|custom_all_reduce|ProcessGroup|"
    r"DistBackendError|torch\.distributed|c10d|Connection (?:closed|reset|refused)|Broken pipe",
    re.I,
)
_EXPLICIT_CAPTURE = re.compile(
    r"Capture (?:cuda|CUDA|cpu|CPU|npu|NPU|device|prefill CUDA|frozen-KV MTP cuda) graph failed|"
    r"during (?:CUDA )?graph capture|during cudagraph capture|during capture|capture_end|"
    r"CUDA graph capturing detected",
    re.I,
)
_CAPTURE_FRAMES = re.compile(
    r"capture_one_batch_size|_capture_one_stream|cuda_graph_runner\.py|init_cuda_graphs|"
    r"init_device_graphs|capture_decode_graph|CudaGraphRunner|capture_model|_capture_cudagraphs|"
    r"_warmup_and_capture|graph_runner\.capture|torch/cuda/graphs\.py|compilation/cuda_graph\.py|"
    r"cuda_piecewise_backend\.py|torch\.cuda\.graph\(|capture_end|capture_begin|cudagraph_utils\.py|"
    r"piecewise_cuda_graph_runner|eagle_draft\w*cuda_graph|cuda_graph_setup\.py"
)


def classify(message: str, frames: str = "") -> str:
    """The capture-error class of an exception message: oom, unsupported_op,
    stream_capture_invalid, distributed or other (checked in that order: an OOM
    surfaced through NCCL is still an OOM)."""
    if _OOM.search(message):
        return "oom"
    if _UNSUPPORTED.search(message):
        return "unsupported_op"
    if _STREAM.search(message):
        return "stream_capture_invalid"
    if _DISTRIBUTED.search(message):
        return "distributed"
    return "other"


def explicit_capture(message: str) -> bool:
    return _EXPLICIT_CAPTURE.search(message) is not None


# ---------------------------------------------------------------- grammar
@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(grammar_text("traceback.lark"), parser="lalr", lexer="contextual")


@dataclass
class ParsedTraceback:
    frames: list[str] = field(default_factory=list)  # 'File "...", line N, in f' + code
    exceptions: list[str] = field(default_factory=list)  # exception line + message tail


def parse_traceback(lines: list[str]) -> ParsedTraceback:
    """Frames and exception messages of a traceback block (never raises)."""
    text = "\n".join(ln.rstrip() for ln in lines) + "\n"
    out = ParsedTraceback()
    try:
        tree = _parser().parse(text)
    except UnexpectedInput:
        return _fallback(lines)
    current: list[str] | None = None
    for node in tree.children:
        if not isinstance(node, Tree):
            continue
        kind = node.data
        tokens = [t for t in node.scan_values(lambda v: isinstance(v, Token))]
        first = str(tokens[0]).strip() if tokens else ""
        if kind == "frame":
            out.frames.append(" ".join(str(t).strip() for t in tokens))
            current = None
        elif kind == "exception":
            out.exceptions.append(first)
            current = out.exceptions
        elif kind == "text" and current is not None and current:
            current[-1] = current[-1] + "\n" + first
        elif kind in ("header", "chain"):
            current = None
    return out


def _fallback(lines: list[str]) -> ParsedTraceback:
    out = ParsedTraceback()
    for ln in lines:
        s = ln.strip()
        if s.startswith('File "'):
            out.frames.append(s)
        elif _EXC_LINE.match(s):
            out.exceptions.append(s)
    return out


# ---------------------------------------------------------------- block + parser
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*)?(?:Error|Exception|Failure)(?::\s|$)")
_CONTINUATION = re.compile(r"^(?:\s|Traceback|During handling|The above exception|\^|~)")
MAX_BLOCK_LINES = 2000


class TracebackBlock(Block):
    """Collects one traceback (plus the message lines that follow its exception)."""

    def __init__(self, first: LogLine, text: str) -> None:
        self.first = first
        self.key = first.key
        self.headed = first.header == "vllm"  # vLLM repeats the prefix on every line
        self.lines: list[str] = [text]
        self.seen_exception = bool(_EXC_LINE.match(text))
        self.done = False

    def offer(self, line: LogLine) -> bool:
        if len(self.lines) >= MAX_BLOCK_LINES:
            self.done = True
            return False
        if self.headed:
            if (
                line.header == "vllm"
                and line.key == self.key
                and line.level in ("ERROR", "CRITICAL")
            ):
                self.lines.append(line.msg)
                return True
            if line.header is None and line.msg.startswith(("--",)):
                return True  # CI separator lines inside a pasted traceback
            self.done = True
            return False
        if line.header is not None:
            self.done = True
            return False
        msg = line.msg
        if self.seen_exception and not _CONTINUATION.match(msg) and not _EXC_LINE.match(msg):
            # message tail after the exception ("Possible solutions:", "1. ...")
            if len(self.lines) - self._exc_index() > 12:
                self.done = True
                return False
        if _EXC_LINE.match(msg):
            self.seen_exception = True
            self._exc_at = len(self.lines)
        self.lines.append(msg)
        return True

    def _exc_index(self) -> int:
        return getattr(self, "_exc_at", len(self.lines))

    def finish(self, ctx: Context) -> None:
        parsed = parse_traceback(self.lines)
        frames = "\n".join(parsed.frames)
        capture_frames = _CAPTURE_FRAMES.search(frames) is not None
        if not parsed.exceptions:
            if parsed.frames and capture_frames:
                ctx.emit(
                    "error",
                    self.first,
                    engine=ctx.backend,
                    error_class="other",
                    message="traceback inside graph capture; the exception line is not in the log",
                    capture_related=True,
                    explicit_capture=False,
                )
            return
        for exc in parsed.exceptions:
            head = exc.split("\n", 1)[0]
            ctx.emit(
                "error",
                self.first,
                engine=ctx.backend,
                error_class=classify(exc, frames),
                message=_clip(exc),
                capture_related=capture_frames or explicit_capture(head),
                explicit_capture=explicit_capture(head),
            )


def _clip(text: str, limit: int = 600) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_STANDALONE_OOM = re.compile(
    r"(?:CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|HIP out of memory)"
)


class ErrorParser(LineParser):
    """Tracebacks, bare exception lines and engine error lines."""

    engine = "common"
    anchors = (
        "Traceback (most recent call last)",
        'File "',
        "Error",
        "Exception",
        "out of memory",
        "Capture cuda graph failed",
        "Capture CUDA graph failed",
        "graph failed",
        "During handling of the above",
    )

    def feed(self, line: LogLine, ctx: Context) -> Block | None:
        msg = line.msg
        idx = msg.find("Traceback (most recent call last)")
        if idx >= 0:
            return TracebackBlock(line, msg[idx:])
        stripped = msg.lstrip()
        if stripped.startswith('File "') and line.header in (None, "vllm"):
            return TracebackBlock(line, msg)
        if stripped.startswith(("During handling of the above", "The above exception")):
            return TracebackBlock(line, stripped)
        if line.header is None and _EXC_LINE.match(msg):
            block = TracebackBlock(line, msg)
            return block
        if line.level in ("ERROR", "CRITICAL") or line.header not in ("vllm", "sglang", "glog"):
            if _STANDALONE_OOM.search(msg) or explicit_capture(msg) and "failed" in msg:
                ctx.emit(
                    "error",
                    line,
                    engine=ctx.backend,
                    error_class=classify(msg),
                    message=_clip(msg.strip()),
                    capture_related=explicit_capture(msg),
                    explicit_capture=explicit_capture(msg),
                )
        return None
