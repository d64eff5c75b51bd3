"""GD115 config-eager."""

from __future__ import annotations

import json

from diag.facts.config_eager import ConfigEager
from diag.rules.base import Remedy, Rule, pct
from diag.rules.metrics import RunMetrics


def _kind(m: RunMetrics, kind: str) -> ConfigEager | None:
    return next((c for c in m.settings.config_eager if c.kind == kind), None)


def _sizes_fix(m: RunMetrics) -> str | None:
    """The explicit list that keeps every verify step in the window (vLLM)."""
    c = _kind(m, "truncated_ceiling_spec")
    if c is None or c.needed is None:
        return None
    ladder = sorted({s for s in (m.capture.capture_sizes or ()) if s < c.needed} | {c.needed})
    return (
        "Capture the verify steps of max_num_seqs requests: --compilation-config "
        f"'{json.dumps({'cudagraph_capture_sizes': ladder})}' (its largest, {c.needed}, is "
        "max_num_seqs x (1 + num_speculative_tokens)); or lower max_num_seqs so that "
        "max_num_seqs x (1 + num_speculative_tokens) fits the truncated size."
    )


class GD115(Rule):
    """A setting, not batch size, sent batches eager: the engine's own line says which.

    vLLM truncates ``max_cudagraph_capture_size`` to the largest size of its ladder below
    it ("Truncating max_cudagraph_capture_size to %d", vllm/config/vllm.py); with
    speculative decoding a verify step of n requests carries n x (1 + k) tokens, so steps
    above the truncated size run eager (vllm-project/vllm PR 37865: 25 -> 133 tok/s once
    fixed). SGLang turns its prefill graphs off for a feature or for memory ("Disable prefill
    CUDA graph because ...", "Disabling auto-selected prefill CUDA graph: ..."): every prefill
    batch then runs eager. The finding counts the batches pushed out and names the change
    that brings them back.

    Fires::

        incident: vllm-2026-spec-truncation

    Near miss (no truncation, no prefill graph turned off)::

        incident: sglang-2026-every-runner
    """

    code = "GD115"
    name = "config-eager"
    severity = "warning"
    trigger = "the engine's own line shows a setting that sends batches out of the graph window"
    impact = 60  # as GD110 (ties: code order); both say the same batches ran eager
    evidence = "config_eager"
    reads = ("capture.capture_sizes", "settings.config_eager")
    thresholds = {}
    remedies = (
        Remedy(
            "List cudagraph_capture_sizes up to max_num_seqs x (1 + num_speculative_tokens) in "
            "--compilation-config, so that verify steps replay graphs.",
            engine="vllm",
            flags=("cudagraph_capture_sizes", "--compilation-config"),
            when=lambda m: _kind(m, "truncated_ceiling_spec") is not None,
            specific=_sizes_fix,
        ),
        Remedy(
            "Set the prefill backend explicitly (--cuda-graph-backend-prefill=breakable) to "
            "override the engine's auto-disable, after freeing the memory it asks for (a lower "
            "--mem-fraction-static).",
            engine="sglang",
            flags=("--cuda-graph-backend-prefill", "--mem-fraction-static"),
            when=lambda m: (
                (c := _kind(m, "prefill_graph_disabled")) is not None and "auto-selected" in c.said
            ),
        ),
        Remedy(
            "The engine turned prefill graphs off for this model or feature: the line names "
            "why; prefill batches stay eager until that feature is off or supported.",
            engine="sglang",
            when=lambda m: (
                (c := _kind(m, "prefill_graph_disabled")) is not None
                and "auto-selected" not in c.said
            ),
            acts=False,
        ),
        Remedy(
            "Find why the named DP rank captured no graphs (its own lines before it served: a "
            "capture error, graphs disabled on that rank) and restart it so that every DP rank "
            "captures: the ranks take the minimum of their graph votes each step "
            "(sglang==0.5.23:srt/managers/scheduler_components/dp_attn.py:290,369-381; "
            "vllm==0.20.0:vllm/v1/worker/dp_utils.py:90-97).",
            when=lambda m: _kind(m, "dp_rank_eager") is not None,
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        return bool(m.settings.config_eager)

    def message(self, m: RunMetrics) -> str:
        parts = []
        for c in m.settings.config_eager:
            said = c.said.strip().rstrip(".")
            if len(said) > 160:
                said = said[:157] + "..."
            share = f" ({pct(c.batches_out / c.batches_seen)})" if c.batches_seen else ""
            where = f'the engine said "{said}" (line {c.line})' if said else f"line {c.line}"
            parts.append(
                f"{where}: {c.detail}; "
                f"{c.batches_out:,} of {c.batches_seen:,} {c.runner} batches ran eager{share}"
            )
        return "Configuration sent batches eager: " + "; ".join(parts)
