"""The typed shape of an engine spec, and the per-version table it is built from."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from diag.engines.phases import PhaseTable, phase_table
from diag.engines.version import Version, parse_version

Backend = Literal["vllm", "sglang", "unknown"]
T = TypeVar("T")

Config = Mapping[str, Any]


@dataclass(frozen=True)
class Versioned(Generic[T]):
    """A value that changed across versions: ``((since, value), ...)`` in ascending order.

    ``at(version)`` is the value of the newest row at or below the version; an unknown
    version gets ``unknown`` (by default the newest row). Extend a spec with one of these
    per fact that moves between releases (flag spellings, phase tables, error signatures).
    """

    rows: tuple[tuple[Version, T], ...]
    unknown: T | None = None

    def at(self, version: str | Version | None) -> T:
        ver = parse_version(version) if isinstance(version, str) or version is None else version
        if ver is None:
            return self.unknown if self.unknown is not None else self.rows[-1][1]
        value = self.rows[0][1]
        for since, v in self.rows:
            if ver >= since:
                value = v
        return value


@dataclass(frozen=True)
class AdviceInputs:
    """What bucket advice needs of a run's config, in plain values (diag.advise reads these;
    the engine-specific key names and defaults stay here)."""

    max_running: int | None = None  # requests the engine runs at once (per rank)
    max_num_batched_tokens: int | None = None  # vLLM token budget per step
    spec_tokens: int = 0  # vLLM num_speculative_tokens; SGLang speculative_num_draft_tokens
    speculative_algorithm: str | None = None
    dp_attention: bool = False
    attn_tp: int = 1
    two_batch_overlap: bool = False
    padding: bool = True
    # steps one periodic batch line stands for (SGLang --decode-log-interval), and the seconds
    # one stats line covers (vLLM VLLM_LOG_STATS_INTERVAL); None where the engine has none
    steps_per_batch_line: int | None = None
    stats_interval_s: float | None = None


def _no_advice_inputs(config: Config, max_running: int | None) -> AdviceInputs:
    return AdviceInputs(max_running=max_running)


@dataclass(frozen=True)
class BucketRule:
    """Which capture sizes the engine keeps: multiples of ``multiple_of`` (forced instead of
    1 when above 1), none above ``at_most``; ``note`` says why, for the advice's notes."""

    multiple_of: int = 1
    at_most: int | None = None
    note: str | None = None


CaptureUnit = Literal["tokens", "requests"]


@dataclass(frozen=True)
class AdviceRules:
    """How the engine counts and keeps capture sizes, for bucket advice (diag.advise reads
    these instead of asking which engine it is)."""

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
    # the sizes the engine keeps of a requested bucket set (version, config echo)
    bucket_rule: Callable[[str | None, Config], BucketRule]
    # where capture memory saved (> 0 GiB) or added (< 0) ends up, for the advice's notes
    kv_note: Callable[[str | None, float], str]
    # a bool config key that, when on, means only exact sizes replay; and what to say then
    padding_off_key: str | None = None
    padding_off_note: str | None = None
    # where a capture runs, for evidence and docs: (file, function) in the engine's source
    capture_code_paths: tuple[str, ...] = ()
    # tokens per KV block when the log prints blocks but not tokens (and no block_size echo)
    default_block_size: int | None = None
    # what a capture size counts: vLLM sizes are tokens of a step (decode and, through
    # piecewise graphs, mixed prefill+decode steps); SGLang's are decode requests
    size_unit: Literal["tokens", "requests"] = "requests"
    # the user's own switch that turns graphs off, as the user spells it (GD131)
    eager_flag: str = ""
    # the flag that caps concurrent decode requests (keeps decode inside a window)
    concurrency_flag: str = ""
    # the config values bucket advice reads: (config echo, max running requests) -> inputs
    advice_inputs: Callable[[Config, int | None], AdviceInputs] = _no_advice_inputs
    # how bucket advice counts and keeps sizes on this engine
    advice_rules: AdviceRules | None = None
    # what the engine calls requests pushed out of a full KV pool (its log's own word)
    eviction_word: str = "preemptions"

    @property
    def phases(self) -> PhaseTable:
        """The start-up phase model (data/phases.yaml): deciding, wrapper and dispatch frames
        of the capture path and the log lines that open each phase, with their sources."""
        return phase_table(self.name)

    def ceiling(self, config: Config) -> int | None | Literal["table"]:
        """The capture ceiling the config echo names; "table" where the log's capture-size
        table may tell instead."""
        for key in self.ceiling_keys:
            if config.get(key) is not None:
                return as_int(config.get(key))
        return "table" if self.ceiling_from_table else None

    def graphs_off(self, config: Config) -> bool | None:
        """What the config echo says about graphs: True off, False on, None not said."""
        return as_bool(config.get(self.graphs_off_key))


def as_bool(v: Any) -> bool | None:
    """A config echo's boolean (True/False or 'true'/'false' text); None if not one."""
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return None


def as_int(v: Any) -> int | None:
    try:
        return None if v is None or isinstance(v, bool) else int(v)
    except (TypeError, ValueError):
        return None


def truthy(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.lower() == "true")
