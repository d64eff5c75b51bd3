"""GD111 padding-waste."""

from __future__ import annotations

from collections.abc import Mapping

from diag.model import Finding
from diag.rules.base import Remedy, Rule, Threshold, num, pct
from diag.rules.metrics import RunMetrics
from diag.rules.quotes import advised_set, unit


def _advised(m: RunMetrics) -> str | None:
    s = advised_set(m)
    return f"Capture {s}." if s else None


def _padding_time_share(m: RunMetrics) -> float | None:
    """Share of the traffic's decode GPU time spent on padded slots (the advice's cost model:
    padded slots x the fitted step-time slope), None without advice."""
    a = m.advice
    if a is None or a.current is None or a.busy_s_h <= 0:
        return None
    return a.current.padded_s_h / a.busy_s_h


class GD111(Rule):
    """Graph-served batches are padded up to the next captured size; padding is waste when it
    costs GPU time.

    Judgement: padding is weighed in padded tokens per step where step time grows with batch
    size, not as a share of a few slots in tiny batches (padding a 5-request batch to 8 costs
    nearly nothing: small decode steps are bound by weight reads). With the run's bucket
    advice, the rule fires when the padded slots' GPU time (the cost model's fitted
    step-time slope) is at least ``max_padded_time_share`` of decode GPU time. Without
    advice it needs both ``max_waste`` of replayed slots and ``min_padded_per_step`` padded
    slots per step, and says the cost is estimated from slots. It never advises adding
    buckets while graph memory squeezes the KV pool (GD120 fired): then it says to leave the
    set alone and ranks below GD120.

    Fires::

        incident: sglang-padding-waste

    Near miss (batches of 4-7 requests padded to 8: a few slots of a tiny step)::

        [2025-11-03 09:00:00] server_args=ServerArgs(model_path='m', tp_size=1, cuda_graph_max_bs=8, cuda_graph_bs=[1, 8], disable_cuda_graph=False)
        [2025-11-03 09:00:05] Capture cuda graph end. Time elapsed: 2.00 s. mem usage=0.05 GB. avail mem=60.00 GB.
        [2025-11-03 09:01:00] Decode batch, #running-req: 4, #token: 4000, token usage: 0.05, cuda graph: True, gen throughput (token/s): 200.00, #queue-req: 0,
        [2025-11-03 09:01:10] Decode batch, #running-req: 5, #token: 4100, token usage: 0.05, cuda graph: True, gen throughput (token/s): 250.00, #queue-req: 0,
        [2025-11-03 09:01:20] Decode batch, #running-req: 4, #token: 4200, token usage: 0.05, cuda graph: True, gen throughput (token/s): 200.00, #queue-req: 0,
        [2025-11-03 09:01:30] Decode batch, #running-req: 6, #token: 4300, token usage: 0.05, cuda graph: True, gen throughput (token/s): 300.00, #queue-req: 0,
        [2025-11-03 09:01:40] Decode batch, #running-req: 5, #token: 4400, token usage: 0.05, cuda graph: True, gen throughput (token/s): 250.00, #queue-req: 0,
        [2025-11-03 09:01:50] Decode batch, #running-req: 7, #token: 4500, token usage: 0.05, cuda graph: True, gen throughput (token/s): 350.00, #queue-req: 0,
    """

    code = "GD111"
    name = "padding-waste"
    severity = "warning"
    trigger = "graphs on, at least min_graph_batches graph batches, and padding costing max_padded_time_share of decode GPU time (with advice) or max_waste of slots and min_padded_per_step padded slots per step (without)"
    impact = 30
    evidence = "padded_batches"
    thresholds = {
        "max_padded_time_share": Threshold(
            0.05,
            "Padding that takes 5 % of decode GPU time is worth a bucket change; below that the "
            "step-time fit is not finer than the saving.",
        ),
        "max_waste": Threshold(
            0.20,
            "Engines' default lists keep waste near 5-12 % at typical batch sizes; above 20 % "
            "the buckets miss the traffic.",
        ),
        "min_padded_per_step": Threshold(
            8,
            "Fewer padded slots per step do not lengthen a decode step measurably (small steps "
            "are bound by weight reads, not by batch size).",
        ),
        "min_graph_batches": Threshold(
            5, "Too few graph batches say nothing about the distribution."
        ),
    }
    remedies = (
        Remedy(
            "Capture buckets at the frequent batch sizes with --cuda-graph-bs (SGLang 0.4.3+); "
            "`graphdiag recommend` gives the set and its waste.",
            engine="sglang",
            flags=("--cuda-graph-bs",),
            specific=_advised,
        ),
        Remedy(
            "Capture buckets at the frequent token counts with a cudagraph_capture_sizes list "
            "in --compilation-config (vLLM 0.6.6+); `graphdiag recommend` gives the set.",
            engine="vllm",
            flags=("cudagraph_capture_sizes",),
            specific=_advised,
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        if not m.graph_on or m.batches_graph < self.t("min_graph_batches"):
            return False
        share = _padding_time_share(m)
        if share is not None:
            return share >= self.t("max_padded_time_share")
        return (
            m.padding_waste is not None
            and m.padding_waste >= self.t("max_waste")
            and m.mean_padded_per_step is not None
            and m.mean_padded_per_step >= self.t("min_padded_per_step")
        )

    def message(self, m: RunMetrics) -> str:
        waste = pct(m.padding_waste) if m.padding_waste is not None else "an unknown share"
        per_step = (
            f", {num(m.mean_padded_per_step)} padded {unit(m)} per step"
            if m.mean_padded_per_step is not None
            else ""
        )
        share = _padding_time_share(m)
        a = m.advice
        if share is not None and a is not None and a.current is not None:
            return (
                f"Padding costs {pct(share)} of decode GPU time ({num(a.current.padded_s_h)} "
                f"GPU-s per hour): {waste} of graph-replayed slots{per_step} over "
                f"{m.batches_graph} graph batches"
            )
        return (
            f"{waste} of graph-replayed slots were padding{per_step} over {m.batches_graph} "
            "graph batches; the step-time slope is not known, so the cost is judged from "
            "padded slots only"
        )

    def adjust(self, m: RunMetrics, fired: Mapping[str, Finding], remedies: list[str]) -> list[str]:
        if "GD120" not in fired:
            return remedies
        if m.advice is not None:
            return [
                "Take only the set GD120 advises (it prices graph memory against the squeezed "
                "KV pool, and pads less than today's); add no buckets beyond it while the pool "
                "is squeezed."
            ]
        return [
            "Keep the bucket set as it is for now: graph memory already squeezes the KV pool "
            "(GD120), and more buckets would take more of it; apply GD120's remedy first, then "
            "re-measure padding."
        ]
