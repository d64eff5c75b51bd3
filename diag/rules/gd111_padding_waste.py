"""GD111 padding-waste."""

from __future__ import annotations

from collections.abc import Mapping

from diag.model import Finding
from diag.rules.base import Remedy, Rule, Threshold, num, pct
from diag.rules.metrics import RunMetrics
from diag.rules.quotes import advice_withheld, advised_set, comparative, unit


def _advised(m: RunMetrics) -> str | None:
    s = advised_set(m)
    return f"Capture {s}." if s else None


def _slope_measured(m: RunMetrics) -> bool:
    """Do the run's own step times show padding costs time: a slope fitted on its graph steps
    that stands above its standard error (the cost model's ``slot_step_s`` from the run)?"""
    return m.flags.advice is not None and m.flags.advice.parameters.slot_step_s.source == "run"


def _padding_time_share(m: RunMetrics) -> float | None:
    """Share of the traffic's decode GPU time spent on padded slots (the advice's cost model:
    padded slots x the fitted step-time slope), None without advice or a measured slope."""
    a = m.flags.advice
    if a is None or a.current is None or a.busy_s_h <= 0 or not _slope_measured(m):
        return None
    return a.current.padded_s_h / a.busy_s_h


class GD111(Rule):
    """Graph-served batches are padded up to the next captured size; padding is waste when it
    costs GPU time.

    Judgement: padding is weighed in padded tokens per step where step time grows with batch
    size, not as a share of a few slots in tiny batches (padding a 5-request batch to 8 costs
    nearly nothing: small decode steps are bound by weight reads). It fires only where the
    run's own step times show that padding costs time: the advice's step-time slope fitted
    on the run's graph steps, above its standard error and of a plausible size (never the
    default slope), and the padded slots' GPU time at that slope at least
    ``max_padded_time_share`` of decode GPU time; and only where the bucket advice changes
    the set (a warning carries a change to make: where the advice keeps today's set, padding
    is cheaper than the change by its own prices, and that is a run note). Padded slots
    without a measured slope are a run note, not a finding. While graph memory squeezes the
    KV pool (GD120 fired) it advises no bucket beyond GD120's set.

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
    trigger = "graphs on, at least min_graph_batches graph batches, a step-time slope measured on the run's graph steps (above its standard error, and one on which a step does not double within 16 tokens), padding costing max_padded_time_share of decode GPU time at that slope, and bucket advice that changes the set"
    impact = 30
    evidence = "padded_batches"
    reads = (
        "flags.advice",
        "window.batches_graph",
        "window.mean_padded_per_step",
        "window.padding_waste",
    )
    thresholds = {
        "max_padded_time_share": Threshold(
            0.05,
            "Padding that takes 5 % of decode GPU time is worth a bucket change; below that the "
            "step-time fit is not finer than the saving.",
        ),
        "max_waste": Threshold(
            0.20,
            "Engines' default lists keep waste near 5-12 % at typical batch sizes; above 20 % "
            "padded slots whose cost the step times do not show get a run note saying so.",
        ),
        "min_graph_batches": Threshold(
            5, "Too few graph batches say nothing about the distribution."
        ),
    }
    remedies = (
        Remedy(
            "Capture buckets at the frequent batch sizes (the version's bucket flags); "
            "`graphdiag recommend` gives the set and its waste.",
            engine="sglang",
            flags=("--cuda-graph-bs",),
            specific=_advised,
        ),
        Remedy(
            "Capture buckets at the frequent token counts with a cudagraph_capture_sizes list "
            "in --compilation-config; `graphdiag recommend` gives the set.",
            engine="vllm",
            flags=("cudagraph_capture_sizes",),
            specific=_advised,
        ),
    )

    def _costly(self, m: RunMetrics) -> float | None:
        """The padding's share of decode GPU time where it reaches the threshold."""
        if not m.graph_on or m.window.batches_graph < self.t("min_graph_batches"):
            return None
        share = _padding_time_share(m)
        return share if share is not None and share >= self.t("max_padded_time_share") else None

    def fires(self, m: RunMetrics) -> bool:
        return self._costly(m) is not None and m.sizing is not None

    def held_back(self, m: RunMetrics) -> str | None:
        """Many padded slots whose cost the run's step times do not show are still said, and
        so is costly padding the bucket advice does not change."""
        if not m.graph_on or m.window.batches_graph < self.t("min_graph_batches"):
            return None
        share = self._costly(m)
        if share is not None and m.sizing is None:
            withheld = advice_withheld(m) or "the run has no bucket advice"
            return (
                f"padding costs {pct(share)} of decode GPU time by the run's step times; not "
                f"reported as {self.code} {self.name}: {withheld}"
            )
        if _padding_time_share(m) is not None:
            return None
        if m.window.padding_waste is None or m.window.padding_waste < self.t("max_waste"):
            return None
        if m.flags.advice is None:
            why = "no decode step times to fit"
        else:
            why = m.flags.advice.parameters.slot_step_s.why
        return (
            f"{pct(m.window.padding_waste)} of graph-replayed slots were padding; not reported as "
            f"{self.code} {self.name}: the run's step times do not show that padding costs time "
            f"({why})"
        )

    def message(self, m: RunMetrics) -> str:
        waste = (
            pct(m.window.padding_waste)
            if m.window.padding_waste is not None
            else "an unknown share"
        )
        per_step = (
            f", {num(m.window.mean_padded_per_step)} padded {unit(m)} per step"
            if m.window.mean_padded_per_step is not None
            else ""
        )
        share = _padding_time_share(m)
        a = m.flags.advice
        slope = a.parameters.slot_step_s.value if a is not None else None
        if share is None or a is None or a.current is None or slope is None:  # (fires() holds)
            return f"{waste} of graph-replayed slots were padding{per_step}"
        return (
            f"Padding costs {pct(share)} of decode GPU time ({num(a.current.padded_s_h)} "
            f"GPU-s per hour at the measured {slope * 1e3:.3g} ms per padded "
            f"{unit(m).rstrip('s')} a step): {waste} of graph-replayed slots{per_step} over "
            f"{m.window.batches_graph} graph batches"
        )

    def adjust(self, m: RunMetrics, fired: Mapping[str, Finding], remedies: list[str]) -> list[str]:
        a = m.sizing
        if "GD120" not in fired or a is None or a.current is None:
            return remedies
        new, old = a.recommended.cost.padding_waste, a.current.padding_waste
        pads = ""
        if new is not None and old is not None:
            word = comparative(new, old, "less", "more", "as much", 0.0005)
            pads = f", and pads {word} than today's: {pct(new)} of slots against {pct(old)}"
        return [
            "Take only the set GD120 advises (it prices graph memory against the squeezed "
            f"KV pool{pads}); add no buckets beyond it while the pool is squeezed."
        ]
