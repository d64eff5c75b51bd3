"""Engine knowledge, one small typed spec per engine (Drain3-style: data, not branches).

Everything graphdiag knows about vLLM or SGLang that is not a line format lives in
:class:`~diag.engines.spec.EngineSpec`: the bytes that identify its logs, the periodic
lines where a log may be cut for parallel scanning, the parser class, the config keys it
echoes, its default capture sizes per version and the flags that set them. Code elsewhere
asks ``spec_for(backend)`` instead of testing ``backend == "sglang"``.

This package is a leaf: it imports nothing of diag but :mod:`diag.engines.version`.
"""

from __future__ import annotations

from dataclasses import replace

from diag.engines.config import ConfigEcho, EngineConfig
from diag.engines.sglang import SGLANG
from diag.engines.spec import COMMON_SETTING_KEYS, Backend, EngineSpec, read_common
from diag.engines.version import parse_version
from diag.engines.vllm import VLLM

ENGINES: dict[str, EngineSpec] = {spec.name: spec for spec in (SGLANG, VLLM)}
#: config keys whose echo lines show the capture window (lists and ceilings), any engine
WINDOW_KEYS = frozenset(k for s in ENGINES.values() for k in (s.capture_sizes_key, *s.ceiling_keys))
#: config keys whose echo lines show the graph, compile and disaggregation settings
SETTINGS_KEYS = frozenset((*COMMON_SETTING_KEYS, *(s.graphs_off_key for s in ENGINES.values())))


def spec_for(backend: str) -> EngineSpec | None:
    """The spec of a known engine, None for ``unknown`` (and anything else)."""
    return ENGINES.get(backend)


def read_config(backend: str, echo: ConfigEcho, version: str | None) -> EngineConfig:
    """The run's config, read by its engine's spec; a run of no known engine reads the keys
    as vLLM spells them (capture list, ceiling) with no graphs switch, rules or engine
    settings of its own."""
    spec = spec_for(backend)
    if spec is not None:
        return spec.read_config(echo, version)
    common = read_common(echo, version, VLLM)  # (no engine settings: those are vLLM's own)
    return replace(common, engine="unknown", advice_rules=None, graphs_off=None)


__all__ = [
    "ENGINES",
    "SETTINGS_KEYS",
    "WINDOW_KEYS",
    "SGLANG",
    "VLLM",
    "Backend",
    "ConfigEcho",
    "EngineConfig",
    "EngineSpec",
    "parse_version",
    "read_config",
    "spec_for",
]
