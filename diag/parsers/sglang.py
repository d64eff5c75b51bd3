"""SGLang log lines (2024 -> 2026) that bear on capture, eager fallback and KV sizing.

The formats and their version ranges are in ``shared/formats/sglang-log-formats.md``;
section numbers below refer to it. Messages are matched anywhere in the line (not at
its start) so an unknown logging prefix (``SGLANG_LOGGING_CONFIG_PATH``) still parses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from diag.lines import periodic
from diag.normalize.prefix import LogLine
from diag.parsers import prometheus
from diag.parsers.base import Block, Context, LineParser, num, parse_int_list, to_int
from diag.parsers.configs import parse_kwargs

ENGINE = "sglang"
_F = r"(-?\d+(?:\.\d+)?)"

# §4.1 capture begin / end, every era and role
_BEGIN = re.compile(
    r"Capture (?:(?P<role>target|draft) )?(?P<kind>decode |verify |prefill |extend |"
    r"draft extend |draft |piecewise |Frozen-KV MTP draft )?(?:cuda|CUDA|cpu|CPU|npu|NPU|xpu|XPU|device|\w+) graph begin"
    r"(?: \(step \d+\))?"
)
_END = re.compile(
    r"Capture (?:(?P<role>target|draft) )?(?P<kind>decode |verify |prefill |extend |"
    r"draft extend |draft |piecewise |Frozen-KV MTP draft )?(?:cuda|CUDA|cpu|CPU|npu|NPU|xpu|XPU|device|\w+) graph end"
)
_ELAPSED = re.compile(r"(?:Time elapsed: |elapsed=)" + _F + r" ?s")
_MEM_USAGE = re.compile(r"mem usage=" + _F + r" ?GB")
_AVAIL = re.compile(r"avail(?:able)?[ _]mem=" + _F + r" ?GB")
_BS_LIST = re.compile(r"\bbs=(\[[^\]]*\]?)")
_TOKENS_LIST = re.compile(r"\bnum_tokens=(\[[^\]]*\]?)")
_BACKEND = re.compile(r"backend=(\w+)")
# §4.2 size lists
_SIZES = re.compile(
    r"Capture (?:cuda |cpu |npu |device |)graph (?P<what>bs|num tokens) (?P<list>\[.*)"
)
# §4.3 tqdm
_TQDM = re.compile(
    r"(?P<desc>Capturing batches|Capturing num tokens|Compiling num tokens)\s*"
    r"(?:\((?:bs=(?P<bs>\d+))?\s*(?:num_tokens=(?P<nt>\d+))?\s*(?:avail_mem=" + _F + r" ?GB)?\))?"
    r":\s*\d+%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)"
)
_BARE_TQDM = re.compile(r"^\s*\d+%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+) \[")
# §5.1 / §5.2 batch lines
_RUNNING = re.compile(r"#running-req: (\d+)", re.ASCII)
_TOKEN = re.compile(r"#token: (\d+)", re.ASCII)
_USAGE = re.compile(r"token usage: (\d+(?:\.\d+)?)", re.ASCII)
_GRAPH_FLAG = re.compile(r"\b(?:cuda|cpu|npu|musa|xpu|device) graph: (True|False)", re.ASCII)
_GEN = re.compile(r"gen throughput \(token/s\): " + _F, re.ASCII)
_QUEUE = re.compile(r"#queue-req: (\d+)", re.ASCII)
_ACCEPT = re.compile(r"accept len: " + _F, re.ASCII)
_NEW_SEQ = re.compile(r"#(?:new-seq|seq): (\d+)", re.ASCII)
_NEW_TOKEN = re.compile(r"#new[-_]token: (\d+)", re.ASCII)
_CACHED = re.compile(r"#cached[-_]token: (\d+)", re.ASCII)
_INPUT_TPUT = re.compile(r"input throughput \(token/s\): " + _F, re.ASCII)
_OLD_PREFILL_RUNNING = re.compile(r"#running_req: (\d+)", re.ASCII)
_OLD_PREFILL_QUEUE = re.compile(r"#remaining_req: (\d+)", re.ASCII)
# The common layouts of §5.1 (D4, D5, D7, D9-D18) and §5.2 (P5, P9-P13), declared once in
# diag/lines/periodic.py (the hot path reads the same declarations), as one anchored
# regex each: one match instead of eight searches. A line they accept has each field once,
# in place, with nothing after the queue length, so every field is what the per-field
# searches below would find; any other layout falls through to those searches.
_FAST_DECODE = re.compile(periodic.SG_DECODE.regex("python"), re.ASCII)
_FAST_PREFILL = re.compile(periodic.SG_PREFILL.regex("python"), re.ASCII)
# §3 memory
_KV_ALLOC = re.compile(
    r"KV Cache is allocated\.(?: dtype: [\w.]+,)?(?: #tokens: (?P<tok>\d+),)?"
    r"(?: K size: (?P<k>" + _F[1:-1] + r") GB, V size: (?P<v>" + _F[1:-1] + r") GB)?"
    r"(?: KV size: (?P<kv>" + _F[1:-1] + r") GB)?"
)
_SUMMARY = re.compile(r"max_total_num_tokens=(\d+)")
_SUMMARY_FIELDS = re.compile(
    r"(chunked_prefill_size|max_prefill_tokens|max_running_requests|context_len)=(-?\d+)"
)
_RETRACT = re.compile(r"#retracted_reqs: (\d+)")

_DISABLED = (
    ("Cuda graph is disabled for prefill server", "prefill_server"),
    (
        "Cuda graph is disabled because of using torch native attention backend",
        "torch_native_attention",
    ),
    ("Cuda graph is disabled because of using torch Flex Attention backend", "flex_attention"),
    # sglang==0.5.2:srt/server_args.py:615-619 (sets disable_cuda_graph before server_args=)
    (
        "cuda graphs are disabled because of using dual chunk flash attention",
        "dual_chunk_attention",
    ),
    ("Cuda graph is disabled because deepep_mode", "deepep_normal"),
    ("Use triton backend without CUDA graph", "double_sparsity"),
    ("Cuda graph and server warmup are disabled", "tensor_dump"),
    ("The CUDA graph is disabled", "dp_attention"),
)
# runners whose tqdm bar reads "Capturing batches" (request-keyed graphs)
_BATCH_BAR_PHASES = frozenset({"decode", "verify", "draft", "draft_verify", "draft_extend"})
_PREFILL_GRAPH_DISABLED = (
    "Disable piecewise CUDA graph",
    "Disable prefill CUDA graph",
    "Disabling auto-selected prefill CUDA graph",
)


def _phase(role: str | None, kind: str | None) -> str:
    """The capture's phase (diag/engines/runners.py maps it to a runner and model): the role
    comes first, so ``Capture draft extend ...`` is the draft's extend runner, not a target
    prefill (sglang==0.5.23: srt/speculative/eagle_worker_v2.py:634, cuda_graph_setup.py:683
    ``{role} prefill``, :752 ``{role} verify``)."""
    kind = (kind or "").strip().lower()
    if role == "draft" or kind.startswith("draft") or kind.startswith("frozen"):
        if "extend" in kind:
            return "draft_extend"
        if kind == "verify":
            return "draft_verify"
        if kind == "prefill":
            return "draft_prefill"
        return "draft"
    if kind in ("piecewise", "prefill", "extend"):
        return "prefill"
    if kind == "verify":
        return "verify"
    return "decode"


def _f(rx: re.Pattern[str], text: str) -> float | None:
    m = rx.search(text)
    return num(m.group(1)) if m else None


def _i(rx: re.Pattern[str], text: str) -> int | None:
    m = rx.search(text)
    return to_int(m.group(1)) if m else None


@dataclass
class SGLangState:
    """Per-stream state: the capture phase each rank has open (tqdm bars carry no phase)."""

    open_phase: dict[str, str] = field(default_factory=dict)  # rank -> phase
    open_backend: dict[str, str] = field(default_factory=dict)  # rank -> backend= of its begin


@lru_cache(maxsize=64)
def _server_args_items(text: str) -> tuple[tuple[str, Any], ...]:
    """The settings of a ``ServerArgs(...)`` echo, by key. Kept for the echoes read last:
    every pod of a deployment prints the same one (~1 ms to parse its ~150 settings); the
    values only go into events, which encode them (``config.value`` is JSON)."""
    args = parse_kwargs(text)
    return tuple((key, args[key]) for key in sorted(args))


class SGLangParser(LineParser):
    engine = ENGINE
    anchors = (
        "server_args=",
        "Capture",
        "Capturing",
        "Compiling num tokens",
        "it/s]",
        "s/it]",
        "Decode batch",
        "Prefill batch",
        "#running-req:",
        "new fill batch",
        "KV Cache is allocated",
        "max_total_num_tokens=",
        "Memory pool end",
        "Load weight end",
        "graph is disabled",
        "CUDA graph",
        "Cuda graph",
        "without CUDA graph",
        "Retract requests",
        "out of memory happened",
        "Sorted by",
        "Memory Usage is saved",
        "fired up and ready",
        "Init torch distributed begin",
        "SIGTERM received",
        "Receive:",
        "Finish:",
        "mem_fraction_static",
        "Registering",
        "cuda graph",
        *prometheus.ANCHORS,
    )

    def feed(self, line: LogLine, ctx: Context) -> Block | None:
        msg = line.msg
        if "cuda_graph_passes_total" in msg and prometheus.read_metric(line, ctx, ENGINE):
            return None
        if "Decode batch" in msg or msg.startswith("#running-req:"):
            self._decode(line, ctx)
        elif "Prefill batch" in msg or "new fill batch" in msg:
            self._prefill(line, ctx)
        elif "%|" in msg:
            self._progress(line, ctx)
        elif "server_args=" in msg:
            self._server_args(line, ctx)
        elif "Capture" in msg:
            self._capture(line, ctx)
        elif "Sorted by" in msg:
            return _table_block(line)
        else:
            self._other(line, ctx)
        return None

    # -------------------------------------------------------------- batches
    def _decode(self, line: LogLine, ctx: Context) -> None:
        msg = line.msg
        fast = _FAST_DECODE.match(msg)
        if fast is not None:
            ctx.emit("decode_batch", line, engine=ENGINE, **periodic.SG_DECODE.read(fast))
            return
        queue = _i(_QUEUE, msg)
        running = _i(_RUNNING, msg)
        if queue is None or running is None:
            return  # a line cut before its last field is not counted
        flag = _GRAPH_FLAG.search(msg)
        ctx.emit(
            "decode_batch",
            line,
            engine=ENGINE,
            batch_size=running,
            tokens=_i(_TOKEN, msg),
            token_usage=_f(_USAGE, msg),
            cuda_graph=None if flag is None else flag.group(1) == "True",
            gen_throughput=_f(_GEN, msg),
            queue=queue,
            accept_len=_f(_ACCEPT, msg),
        )

    def _prefill(self, line: LogLine, ctx: Context) -> None:
        msg = line.msg
        fast = _FAST_PREFILL.match(msg)
        if fast is not None:
            ctx.emit("prefill_batch", line, engine=ENGINE, **periodic.SG_PREFILL.read(fast))
            return
        queue = _i(_QUEUE, msg)
        if queue is None:
            queue = _i(_OLD_PREFILL_QUEUE, msg)
        if queue is None:
            return
        flag = _GRAPH_FLAG.search(msg)
        tail_ok = (
            flag is None
            or _INPUT_TPUT.search(msg) is not None
            or msg.rstrip().endswith(("True", "False"))
        )
        if not tail_ok:
            return
        ctx.emit(
            "prefill_batch",
            line,
            engine=ENGINE,
            new_seq=_i(_NEW_SEQ, msg),
            new_tokens=_i(_NEW_TOKEN, msg),
            cached_tokens=_i(_CACHED, msg),
            running=_i(_RUNNING, msg) if "#running-req" in msg else _i(_OLD_PREFILL_RUNNING, msg),
            queue=queue,
            cuda_graph=None if flag is None else flag.group(1) == "True",
            input_throughput=_f(_INPUT_TPUT, msg),
        )

    # -------------------------------------------------------------- capture
    def _progress(self, line: LogLine, ctx: Context) -> None:
        msg = line.msg
        m = _TQDM.search(msg)
        if m:
            desc = m.group("desc")
            if desc.startswith("Compiling"):
                return
            phase = "decode" if desc == "Capturing batches" else "prefill"
            opened = ctx.state_of(SGLangState).open_phase
            now = opened.get(line.rank or "") or next(iter(opened.values()), None)
            if phase == "decode" and now in _BATCH_BAR_PHASES:
                phase = now  # the bar of the runner whose begin line is open (verify, draft)
            size = to_int(m.group("bs") or m.group("nt"))
            ctx.emit(
                "capture_progress",
                line,
                engine=ENGINE,
                phase=phase,
                mode=None,
                done=to_int(m.group("done")),
                total=to_int(m.group("total")),
                size=size,
                avail_mem_gib=num(m.group(4)),
            )
            return
        bare = _BARE_TQDM.match(msg)
        opened = ctx.state_of(SGLangState).open_phase
        # bars carry no prefix; only TP0 prints them, so any open phase is theirs
        open_phase = opened.get(line.rank or "") or next(iter(opened.values()), None)
        if bare and open_phase:
            ctx.emit(
                "capture_progress",
                line,
                engine=ENGINE,
                phase=open_phase,
                mode=None,
                done=to_int(bare.group("done")),
                total=to_int(bare.group("total")),
                size=None,
                avail_mem_gib=None,
            )

    def _capture(self, line: LogLine, ctx: Context) -> None:
        msg = line.msg
        state = ctx.state_of(SGLangState)
        opened: dict[str, str] = state.open_phase
        m = _BEGIN.search(msg)
        if m:
            phase = _phase(m.group("role"), m.group("kind"))
            sizes = None
            bs = _BS_LIST.search(msg) or _TOKENS_LIST.search(msg)
            if bs:
                sizes = parse_int_list(bs.group(1))
            ctx.emit(
                "capture_begin",
                line,
                engine=ENGINE,
                phase=phase,
                avail_mem_gib=_f(_AVAIL, msg),
                sizes=sizes,
            )
            if sizes:
                ctx.emit(
                    "capture_sizes",
                    line,
                    engine=ENGINE,
                    phase=phase,
                    mode=(_BACKEND.search(msg) or _NONE).group(1),
                    sizes=sizes,
                    count=len(sizes),
                    largest=max(sizes),
                )
            opened[line.rank or ""] = phase
            backend = _BACKEND.search(msg)
            if backend:
                state.open_backend[line.rank or ""] = backend.group(1)
            else:
                state.open_backend.pop(line.rank or "", None)
            return
        m = _END.search(msg)
        if m:
            phase = _phase(m.group("role"), m.group("kind"))
            # sglang==0.5.23 cuda_graph_setup.py:787-790 moved the decode list to the end line
            bs = _BS_LIST.search(msg)
            sizes = parse_int_list(bs.group(1)) if bs else None
            if sizes:
                ctx.emit(
                    "capture_sizes",
                    line,
                    engine=ENGINE,
                    phase=phase,
                    mode=state.open_backend.get(line.rank or ""),
                    sizes=sizes,
                    count=len(sizes),
                    largest=max(sizes),
                )
            ctx.emit(
                "capture_end",
                line,
                engine=ENGINE,
                phase=phase,
                time_s=_f(_ELAPSED, msg),
                mem_gib=_f(_MEM_USAGE, msg),
                avail_mem_gib=_f(_AVAIL, msg),
            )
            opened.pop(line.rank or "", None)
            state.open_backend.pop(line.rank or "", None)
            return
        m = _SIZES.search(msg)
        if m:
            sizes = parse_int_list(m.group("list"))
            if sizes:
                phase = "decode" if m.group("what") == "bs" else "prefill"
                ctx.emit(
                    "capture_sizes",
                    line,
                    engine=ENGINE,
                    phase=phase,
                    mode=None,
                    sizes=sizes,
                    count=len(sizes),
                    largest=max(sizes),
                )
            return
        self._other(line, ctx)

    # -------------------------------------------------------------- startup config
    def _server_args(self, line: LogLine, ctx: Context) -> None:
        msg = line.msg
        start = msg.find("ServerArgs(")
        if start < 0:
            return
        ctx.emit("startup", line, engine=ENGINE, marker="server_args")
        for key, value in _server_args_items(msg[start:]):
            ctx.emit("config", line, engine=ENGINE, origin="server_args", key=key, value=value)

    def _other(self, line: LogLine, ctx: Context) -> None:
        msg = line.msg
        if "KV Cache is allocated" in msg:
            m = _KV_ALLOC.search(msg)
            if m:
                if m.group("tok"):
                    ctx.emit(
                        "sizing",
                        line,
                        engine=ENGINE,
                        name="kv_tokens",
                        value=to_int(m.group("tok")),
                        unit="tokens",
                    )
                kv = None
                if m.group("k") and m.group("v"):
                    kv = float(m.group("k")) + float(m.group("v"))
                elif m.group("kv"):
                    kv = float(m.group("kv"))
                if kv is not None:
                    ctx.emit(
                        "sizing", line, engine=ENGINE, name="kv_cache_gib", value=kv, unit="GiB"
                    )
        elif "max_total_num_tokens=" in msg:
            m = _SUMMARY.search(msg)
            if m:
                ctx.emit(
                    "sizing",
                    line,
                    engine=ENGINE,
                    name="max_total_num_tokens",
                    value=to_int(m.group(1)),
                    unit="tokens",
                )
            for key, value in _SUMMARY_FIELDS.findall(msg):
                ctx.emit(
                    "config", line, engine=ENGINE, origin="scheduler", key=key, value=to_int(value)
                )
            avail = _f(_AVAIL, msg)
            if avail is not None:
                ctx.emit(
                    "sizing",
                    line,
                    engine=ENGINE,
                    name="available_gpu_mem_gib",
                    value=avail,
                    unit="GiB",
                )
        elif "Memory pool end" in msg:
            avail = _f(_AVAIL, msg) or _f(re.compile(r"Avail mem=" + _F), msg)
            if avail is not None:
                ctx.emit(
                    "sizing",
                    line,
                    engine=ENGINE,
                    name="avail_after_kv_gib",
                    value=avail,
                    unit="GiB",
                )
        elif "Load weight end" in msg:
            used = _f(_MEM_USAGE, msg)
            if used is not None:
                ctx.emit("sizing", line, engine=ENGINE, name="weights_gib", value=used, unit="GiB")
        elif "Retract requests" in msg or "out of memory happened" in msg:
            ctx.emit("retract", line, engine=ENGINE, count=_i(_RETRACT, msg) or 1, text=msg[:200])
        elif "Init torch distributed begin" in msg:
            ctx.emit("startup", line, engine=ENGINE, marker="init_distributed")
        elif "fired up and ready" in msg:
            ctx.emit("startup", line, engine=ENGINE, marker="ready")
        elif "SIGTERM received" in msg and "shutting down" in msg:
            # the operator's stop (sglang==0.5.23:srt/managers/tokenizer_manager.py:4068
            # SignalHandler.sigterm_handler; 0.5.3:1864): what fails after it is the shutdown's
            ctx.emit("startup", line, engine=ENGINE, marker="shutdown_requested")
        elif "Memory Usage is saved" in msg:
            ctx.emit(
                "advisory",
                line,
                engine=ENGINE,
                topic="snapshot_written",
                value=None,
                text=msg.strip(),
            )
        elif msg.startswith(("Receive:", "Finish:")) or " Receive: " in msg or " Finish: " in msg:
            self._request(line, ctx)
        else:
            self._graph_status(line, ctx)

    def _graph_status(self, line: LogLine, ctx: Context) -> None:
        msg = line.msg
        for needle, reason in _DISABLED:
            if needle in msg:
                ctx.emit(
                    "graph_disabled", line, engine=ENGINE, reason=reason, text=msg.strip()[:300]
                )
                return
        if msg.startswith(_PREFILL_GRAPH_DISABLED) or any(
            n in msg for n in _PREFILL_GRAPH_DISABLED
        ):
            ctx.emit(
                "graph_disabled",
                line,
                engine=ENGINE,
                reason="prefill_graph_only",
                text=msg.strip()[:300],
            )

    def _request(self, line: LogLine, ctx: Context) -> None:
        msg = line.msg
        spec = periodic.SG_RECEIVE if "Receive:" in msg else periodic.SG_FINISH
        ctx.emit("request", line, engine=ENGINE, **spec.search_fields(msg))


class _NoMatch:
    def group(self, _i: int) -> None:
        return None


_NONE = _NoMatch()


# ------------------------------------------------------------------ profiler table blocks
class ProfileTableBlock(Block):
    """``Sorted by CUDA Time:`` + unprefixed table lines (§9.2)."""

    def __init__(self, first: LogLine, sort_by: str) -> None:
        self.first = first
        self.sort_by = sort_by
        self.lines: list[str] = []
        self.footer_seen = False
        self.done = False

    def offer(self, line: LogLine) -> bool:
        if line.header is not None or len(self.lines) > 400:
            self.done = True
            return False
        text = line.text
        if self.footer_seen and not text.startswith("Self "):
            self.done = True
            return False
        self.lines.append(text)
        if text.startswith("Self ") and "time total" in text:
            self.footer_seen = True
        return True

    def finish(self, ctx: Context) -> None:
        from diag.artifacts.profiler_table import ProfileTableError, parse_table_block

        try:
            table = parse_table_block(
                self.lines, self.first.source, self.first.lineno + 1, self.sort_by
            )
        except ProfileTableError:
            return
        ctx.emit(
            "profile",
            self.first,
            engine=ENGINE,
            sort_by=table.sort_by or self.sort_by,
            rows=len(table.frame),
            table=table.to_dict(),
        )


def _table_block(line: LogLine) -> Block | None:
    m = re.search(r"Sorted by (\w+) Time", line.msg)
    if not m:
        return None
    sort = {"CUDA": "cuda_time_total", "CPU": "cpu_time_total", "XPU": "xpu_time_total"}.get(
        m.group(1), m.group(1).lower() + "_time_total"
    )
    return ProfileTableBlock(line, sort)
