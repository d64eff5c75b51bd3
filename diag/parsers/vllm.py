"""vLLM log lines (0.4 -> 0.33) that bear on capture, eager fallback and KV sizing.

The formats and their version ranges are in ``shared/formats/vllm-log-formats.md``;
section / line ids below (V0-1, V1-4, M-1, R-2, ...) refer to it. Messages are matched
anywhere in the line, never anchored at its start, because unknown prefixes exist
(``VLLM_LOGGING_PREFIX``, pasted message bodies without any header).

Per-stream state (``ctx.state``) keeps what a single line cannot tell: which engine era
the stream is in (V0 and V1 print the same "Graph capturing finished" text), which
process has a capture phase open, and the configured cudagraph mode of the current run.
A new start-up (config echo, args echo, API server banner) resets the run state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Transformer, UnexpectedInput, v_args

from diag.normalize.prefix import LogLine
from diag.parsers.base import Block, Context, LineParser, num, parse_int_list, to_int
from diag.parsers.configs import parse_kwargs, parse_value
from diag.parsers.traceback import explicit_capture
from diag.resources import grammar_text

ENGINE = "vllm"
_N = r"(-?\d[\d,]*(?:\.\d+)?)"  # a printed number, thousands separators allowed

MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
_MODE_BY_VALUE: dict[Any, str] = {
    0: "NONE",
    1: "PIECEWISE",
    2: "FULL",
    (2, 0): "FULL_DECODE_ONLY",
    (2, 1): "FULL_AND_PIECEWISE",
}


def mode_name(value: Any) -> str | None:
    """A cudagraph_mode as printed in any era -> its NAME (JSON enum values 0, [2,1], ...)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _MODE_BY_VALUE.get(value)
    if isinstance(value, list | tuple):
        if len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return _MODE_BY_VALUE.get((value[0], value[1]))
        return None
    if isinstance(value, str):
        text = value.strip().strip("'\"<>").split(":", 1)[0].strip()
        name = text.rsplit(".", 1)[-1].upper()
        if name in MODES:
            return name
        if name.isdigit():
            return _MODE_BY_VALUE.get(int(name))
        m = re.fullmatch(r"[\[(]\s*(\d)\s*,\s*(\d)\s*[\])]", text)
        if m:
            return _MODE_BY_VALUE.get((int(m.group(1)), int(m.group(2))))
    return None


# ---------------------------------------------------------------- §2 startup / config
_ENGINE_CONFIG = re.compile(
    r"Initializing an? (?:(?P<eng>V[01]) )?LLM engine \(v(?P<ver>[^)\s]+)\)(?: with config: (?P<cfg>.*))?"
)
_API_VERSION = re.compile(r"vLLM (?:API )?server version:? v?(?P<ver>\d+\.\d+[\w.+-]*)")
_BANNER_VERSION = re.compile(r"[^\w]*version\s+v?(?P<ver>\d+\.\d+[\w.+-]*)\s*")
_NON_DEFAULT = re.compile(r"non-default args: (?P<args>\{.*)")
_ARGS = re.compile(r"(?:^|\s)args: (?P<args>Namespace\(.*)")
_INIT_ENGINE = re.compile(
    r"init engine\b.*?took (?P<t>\d+(?:\.\d+)?) ?(?:seconds|secs|s)\b"
    r"(?: \(compilation: (?P<c>\d+(?:\.\d+)?) ?s)?"
)
_CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
_SET_MAX_SEQS = re.compile(r"Setting max_num_seqs to (\d+) for")
_ATTN_BACKEND = re.compile(
    r"Using (?P<name>AttentionBackendEnum\.\w+|[\w-]+(?: [\w-]+)??) (?:attention )?backend\b"
)
_ATTN_NAMES = re.compile(r"attn|attention|flash|infer|xformers|mla|sdpa|rocm|aiter|tree", re.I)

# ---------------------------------------------------------------- §2.4 downgrades / disabled
_SETTING_MODE = re.compile(r"setting cudagraph_mode=(?P<mode>[A-Z_]+)")
_OVERRIDE_MODE = re.compile(r"Overriding cudagraph_mode (?:from \S+ )?to (?P<mode>[A-Z_]+)")
_OVERRIDE_TO = re.compile(
    r"Cudagraph mode \S+ is not compatible with .*?Overriding to (?:CUDAGraphMode\.)?(?P<mode>[A-Z_]+)"
)
_DISABLED: tuple[tuple[str, str], ...] = (
    ("Cudagraph is disabled under eager mode", "enforce_eager"),
    ("Enforce eager set", "enforce_eager"),
    ("Skipping CUDA graph capture", "skipping_capture"),
    ("Skipping encoder and decoder CUDA graph capture", "skipping_capture"),
    ("CUDA graph is not supported on BitAndBytes", "bitsandbytes"),
    ("CUDA graph is not supported on BitsAndBytes", "bitsandbytes"),
    ("cudagraph dispatching keys are not initialized", "dispatch_keys_uninitialized"),
    ("DeepEP: Disabling CUDA Graphs", "deepep"),
)
_ROCM_UNSUPPORTED = re.compile(r"CUDA graph is not supported for .* on ROCm yet")

# ---------------------------------------------------------------- §3/§4 capture
_V0_BEGIN = ("Capturing the model for CUDA graphs", "Capturing cudagraphs for decoding")
_V1_BEGIN = re.compile(r"Rank \d+: Torch profiler (?:disabled|enabled) for CUDA graph capture")
_CAPTURE_END = re.compile(
    r"Graph capturing finished in (?P<s>-?\d+(?:\.\d+)?) secs(?:, took (?P<gib>-?\d+(?:\.\d+)?) GiB)?"
)
_TQDM = re.compile(
    r"(?P<desc>Capturing CUDA graph shapes|Capturing CUDA graphs(?: \((?P<a>[^,()]+?)(?:, ?(?P<b>[A-Za-z_]+))?\))?)"
    r"\s*:\s*\d+%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)"
)
_SHAPE_DEBUG = re.compile(r"Capturing a cudagraph for shape (\d+)")
_ON_DEBUG = re.compile(
    r"Capturing a cudagraph on \(\s*(?:CUDAGraphMode\.)?(?P<mode>[A-Z_]+)\s*,\s*(?P<desc>BatchDescriptor\(.*)"
)
_CG_DEBUG = re.compile(
    r"CG Capture: mode=(?:CUDAGraphMode\.)?(?P<mode>[A-Z_]+), batch_desc=(?P<desc>.*)"
)
_DESC_TOKENS = re.compile(r"num_tokens=(\d+)")
_DESC_REQS = re.compile(r"num_reqs=(\d+|None)")
_DESC_UNIFORM = re.compile(r"uniform(?:_decode)?=(True|False)")

# ---------------------------------------------------------------- §5 runtime
_STEP = re.compile(
    r"Running batch with cudagraph_mode: (?:CUDAGraphMode\.)?(?P<mode>[A-Z_]+), batch_descriptor: (?P<desc>.*)"
)

# ---------------------------------------------------------------- §7 stats
_PROMPT_TPUT = re.compile(r"Avg prompt throughput: " + _N + r" tokens/s")
_GEN_TPUT = re.compile(r"Avg generation throughput: " + _N + r" tokens/s")
_RUNNING = re.compile(r"Running: (\d+) reqs")
_WAITING = re.compile(r"(?:Waiting|Pending): (\d+) reqs")
_SWAPPED = re.compile(r"Swapped: (\d+) reqs")
_KV_USAGE = re.compile(r"(?<!CPU )KV cache usage: " + _N + r"%")
_PREEMPT = re.compile(r"Preemptions: (\d+)")
_ENGINE_IDX = re.compile(r"Engine (\d+):")

# ---------------------------------------------------------------- §8 requests
_REQ = re.compile(
    r"(?:^|\s)(?P<verb>Received request|Added request|Finished request|Aborted request(?:\(s\))?|"
    r"Generated response) (?P<rest>.*)"
)
_PROMPT_IDS = re.compile(r"prompt_token_ids: (\[[^\]]*\]?|None)")
_MAX_TOKENS = re.compile(r"SamplingParams\(.*?\bmax_tokens=(\d+)")
_ACTIONS = {
    "Received request": "received",
    "Added request": "added",
    "Finished request": "finished",
    "Aborted request": "aborted",
    "Aborted request(s)": "aborted",
    "Generated response": "response",
}

# ---------------------------------------------------------------- §9 KV sizing
_BLOCKS = re.compile(r"# (?!CPU\b)(?P<dev>\w+) blocks: (?P<g>\d+)(?:, # CPU blocks: (?P<c>\d+))?")
_CACHE_INFO_BLOCKS = re.compile(
    r"cache_config_info with initialization after num_gpu_blocks is: (\d+)"
)
_OVERRIDE_BLOCKS = re.compile(
    r"Overriding num_gpu_blocks=(-?\d+) with num_gpu_blocks_override=(\d+)"
)
_KV_TOKENS = re.compile(r"(?:^|[\s,:])(?:[A-Z]+(?: \+ host)? )?KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: " + _N + r" ?x")
_AVAIL_KV = re.compile(r"Available KV cache memory: " + _N + r" ?GiB")
_V0_KV_REST = re.compile(r"the rest of the memory reserved for KV Cache is " + _N + r" ?GiB")
_KV_FIXED = re.compile(r"reserved " + _N + r" ?GiB memory for KV Cache")
_V0_TOTAL = re.compile(
    r"total_gpu_memory \(" + _N + r" ?GiB\) x gpu_memory_utilization \(" + _N + r"\)"
)
_V0_WEIGHTS = re.compile(r"model weights take " + _N + r" ?GiB")
_V0_NON_TORCH = re.compile(r"non_torch_memory takes " + _N + r" ?GiB")
_V0_ACTIVATION = re.compile(r"activation peak memory takes " + _N + r" ?GiB")
_PROFILE_064 = re.compile(r"Memory profiling results: (?P<kv>.*)")
_LOAD_WEIGHTS = re.compile(r"(?:Loading model weights took|Model loading took) " + _N + r" ?Gi?B")
_FREE_MEM = re.compile(r"Free memory on device \(" + _N + r"/" + _N + r" GiB\)")
_FREE_UTIL = re.compile(r"Desired GPU memory utilization is \(" + _N)
_FREE_WEIGHT = re.compile(_N + r" GiB for weight\b")
_FREE_ACT = re.compile(_N + r" GiB for peak activation")
_FREE_NON_TORCH = re.compile(_N + r" GiB for non-torch memory")
_FREE_GRAPH = re.compile(_N + r" GiB for CUDAGraph memory")
_EST_GRAPH = re.compile(r"Estimated CUDA graph memory: " + _N + r" ?GiB total")
_POOL = re.compile(
    r"CUDA graph pool memory: " + _N + r" ?GiB \(actual\), " + _N + r" ?GiB \(estimated\)"
)
_PROFILING = re.compile(r"Profiling CUDA graph memory: (?P<spec>.*)")
_PROFILING_ITEM = re.compile(r"(?P<mode>[A-Z_]+)=(?P<n>\d+) \(largest=(?P<largest>\d+)\)")

# ---------------------------------------------------------------- advisories
_GMU_ADVICE = re.compile(
    r"increas(?:e|ing) --gpu-memory-utilization (?:from \d+(?:\.\d+)? )?to (\d+(?:\.\d+)?)"
)
_MAMBA_CAP = re.compile(r"Capping cudagraph capture sizes from max (\d+) to (\d+)")
_TRUNCATE = re.compile(r"Truncating max_cudagraph_capture_size to (\d+)")
_OVERRIDDEN = re.compile(
    r"cudagraph_capture_sizes specified in compilation_config (?P<old>.*?) is overridden by config (?P<new>.*)"
)
_GRAPH_MEM_WARN = (
    "CUDA graphs can take additional",
    "If out-of-memory error occurs during cudagraph capture",
)

# ---------------------------------------------------------------- vLLM-only error lines
_KV_ERRORS = (
    "No available memory for the cache blocks",
    "To serve at least one request with the model",
    "is larger than the maximum number of tokens that can be stored in KV cache",
)
_WARMUP_OOM = re.compile(r"CUDA out of memory occurred when warming up (?:sampler|pooler)")
# mirrors of diag.parsers.traceback.ErrorParser's own tests, to avoid emitting twice
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*)?(?:Error|Exception|Failure)(?::\s|$)")
_STANDALONE_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|HIP out of memory"
)

# ---------------------------------------------------------------- metrics table
_METRICS_START = (
    "**CUDAGraph Config Settings",
    "**CUDAGraph Stats",
    "| Unpadded Tokens",
    "- Mode:",
    "- Capture sizes:",
)
_METRICS_ROW = re.compile(r"^\|\s*\d+\s*\|")

# ---------------------------------------------------------------- per-stream state keys
_ERA = "vllm.era"  # "v0" | "v1" | None
_OPEN = "vllm.open_capture"  # {process key: phase}
_RUN = "vllm.run"  # per-run facts and de-duplication sets


def _f(rx: re.Pattern[str], text: str, group: int = 1) -> float | None:
    m = rx.search(text)
    return num(m.group(group)) if m else None


def _run(ctx: Context) -> dict[str, Any]:
    """Facts of the current run (configured mode, what was already reported once)."""
    run: dict[str, Any] | None = ctx.state.get(_RUN)
    if run is None:
        run = ctx.state[_RUN] = {"seen": set()}
    return run


def _new_run(ctx: Context, era: str | None) -> None:
    """A start-up line: forget what the previous run had open or already reported."""
    ctx.state[_OPEN] = {}
    ctx.state[_RUN] = {"seen": set()}
    ctx.state[_ERA] = era


def _once(ctx: Context, *key: Any) -> bool:
    """True the first time ``key`` is seen in this run (tqdm redraws, repeated tables)."""
    seen: set[Any] = _run(ctx)["seen"]
    if key in seen:
        return False
    seen.add(key)
    return True


class VLLMParser(LineParser):
    """Every vLLM line kind of the spec that bears on capture, eager fallback and KV sizing."""

    engine = ENGINE
    anchors = (
        # start-up and configuration
        "LLM engine",
        "args: ",
        "server version",
        "version ",
        "init engine",
        "Application startup complete",
        "Chunked prefill is enabled",
        "Setting max_num_seqs",
        "backend",
        # capture, modes, eager fallback, advisories (most carry one of these)
        "CUDA graph",
        "CUDA Graph",
        "cuda graph",
        "cudagraph",
        "Cudagraph",
        "CUDAGraph",
        "Capturing",
        "Graph capturing",
        "CG Capture",
        "Enforce eager",
        "eager mode",
        # KV sizing
        " blocks: ",
        "num_gpu_blocks",
        "KV cache size",
        "Maximum concurrency",
        "KV cache memory",
        "KV Cache",
        "kv_cache_size=",
        "model weights take",
        "weights took",
        "Model loading took",
        "total_gpu_memory",
        "Free memory on device",
        # runtime
        "Avg prompt throughput",
        "Unpadded Tokens",
        "- Mode:",
        "- Capture sizes:",
        "| FULL",
        "| NONE",
        "| PIECEWISE",
        "request",
        "Generated response",
        "is preempted",
        # vLLM-only error messages
        "No available memory",
        "To serve at least one request",
        "out of memory occurred",
    )

    def feed(self, line: LogLine, ctx: Context) -> Block | None:
        msg = line.msg
        if not msg or not msg.strip():
            return None
        if ctx.state.get(_ERA) is None:
            self._note_era(line, ctx)
        if "%|" in msg:
            self._progress(line, ctx)
            return None
        if "Avg prompt throughput" in msg:
            self._stats(line, ctx)
            return None
        if "Running batch with cudagraph_mode" in msg:
            self._step(line, ctx)
            return None
        if ("request" in msg or "Generated response" in msg) and self._request(line, ctx):
            return None  # the most frequent runtime lines: skip the start-up checks below
        stripped = msg.strip()
        if stripped.startswith(_METRICS_START):
            return MetricsTableBlock(line)
        if _METRICS_ROW.match(stripped):
            MetricsTableBlock(line).finish(ctx)
            return None
        if "LLM engine" in msg and "Initializing" in msg:
            self._engine_config(line, ctx)
        elif "args: " in msg and ("Namespace(" in msg or "non-default args" in msg):
            self._args(line, ctx)
        elif self._capture(line, ctx) or self._sizing(line, ctx) or self._graph_status(line, ctx):
            pass
        else:
            self._other(line, ctx)
        return None

    # -------------------------------------------------------------- state
    @staticmethod
    def _note_era(line: LogLine, ctx: Context) -> None:
        """Which engine wrote this stream: both print "Graph capturing finished"."""
        msg = line.msg
        era = None
        if (
            "Capturing the model for CUDA graphs" in msg
            or "Capturing cudagraphs for decoding" in msg
            or "# CPU blocks" in msg
            or "model weights take" in msg
            or line.proc == "VllmWorkerProcess"
        ):
            era = "v0"
        elif (
            "KV cache size:" in msg
            or "Available KV cache memory" in msg
            or "(mixed prefill-decode" in msg
            or "Capturing CUDA graphs" in msg
            or "cudagraph for shape" in msg
            or "Capturing a cudagraph on" in msg
            or "gpu_model_runner.py" in line.text
            or (line.proc or "").startswith(("EngineCore", "VllmWorker", "Worker", "APIServer"))
        ):
            era = "v1"
        if era is not None and ctx.state.get(_ERA) is None:
            ctx.state[_ERA] = era

    # -------------------------------------------------------------- start-up
    def _engine_config(self, line: LogLine, ctx: Context) -> None:
        m = _ENGINE_CONFIG.search(line.msg)
        if not m:
            return
        eng = m.group("eng")
        if eng is None:  # "an LLM engine": V0's llm_engine.py, or 0.6.6's opt-in V1 core.py
            eng = "V1" if re.search(r"\bcore\.py:", line.text) else "V0"
        era = "v1" if eng == "V1" else "v0"
        _new_run(ctx, era)
        ctx.state[_ERA] = era
        ctx.emit("startup", line, engine=ENGINE, marker="engine_config")
        ctx.emit("version", line, engine=ENGINE, version=m.group("ver"))
        cfg = m.group("cfg")
        if not cfg:
            return
        cfg = cfg.rstrip()
        if cfg.endswith(")") and cfg.count(")") > cfg.count("("):
            cfg = cfg[:-1]  # <=0.6.4 closes the echo with ")"
        settings = _flatten(parse_config_echo(cfg))
        for key, value in settings:
            ctx.emit("config", line, engine=ENGINE, origin="engine_config", key=key, value=value)
        self._graph_config(line, ctx, dict(settings), era)

    def _graph_config(self, line: LogLine, ctx: Context, cfg: dict[str, Any], era: str) -> None:
        """What the config echo says about graphs: mode, capture sizes, eager."""
        eager = cfg.get("enforce_eager") is True
        mode = mode_name(cfg.get("compilation_config.cudagraph_mode"))
        text = line.msg.strip()[:300]
        if mode is None and era == "v1" and not eager:
            level = cfg.get("compilation_config.level")
            level = cfg.get("compilation_config.mode") if level is None else level
            use_cg = cfg.get("compilation_config.use_cudagraph")
            if use_cg is False or level == 0:
                mode = "NONE"
            elif use_cg is True or level == 3:
                mode = (
                    "FULL" if cfg.get("compilation_config.full_cuda_graph") is True else "PIECEWISE"
                )
        if eager:
            mode = "NONE"
        if mode is not None:
            _run(ctx)["mode"] = mode
            ctx.emit(
                "graph_mode",
                line,
                engine=ENGINE,
                mode=mode,
                origin="config",
                downgraded=False,
                text=text,
            )
        if eager:
            ctx.emit(
                "graph_disabled",
                line,
                engine=ENGINE,
                reason="enforce_eager",
                text="enforce_eager=True in engine config",
            )
            return
        if mode == "NONE":
            ctx.emit(
                "graph_disabled",
                line,
                engine=ENGINE,
                reason="mode_none",
                text="cudagraph_mode NONE in engine config",
            )
            return
        sizes = cfg.get("compilation_config.cudagraph_capture_sizes")
        if isinstance(sizes, list) and sizes:
            if era == "v0":
                phase, set_mode = "decode", "FULL"
            elif mode == "FULL_DECODE_ONLY":
                phase, set_mode = "decode", "FULL"
            else:
                phase, set_mode = "mixed", "FULL" if mode == "FULL" else "PIECEWISE"
            ctx.emit(
                "capture_sizes",
                line,
                engine=ENGINE,
                phase=phase,
                mode=set_mode,
                sizes=sizes,
                count=len(sizes),
                largest=max(sizes),
            )

    def _args(self, line: LogLine, ctx: Context) -> None:
        msg = line.msg
        m = _NON_DEFAULT.search(msg)
        if m:
            origin, args = "non_default_args", _parse_dict(m.group("args"))
        else:
            a = _ARGS.search(msg)
            if not a:
                return
            origin = "args"
            inner = a.group("args")[len("Namespace(") :].rstrip()
            args = parse_config_echo(inner[:-1] if inner.endswith(")") else inner)
        _new_run(ctx, ctx.state.get(_ERA))
        ctx.emit("startup", line, engine=ENGINE, marker="args")
        settings = _flatten(args)
        for key, value in settings:
            ctx.emit("config", line, engine=ENGINE, origin=origin, key=key, value=value)
        if dict(settings).get("enforce_eager") is True:
            ctx.emit(
                "graph_disabled",
                line,
                engine=ENGINE,
                reason="enforce_eager",
                text=f"enforce_eager=True in {origin.replace('_', ' ')}",
            )

    # -------------------------------------------------------------- capture
    def _capture(self, line: LogLine, ctx: Context) -> bool:
        msg = line.msg
        opened: dict[str, str] = ctx.state.setdefault(_OPEN, {})
        key = line.key
        if any(b in msg for b in _V0_BEGIN):
            ctx.state[_ERA] = "v0"
            ctx.emit(
                "capture_begin", line, engine=ENGINE, phase="decode", avail_mem_gib=None, sizes=None
            )
            opened[key] = "decode"
            if any(w in msg for w in _GRAPH_MEM_WARN):  # V0-6 carries V0-5's advice
                ctx.emit(
                    "advisory",
                    line,
                    engine=ENGINE,
                    topic="graph_memory_warning",
                    value=None,
                    text=msg.strip()[:400],
                )
            return True
        if _V1_BEGIN.search(msg):
            ctx.emit(
                "capture_begin", line, engine=ENGINE, phase="all", avail_mem_gib=None, sizes=None
            )
            opened[key] = "all"
            return True
        m = _CAPTURE_END.search(msg)
        if m:
            phase = (
                opened.pop(key, None)
                or opened.pop("", None)
                or ("decode" if ctx.state.get(_ERA) == "v0" else "all")
            )
            ctx.emit(
                "capture_end",
                line,
                engine=ENGINE,
                phase=phase,
                time_s=num(m.group("s")),
                mem_gib=num(m.group("gib")),
                avail_mem_gib=None,
            )
            return True
        m = _SHAPE_DEBUG.search(msg)
        if m:  # V1-6: piecewise backend, one line per captured size
            ctx.emit(
                "capture_progress",
                line,
                engine=ENGINE,
                phase="mixed",
                mode="PIECEWISE",
                done=None,
                total=None,
                size=int(m.group(1)),
                avail_mem_gib=None,
            )
            return True
        m = _ON_DEBUG.search(msg) or _CG_DEBUG.search(msg)
        if m:  # V1-6' / V1-6m
            desc = m.group("desc")
            reqs = _DESC_REQS.search(desc)
            uniform = _DESC_UNIFORM.search(desc)
            decode = (uniform is not None and uniform.group(1) == "True") or (
                reqs is not None and reqs.group(1) != "None"
            )
            ctx.emit(
                "capture_progress",
                line,
                engine=ENGINE,
                phase="decode" if decode else "mixed",
                mode=m.group("mode"),
                done=None,
                total=None,
                size=to_int(_group(_DESC_TOKENS, desc)),
                avail_mem_gib=None,
            )
            return True
        m = _PROFILING.search(msg)
        if m:  # M-1
            items = list(_PROFILING_ITEM.finditer(m.group("spec")))
            names = {i.group("mode") for i in items}
            for item in items:
                ctx.emit(
                    "capture_sizes",
                    line,
                    engine=ENGINE,
                    phase=self._m1_phase(ctx, item.group("mode"), names),
                    mode=item.group("mode"),
                    sizes=None,
                    count=int(item.group("n")),
                    largest=int(item.group("largest")),
                )
            return True
        return False

    def _m1_phase(self, ctx: Context, mode: str, names: set[str]) -> str:
        if mode == "ENCODER":
            return "encoder"
        if mode == "PIECEWISE":
            return "mixed"
        configured = _run(ctx).get("mode")
        if "PIECEWISE" in names or configured in ("FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
            return "decode"
        return "mixed" if configured == "FULL" else "decode"

    def _progress(self, line: LogLine, ctx: Context) -> None:
        m = _TQDM.search(line.msg)
        if not m:
            return
        era = ctx.state.get(_ERA)
        a, b = m.group("a"), m.group("b")
        phase: str
        mode: str | None
        if m.group("desc") == "Capturing CUDA graph shapes":  # V0-8 or V1-2
            phase, mode = (
                ("decode", "FULL")
                if era == "v0"
                else ("mixed", "PIECEWISE")
                if era == "v1"
                else ("all", None)
            )
        elif a is None:  # MRV2 0.13 plain desc
            phase, mode = "all", None
        elif b is None:  # MRV2 "(PIECEWISE)" / "(FULL)"
            mode = mode_name(a)
            phase = "mixed" if mode == "PIECEWISE" else "decode" if mode == "FULL" else "all"
        else:
            mode = mode_name(b) or b.upper()
            phase = (
                "decode"
                if a.strip().lower() == "decode"
                else "mixed"
                if "mixed" in a
                else a.strip().lower()
            )
        opened: dict[str, str] = ctx.state.setdefault(_OPEN, {})
        if line.key not in opened and not (line.key == "" and opened):
            # the first bar of a capture opens it; a bar without a process prefix (tqdm
            # redraws lose it, and >=0.31 never has one) belongs to a capture already open
            begin = "decode" if era == "v0" else "all"
            ctx.emit(
                "capture_begin", line, engine=ENGINE, phase=begin, avail_mem_gib=None, sizes=None
            )
            opened[line.key] = begin
        done, total = int(m.group("done")), int(m.group("total"))
        ctx.emit(
            "capture_progress",
            line,
            engine=ENGINE,
            phase=phase,
            mode=mode,
            done=done,
            total=total,
            size=None,
            avail_mem_gib=None,
        )
        if a is not None and mode is not None and _once(ctx, "tqdm_mode", phase, mode):
            ctx.emit(
                "graph_mode",
                line,
                engine=ENGINE,
                mode=mode,
                origin="tqdm",
                downgraded=False,
                text=m.group("desc"),
            )

    # -------------------------------------------------------------- KV sizing
    def _sizing(self, line: LogLine, ctx: Context) -> bool:
        msg = line.msg
        emitted = False

        def size(name: str, value: float | None, unit: str) -> None:
            nonlocal emitted
            if value is not None:
                ctx.emit("sizing", line, engine=ENGINE, name=name, value=value, unit=unit)
                emitted = True

        if " blocks: " in msg:
            m = _BLOCKS.search(msg)
            if m:
                size("gpu_blocks", num(m.group("g")), "blocks")
                size("cpu_blocks", num(m.group("c")), "blocks")
        if "num_gpu_blocks" in msg:
            size("gpu_blocks", _f(_CACHE_INFO_BLOCKS, msg), "blocks")
            size("num_gpu_blocks_override", _f(_OVERRIDE_BLOCKS, msg, 2), "blocks")
        if "KV cache size:" in msg:
            size("kv_tokens", _f(_KV_TOKENS, msg), "tokens")
        if "Maximum concurrency" in msg:
            m = _CONCURRENCY.search(msg)
            if m:
                size("max_concurrency", num(m.group(2)), "x")
                size("max_model_len", num(m.group(1)), "tokens")
        if "KV cache memory" in msg or "KV Cache" in msg:
            size(
                "kv_cache_gib",
                _f(_AVAIL_KV, msg)
                if "Available KV" in msg
                else _f(_V0_KV_REST, msg) or _f(_KV_FIXED, msg),
                "GiB",
            )
        if "total_gpu_memory (" in msg:
            m = _V0_TOTAL.search(msg)
            if m:
                size("total_gpu_memory_gib", num(m.group(1)), "GiB")
                size("gpu_memory_utilization", num(m.group(2)), "fraction")
        if "model weights take" in msg:
            size("weights_gib", _f(_V0_WEIGHTS, msg), "GiB")
            size("non_torch_gib", _f(_V0_NON_TORCH, msg), "GiB")
            size("activation_peak_gib", _f(_V0_ACTIVATION, msg), "GiB")
        if "Memory profiling results:" in msg:  # 0.6.4 key=value form
            kv = dict(re.findall(r"(\w+)=" + _N, msg))
            size("total_gpu_memory_gib", num(kv.get("total_gpu_memory")), "GiB")
            size("non_torch_gib", num(kv.get("non_torch_memory")), "GiB")
            size("kv_cache_gib", num(kv.get("kv_cache_size")), "GiB")
            size("gpu_memory_utilization", num(kv.get("gpu_memory_utilization")), "fraction")
        if "weights took" in msg or "Model loading took" in msg:
            size("weights_gib", _f(_LOAD_WEIGHTS, msg), "GiB")
        if "Free memory on device" in msg:
            m = _FREE_MEM.search(msg)
            if m:
                size("total_gpu_memory_gib", num(m.group(2)), "GiB")
            size("gpu_memory_utilization", _f(_FREE_UTIL, msg), "fraction")
            size("weights_gib", _f(_FREE_WEIGHT, msg), "GiB")
            size("activation_peak_gib", _f(_FREE_ACT, msg), "GiB")
            size("non_torch_gib", _f(_FREE_NON_TORCH, msg), "GiB")
            size("graph_mem_actual_gib", _f(_FREE_GRAPH, msg), "GiB")
        if "Estimated CUDA graph memory" in msg:
            size("graph_mem_est_gib", _f(_EST_GRAPH, msg), "GiB")
        if "CUDA graph pool memory" in msg:
            m = _POOL.search(msg)
            if m:
                size("graph_pool_actual_gib", num(m.group(1)), "GiB")
                size("graph_mem_est_gib", num(m.group(2)), "GiB")
        return emitted

    # -------------------------------------------------------------- modes, eager, advisories
    def _graph_status(self, line: LogLine, ctx: Context) -> bool:
        msg = line.msg
        text = msg.strip()[:400]
        for needle, reason in _DISABLED:
            if needle in msg:
                ctx.emit("graph_disabled", line, engine=ENGINE, reason=reason, text=text)
                return True
        if _ROCM_UNSUPPORTED.search(msg):
            ctx.emit("graph_disabled", line, engine=ENGINE, reason="rocm_unsupported", text=text)
            return True
        m = _SETTING_MODE.search(msg) or _OVERRIDE_MODE.search(msg) or _OVERRIDE_TO.search(msg)
        if m and mode_name(m.group("mode")):
            ctx.emit(
                "graph_mode",
                line,
                engine=ENGINE,
                mode=mode_name(m.group("mode")),
                origin="downgrade",
                downgraded=True,
                text=text,
            )
            return True
        if "--gpu-memory-utilization" in msg and "CUDA graph memory profiling" in msg:
            ctx.emit(
                "advisory",
                line,
                engine=ENGINE,
                topic="graph_memory_profiling",
                value=_f(_GMU_ADVICE, msg),
                text=text,
            )
            return True
        m = _MAMBA_CAP.search(msg)
        if m:
            ctx.emit(
                "advisory",
                line,
                engine=ENGINE,
                topic="capping_capture_sizes",
                value=num(m.group(2)),
                text=text,
            )
            return True
        m = _TRUNCATE.search(msg)
        if m:
            ctx.emit(
                "advisory",
                line,
                engine=ENGINE,
                topic="truncating_capture_size",
                value=num(m.group(1)),
                text=text,
            )
            return True
        m = _OVERRIDDEN.search(msg)
        if m:
            new = parse_int_list(m.group("new")) or []
            ctx.emit(
                "advisory",
                line,
                engine=ENGINE,
                topic="sizes_overridden",
                value=max(new) if new else None,
                text=text,
            )
            return True
        if any(w in msg for w in _GRAPH_MEM_WARN):
            ctx.emit(
                "advisory", line, engine=ENGINE, topic="graph_memory_warning", value=None, text=text
            )
            return True
        return False

    # -------------------------------------------------------------- the rest
    def _other(self, line: LogLine, ctx: Context) -> None:
        msg = line.msg
        m = _INIT_ENGINE.search(msg)
        if m:
            ctx.emit("startup", line, engine=ENGINE, marker="init_engine_done")
            ctx.emit(
                "sizing",
                line,
                engine=ENGINE,
                name="init_engine_s",
                value=num(m.group("t")),
                unit="s",
            )
            if m.group("c"):
                ctx.emit(
                    "sizing",
                    line,
                    engine=ENGINE,
                    name="compilation_s",
                    value=num(m.group("c")),
                    unit="s",
                )
            return
        if "server version" in msg or "version " in msg:
            m = _API_VERSION.search(msg)
            banner = (
                None if m else (_BANNER_VERSION.fullmatch(msg) if line.header == "vllm" else None)
            )
            if m or banner:
                _new_run(ctx, ctx.state.get(_ERA))
                ctx.emit("startup", line, engine=ENGINE, marker="api_server")
                ctx.emit("version", line, engine=ENGINE, version=(m or banner).group("ver"))  # type: ignore[union-attr]
                return
        if "Application startup complete" in msg:
            ctx.emit("startup", line, engine=ENGINE, marker="ready")
            return
        m = _CHUNKED.search(msg)
        if m:
            ctx.emit(
                "config",
                line,
                engine=ENGINE,
                origin="log",
                key="max_num_batched_tokens",
                value=int(m.group(1)),
            )
            return
        m = _SET_MAX_SEQS.search(msg)
        if m:
            ctx.emit(
                "config",
                line,
                engine=ENGINE,
                origin="log",
                key="max_num_seqs",
                value=int(m.group(1)),
            )
            return
        if "is preempted" in msg and "Sequence group" in msg:
            ctx.emit("retract", line, engine=ENGINE, count=1, text=msg.strip()[:300])
            return
        if "backend" in msg:
            m = _ATTN_BACKEND.search(msg)
            if (
                m
                and (
                    "AttentionBackendEnum" in m.group("name")
                    or "attention backend" in msg
                    or _ATTN_NAMES.search(m.group("name"))
                )
                and "MoE" not in msg
            ):
                name = m.group("name").replace("AttentionBackendEnum.", "")
                ctx.emit(
                    "config", line, engine=ENGINE, origin="log", key="attention_backend", value=name
                )
                return
        self._error(line, ctx)

    def _request(self, line: LogLine, ctx: Context) -> bool:
        m = _REQ.search(line.msg)
        if not m:
            return False
        verb = m.group("verb")
        rest = m.group("rest")
        action = _ACTIONS[verb]
        if action in ("received", "response"):
            rid_m = re.match(r"(\S+?)(?: \(streaming (?:delta|complete)\))?:(?:\s|$)", rest)
            ids = [rid_m.group(1)] if rid_m else []
        else:
            body = rest.strip()
            body = body[:-1] if body.endswith(".") else body
            ids = [i.strip(" '\"[]{}") for i in re.split(r",\s*", body) if i.strip(" '\"[]{}")]
        if not ids:
            return False
        prompt_tokens = max_new = None
        if action == "received":
            p = _PROMPT_IDS.search(rest)
            if p and p.group(1) != "None":
                ints = re.findall(r"-?\d+", p.group(1))
                prompt_tokens = len(ints) if p.group(1).endswith("]") else None
            mt = _MAX_TOKENS.search(rest)
            max_new = int(mt.group(1)) if mt else None
        for rid in ids:
            ctx.emit(
                "request",
                line,
                engine=ENGINE,
                request_id=rid,
                action=action,
                prompt_tokens=prompt_tokens,
                max_new_tokens=max_new,
            )
        return True

    def _error(self, line: LogLine, ctx: Context) -> None:
        """vLLM-specific error messages that ErrorParser would not already report."""
        msg = line.msg
        warmup = _WARMUP_OOM.search(msg) is not None
        kv = any(k in msg for k in _KV_ERRORS)
        if not (warmup or kv) or _error_parser_covers(line):
            return
        ctx.emit(
            "error",
            line,
            engine=ENGINE,
            error_class="oom",
            message=msg.strip()[:600],
            capture_related=warmup,
            explicit_capture=False,
        )

    # -------------------------------------------------------------- stats, steps
    def _stats(self, line: LogLine, ctx: Context) -> None:
        msg = line.msg
        running = _RUNNING.search(msg)
        waiting = _WAITING.search(msg)
        if running is None or waiting is None:
            return  # a line cut before its queue fields is not a sample
        engine = _ENGINE_IDX.search(msg)
        ctx.emit(
            "stats",
            line,
            engine=ENGINE,
            prompt_throughput=_f(_PROMPT_TPUT, msg),
            gen_throughput=_f(_GEN_TPUT, msg),
            running=int(running.group(1)),
            waiting=int(waiting.group(1)),
            swapped=to_int(_group(_SWAPPED, msg)),
            kv_usage=_f(_KV_USAGE, msg),
            preemptions=to_int(_group(_PREEMPT, msg)),
            engine_index=int(engine.group(1)) if engine else None,
        )

    def _step(self, line: LogLine, ctx: Context) -> None:
        m = _STEP.search(line.msg)
        if not m:
            return
        mode = m.group("mode")
        desc = m.group("desc")
        tokens = to_int(_group(_DESC_TOKENS, desc))
        reqs = _group(_DESC_REQS, desc)
        uniform = _group(_DESC_UNIFORM, desc)
        ctx.emit(
            "graph_step",
            line,
            engine=ENGINE,
            mode=mode,
            num_tokens=tokens if mode == "NONE" else None,
            padded_tokens=tokens,
            num_reqs=None if reqs in (None, "None") else int(reqs),
            uniform=None if uniform is None else uniform == "True",
            count=1,
            origin="debug_step",
        )


def _group(rx: re.Pattern[str], text: str) -> str | None:
    m = rx.search(text)
    return m.group(1) if m else None


def _error_parser_covers(line: LogLine) -> bool:
    """Would ErrorParser (same scanner) report this line itself? Mirrors its feed()."""
    msg = line.msg
    if "Traceback (most recent call last)" in msg:
        return True
    stripped = msg.lstrip()
    if stripped.startswith('File "') and line.header in (None, "vllm"):
        return True
    if line.header is None and _EXC_LINE.match(msg):
        return True
    if line.level in ("ERROR", "CRITICAL") or line.header not in ("vllm", "sglang", "glog"):
        return bool(_STANDALONE_OOM.search(msg) or (explicit_capture(msg) and "failed" in msg))
    return False


# ---------------------------------------------------------------- config echoes
def parse_config_echo(text: str) -> dict[str, Any]:
    """``model='x', served_model_name=a/b, compilation_config={...}, ...`` -> dict.

    Split at top-level commas first and parse each value on its own: unquoted values such
    as ``served_model_name=Qwen/Qwen3-0.6B`` defeat a whole-line parse, and a line cut off
    inside ``compilation_config`` must still yield the settings before the cut.
    """
    out: dict[str, Any] = {}
    for key, raw in _split_top(text):
        raw = raw.strip()
        if not raw:
            out[key] = None
            continue
        try:
            out[key] = parse_value(raw)
        except ValueError:
            if raw.startswith("{"):
                out[key] = _parse_dict(raw)
            elif raw.startswith("["):
                out[key] = parse_int_list(raw) or []
            else:
                out[key] = raw
    return out


_KEY_START = re.compile(r"\s*([A-Za-z_]\w*)=(?!=)")


def _split_top(text: str) -> list[tuple[str, str]]:
    """Top-level ``key=value`` pieces; commas inside brackets or quotes do not split."""
    pieces: list[str] = []
    depth = 0
    quote: str | None = None
    start = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if quote is not None:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "'\"" and (i == 0 or not text[i - 1].isalnum()):
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
        i += 1
    pieces.append(text[start:])
    out: list[tuple[str, str]] = []
    for piece in pieces:
        m = _KEY_START.match(piece)
        if m:
            out.append((m.group(1), piece[m.end() :]))
        elif out and piece.strip():
            out[-1] = (out[-1][0], out[-1][1] + "," + piece)
    return out


def _parse_dict(text: str) -> dict[str, Any]:
    try:
        value = parse_value(text)
    except ValueError:
        value = None
    if isinstance(value, dict):
        value.pop("__call__", None)
        return value
    return parse_kwargs(text.strip().lstrip("{").rstrip("}"))


def _norm(key: str, value: Any) -> Any:
    leaf = key.rsplit(".", 1)[-1]
    if leaf == "cudagraph_mode":
        return mode_name(value) or value
    if leaf == "cudagraph_capture_sizes" and isinstance(value, list):
        ints = [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
        return sorted(set(ints))
    return value


def _flatten(args: dict[str, Any]) -> list[tuple[str, Any]]:
    """Top-level names as printed; compilation config keys as ``compilation_config.<key>``."""
    out: list[tuple[str, Any]] = []
    for key, value in args.items():
        if key == "__call__":
            continue
        if key == "compilation_config" and isinstance(value, dict):
            for ck, cv in value.items():
                if ck != "__call__":
                    out.append((f"compilation_config.{ck}", _norm(ck, cv)))
        else:
            out.append((key, _norm(key, value)))
    return out


# ---------------------------------------------------------------- R-3 metrics table
@lru_cache(maxsize=1)
def _metrics_parser() -> Lark:
    return Lark(grammar_text("cudagraph_metrics.lark"), parser="lalr", propagate_positions=True)


@dataclass
class MetricsItem:
    """One parsed table line: kind "title" | "setting" | "row" | "rule", 1-based line in the text."""

    kind: str
    line: int
    values: list[Any]


@v_args(meta=True)
class _MetricsTransformer(Transformer):  # type: ignore[type-arg]
    def start(self, meta: Any, items: list[MetricsItem]) -> list[MetricsItem]:
        return items

    def title(self, meta: Any, children: list[Token]) -> MetricsItem:
        return MetricsItem("title", meta.line, [str(children[0]).strip("*: ")])

    def setting(self, meta: Any, children: list[Token]) -> MetricsItem:
        key = str(children[0]).strip()
        value = str(children[1]).strip() if len(children) > 1 else ""
        return MetricsItem("setting", meta.line, [key, value])

    def row(self, meta: Any, children: list[Any]) -> MetricsItem:
        return MetricsItem("row", meta.line, list(children))

    def rule(self, meta: Any, children: list[Token]) -> MetricsItem:
        return MetricsItem("rule", meta.line, [])

    def int_cell(self, meta: Any, children: list[Token]) -> int:
        return int(children[0])

    def word_cell(self, meta: Any, children: list[Token]) -> str:
        return str(children[0]).strip()


def parse_metrics_table(lines: list[str]) -> list[MetricsItem]:
    """Parse table message lines (headers stripped); a line the grammar rejects is skipped."""
    text = "\n".join(part.strip() for part in lines) + "\n"
    try:
        result: list[MetricsItem] = _MetricsTransformer().transform(_metrics_parser().parse(text))
        return result
    except UnexpectedInput:
        pass
    items: list[MetricsItem] = []
    for i, part in enumerate(lines, 1):
        try:
            one: list[MetricsItem] = _MetricsTransformer().transform(
                _metrics_parser().parse(part.strip() + "\n")
            )
        except UnexpectedInput:
            continue
        for item in one:
            item.line = i
            items.append(item)
    return items


_COLUMNS = (
    ("unpadded", "num_tokens"),
    ("padded", "padded_tokens"),
    ("mode", "mode"),
    ("count", "count"),
)


def _column_map(labels: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for idx, label in enumerate(labels):
        low = str(label).lower()
        for needle, field_name in _COLUMNS:
            if needle in low and field_name not in out:
                out[field_name] = idx
                break
    return out


_DEFAULT_COLUMNS = {"num_tokens": 0, "padded_tokens": 1, "mode": 3, "count": 4}


class MetricsTableBlock(Block):
    """R-3: the ``--cudagraph-metrics`` table, one logged line per table line."""

    MAX_LINES = 600
    MAX_FOREIGN = 40

    def __init__(self, first: LogLine) -> None:
        self.lines: list[LogLine] = [first]
        self.key = first.key
        self.foreign = 0
        self.done = False

    def offer(self, line: LogLine) -> bool:
        if len(self.lines) >= self.MAX_LINES:
            self.done = True
            return False
        if line.key != self.key:  # another process interleaved: let it through
            self.foreign += 1
            if self.foreign > self.MAX_FOREIGN:
                self.done = True
            return False
        msg = line.msg.strip()
        if not msg or msg.startswith(("**CUDAGraph", "- ", "|")):
            if msg.startswith("**CUDAGraph Config") and any("|" in seen.msg for seen in self.lines):
                self.done = True  # the next interval's table
                return False
            self.lines.append(line)
            return True
        self.done = True
        return False

    def finish(self, ctx: Context) -> None:
        items = parse_metrics_table([seen.msg for seen in self.lines])
        columns = dict(_DEFAULT_COLUMNS)
        mode_setting: str | None = None
        for item in items:
            src = self.lines[min(item.line, len(self.lines)) - 1]
            if item.kind == "setting":
                key, value = item.values
                if key.lower() == "mode":
                    mode_setting = mode_name(value) or value
                    if mode_setting and _once(ctx, "metrics_mode", mode_setting):
                        ctx.emit(
                            "graph_mode",
                            src,
                            engine=ENGINE,
                            mode=mode_setting,
                            origin="metrics",
                            downgraded=False,
                            text=src.msg.strip()[:300],
                        )
                elif "capture sizes" in key.lower():
                    sizes = sorted(set(parse_int_list(value) or []))
                    if _once(ctx, "metrics_sizes", tuple(sizes)):
                        ctx.emit(
                            "capture_sizes",
                            src,
                            engine=ENGINE,
                            phase="metrics",
                            mode=mode_setting,
                            sizes=sizes,
                            count=len(sizes),
                            largest=max(sizes) if sizes else None,
                        )
            elif item.kind == "row":
                cells = item.values
                if all(isinstance(c, str) for c in cells):
                    columns = {**_DEFAULT_COLUMNS, **_column_map(cells)}
                    continue
                row = {k: cells[i] if i < len(cells) else None for k, i in columns.items()}
                if not all(
                    isinstance(row[k], int) for k in ("num_tokens", "padded_tokens", "count")
                ):
                    continue
                ctx.emit(
                    "graph_step",
                    src,
                    engine=ENGINE,
                    mode=str(row["mode"]) if row["mode"] is not None else None,
                    num_tokens=row["num_tokens"],
                    padded_tokens=row["padded_tokens"],
                    num_reqs=None,
                    uniform=None,
                    count=row["count"],
                    origin="metrics_table",
                )
