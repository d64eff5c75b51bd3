"""vLLM's line patterns and per-stream state keys (section ids refer to
``shared/formats/vllm-log-formats.md``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from diag.lines import periodic
from diag.parsers.base import Context, num, to_int

ENGINE = "vllm"
N = r"(-?\d[\d,]*(?:\.\d+)?)"  # a printed number, thousands separators allowed

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
            return _MODE_BY_VALUE.get((to_int(m.group(1)), to_int(m.group(2))))
    return None


# ---------------------------------------------------------------- §2 startup / config
ENGINE_CONFIG = re.compile(
    r"Initializing an? (?:(?P<eng>V[01]) )?LLM engine \(v(?P<ver>[^)\s]+)\)(?: with config: (?P<cfg>.*))?"
)
API_VERSION = re.compile(r"vLLM (?:API )?server version:? v?(?P<ver>\d+\.\d+[\w.+-]*)")
BANNER_VERSION = re.compile(r"[^\w]*version\s+v?(?P<ver>\d+\.\d+[\w.+-]*)\s*")
NON_DEFAULT = re.compile(r"non-default args: (?P<args>\{.*)")
ARGS = re.compile(r"(?:^|\s)args: (?P<args>Namespace\(.*)")
# the config origins of the args the user typed, echoed before the engine changes anything:
# "non-default args: {...}" (vllm/entrypoints/openai/cli_args.py 0.9.0, later
# vllm/entrypoints/utils.py) and "args: Namespace(...)" (vllm/entrypoints/openai/api_server.py
# 0.4.0-0.8.5); formats/vllm-log-formats.md 2.3
TYPED_ARG_ORIGINS = ("non_default_args", "args")
INIT_ENGINE = re.compile(
    r"init engine\b.*?took (?P<t>\d+(?:\.\d+)?) ?(?:seconds|secs|s)\b"
    r"(?: \(compilation: (?P<c>\d+(?:\.\d+)?) ?s)?"
)
CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
SET_MAX_SEQS = re.compile(r"Setting max_num_seqs to (\d+) for")
ATTN_BACKEND = re.compile(
    r"Using (?P<name>AttentionBackendEnum\.\w+|[\w-]+(?: [\w-]+)??) (?:attention )?backend\b"
)
ATTN_NAMES = re.compile(r"attn|attention|flash|infer|xformers|mla|sdpa|rocm|aiter|tree", re.I)

# ---------------------------------------------------------------- §2.4 downgrades / disabled
# the attention backend refusing a mode (vllm==0.20.0:vllm/config/compilation.py:1323-1388,
# earlier vllm/v1/worker/gpu_model_runner.py _check_and_update_cudagraph_mode, 0.10.2+):
# "CUDAGraphMode.%s is not supported with %s backend (support: %s)" and the spec-decode
# variant "... is not supported with spec-decode for attention backend %s (support: %s)"
BACKEND_REFUSED = re.compile(
    r"CUDAGraphMode\.(?P<asked>[A-Z_]+) is not supported with "
    r"(?:spec-decode for attention backend (?P<spec>\S+)|(?P<backend>\S+) backend) "
    r"\(support: (?:AttentionCGSupport\.)?(?P<support>[A-Z_]+)\)"
)
SETTING_MODE = re.compile(r"setting cudagraph_mode=(?P<mode>[A-Z_]+)")
OVERRIDE_MODE = re.compile(r"Overriding cudagraph_mode (?:from \S+ )?to (?P<mode>[A-Z_]+)")
OVERRIDE_TO = re.compile(
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
ROCM_UNSUPPORTED = re.compile(r"CUDA graph is not supported for .* on ROCm yet")

# ---------------------------------------------------------------- §3/§4 capture
V0_BEGIN = ("Capturing the model for CUDA graphs", "Capturing cudagraphs for decoding")
V1_BEGIN = re.compile(r"Rank \d+: Torch profiler (?:disabled|enabled) for CUDA graph capture")
CAPTURE_END = re.compile(
    r"Graph capturing finished in (?P<s>-?\d+(?:\.\d+)?) secs(?:, took (?P<gib>-?\d+(?:\.\d+)?) GiB)?"
)
TQDM = re.compile(
    r"(?P<desc>Capturing CUDA graph shapes|Capturing CUDA graphs(?: \((?P<a>[^,()]+?)(?:, ?(?P<b>[A-Za-z_]+))?\))?)"
    r"\s*:\s*\d+%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)"
)
SHAPE_DEBUG = re.compile(r"Capturing a cudagraph for shape (\d+)")
ON_DEBUG = re.compile(
    r"Capturing a cudagraph on \(\s*(?:CUDAGraphMode\.)?(?P<mode>[A-Z_]+)\s*,\s*(?P<desc>BatchDescriptor\(.*)"
)
CG_DEBUG = re.compile(
    r"CG Capture: mode=(?:CUDAGraphMode\.)?(?P<mode>[A-Z_]+), batch_desc=(?P<desc>.*)"
)
DESC_TOKENS = re.compile(r"num_tokens=(\d+)", re.ASCII)
DESC_REQS = re.compile(r"num_reqs=(\d+|None)", re.ASCII)
DESC_UNIFORM = re.compile(r"uniform(?:_decode)?=(True|False)", re.ASCII)

# ---------------------------------------------------------------- §5 runtime
STEP = re.compile(
    r"Running batch with cudagraph_mode: (?:CUDAGraphMode\.)?(?P<mode>[A-Z_]+), batch_descriptor: (?P<desc>.*)",
    re.ASCII,
)

# the declared shapes (diag/lines/periodic.py), matched at the message start
FAST_STEP = re.compile(periodic.VL_STEP.regex("python"), re.ASCII)
FAST_STATS = re.compile(periodic.VL_STATS.regex("python"), re.ASCII)
FAST_ITERATION = re.compile(periodic.VL_ITERATION.regex("python"), re.ASCII)
FAST_ADDED = re.compile(periodic.VL_ADDED.regex("python"), re.ASCII)
FAST_RECEIVED = re.compile(periodic.VL_RECEIVED.regex("python"), re.ASCII)

# ---------------------------------------------------------------- §7 stats
# (a stats line of another shape is read by VL_STATS's labels: LineSpec.search_labelled)
PREEMPT = re.compile(r"Preemptions: (\d+)", re.ASCII)

# ---------------------------------------------------------------- §8 requests
REQ = re.compile(
    r"(?:^|\s)(?P<verb>Received request|Added request|Finished request|Aborted request(?:\(s\))?|"
    r"Generated response) (?P<rest>.*)",
    re.ASCII,
)
PROMPT_IDS = re.compile(r"prompt_token_ids: (\[[^\]]*\]?|None)", re.ASCII)
MAX_TOKENS = re.compile(r"SamplingParams\(.*?\bmax_tokens=(\d+)", re.ASCII)
PROMPT_INTS = re.compile(r"-?\d+", re.ASCII)
ACTIONS = {
    "Received request": "received",
    "Added request": "added",
    "Finished request": "finished",
    "Aborted request": "aborted",
    "Aborted request(s)": "aborted",
    "Generated response": "response",
}

# ---------------------------------------------------------------- §9 KV sizing
BLOCKS = re.compile(r"# (?!CPU\b)(?P<dev>\w+) blocks: (?P<g>\d+)(?:, # CPU blocks: (?P<c>\d+))?")
CACHE_INFO_BLOCKS = re.compile(
    r"cache_config_info with initialization after num_gpu_blocks is: (\d+)"
)
OVERRIDE_BLOCKS = re.compile(
    r"Overriding num_gpu_blocks=(-?\d+) with num_gpu_blocks_override=(\d+)"
)
KV_TOKENS = re.compile(r"(?:^|[\s,:])(?:[A-Z]+(?: \+ host)? )?KV cache size: ([\d,]+) tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: " + N + r" ?x")
AVAIL_KV = re.compile(r"Available KV cache memory: " + N + r" ?GiB")
V0_KV_REST = re.compile(r"the rest of the memory reserved for KV Cache is " + N + r" ?GiB")
KV_FIXED = re.compile(r"reserved " + N + r" ?GiB memory for KV Cache")
V0_TOTAL = re.compile(
    r"total_gpu_memory \(" + N + r" ?GiB\) x gpu_memory_utilization \(" + N + r"\)"
)
V0_WEIGHTS = re.compile(r"model weights take " + N + r" ?GiB")
V0_NON_TORCH = re.compile(r"non_torch_memory takes " + N + r" ?GiB")
V0_ACTIVATION = re.compile(r"activation peak memory takes " + N + r" ?GiB")
PROFILE_064 = re.compile(r"Memory profiling results: (?P<kv>.*)")
LOAD_WEIGHTS = re.compile(r"(?:Loading model weights took|Model loading took) " + N + r" ?Gi?B")
FREE_MEM = re.compile(r"Free memory on device \(" + N + r"/" + N + r" GiB\)")
FREE_UTIL = re.compile(r"Desired GPU memory utilization is \(" + N)
FREE_WEIGHT = re.compile(N + r" GiB for weight\b")
FREE_ACT = re.compile(N + r" GiB for peak activation")
FREE_NON_TORCH = re.compile(N + r" GiB for non-torch memory")
FREE_GRAPH = re.compile(N + r" GiB for CUDAGraph memory")
EST_GRAPH = re.compile(r"Estimated CUDA graph memory: " + N + r" ?GiB total")
POOL = re.compile(
    r"CUDA graph pool memory: " + N + r" ?GiB \(actual\), " + N + r" ?GiB \(estimated\)"
)
PROFILING = re.compile(r"Profiling CUDA graph memory: (?P<spec>.*)")
PROFILING_ITEM = re.compile(r"(?P<mode>[A-Z_]+)=(?P<n>\d+) \(largest=(?P<largest>\d+)\)")

# ---------------------------------------------------------------- advisories
GMU_ADVICE = re.compile(
    r"increas(?:e|ing) --gpu-memory-utilization (?:from \d+(?:\.\d+)? )?to (\d+(?:\.\d+)?)"
)
MAMBA_CAP = re.compile(r"Capping cudagraph capture sizes from max (\d+) to (\d+)")
TRUNCATE = re.compile(r"Truncating max_cudagraph_capture_size to (\d+)")
OVERRIDDEN = re.compile(
    r"cudagraph_capture_sizes specified in compilation_config (?P<old>.*?) is overridden by config (?P<new>.*)"
)
GRAPH_MEM_WARN = (
    "CUDA graphs can take additional",
    "If out-of-memory error occurs during cudagraph capture",
)

# ---------------------------------------------------------------- vLLM-only error lines
KV_ERRORS = (
    "No available memory for the cache blocks",
    "To serve at least one request with the model",
    "is larger than the maximum number of tokens that can be stored in KV cache",
)
WARMUP_OOM = re.compile(r"CUDA out of memory occurred when warming up (?:sampler|pooler)")
# what diag.parsers.traceback.ErrorParser reports itself, to avoid emitting twice
STANDALONE_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|HIP out of memory"
)

# ---------------------------------------------------------------- metrics table
METRICS_START = (
    "**CUDAGraph Config Settings",
    "**CUDAGraph Stats",
    "| Unpadded Tokens",
    "- Mode:",
    "- Capture sizes:",
)
METRICS_ROW = re.compile(r"^\|\s*\d+\s*\|")

# ---------------------------------------------------------------- per-stream state
Era = Literal["v0", "v1"]


@dataclass
class VllmRun:
    """Facts of the current run: its configured cudagraph mode, what was reported once."""

    seen: set[Any] = field(default_factory=set)
    mode: str | None = None


@dataclass
class VllmState:
    """What a single vLLM line cannot tell: the engine era, captures open per process."""

    era: Era | None = None
    open_capture: dict[str, str] = field(default_factory=dict)  # process key -> phase
    run: VllmRun = field(default_factory=VllmRun)


def vllm_state(ctx: Context) -> VllmState:
    return ctx.state_of(VllmState)


def number_in(rx: re.Pattern[str], text: str, group: int = 1) -> float | None:
    m = rx.search(text)
    return num(m.group(group)) if m else None


def run_state(ctx: Context) -> VllmRun:
    """Facts of the current run (configured mode, what was already reported once)."""
    return vllm_state(ctx).run


def new_run(ctx: Context, era: Era | None) -> None:
    """A start-up line: forget what the previous run had open or already reported."""
    st = vllm_state(ctx)
    st.open_capture = {}
    st.run = VllmRun()
    st.era = era


def first_time(ctx: Context, *key: Any) -> bool:
    """True the first time ``key`` is seen in this run (tqdm redraws, repeated tables)."""
    seen = run_state(ctx).seen
    if key in seen:
        return False
    seen.add(key)
    return True
