"""Errors and tracebacks, common to every engine, and their capture-error class.

Tracebacks are collected as blocks, whatever wraps them: vLLM's logger repeats its header on
every traceback line (one ``ERROR`` line per traceback line, grouped by process), SGLang
prints a tagged header and bare lines, pastes carry markdown/HTML markup or have lost their
line breaks. Each block is parsed with the ``traceback.lark`` grammar (:mod:`diag.parsers.traceback_text`) into sections (one per
chained exception), each with its frames and exception text.

Every exception becomes an ``error`` event with what the text and the frames say, and
nothing else: its class and capture marks from the signature table
(:mod:`diag.engines.errors`), the phase of its innermost deciding frame
(:mod:`diag.engines.phases`), and the phase the log lines had opened before it. Whether it is
*the* capture error of a run is decided per run (``diag.facts.record``). Lines outside any
traceback are scanned too: NCCL ``WARN`` lines, torch's "Search for `cudaError...'" hint,
C++ watchdog lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from diag.engines import atlas
from diag.engines import errors as sigs
from diag.engines.frame_causes import class_and_cause
from diag.engines.phases import CAPTURE_PHASES, engine_of_frames, graph_frame, phase_table, place
from diag.normalize.lines import ENTITY_ANCHORS
from diag.normalize.prefix import LogLine
from diag.parsers.base import Block, Context, LineParser
from diag.parsers.traceback_text import (
    CHAIN_WORDS,
    CONTINUATION,
    EXC_LINE,
    MAX_BLOCK_LINES,
    MAX_FOREIGN_LINES,
    parse_traceback,
    split_glued,
    unmark,
)


@dataclass
class PhaseState:
    """Per-stream state: the start-up phase each process has opened ("": lines that name no
    process, such as tqdm bars), the processes in the order of their last phase line
    (``recent``, latest last), and the stream's last phase. An order, not a count of phase
    lines: a restart that opens the same phases in the same order ends in the same state, so
    the parallel scan's speculative segments after it need no second scan."""

    opened: dict[str, str] = field(default_factory=dict)  # process key -> phase
    recent: list[str] = field(default_factory=list)
    latest: str | None = None


def explicit_capture(message: str) -> bool:
    """Whether the text names an error raised only while capturing."""
    return sigs.capture_only(message)


class TracebackBlock(Block):
    """Collects one traceback (plus the message lines that follow its exception)."""

    def __init__(self, first: LogLine, text: str) -> None:
        self.first = first
        self.key = first.key
        self.headed = first.header == "vllm"  # vLLM repeats the prefix on every line
        self.lines: list[str] = []
        self.last_lineno = first.lineno
        self.seen_exception = False
        self.at_end = False  # set by the scanner when the input ends inside the block
        self.foreign = 0  # other processes' lines since our last one
        self.log_phase: str | None = None
        # a process's failure words before its traceback ("Scheduler hit an exception: ",
        # vLLM's "WorkerProc failed to start." on the line above it)
        self.heading = ""
        for piece in split_glued(text) if text else ():
            self._add(piece)

    def _add(self, msg: str) -> None:
        if EXC_LINE.match(msg.strip()):
            self.seen_exception = True
            self._exc_at = len(self.lines)
        self.lines.append(msg)

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
                self.last_lineno = line.lineno
                self.foreign = 0
                for piece in split_glued(line.msg):
                    self._add(piece)
                return True
            if line.header is None and line.msg.startswith(("--",)):
                return True  # CI separator lines inside a pasted traceback
            if line.header == "vllm" and line.key != self.key and line.proc and self.key:
                # another process's line between two of ours (ranks fail together): stay open
                # for our own lines, a while
                self.foreign += 1
                if self.foreign > MAX_FOREIGN_LINES:
                    self.done = True
                return False
            self.done = True
            return False
        if line.header is not None:
            self.done = True
            return False
        msg = unmark(line.msg)
        if not msg.strip():
            return True
        if self.seen_exception and not CONTINUATION.match(msg) and not EXC_LINE.match(msg):
            # message tail after the exception ("Possible solutions:", "1. ...")
            if len(self.lines) - self._exc_index() > 12:
                self.done = True
                return False
        self.last_lineno = line.lineno
        for piece in split_glued(msg):
            self._add(piece)
        return True

    def _exc_index(self) -> int:
        return getattr(self, "_exc_at", len(self.lines))

    def finish(self, ctx: Context) -> None:
        parsed = parse_traceback(self.lines)
        all_frames = parsed.frames
        engine = _engine(ctx, self.first, all_frames)
        if not parsed.exceptions:
            phase = place(all_frames)
            tail = [ln.strip() for ln in self.lines if ln.strip() and not _FRAME_OR_CODE.match(ln)]
            said = sigs.judge("\n".join(tail)) if tail else None
            if said is not None and said.capture:
                # no exception line, but the engine's own words under the frames say capture
                # failed (SGLang's "Possible solutions" list): that is the error
                ctx.emit(
                    "error",
                    self.first,
                    engine=engine,
                    error_class=said.error_class,
                    message=_clip("\n".join(tail)),
                    capture_related=True,
                    explicit_capture=True,
                    phase=phase,
                    log_phase=self.log_phase,
                    secondary=said.secondary,
                    reason="the exception line is not in the log; the engine's capture-failure "
                    "advice is",
                    cause=said.cause,
                    site=said.site,
                )
            elif not all_frames and self.heading:
                # a process's failure line with no traceback after it in the log: an error
                # of the run, after any root error (a follow-on's rank)
                ctx.emit(
                    "error",
                    self.first,
                    engine=engine,
                    error_class="other",
                    message=_clip(self.heading),
                    capture_related=False,
                    explicit_capture=False,
                    phase=None,
                    log_phase=self.log_phase,
                    secondary=True,
                    reason=None,
                )
            elif all_frames:
                cut = (
                    f"the log ends inside a traceback (line {self.last_lineno})"
                    if self.at_end
                    else f"traceback cut before its exception line (line {self.last_lineno})"
                )
                # no message to read: the class and cause are the frames' (custom all-reduce
                # frames are a distributed failure whatever the cut hid)
                error_class, frame_cause = class_and_cause("other", all_frames)
                ctx.emit(
                    "error",
                    self.first,
                    engine=engine,
                    error_class=error_class,
                    frame_cause=frame_cause,
                    message=f"traceback in {phase or 'an unknown phase'}; the exception line "
                    f"is not in the log: {cut}",
                    capture_related=phase in CAPTURE_PHASES,
                    explicit_capture=False,
                    phase=phase,
                    log_phase=self.log_phase,
                    secondary=False,
                    reason=cut,
                )
            if self.at_end and all_frames:
                ctx.emit(
                    "input_note",
                    self.first,
                    text=f"cut inside a traceback at line {self.last_lineno}",
                )
            return
        for sec in parsed.sections:
            if sec.exception is None:
                continue
            verdict = sigs.judge(sec.exception)
            # every exception is an error event, whatever the text around it says of the
            # engine: an error paste is never "nothing recognised" (GD105 says what is unknown)
            phase = place(sec.frames) or place(all_frames)
            graph = None if phase else graph_frame(sec.frames) or graph_frame(all_frames)
            error_class, frame_cause = class_and_cause(verdict.error_class, sec.frames)
            reason = None
            head = sec.exception.split("\n", 1)[0]
            if verdict.error_class == "other" and _EMPTY_REASON.search(head):
                reason = "the capture error gives no reason (its cause was logged before it)"
            ctx.emit(
                "error",
                self.first,
                engine=engine,
                error_class=error_class,
                message=_clip(sec.exception),
                capture_related=verdict.capture or phase in CAPTURE_PHASES,
                explicit_capture=verdict.capture,
                phase=phase,
                log_phase=self.log_phase,
                secondary=verdict.secondary,
                reason=reason,
                frame_cause=frame_cause,
                cause=verdict.cause,
                site=verdict.site,
                graph_frame=f"{graph[0].phase}|{graph[1]}" if graph else None,
            )


_FRAME_OR_CODE = re.compile(r"^(?:\s|File \"|Traceback|During handling|The above exception)")
_EMPTY_REASON = re.compile(r"graph failed:\s*$")


def _clip(text: str, limit: int = 600) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_VLLM_PROC = re.compile(r"^(?:EngineCore|Worker|VllmWorker|APIServer|DPCoordinator|RayWorker)")


def _engine(ctx: Context, line: LogLine, frames: list[str]) -> str:
    """The engine an error belongs to: the stream's, else its frames' package, else its prefix."""
    if ctx.backend != "unknown":
        return ctx.backend
    own = engine_of_frames(frames)
    if own is not None:
        return own
    if line.header == "sglang":
        return "sglang"
    if line.header == "vllm" or (line.proc and _VLLM_PROC.match(line.proc)):
        return "vllm"
    return "unknown"


@lru_cache(maxsize=4)
def _markers(engines: tuple[str, ...]) -> tuple[tuple[str, ...], re.Pattern[str], tuple[str, ...]]:
    """The markers' literal anchors, and one regex over every phase-opening log line
    (group i opens phase i)."""
    rows = [m for e in engines for m in phase_table(e).markers]
    rx = re.compile("|".join(f"({m.regex.pattern})" for m in rows))
    if rx.groups != len(rows):
        raise ValueError("phases.yaml: a marker regex has its own capturing group")
    anchors = tuple(sorted({a for m in rows for a in m.anchors}))
    return anchors, rx, tuple(m.phase for m in rows)


def _fewest(words: tuple[str, ...]) -> tuple[str, ...]:
    """The words none of the others is part of: ``any(w in text ...)`` over them says the
    same as over all (a word holding another is found only where that one is), in a few
    checks instead of ~150 on every line."""
    return tuple(w for w in dict.fromkeys(words) if not any(o in w and o != w for o in words))


_NCCL_LINE = "NCCL WARN"
# words of a process saying it failed or died that hold none of "rror" / "ail" (errors.yaml
# rows with failure: true): a segfault report, a C++ terminate, SGLang's "hit an exception"
_FAILURE_WORDS = ("egmentation fault", "core dumped", "terminate called", "hit an exception")
# words every signature a line is reported for contains (capture rows, NCCL rows, OOM rows):
# only lines holding one are matched against the signature table
_SIGNATURE_WORDS = _fewest(
    (
        "aptur",
        "CAPTUR",
        "NCCL",
        "nccl",
        "memory",
        "Memory",
        "rror",
        "graph",
        "Fail when",
        *_FAILURE_WORDS,
        *sigs.line_anchors(),  # a runtime code in its printed form
        "ail",
        "error",
        *atlas.advice_anchors(),  # a line of an engine's capture-failure advice block
    )
)
# an SGLang header line (no level) is judged for capture-explicit words only when it says
# it failed (its batch lines name "cuda graph" on every step: they stay cheap)
_SGLANG_ERROR_WORDS = _fewest(
    (
        "rror",
        "ail",
        "xception",
        *_FAILURE_WORDS,
        *sigs.line_anchors(),  # a table text (a capture-only message) with no error word
        *atlas.advice_anchors(),
    )
)
# a runtime's error print, whatever its code: an error line even when the code is not one the
# table knows (a newer runtime's text, a code cut off)
_RUNTIME_FORM = re.compile(
    r"\b(?:CUDA error|Cuda error|CUDA Error|HIP error|NCCL error|ACL error|NPU function error|"
    r"cuda(?:Error|_ERROR_)\w+|hipError\w+|nccl(?:Unhandled|Internal|System|Invalid|Remote)\w*Error)"
    r"|\[FUNC:\w+\]\[FILE:[\w.]+\]\[LINE:\d+\]"  # CANN's report lines (torch-npu's "TraceBack")
)
# what an error print says of itself, whatever printed it (a C++ CUDACHECK's "Failed: Cuda
# error FILE:LINE 'msg'", a watchdog's "HIP error: ...", an exception line): a header-less line
# with one of these words whose text the signature table gives a class is an error line
_ERROR_PRINT = re.compile(
    r"\b(?:Failed|FAILED|failed|\w*Error|ERROR|error|\w*Exception|terminate called|Aborted)\b"
)
_NOT_AN_ERROR = ("NCCL INFO",)
# rows of a general vocabulary (a word that names a subsystem, not an error message): a
# header-less line matching only such a row is an error only where it says so itself
_GENERAL_ROWS = frozenset({"distributed_general", "unsupported_in_graph"})
# OOM rows an error line is reported for on its own (engine parsers report their own OOM lines);
# a line quoting a runtime code in its printed form is reported whatever its class
_LINE_OOM = frozenset({"torch_cuda_oom"})
# what stands before the message on C++ lines: torchrun "[rank0]:", glog/c10d "[E1030 hh:mm:ss.us
# file:N]", NCCL "host:pid:tid [dev] file:line (func)"
_CPP_HEAD = re.compile(
    r"^(?:\[(?:default)?rank\d+\]:\s*)?(?:\[?[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+(?: +\d+)? [\w.]+:\d+\]\s*)?"
)
_NCCL_HEAD = re.compile(r"^\S+:\d+:\d+ \[\d+\] (?:[\w./]+:\d+ )?(?:\(\w+\) )?(?=NCCL )")


#: the reason a warned capture failure carries (diag.facts.run_record.CaptureError.reason)
WARNED_FAILURE = (
    "the engine logs this capture failure as a warning and goes on without that graph "
    "(inputs of that shape run eagerly)"
)
_HINT = re.compile(r"Search for `(?P<name>(?:cuda|hip)Error\w+)'")


def _hint_message(msg: str) -> str:
    """torch's "Search for `cudaError...'" hint line said as the error it names."""
    m = _HINT.search(msg)
    if m is None:
        return msg
    name = m.group("name")
    known = next((s.message for s in sigs.signatures() if s.message and s.regex.search(name)), None)
    said = f"{name} ({known})" if known else name
    return f"{said}, named by torch's error hint (the exception line is not in the log)"


def line_message(msg: str) -> str:
    """An error line's message without the C++/NCCL log header in front of it."""
    out = _NCCL_HEAD.sub("", _CPP_HEAD.sub("", msg.strip()))
    return out or msg.strip()


def _error_print(msg: str) -> bool:
    """Whether a header-less line is an error print (not an info line naming a library)."""
    return _ERROR_PRINT.search(msg) is not None and not any(w in msg for w in _NOT_AN_ERROR)


def _erring(line: LogLine) -> bool:
    """An ERROR/CRITICAL line, or one whose prefix prints no level to say otherwise."""
    return line.level in ("ERROR", "CRITICAL") or line.header not in ("vllm", "sglang", "glog")


#: :func:`diag.engines.errors.judge` of the line texts read last: a text repeats on every
#: rank of a log and in every pod of a deployment ("Load weight begin. avail mem=78.52 GB"
#: holds "ail": each is judged, ~25 us); a longer text than 4 KiB is judged, not kept
_judged = lru_cache(maxsize=512)(sigs.judge)


def _judged_line(msg: str) -> sigs.Verdict:
    return _judged(msg) if len(msg) <= 4096 else sigs.judge(msg)


def error_line_verdict(line: LogLine, msg: str) -> sigs.Verdict | None:
    """The table's verdict on a line outside a traceback that is an error line, else None:
    what the signatures, the atlas and the runtimes' printed forms say of an ERROR line, a
    header-less error print, an NCCL WARN line or an SGLang line (no level) in an engine's
    or a process's failure words. One rule for ErrorParser and for the engine parsers that
    leave such lines to it."""
    erring = _erring(line)
    sglang_error = line.header == "sglang" and any(w in msg for w in _SGLANG_ERROR_WORDS)
    if not (erring or _NCCL_LINE in msg or sglang_error) or not any(
        w in msg for w in _SIGNATURE_WORDS
    ):
        return None
    verdict = _judged_line(msg)
    if not erring and _NCCL_LINE not in msg:
        # an SGLang line (no level) is an error by an engine site's or a failure's words
        return verdict if verdict.capture or verdict.site or verdict.failure else None
    known = verdict.signature is not None  # a message of the table (any class)
    if (
        verdict.capture
        or verdict.code is not None
        or verdict.site is not None  # an engine's own error message (raise_atlas.json)
        or verdict.failure  # a process saying it failed or died (errors.yaml)
        or (erring and _RUNTIME_FORM.search(msg) is not None)
        or (known and (_NCCL_LINE in msg or verdict.signature in _LINE_OOM))
        or (known and line.level in ("ERROR", "CRITICAL"))  # a known text at error level
        or (
            known
            and line.header is None
            and not any(w in msg for w in _NOT_AN_ERROR)
            # a specific message of the table, or a general word said as an error
            and (verdict.signature not in _GENERAL_ROWS or _error_print(msg))
        )
    ):
        return verdict
    return None


class ErrorParser(LineParser):
    """Tracebacks, bare exception lines, engine error lines, and the phase log lines open."""

    engine = "common"
    anchors = (
        "Traceback (most recent call last)",
        'File "',
        "Error",
        "Exception",
        "out of memory",
        "graph failed",
        "Failed",
        "failed",
        "error",
        "During handling of the above",
        "The above exception",
        "NCCL WARN",
        "Search for `",
        "cannot be captured",
        *_FAILURE_WORDS,
        *atlas.advice_anchors(),  # the engines' capture-failure advice lines (raise_atlas.json)
        # phase-opening lines the engine parsers do not anchor on already
        "Memory profiling",
        "Model loading",
        "Load weight",
        "startup complete",
        "fired up",
        *sigs.line_anchors(),  # how the runtimes print their codes (Cuda error, error code is, ...)
        # every phase marker's anchors (phases.yaml), so no marker row goes unread
        *sorted({a for e in ("vllm", "sglang") for m in phase_table(e).markers for a in m.anchors}),
        # a paste copied from a web page's source: the anchors above with their quotes escaped
        *ENTITY_ANCHORS,
    )

    def feed(self, line: LogLine, ctx: Context) -> Block | None:
        msg = line.msg
        phase = self._track_phase(line, ctx)
        if line.header is None or line.header == "pylog":
            msg = unmark(msg)
        idx = msg.find("Traceback (most recent call last)")
        if idx >= 0:
            block = self._block(line, msg[idx:], phase)
            before = msg[:idx].strip()
            if before and sigs.judge(before).failure:
                block.heading = before
            return block
        stripped = msg.lstrip()
        if stripped.startswith('File "') and line.header in (None, "vllm"):
            return self._block(line, msg, phase)
        if stripped.startswith(CHAIN_WORDS):
            return self._block(line, stripped, phase)
        if EXC_LINE.match(stripped) and (
            (_erring(line) and line.header in (None, "vllm", "pylog")) or line.header == "sglang"
        ):
            # an exception line with its traceback above it cut off (or a quoted one); SGLang
            # prints no level, so its header line holding an exception is one
            return self._block(line, stripped, phase)
        if (
            line.level in ("WARNING", None)  # SGLang's prefix prints no level
            and ("aptur" in msg or "APTUR" in msg)
            and atlas.warned_capture_failure(msg) is not None
        ):
            self._warned(line, msg, phase, ctx)
            return None
        verdict = error_line_verdict(line, msg)
        summary = verdict is not None and verdict.failure and verdict.signature is None
        if summary and line.header == "vllm":
            # a line that is an error only because a process says it failed: vLLM's
            # logger.exception ("WorkerProc failed to start.") heads the traceback its process
            # prints on the next lines; alone, an error ranked after any root error
            block = self._block(line, "", phase)
            block.heading = line_message(msg).strip()
            return block
        if verdict is not None:
            ctx.emit(
                "error",
                line,
                engine=_engine(ctx, line, []),
                error_class=verdict.error_class,
                message=_clip(_hint_message(line_message(msg))),
                capture_related=verdict.capture,
                explicit_capture=verdict.capture,
                phase=None,
                log_phase=phase,
                # a crash print or a failure line with no traceback it heads: after any root
                secondary=verdict.secondary or summary,
                reason=None,
                cause=verdict.cause,
                site=verdict.site,
            )
        return None

    @staticmethod
    def _warned(line: LogLine, msg: str, phase: str | None, ctx: Context) -> None:
        """A warning the engine logs where it caught a failed capture and went on without
        that graph (an atlas site at warning level whose words say the capture failed)."""
        verdict = sigs.judge(msg)
        ctx.emit(
            "error",
            line,
            engine=_engine(ctx, line, []),
            error_class=verdict.error_class,
            message=_clip(line_message(msg)),
            capture_related=True,
            explicit_capture=True,
            phase=None,
            log_phase=phase,
            secondary=verdict.secondary,
            reason=WARNED_FAILURE,
            cause=verdict.cause,
            site=verdict.site,
        )

    @staticmethod
    def _block(line: LogLine, text: str, phase: str | None) -> TracebackBlock:
        block = TracebackBlock(line, text)
        block.log_phase = phase
        return block

    @staticmethod
    def _track_phase(line: LogLine, ctx: Context) -> str | None:
        """The phase the log lines have opened on this line's process (an error takes the
        phase of the process that raised it); the stream's latest for a process that has
        opened none itself (only rank 0 prints capture progress for its peers)."""
        engines = (ctx.backend,) if ctx.backend in ("vllm", "sglang") else ("vllm", "sglang")
        anchors, rx, phases = _markers(engines)
        state = ctx.state_of(PhaseState)
        msg = line.msg
        m = None
        if line.level != "DEBUG" and any(a in msg for a in anchors):
            m = rx.search(msg)
        if m is not None and m.lastindex is not None:
            opened = phases[m.lastindex - 1]
            if state.opened.get(line.key) != opened:
                ctx.emit("phase", line, engine=ctx.backend, phase=opened)
            state.opened[line.key] = opened
            if line.key in state.recent:
                state.recent.remove(line.key)
            state.recent.append(line.key)
            state.latest = opened
        # this process's own phase, or a later one opened by a line naming no process (which
        # may be its own); the stream's last for a process that opened none
        own = [k for k in (line.key, "") if k in state.opened]
        if not own or (line.key and line.key not in state.opened):
            return state.latest
        return state.opened[max(own, key=state.recent.index)]
