"""GD160 graph-mode-downgraded."""

from __future__ import annotations

from diag.rules.base import Remedy, Rule
from diag.rules.metrics import RunMetrics


class GD160(Rule):
    """The engine overrode the requested graph mode: the model or attention backend cannot
    run it, so the engine downgraded it (e.g. FULL_AND_PIECEWISE to PIECEWISE) or turned
    graphs off.

    Judgement: only the engine's own override counts (vLLM "setting cudagraph_mode=...",
    "Overriding cudagraph_mode to ..."; SGLang "Cuda graph is disabled because of using
    torch native attention backend" and kin). A change to NONE that follows the user's own
    --enforce-eager / cudagraph_mode=NONE is the user's choice: GD131, never GD160; so is
    vLLM V1's "cudagraph dispatching keys are not initialized" warning, which follows from
    graphs being off whoever turned them off. The args the user typed (vLLM's "non-default
    args") decide; an enforce_eager=True that only the config echo shows, after the
    engine's own ROCm or BitsAndBytes fallback, is the engine's override.

    Fires::

        (Worker_DP0_TP1_EP1 pid=5016) WARNING 10-24 13:22:34 [gpu_model_runner.py:4068] CUDAGraphMode.FULL_AND_PIECEWISE is not supported with MLACommonMetadataBuilder backend (support: AttentionCGSupport.NEVER); setting cudagraph_mode=PIECEWISE because attention is compiled piecewise

    Near miss (vLLM started with --enforce-eager: the user's own eager mode)::

        incident: vllm-enforce-eager
    """

    code = "GD160"
    name = "graph-mode-downgraded"
    severity = "warning"
    trigger = "the engine printed that it changed the graph mode or turned graphs off for the model/backend"
    impact = 65
    evidence = "downgrade"
    reads = ("cudagraph_mode", "graph_mode", "settings.engine_downgrades", "settings.refused_by")
    remedies = (
        Remedy(
            "Use an attention backend that supports graphs (flashinfer, fa3 or triton): the "
            "one in use (torch native, flex or dual-chunk attention) makes SGLang turn them off.",
            engine="sglang",
            causes=("attention_backend", "other"),
        ),
        Remedy(
            "Use DeepEP's low_latency mode on decode nodes: normal mode cannot run graphs.",
            engine="sglang",
            causes=("deepep",),
        ),
        Remedy(
            "Pick an attention backend with the graph support you need (FULL decode graphs "
            "need UNIFORM_BATCH or ALWAYS support), or accept cudagraph_mode=PIECEWISE.",
            engine="vllm",
            causes=("attention_backend", "other"),
            flags=("cudagraph_mode",),
        ),
        Remedy(
            "With speculative decoding pick an attention backend whose full graphs support "
            "spec-decode, or accept the piecewise graphs the engine chose.",
            engine="vllm",
            causes=("spec_decode",),
        ),
        Remedy(
            "Graphs need the compiled path: leave the compilation mode at its default "
            "(VLLM_COMPILE) instead of 0; cudagraph_mode alone cannot turn graphs on without it.",
            engine="vllm",
            causes=("compilation_mode",),
            source="vllm==0.12.0:vllm/config/vllm.py:650-655",
        ),
        Remedy(
            "Decode/prefill context parallelism runs piecewise graphs only: expected, no change "
            "unless full graphs matter more than context parallelism.",
            engine="vllm",
            causes=("context_parallel",),
            source="vllm==0.12.0:vllm/config/vllm.py:650-705",
        ),
        Remedy(
            "This engine version cannot capture graphs for this model on this platform or "
            "quantization, so it runs eager on its own: look for graph support in a newer "
            "release's notes, or serve the model where graphs are supported; it is not a "
            "setting of yours to remove.",
            causes=("platform",),
            source="vllm/config.py ~0.6-0.10: 'CUDA graph is not supported for %s on ROCm yet, "
            "fallback to eager mode.', 'CUDA graph is not supported on BitAndBytes 8bit yet, "
            "fallback to the eager mode.' (both set enforce_eager=True; formats 2.4)",
        ),
        Remedy(
            "Pick an attention backend with full-graph support, or leave full_cuda_graph off.",
            engine="vllm",
            causes=("attention_backend", "other"),
            flags=("full_cuda_graph",),
        ),
    )

    def cause(self, m: RunMetrics) -> str | None:
        said = m.settings.engine_downgrades[0] if m.settings.engine_downgrades else ""
        low = said.lower()
        if "compilation mode" in low:
            return "compilation_mode"
        if "spec-decode" in low or "speculative" in low:
            return "spec_decode"
        if "context parallel" in low or "(dcp)" in low or "(pcp)" in low:
            return "context_parallel"
        if "deepep" in low:
            return "deepep"
        if "on rocm" in low or "bitsandbytes" in low or "bitandbytes" in low:
            return "platform"  # vllm==0.6.3:vllm/config.py (ROCm fallback, BitsAndBytes)
        return "attention_backend"

    def fires(self, m: RunMetrics) -> bool:
        return bool(m.settings.engine_downgrades)

    def message(self, m: RunMetrics) -> str:
        said = m.settings.engine_downgrades[0].strip()
        if len(said) > 200:
            said = said[:197] + "..."
        now = []
        if m.cudagraph_mode:
            now.append(f"mode now {m.cudagraph_mode}")
        now.append(f"graphs {m.graph_mode}")
        if m.settings.refused_by:
            return (
                f"The attention backend {m.settings.refused_by} does not support the graph mode asked "
                f"for, so the engine changed it: '{said}' ({', '.join(now)})"
            )
        return f"The engine overrode the graph mode for this model/backend: '{said}' ({', '.join(now)})"
