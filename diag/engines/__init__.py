"""Engine knowledge, one small typed spec per engine (Drain3-style: data, not branches).

Everything graphdiag knows about vLLM or SGLang that is not a line format lives in
:class:`~diag.engines.spec.EngineSpec`: the bytes that identify its logs, the periodic
lines where a log may be cut for parallel scanning, the parser class, the config keys it
echoes, its default capture sizes per version and the flags that set them. Code elsewhere
asks ``spec_for(backend)`` instead of testing ``backend == "sglang"``.

This package is a leaf: it imports nothing of diag but :mod:`diag.engines.version`.
"""

from __future__ import annotations

from diag.engines.sglang import SGLANG
from diag.engines.spec import Backend, EngineSpec, Versioned
from diag.engines.version import parse_version
from diag.engines.vllm import VLLM

ENGINES: dict[str, EngineSpec] = {spec.name: spec for spec in (SGLANG, VLLM)}


def spec_for(backend: str) -> EngineSpec | None:
    """The spec of a known engine, None for ``unknown`` (and anything else)."""
    return ENGINES.get(backend)


__all__ = [
    "ENGINES",
    "SGLANG",
    "VLLM",
    "Backend",
    "EngineSpec",
    "Versioned",
    "parse_version",
    "spec_for",
]
