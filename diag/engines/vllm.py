"""vLLM: sniff markers, split points, config keys, default capture sizes and flags.

Default sizes encode ``vllm-log-formats.md`` §11 (vllm/config: the compilation config's
``cudagraph_capture_sizes`` default); vLLM's capture sizes are token counts. An unknown
version gets the newest era's rule; callers label every default as an inference.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from diag.engines.config import truthy
from diag.engines.flags import accepts, span
from diag.engines.spec import (
    AdviceRules,
    Config,
    EngineConfig,
    EngineSpec,
    as_int,
)
from diag.engines.version import parse_version

NEWEST = (0, 11, 1)
# the default engine is V0 before 0.8.0 (VLLM_USE_V1 defaults to 0:
# vllm==0.7.3:vllm/envs.py:503-504) and V1 from 0.8.0: V0 captures per batch of sequences,
# V1 per step of tokens (which also serve mixed prefill+decode steps)
V1_DEFAULT_SINCE = (0, 8, 0)


def capture_unit(version: str | None) -> str:
    """What this version's capture sizes (and the batch sizes set against them) count."""
    return "sequences" if (parse_version(version) or NEWEST) < V1_DEFAULT_SINCE else "tokens"


# VllmWorker-N: the name the multiprocessing executor gives each worker process, quoted by
# its "Worker proc %s died unexpectedly" (vllm==0.34.0:vllm/v1/executor/multiproc_executor.py:
# 882, 405)
MARKERS = re.compile(
    rb"vllm|vLLM|model_runner\.py|gpu_model_runner|Avg prompt throughput|# GPU blocks|"
    rb"# cuda blocks|KV cache size: [\d,]+ tokens|Graph capturing finished|"
    rb"Capturing CUDA graph|Maximum concurrency for|\(EngineCore|\(VllmWorker|VllmWorker-\d|"
    # vLLM's own stamp after a level; one alternative per level, not ``(?:INFO|...) \d\d``:
    # the same matches, but re's scan can skip ahead by each alternative's first byte
    # (~4x faster on a 30 KB head, where this is most of sniffing a log's engine)
    + b"|".join(
        level + rb" \d\d-\d\d \d\d:\d\d:\d\d" for level in (b"INFO", b"WARNING", b"ERROR", b"DEBUG")
    )
)


def _s(m: int) -> list[int]:
    return [x for x in [1, 2, 4] if x <= m] + list(range(8, m + 1, 8))


def _t(m: int) -> list[int]:
    small = [x for x in [1, 2, 4] if x <= m] + [x for x in range(8, 256, 8) if x <= m]
    return small + list(range(256, m + 1, 16))


def default_capture_sizes(
    version: str | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None = None,
    v0: bool = False,
) -> list[int]:
    """vLLM's capture sizes with no override (§11).

    Before 0.8.0 the default engine is V0 (``VLLM_USE_V1`` defaults to 0:
    vllm==0.7.3:vllm/envs.py:503-504), whose list stops at max_num_seqs padded
    (vllm==0.7.3:vllm/config.py:3369-3394); from 0.8.0 V1's token list."""
    ver = parse_version(version) or NEWEST
    if v0 or ver < V1_DEFAULT_SINCE:
        seqs = max_num_seqs or 256
        pad = seqs if seqs <= 2 else 4 if seqs <= 4 else -(-seqs // 8) * 8
        cap = min(pad, 256 if ver < (0, 6, 0) else 8192)
        return [x for x in _s(8192) if x <= cap]
    if ver < (0, 10, 0):
        sizes = _s(512)
    elif ver < (0, 11, 1):
        seqs = max_num_seqs or 256
        sizes = sorted(set(_s(min(2 * seqs, 512))) | {1, 2, 4})
    else:
        seqs = max_num_seqs or 256
        cap = min(2 * seqs, 512, max_num_batched_tokens or 512)
        sizes = _t(cap)
        # the token budget itself is captured when within the ceiling: in vllm==0.20.2 and
        # later (vllm==0.20.2:vllm/config/vllm.py:1527-1532), not in vllm==0.15.1
        if ver >= (0, 20, 0) and max_num_batched_tokens and max_num_batched_tokens <= cap:
            sizes = sorted({*sizes, max_num_batched_tokens})
    if max_num_batched_tokens:
        sizes = [x for x in sizes if x <= max_num_batched_tokens] or sizes[:1]
    return sizes


def _defaults_from_config(version: str | None, config: Config, ceiling: int | None) -> list[int]:
    sizes = default_capture_sizes(
        version, as_int(config.get("max_num_seqs")), as_int(config.get("max_num_batched_tokens"))
    )
    if ceiling:
        sizes = [s for s in sizes if s <= ceiling] or sizes
    return sizes


def bucket_flags(
    version: str | None, config: Config, sizes: Sequence[int], notes: list[str]
) -> str:
    """``--compilation-config`` JSON (the long form of ``-O`` before 0.12 and of ``-cc`` after)
    with ``cudagraph_capture_sizes`` and, where the version takes it,
    ``max_cudagraph_capture_size`` equal to the list's max (before that the ceiling
    ``max_capture_size`` is computed from the list and is not a user field). Which version
    takes which key is the flag table's answer (:mod:`diag.engines.flags`)."""
    ss = sorted(set(int(s) for s in sizes))
    if not (
        accepts("vllm", "--compilation-config", version)
        and accepts("vllm", "cudagraph_capture_sizes", version)
    ):
        notes.append(
            f"vLLM {version} has no cudagraph_capture_sizes (V0 list is fixed, §11): upgrade to "
            f">= {span('vllm', 'cudagraph_capture_sizes').since_text} to set buckets"
        )
        return ""
    cc: dict[str, Any] = {"cudagraph_capture_sizes": ss}
    if accepts("vllm", "max_cudagraph_capture_size", version):
        cc["max_cudagraph_capture_size"] = ss[-1]
    return f"--compilation-config '{json.dumps(cc, separators=(', ', ': '))}'"


def graphs_off_flag(version: str | None, config: Config) -> str:
    """``cudagraph_mode`` NONE where the version has the key (--enforce-eager would also drop
    torch.compile, -O0 from 0.12), else ``--enforce-eager``."""
    if accepts("vllm", "cudagraph_mode", version):
        return '--compilation-config \'{"cudagraph_mode": "NONE"}\''
    return "--enforce-eager"


# vllm==0.11.0:vllm/envs.py:591 VLLM_LOG_STATS_INTERVAL defaults to 10 s between stats lines
STATS_INTERVAL_S = 10.0


def engine_settings(config: EngineConfig) -> EngineConfig:
    """Token budget, speculative tokens (the echo's ``speculative_config``: ``num_spec_tokens``
    from 0.10, ``num_speculative_tokens`` in the CLI spelling) and the stats interval."""
    c = dict(config.raw)
    nested = c.get("speculative_config")
    if isinstance(nested, dict):  # the echo's SpeculativeConfig(...) repr, read as a mapping
        for key, value in nested.items():
            c.setdefault(f"speculative_config.{key}", value)
    k = 0
    method = None
    for key in (
        "speculative_config.num_speculative_tokens",
        "speculative_config.num_spec_tokens",
        "num_speculative_tokens",
    ):
        k = k or (as_int(c.get(key)) or 0)
    for key in ("speculative_config.method", "speculative_config.model"):
        method = method or (c.get(key) or None)
    budgets = c.get("compilation_config.encoder_cudagraph_token_budgets") or c.get(
        "encoder_cudagraph_token_budgets"
    )
    mm_on = truthy(c.get("compilation_config.cudagraph_mm_encoder")) or truthy(
        c.get("cudagraph_mm_encoder")
    )
    lora = truthy(c.get("enable_lora")) or c.get("lora_config") not in (None, "None")
    specialize = c.get("compilation_config.cudagraph_specialize_lora")
    return replace(
        config,
        encoder_budgets=tuple(sorted(int(b) for b in budgets if as_int(b) is not None))
        if mm_on and isinstance(budgets, list)
        else (),
        lora_specialized=lora and (specialize is None or truthy(specialize)),
        max_num_batched_tokens=as_int(c.get("max_num_batched_tokens")),
        spec_tokens=k,
        speculative_algorithm=str(method) if method and k else None,
        stats_interval_s=STATS_INTERVAL_S,
    )


def kv_note(version: str | None, saved_gib: float) -> str:
    if (parse_version(version) or NEWEST) >= (0, 20, 0):
        return "vLLM >= 0.20 subtracts the graph estimate from the KV budget: the KV pool changes by the amount above"
    if saved_gib < 0:
        return (
            "this vLLM allocates KV before capture: the extra capture memory comes out of the "
            "(1 - gpu_memory_utilization) headroom (OOM risk), lower --gpu-memory-utilization if short"
        )
    return (
        "this vLLM allocates KV before capture: saved capture memory is headroom; raise "
        "--gpu-memory-utilization by it to turn it into KV tokens"
    )


def _spec_note(algorithm: str | None, k: int) -> str:
    return (
        f"speculative decoding ({algorithm or 'on'}, k={k}): a decode step of n requests is "
        f"n x {1 + k} tokens; sizes above are tokens"
    )


def more_evidence(version: str | None) -> str:
    """Per-step lines: DEBUG step lines, and the metrics table where the version has it."""
    debug = "DEBUG step lines (VLLM_LOGGING_LEVEL=DEBUG)"
    if accepts("vllm", "--cudagraph-metrics", version):
        return f"{debug} or the --cudagraph-metrics table"
    return debug


ADVICE_RULES = AdviceRules(
    engine="vllm",
    unit="tokens",
    step_pattern=lambda version, speculative: default_capture_sizes(version, 4096, 8192),
    # FULL_DECODE_ONLY captures uniform decode only; every other mode's piecewise graphs
    # also serve mixed prefill+decode steps, sized by their scheduled tokens
    mixed_steps_in_graphs=lambda mode: (mode or "").upper() != "FULL_DECODE_ONLY",
    default_window=lambda version, seqs, tokens: default_capture_sizes(version, seqs, tokens),
    capture_multiple=lambda version, tbo, dp_attention, attn_tp: 1,
    spec_note=_spec_note,
    more_evidence=more_evidence,
)


VLLM = EngineSpec(
    name="vllm",
    markers=MARKERS,
    line_head=rb"(?:\([^)\n]*pid=\d+\) )?(?:INFO|DEBUG) \d\d-\d\d [^\n]*?\]",
    periodic_words=(b"Avg prompt throughput", b"Running batch with"),
    parser="diag.parsers.vllm:VLLMParser",
    graphs_off_key="enforce_eager",
    capture_sizes_key="compilation_config.cudagraph_capture_sizes",
    ceiling_keys=(
        "compilation_config.max_cudagraph_capture_size",
        "compilation_config.max_capture_size",
    ),
    ceiling_from_table=True,
    mode_names="cudagraph_mode",
    default_sizes=_defaults_from_config,
    bucket_flags=bucket_flags,
    graphs_off_flag=graphs_off_flag,
    ceiling_flag=lambda version, config, n: ceiling_flag(version, n),
    kv_note=kv_note,
    # V0 prints "# GPU blocks: N" only; EngineArgs.block_size defaults to 16 on CUDA
    # (vllm==0.6.3.post1:vllm/engine/arg_utils.py block_size: int = 16)
    default_block_size=16,
    size_unit="tokens",
    eager_flag="--enforce-eager",
    concurrency_flag="--max-num-seqs",
    engine_settings=engine_settings,
    advice_rules=ADVICE_RULES,
)


def ceiling_flag(version: str | None, n: int | None) -> str:
    """How this version sets the capture ceiling (tokens), with the value when given, in the
    flag table's order of preference: ``max_cudagraph_capture_size``, else
    ``--cuda-graph-sizes N`` (before 0.11.1 ``max_capture_size`` is computed, not an input),
    else only an explicit ``cudagraph_capture_sizes`` list; older V0 lists follow
    ``--max-num-seqs``."""
    if accepts("vllm", "max_cudagraph_capture_size", version):
        if n is None:
            return "max_cudagraph_capture_size in --compilation-config"
        return f"--compilation-config '{{\"max_cudagraph_capture_size\": {n}}}'"
    if accepts("vllm", "--cuda-graph-sizes", version):
        return "--cuda-graph-sizes" + (f" {n}" if n is not None else "")
    if accepts("vllm", "cudagraph_capture_sizes", version):
        return "a cudagraph_capture_sizes list in --compilation-config" + (
            f" reaching {n}" if n is not None else ""
        )
    return "--max-num-seqs" + (f" {n}" if n is not None else "")
