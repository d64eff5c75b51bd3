"""The typed shape of an engine spec, and the per-version table it is built from."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from diag.engines.config import (  # re-exported: specs and advice read them from here
    AdviceRules as AdviceRules,
)
from diag.engines.config import (
    CaptureUnit as CaptureUnit,
)
from diag.engines.config import (
    Config as Config,
)
from diag.engines.config import (
    ConfigEcho,
    as_bool,
    as_float,
    as_sizes,
    first,
)
from diag.engines.config import (
    EngineConfig as EngineConfig,
)
from diag.engines.config import (
    as_int as as_int,
)
from diag.engines.config import (
    truthy as truthy,
)
from diag.engines.phases import PhaseTable, phase_table

Backend = Literal["vllm", "sglang", "unknown"]


def _no_settings(config: EngineConfig) -> EngineConfig:
    return config


@dataclass(frozen=True)
class EngineSpec:
    """What graphdiag knows of one engine, apart from its line formats (see parsers/)."""

    name: Backend
    # sniffing: bytes that only this engine's logs contain; the engine with more hits wins
    markers: re.Pattern[bytes]
    # the start of the engine's own log lines, up to the logger location's closing bracket
    line_head: bytes
    # words of periodic one-line records (batch/stats lines): a log may be cut right after one
    # for parallel scanning, as no multi-line block is open there
    periodic_words: tuple[bytes, ...]
    # the line parser, as "module:Class" (parsers/ sits above this package)
    parser: str
    # config keys of the engine's config echo
    graphs_off_key: str  # a bool key: True means CUDA graphs are off
    capture_sizes_key: str  # the explicit capture list
    # config keys of the capture ceiling, first found wins; with none, may the capture-size
    # table's largest size stand in?
    ceiling_keys: tuple[str, ...]
    ceiling_from_table: bool
    # what the record's cudagraph_mode names: vLLM's CUDAGraphMode, or SGLang's graph backend
    mode_names: Literal["cudagraph_mode", "graph_backend"]
    # default capture sizes when the log prints none: (version, config echo, ceiling) -> sizes
    default_sizes: Callable[[str | None, Config, int | None], list[int]]
    # the flag fragment that captures exactly these sizes (notes get why, if none)
    bucket_flags: Callable[[str | None, Config, Sequence[int], list[str]], str]
    # graphs off on a prefill node, keeping whatever else the engine compiles
    graphs_off_flag: Callable[[str | None, Config], str]
    # the flag that sets the capture ceiling for a version, with a value when given ("" if none)
    ceiling_flag: Callable[[str | None, Config, int | None], str]
    # where capture memory saved (> 0 GiB) or added (< 0) ends up, for the advice's notes
    kv_note: Callable[[str | None, float], str]
    # a bool config key that, when on, means only exact sizes replay
    padding_off_key: str | None = None
    # tokens per KV block when the log prints blocks but not tokens (and no block_size echo)
    default_block_size: int | None = None
    # what a capture size counts: vLLM sizes are tokens of a step (decode and, through
    # piecewise graphs, mixed prefill+decode steps); SGLang's are decode requests
    size_unit: Literal["tokens", "requests"] = "requests"
    # the user's own switch that turns graphs off, as the user spells it (GD131)
    eager_flag: str = ""
    # the flag that caps concurrent decode requests (keeps decode inside a window)
    concurrency_flag: str = ""
    # the engine's own settings on top of the common reading (token budget, speculative
    # decoding, DP attention, log intervals): common reading -> full reading
    engine_settings: Callable[[EngineConfig], EngineConfig] = _no_settings
    # how bucket advice counts and keeps sizes on this engine
    advice_rules: AdviceRules | None = None
    # what the engine calls requests pushed out of a full KV pool (its log's own word)
    eviction_word: str = "preemptions"

    @property
    def phases(self) -> PhaseTable:
        """The start-up phase model (data/phases.yaml): deciding, wrapper and dispatch frames
        of the capture path and the log lines that open each phase, with their sources."""
        return phase_table(self.name)

    def __post_init__(self) -> None:
        _SPECS[self.name] = self

    def __reduce__(self) -> tuple[Callable[[str], EngineSpec], tuple[str]]:
        """Pickled by name: a spec is module data (some of its callables are lambdas), so a
        run's facts can be packed whole (:mod:`diag.spill`)."""
        return (spec_named, (self.name,))

    def read_config(self, echo: ConfigEcho, version: str | None) -> EngineConfig:
        """The one typed reading of a run's config (keys in this engine's own names)."""
        return self.engine_settings(read_common(echo, version, self))


_SPECS: dict[str, EngineSpec] = {}


def spec_named(name: str) -> EngineSpec:
    """The spec an engine module declared (diag.engines imports every engine module)."""
    return _SPECS[name]


def read_common(echo: ConfigEcho, version: str | None, spec: EngineSpec) -> EngineConfig:
    """The keys both engines (or their shared echo formats) spell alike, and the spec's own
    graph keys; ``spec.engine_settings`` adds the engine's own."""
    c = echo.values
    named = [k for k in spec.ceiling_keys if c.get(k) is not None]
    sizes = c.get(spec.capture_sizes_key)
    kv = c.get(KV_TRANSFER_KEY)
    mode = c.get(DISAGGREGATION_KEY)
    # model / parallelism: SGLang's ServerArgs and vLLM's EngineArgs field names, the names
    # diag/parsers/cmdline.py maps the engines' flags to (sglang==0.5.2:sglang/srt/
    # server_args.py, vllm==0.11.0:vllm/engine/arg_utils.py)
    model = first(c.get("model_path"), c.get("model"))
    cudagraph_mode = c.get(MODE_KEY)
    return EngineConfig(
        engine=spec.name,
        version=version,
        raw=c,
        advice_rules=spec.advice_rules,
        graphs_off=as_bool(c.get(spec.graphs_off_key)),
        capture_sizes=as_sizes(sizes),
        ceiling=as_int(c.get(named[0])) if named else None,
        ceiling_named=bool(named),
        cudagraph_mode=None if cudagraph_mode is None else str(cudagraph_mode),
        max_running=as_int(first(c.get("max_running_requests"), c.get("max_num_seqs"))),
        dp_attention=truthy(c.get("enable_dp_attention")),
        padding=not (spec.padding_off_key and truthy(c.get(spec.padding_off_key))),
        model=None if model is None else str(model),
        tp_size=as_int(first(c.get("tp_size"), c.get("tensor_parallel_size"))),
        pp_size=as_int(first(c.get("pp_size"), c.get("pipeline_parallel_size"))),
        dp_size=as_int(first(c.get("dp_size"), c.get("data_parallel_size"))),
        torch_compile=truthy(c.get(TORCH_COMPILE_KEY)),
        torch_compile_max_bs=as_int(c.get(TORCH_COMPILE_MAX_BS_KEY)),
        mem_fraction_static=as_float(c.get("mem_fraction_static")),
        custom_all_reduce_off=truthy(c.get("disable_custom_all_reduce")),
        kv_cache_memory_bytes_set=c.get("kv_cache_memory_bytes") not in (None, 0, "None"),
        profile_cuda_graph=truthy(c.get("enable_profile_cuda_graph")),
        block_size=as_int(first(c.get("block_size"), c.get("cache_config.block_size"))),
        disaggregation_mode=mode if isinstance(mode, str) else None,
        kv_role=str(kv["kv_role"]) if isinstance(kv, dict) and kv.get("kv_role") else None,
        attention_backend=next(
            (
                v
                for k in (
                    "resolved_attention_backend",
                    "attention_backend",
                    "decode_attention_backend",
                )
                if isinstance(v := c.get(k), str) and v and v.lower() != "none"
            ),
            None,
        ),
        typed_eager=_typed_eager(echo.typed),
        user_mode_none=(
            "NONE" in str(echo.user[MODE_KEY]).upper() if MODE_KEY in echo.user else None
        ),
    )


# keys both engines' echoes spell alike; rules quote their lines as evidence (the
# settings that decide graphs, compile, disaggregation: diag.engines.SETTINGS_KEYS)
MODE_KEY = "compilation_config.cudagraph_mode"
DISAGGREGATION_KEY = "disaggregation_mode"
KV_TRANSFER_KEY = "kv_transfer_config"
TORCH_COMPILE_KEY = "enable_torch_compile"
TORCH_COMPILE_MAX_BS_KEY = "torch_compile_max_bs"
COMMON_SETTING_KEYS = (
    DISAGGREGATION_KEY,
    MODE_KEY,
    TORCH_COMPILE_KEY,
    TORCH_COMPILE_MAX_BS_KEY,
    KV_TRANSFER_KEY,
)


def _typed_eager(typed: Config) -> str | None:
    """The eager setting in the args the user typed, spelled as the user set it."""
    for key, value in typed.items():
        text = str(value).strip('"').lower()
        if key == "enforce_eager" and text == "true":
            return "--enforce-eager"
        if key == MODE_KEY and text.endswith("none"):
            return "cudagraph_mode=NONE"
    return None
