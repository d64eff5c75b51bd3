"""The one typed reading of a run's engine configuration (:class:`EngineConfig`).

Facts hand the engine spec the run's raw key/values (:class:`ConfigEcho`: the effective
echo, and the args the user typed); the spec reads them once, in the engine's own key
names, into typed fields. Rules, advice, facts and renderers read those fields; no module
outside ``diag.engines`` and ``diag.parsers`` indexes a raw config key
(``tests/test_engine_config.py`` holds every module to it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Config = Mapping[str, Any]
CaptureUnit = Literal["tokens", "requests"]


@dataclass(frozen=True)
class AdviceRules:
    """How the engine counts and keeps capture sizes, for bucket advice (diag.advise reads
    these instead of asking which engine it is)."""

    engine: str  # whose rules (they pickle as this name: their callables are lambdas)
    unit: CaptureUnit  # what a capture size counts per step
    # the engine's own step pattern, long enough to pick conventional sizes from:
    # (version, speculative decoding on) -> sizes
    step_pattern: Callable[[str | None, bool], list[int]]
    # do the graphs of this mode also serve mixed prefill+decode steps? (graph mode) -> bool
    mixed_steps_in_graphs: Callable[[str | None], bool]
    # the default window: (version, max running requests, token budget) -> sizes
    default_window: Callable[[str | None, int | None, int | None], list[int]]
    # the multiple the engine keeps sizes at: (version, two-batch overlap, DP attention, attn TP)
    capture_multiple: Callable[[str | None, bool, bool, int], int]
    # what speculative decoding means for the sizes: (algorithm, tokens per step) -> note
    spec_note: Callable[[str | None, int], str]
    # said when DP attention is on (sizes per DP rank), None where it does not apply
    dp_attention_note: str | None = None
    # how to log more decode steps on this version, for advice that lacks evidence:
    # (version) -> "DEBUG step lines (...)" in the engine's own flags
    more_evidence: Callable[[str | None], str] = lambda version: "a longer window of serving"

    def __post_init__(self) -> None:
        _ADVICE_RULES[self.engine] = self

    def __reduce__(self) -> tuple[Callable[[str], AdviceRules], tuple[str]]:
        """Pickled by name: the rules are an engine's module data, so a run's facts, which
        carry them, can be packed whole (loading this module loads the engines')."""
        return (advice_rules_of, (self.engine,))


_ADVICE_RULES: dict[str, AdviceRules] = {}


def advice_rules_of(engine: str) -> AdviceRules:
    """The rules an engine module declared (diag.engines imports every engine module)."""
    return _ADVICE_RULES[engine]


@dataclass(frozen=True)
class ConfigEcho:
    """A run's raw settings as the log shows them (made by facts from the config table)."""

    values: Config = field(default_factory=dict)  # effective: later echoes override earlier
    # the args the user typed (vLLM "non-default args" / args echo), else the pasted command
    # line: what the user asked for, whatever the engine changed next
    typed: Config = field(default_factory=dict)
    # per key, the user's own args (typed args, SGLang's server_args=) else the command line
    user: Config = field(default_factory=dict)


@dataclass(frozen=True)
class EngineConfig:
    """What a run's config says, typed; ``None`` where the log does not say. An engine's
    defaults (no config seen) are the field defaults with ``engine`` and ``rules`` set."""

    engine: str = "unknown"
    version: str | None = None
    # the raw key/values, handed back to the spec's own flag and default-size functions
    raw: Config = field(default_factory=dict, repr=False, compare=False)
    advice_rules: AdviceRules | None = field(default=None, repr=False, compare=False)
    # graphs
    graphs_off: bool | None = None  # the engine's graphs-off switch: True off, False on
    capture_sizes: tuple[int, ...] | None = None  # the explicit capture list
    ceiling: int | None = None  # the capture ceiling a config key names
    ceiling_named: bool = False  # a ceiling key is set (even to a value that is no number)
    cudagraph_mode: str | None = None  # vLLM compilation_config.cudagraph_mode as echoed
    # serving limits and what bucket advice reads
    max_running: int | None = None  # SGLang max_running_requests / vLLM max_num_seqs (per rank)
    max_num_batched_tokens: int | None = None  # vLLM token budget per step
    spec_tokens: int = 0  # vLLM num_speculative_tokens; SGLang speculative_num_draft_tokens
    speculative_algorithm: str | None = None
    dp_attention: bool = False  # SGLang --enable-dp-attention
    attn_tp: int = 1  # SGLang tp_size // dp_size under DP attention, else tp_size
    two_batch_overlap: bool = False  # SGLang
    padding: bool = True  # the engine's padding-off switch (SGLang --disable-cuda-graph-padding)
    prefill_graphs_off: bool = False  # SGLang: the user turned prefill graphs off
    # vLLM: the multimodal encoder's graph budgets (compilation_config.
    # encoder_cudagraph_token_budgets, with cudagraph_mm_encoder), tokens
    encoder_budgets: tuple[int, ...] = ()
    # graphs captured twice per size, with and without LoRA (vLLM cudagraph_specialize_lora
    # with enable_lora: vllm==0.34.0:vllm/config/compilation.py:815-822)
    lora_specialized: bool = False
    # steps one periodic batch line stands for (SGLang --decode-log-interval), and the seconds
    # one stats line covers (vLLM VLLM_LOG_STATS_INTERVAL); None where the engine has none
    steps_per_batch_line: int | None = None
    stats_interval_s: float | None = None
    # the rest of the settings rules, facts and the fleet summary read
    model: str | None = None  # SGLang model_path / vLLM model
    tp_size: int | None = None
    pp_size: int | None = None
    dp_size: int | None = None
    torch_compile: bool = False
    torch_compile_max_bs: int | None = None
    mem_fraction_static: float | None = None
    custom_all_reduce_off: bool = False  # disable_custom_all_reduce=True in the echo
    kv_cache_memory_bytes_set: bool = False
    profile_cuda_graph: bool = False  # --enable-profile-cuda-graph
    block_size: int | None = None  # tokens per KV block, where echoed
    disaggregation_mode: str | None = None  # SGLang: prefill / decode / null
    kv_role: str | None = None  # vLLM kv_transfer_config.kv_role
    attention_backend: str | None = None  # the backend the echo names (resolved first)
    # the user's own eager setting in the args the user typed, spelled as the user set it
    typed_eager: str | None = None
    # does the user's own cudagraph_mode say NONE? None: the user's args do not set it
    user_mode_none: bool | None = None

    @property
    def echoed(self) -> bool:
        """Did the log show any of the run's settings (a config echo, args, a command line)?"""
        return bool(self.raw)

    @property
    def mode_none_echoed(self) -> bool:
        """The echoed cudagraph_mode ends in NONE (the user's, or the engine's override)."""
        return str(self.cudagraph_mode or "").upper().endswith("NONE")

    @property
    def rules(self) -> AdviceRules:
        """How this engine counts and keeps sizes (its spec's advice rules)."""
        if self.advice_rules is None:
            raise ValueError(f"no advice rules for engine {self.engine!r}")
        return self.advice_rules

    @property
    def unit(self) -> str:
        return self.rules.unit

    def multiple(self) -> int:
        """The multiple the engine keeps sizes at (SGLang §7: TBO, DP attention), else 1."""
        return self.rules.capture_multiple(
            self.version, self.two_batch_overlap, self.dp_attention, self.attn_tp
        )

    def mixed_served(self) -> bool:
        """Do the graphs also serve mixed prefill+decode steps (vLLM piecewise modes)?"""
        return self.rules.mixed_steps_in_graphs(self.cudagraph_mode)

    def cap(self) -> int | None:
        """The largest size the engine can use."""
        if self.unit == "requests":
            return self.max_running
        if self.mixed_served():
            return self.max_num_batched_tokens
        if self.max_running:
            decode = self.max_running * (1 + self.spec_tokens)
            return min(decode, self.max_num_batched_tokens or decode)
        return self.max_num_batched_tokens


def as_bool(v: Any) -> bool | None:
    """A config echo's boolean (True/False or 'true'/'false' text); None if not one."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return None


#: the largest count a config key is read as (sizes, token budgets, parallelism, intervals):
#: 4 Mi is past every step an engine runs; a larger value is a garbled echo, read as unset
#: (the default windows are ranges up to it, which a 12-digit value would make billions long)
CONFIG_INT_LIMIT = 1 << 22


#: the largest count read from a log's figures (block counts, totals): float64-exact
COUNT_LIMIT = 1 << 53


def as_int(v: Any, limit: int = CONFIG_INT_LIMIT) -> int | None:
    """A config count, ``None`` where it is no int or past ``limit``."""
    try:
        n = None if v is None or isinstance(v, bool) else int(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return n if n is not None and abs(n) <= limit else None


def as_count(v: Any) -> int | None:
    """A count from a log's figures (not a config key), ``None`` past :data:`COUNT_LIMIT`."""
    return as_int(v, COUNT_LIMIT)


def as_sizes(v: Any) -> tuple[int, ...] | None:
    """An explicit capture list: its int entries within ``1..CONFIG_INT_LIMIT``, sorted."""
    if not isinstance(v, list):
        return None
    got = {n for n in map(as_int, v) if n is not None and n >= 1}
    return tuple(sorted(got)) or None


def as_float(v: Any) -> float | None:
    """A finite config number, else ``None``."""
    try:
        f = None if v is None or isinstance(v, bool) else float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if f is not None and math.isfinite(f) else None


def truthy(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.lower() == "true")


def first(*values: Any) -> Any:
    for v in values:
        if v is not None:
            return v
    return None
