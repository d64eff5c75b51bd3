"""SGLang: sniff markers, split points, config keys, default batch sizes and flags.

Default sizes encode ``sglang-log-formats.md`` §7 (server_args / cuda_graph_runner: the
``cuda_graph_bs`` default). SGLang's capture sizes are batch sizes (requests).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from diag.engines.flags import accepts, span
from diag.engines.spec import (
    AdviceRules,
    Config,
    EngineConfig,
    EngineSpec,
    as_int,
    truthy,
)
from diag.engines.version import parse_version

NEWEST = (
    0,
    5,
    23,
)  # the newest release whose defaults were checked (tests/data/engine_defaults.yaml)

# since when the default list ends in max_bs itself (0.5.9's server_args does not append it)
APPENDS_MAX_BS = (0, 5, 10)
# the speculative list's 40..step-4 run reaches 64 from 0.5.4.post2 (0.5.3: 40..60)
SPEC_RUN_TO_64 = (0, 5, 4, 2)

MARKERS = re.compile(
    rb"sglang|Decode batch|Prefill batch|server_args=ServerArgs|Capture cuda graph|"
    rb"Capture CUDA graph|Capturing batches|max_total_num_tokens=|KV Cache is allocated|"
    rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:DP|TP|PP|EP)-?\d+"
)

# 2026-06+ SGLang (#23906) has per-phase flags; its config echo shows the new keys
SPLIT_FLAG_PREFIXES = (
    "cuda_graph_config",
    "cuda_graph_max_bs_decode",
    "cuda_graph_bs_decode",
    "cuda_graph_backend",
)


def split_flags(config: Config) -> bool:
    """Does this SGLang spell its graph flags per phase (``--cuda-graph-bs-decode``)?"""
    return any(k.startswith(SPLIT_FLAG_PREFIXES) for k in config)


def max_bs_flag(config: Config) -> str:
    return "--cuda-graph-max-bs-decode" if split_flags(config) else "--cuda-graph-max-bs"


def default_capture_sizes(
    version: str | None,
    cuda_graph_max_bs: int | None,
    disable_padding: bool = False,
    speculative: bool = False,
) -> list[int]:
    """SGLang's captured batch sizes with no ``--cuda-graph-bs`` (§7)."""
    ver = parse_version(version) or NEWEST
    max_bs = cuda_graph_max_bs
    if ver >= (0, 5, 3):
        max_bs = max_bs or 160
        if disable_padding:
            sizes = list(range(1, max_bs + 1))
        elif speculative:
            sizes = (
                list(range(1, 9))
                + list(range(10, 33, 2))
                + list(range(40, 65 if ver >= SPEC_RUN_TO_64 else 64, 4))
                + list(range(72, 257, 8))
                + list(range(272, max_bs + 1, 16))
            )
        else:
            sizes = (
                [1, 2, 4, 8, 12]
                + list(range(16, 257, 8))
                + list(range(272, 497, 16))
                + list(range(512, max_bs + 1, 32))
            )
        sizes = [x for x in sizes if x <= max_bs]
        if ver >= APPENDS_MAX_BS and max_bs not in sizes:
            sizes.append(max_bs)
        return sizes
    if disable_padding and (0, 4, 5) <= ver <= (0, 4, 6, 5):  # cuda_graph_runner 0.4.6.post5
        base = list(range(1, 33)) + list(range(40, 161, 16))
    elif disable_padding:
        base = list(range(1, 33)) + [48, 64, 80, 96, 112, 128, 144, 160]
    elif ver < (0, 2, 13):
        base = [1, 2, 4] + list(range(8, 129, 8))
    else:
        base = [1, 2, 4] + list(range(8, 161, 8))
    if max_bs:
        base = [x for x in base if x <= max_bs]
        if ver >= (0, 4, 6) and base and base[-1] < max_bs:
            base += list(range(base[-1] + 16, max_bs + 1, 16))
    return base


def _defaults_from_config(version: str | None, config: Config, ceiling: int | None) -> list[int]:
    return default_capture_sizes(
        version,
        ceiling or as_int(config.get("cuda_graph_max_bs")),
        truthy(config.get("disable_cuda_graph_padding")),
        bool(config.get("speculative_algorithm")),
    )


def _bs_flags(config: Config) -> tuple[str, str]:
    """(list flag, ceiling flag) in the spelling this SGLang's config echo uses."""
    if split_flags(config):
        return "--cuda-graph-bs-decode", "--cuda-graph-max-bs-decode"
    return "--cuda-graph-bs", "--cuda-graph-max-bs"


def bucket_flags(
    version: str | None, config: Config, sizes: Sequence[int], notes: list[str]
) -> str:
    """The list flag with the ceiling flag equal to the list's max, so no version extends the
    list past it (§7: since 0.4.6.post3 a list short of the ceiling is extended in steps of
    16); per-phase spelling where the echo shows per-phase keys. Which version takes which
    flag is the flag table's answer (:mod:`diag.engines.flags`), nothing here."""
    ss = sorted(set(int(s) for s in sizes))
    top = ss[-1]
    list_flag, max_flag = _bs_flags(config)
    if not accepts("sglang", max_flag, version):
        notes.append(
            f"SGLang {version} has neither {list_flag} nor {max_flag} (added "
            f"{span('sglang', max_flag).since_text}): upgrade to set buckets"
        )
        return ""
    if not accepts("sglang", list_flag, version):
        notes.append(
            f"SGLang {version} has no {list_flag} (added {span('sglang', list_flag).since_text}): "
            "only the ceiling can be set; upgrade for the exact list"
        )
        return f"{max_flag} {top}"
    return f"{list_flag} {' '.join(map(str, ss))} {max_flag} {top}"


def graphs_off_flag(version: str | None, config: Config) -> str:
    """Graphs off in the run's spelling: the per-phase backend where the echo and the flag
    table both have it, else ``--disable-cuda-graph``."""
    if split_flags(config) and accepts("sglang", "--cuda-graph-backend-decode", version):
        return "--cuda-graph-backend-decode=disabled"
    return "--disable-cuda-graph"


# sglang==0.4.10.post2:python/sglang/srt/server_args.py:120 decode_log_interval: int = 40
DECODE_LOG_INTERVAL = 40


def engine_settings(config: EngineConfig) -> EngineConfig:
    """Speculative draft tokens (only with an algorithm set), DP attention's attention-TP size
    (tp // dp), two-batch overlap, the decode log interval."""
    c = config.raw
    tp = config.tp_size or 1
    dp = config.dp_size or 1
    algo = c.get("speculative_algorithm") or None
    return replace(
        config,
        spec_tokens=(as_int(c.get("speculative_num_draft_tokens")) or 0) if algo else 0,
        speculative_algorithm=str(algo) if algo else None,
        attn_tp=max(1, tp // dp) if config.dp_attention else tp,
        two_batch_overlap=truthy(c.get("enable_two_batch_overlap")),
        steps_per_batch_line=as_int(c.get("decode_log_interval")) or DECODE_LOG_INTERVAL,
        prefill_graphs_off=any(
            (c.get(k) == v if isinstance(v, str) else truthy(c.get(k)))
            for k, v in _USER_PREFILL_OFF
        ),
    )


#: the user's own switches that turn prefill graphs off (sglang==0.5.23:sglang/srt/arg_groups/
#: fields/exec_.py:621 cuda_graph_backend_prefill, :660 disable_prefill_cuda_graph;
#: piecewise-era --disable-piecewise-cuda-graph; --disable-cuda-graph)
_USER_PREFILL_OFF: tuple[tuple[str, str | bool], ...] = (
    ("cuda_graph_backend_prefill", "disabled"),
    ("disable_prefill_cuda_graph", True),
    ("disable_piecewise_cuda_graph", True),
    ("disable_cuda_graph", True),
)


def capture_multiple(version: str | None, tbo: bool, dp_attention: bool, attn_tp: int) -> int:
    """§7: two-batch overlap keeps multiples of 2*attn_tp (2 before 0.4.9.post4), DP attention
    multiples of attn_tp (0.4.9.post4+); 1 elsewhere."""
    ver = parse_version(version)
    modern = ver is None or ver >= (0, 4, 9, 4)
    if tbo:
        return 2 * attn_tp if modern else 2
    if dp_attention and modern and attn_tp > 1:
        return attn_tp
    return 1


def kv_note(version: str | None, saved_gib: float) -> str:
    if saved_gib < 0:
        return (
            "SGLang sizes the KV pool before capture: the extra capture memory comes out of the reserve "
            "outside --mem-fraction-static; check the capture-end avail mem headroom, lower "
            "--mem-fraction-static by it if short (that is where the KV tokens above are lost)"
        )
    return (
        "SGLang sizes the KV pool before capture: saved capture memory becomes KV tokens only if "
        "--mem-fraction-static is raised by it (0.5.3+ default reserves 2 MiB x cuda_graph_max_bs, "
        "so a lower ceiling also raises the default fraction)"
    )


def _spec_note(algorithm: str | None, k: int) -> str:
    return (
        f"speculative decoding ({algorithm}): SGLang captures request counts, each verify graph "
        f"runs {k} draft tokens per request; sizes above are requests"
    )


def more_evidence(version: str | None) -> str:
    """More Decode batch lines: one every --decode-log-interval steps (40 by default)."""
    if accepts("sglang", "--decode-log-interval", version):
        return (
            f"more Decode batch lines (one per {DECODE_LOG_INTERVAL} steps by default: a longer "
            "window, or a smaller --decode-log-interval)"
        )
    return "more Decode batch lines (a longer window)"


ADVICE_RULES = AdviceRules(
    engine="sglang",
    unit="requests",
    step_pattern=lambda version, speculative: default_capture_sizes(
        version, 4096, speculative=speculative
    ),
    mixed_steps_in_graphs=lambda mode: False,  # decode graphs serve decode batches only
    default_window=lambda version, running, tokens: default_capture_sizes(version, None),
    capture_multiple=capture_multiple,
    spec_note=_spec_note,
    dp_attention_note="DP attention: sizes are per DP rank (each rank's Decode batch line)",
    more_evidence=more_evidence,
)


SGLANG = EngineSpec(
    name="sglang",
    markers=MARKERS,
    line_head=rb"\[\d{4}-\d\d-\d\d [^\]\n]*\]",
    periodic_words=(b"Decode batch", b"Prefill batch"),
    parser="diag.parsers.sglang:SGLangParser",
    graphs_off_key="disable_cuda_graph",
    capture_sizes_key="cuda_graph_bs",
    ceiling_keys=("cuda_graph_max_bs",),
    ceiling_from_table=False,
    mode_names="graph_backend",
    default_sizes=_defaults_from_config,
    bucket_flags=bucket_flags,
    graphs_off_flag=graphs_off_flag,
    ceiling_flag=lambda version, config, n: ceiling_flag(version, config, n),
    kv_note=kv_note,
    padding_off_key="disable_cuda_graph_padding",
    eager_flag="--disable-cuda-graph",
    concurrency_flag="--max-running-requests",
    engine_settings=engine_settings,
    advice_rules=ADVICE_RULES,
    # sglang==0.3.6.post3:sglang/srt/managers/scheduler.py:904 "#retracted_reqs"
    eviction_word="retractions",
)


def ceiling_flag(version: str | None, config: Config, n: int | None) -> str:
    """The ceiling flag in this run's spelling, with the value when given; "" where the flag
    table says the version has no such flag."""
    flag = max_bs_flag(config)
    if not accepts("sglang", flag, version):
        return ""
    return flag + (f" {n}" if n is not None else "")
