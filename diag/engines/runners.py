"""Graph runners: which runner and model each parsed capture phase belongs to, and the unit of
its sizes (engine knowledge as data; diag.facts.graphs builds the record's ``graphs`` from it).

The parsers name a capture by a ``phase`` (diag.parsers.sglang ``_phase``, diag.parsers.vllm
capture): SGLang logs one begin/end per runner and model (sglang==0.5.23:
srt/model_executor/model_runner_components/cuda_graph_setup.py:683-700 ``{role} prefill``,
:750-790 ``{role} verify`` / ``{role} decode``; srt/speculative/eagle_worker_v2.py:515,634
``draft decode`` / ``draft extend``); vLLM V1 captures every set between one start and one
``Graph capturing finished`` (phase ``all``) and names the sets by mode in its bars and in
``Profiling CUDA graph memory`` (PIECEWISE: mixed batches, FULL: uniform decode, ENCODER:
multimodal encoder budgets; vllm==0.34.0: vllm/v1/worker/gpu_model_runner.py).
"""

from __future__ import annotations

from typing import Literal

Runner = Literal["decode", "verify", "prefill", "extend", "encoder", "mixed"]
Model = Literal["target", "draft"]
Unit = Literal["requests", "tokens", "images"]
Status = Literal["captured", "failed", "disabled", "not_captured", "unknown"]

RUNNERS: tuple[Runner, ...] = ("decode", "verify", "mixed", "prefill", "extend", "encoder")

#: parsed capture phase -> (runner, model); phases not here ("all", "metrics") span sets
PHASE_RUNNER: dict[str, tuple[Runner, Model]] = {
    "decode": ("decode", "target"),
    "verify": ("verify", "target"),
    "prefill": ("prefill", "target"),
    "piecewise": ("prefill", "target"),
    "mixed": ("mixed", "target"),
    "encoder": ("encoder", "target"),
    "draft": ("decode", "draft"),
    "draft_verify": ("verify", "draft"),
    "draft_extend": ("extend", "draft"),
    "draft_prefill": ("prefill", "draft"),
}


def phase_of(runner: str, model: str) -> str | None:
    """The parsed phase name of a runner (the inverse of :data:`PHASE_RUNNER`)."""
    for phase, rm in PHASE_RUNNER.items():
        if rm == (runner, model) and phase != "piecewise":
            return phase
    return None


def unit_of(engine: str, runner: str) -> Unit:
    """What a runner's sizes count: SGLang decode / verify / draft graphs are keyed by
    requests (``bs=``), its prefill graphs by tokens (``num_tokens=``); every vLLM V1 set
    by tokens (``BatchDescriptor(num_tokens=...)``), its encoder budgets by tokens too."""
    if engine == "sglang" and runner in ("decode", "verify", "extend"):
        return "requests"
    return "tokens"


#: vLLM runtime modes (bars, M-1, metrics rows) -> the runner whose graphs they replay
VLLM_MODE_RUNNER: dict[str, Runner] = {
    "FULL": "decode",
    "PIECEWISE": "mixed",
    "ENCODER": "encoder",
}
