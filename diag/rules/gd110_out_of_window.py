"""GD110 out-of-window."""

from __future__ import annotations

from collections.abc import Mapping

from diag.model import Finding
from diag.rules.base import Remedy, Rule, Standstill, Threshold, pct
from diag.rules.metrics import RunMetrics
from diag.rules.quotes import advice_withheld, advised_ceiling, advised_set, withheld_lead


def _raise(m: RunMetrics) -> str | None:
    withheld = advice_withheld(m)
    if withheld is not None:
        return Standstill(f"{withheld_lead(m, 'Raising')}: {withheld}.")
    ceiling = advised_ceiling(m)
    a = m.sizing
    if ceiling is None or a is None:
        return None
    if m.window.ceiling is not None and a.ceiling <= m.window.ceiling:
        why = f" ({a.notes[0]})" if a.notes else ""
        cap = m.flags.concurrency_flag or "the engine's concurrency limit"
        return (
            f"The advice keeps the capture ceiling at {a.ceiling} {a.unit}{why}: "
            f"cap concurrency with {cap} so decode stays inside it."
        )
    s = advised_set(m)
    return f"Raise the capture ceiling to {ceiling}" + (f", or capture {s}" if s else "") + "."


def _raise_generic(m: RunMetrics) -> str | None:
    if m.window.observed_max is None or not m.flags.ceiling_flag:
        return None
    return (
        f"Raise the capture ceiling ({m.flags.ceiling_flag}) to cover the largest observed batch "
        f"({m.window.observed_max:g}); `graphdiag recommend` gives the set with headroom."
    )


def _raise_flag(m: RunMetrics) -> str | None:
    """The version's own ceiling flag (the flag table's answer), when nothing else is known."""
    if not m.flags.ceiling_flag:
        return None
    return (
        f"Raise the capture ceiling ({m.flags.ceiling_flag}) to the advised ceiling "
        "`graphdiag recommend` prints."
    )


def _raise_any(m: RunMetrics) -> str | None:
    return _raise(m) or _raise_generic(m) or _raise_flag(m)


class GD110(Rule):
    """A significant share of decode batches ran eagerly: above the capture ceiling, between
    captured sizes with padding off, or declined by the engine inside the window.

    Those batches pay the capture cost and get none of the benefit; latency rises and batches
    grow further. The ceiling to raise to is the run's bucket advice (the same one
    ``graphdiag recommend`` prints); no second ceiling is computed here. Without advice the
    remedy names the largest observed batch and the version's ceiling flag. When GD120 also
    holds (graph memory squeezes the KV pool), capping concurrency comes first.

    Fires::

        incident: sglang-out-of-window

    Near miss (every batch inside the window)::

        incident: sglang-healthy
    """

    code = "GD110"
    name = "out-of-window"
    severity = "warning"
    trigger = "graphs on (or unknown with logged batches), at least min_batches decided decode batches and an eager share of at least min_eager_share with a known cause"
    impact = 60
    evidence = "eager_batches"
    reads = (
        "cudagraph_mode",
        "flags.ceiling_flag",
        "flags.concurrency_flag",
        "graph_mode",
        "settings.dp_attention",
        "settings.padding_disabled",
        "window.batches_decided",
        "window.batches_eager",
        "window.batches_source",
        "window.ceiling",
        "window.observed_max",
    )
    thresholds = {
        "min_eager_share": Threshold(
            0.10, "Below 10 % the eager steps are the long tail the bucket set rightly gives up."
        ),
        "min_batches": Threshold(
            5,
            "Fewer decided batches are too few samples (SGLang logs one decode line per 40 steps).",
        ),
    }
    remedies = (
        Remedy(
            "The counters say how many decode passes ran eager, not which: add the server log "
            "(its Decode batch lines flag each batch and its capture line lists the sizes) to "
            "size the window from the batches.",
            engine="sglang",
            causes=("counted_eager",),
        ),
        Remedy(
            "Raise the capture ceiling (the version's ceiling flag) to the advised ceiling "
            "`graphdiag recommend` prints, or pass its bucket set.",
            engine="sglang",
            causes=("above_ceiling", "logged_eager"),
            flags=("--cuda-graph-max-bs",),
            specific=_raise_any,
        ),
        Remedy(
            "Or cap concurrency with --max-running-requests near the ceiling so decode stays "
            "in the window.",
            engine="sglang",
            causes=("above_ceiling",),
            flags=("--max-running-requests",),
        ),
        Remedy(
            "Drop --disable-cuda-graph-padding: in-between batch sizes then pad up to the next graph.",
            engine="sglang",
            causes=("unpadded_gap",),
            flags=("--disable-cuda-graph-padding",),
            when=lambda m: m.settings.padding_disabled,
        ),
        Remedy(
            "The engine declined graphs inside the window: with --enable-dp-attention any DP "
            "rank prefilling makes every rank's decode step eager; move prefill off the decode "
            "ranks (PD disaggregation) or lower --chunked-prefill-size.",
            engine="sglang",
            causes=("engine_reported_eager",),
            when=lambda m: m.settings.dp_attention,
        ),
        Remedy(
            "The engine declined graphs inside the window: check the request mix (hidden "
            "states, logprobs, two-batch-overlap constraints) against what the graphs were "
            "captured for.",
            engine="sglang",
            causes=("engine_reported_eager",),
            acts=False,
        ),
        Remedy(
            "Raise the capture ceiling in tokens (the version's ceiling flag) to the advised "
            "ceiling `graphdiag recommend` prints.",
            engine="vllm",
            causes=("above_ceiling", "logged_eager", "other"),
            flags=("cudagraph_capture_sizes",),
            specific=_raise_any,
        ),
        Remedy(
            "Or lower --max-num-seqs so decode steps stay inside the captured window.",
            engine="vllm",
            causes=("above_ceiling",),
            flags=("--max-num-seqs",),
        ),
        Remedy(
            "Steps inside the window ran without graphs: under cudagraph_mode=FULL_DECODE_ONLY "
            "mixed prefill-decode steps run eagerly; use FULL_AND_PIECEWISE so they get "
            "piecewise graphs.",
            engine="vllm",
            causes=("engine_reported_eager",),
            flags=("cudagraph_mode",),
            when=lambda m: (m.cudagraph_mode or "").upper() == "FULL_DECODE_ONLY",
        ),
        Remedy(
            "Steps inside the window ran without graphs: cascade attention, uncaptured LoRA "
            "counts or DP padding across ranks; check which applies to the request mix.",
            engine="vllm",
            causes=("engine_reported_eager",),
            acts=False,
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        share = m.window.eager_share
        graphs_possible = m.graph_on or (
            m.graph_mode == "unknown" and m.window.batches_source == "logged"
        )
        return (
            graphs_possible
            and m.window.batches_decided >= self.t("min_batches")
            and share is not None
            and share >= self.t("min_eager_share")
            and m.window.eager_in_window_causes > 0
        )

    def cause(self, m: RunMetrics) -> str | None:
        return m.window.eager_cause

    def message(self, m: RunMetrics) -> str:
        share = m.window.eager_share or 0.0
        out = (
            f"{m.window.batches_eager} of {m.window.batches_decided} decode batches ({pct(share)}) ran eagerly "
            f"({m.window.eager_breakdown})"
        )
        facts = []
        if m.window.observed_max is not None:
            facts.append(f"largest batch {m.window.observed_max:g}")
        facts.append(
            f"capture ceiling {m.window.ceiling}"
            if m.window.ceiling is not None
            else "capture ceiling not in the log"
        )
        if m.sizing is not None:
            facts.append(f"recommended ceiling {m.sizing.ceiling} {m.sizing.unit}")
        out += "; " + ", ".join(facts) + f" (batches source: {m.window.batches_source})"
        if m.graph_mode == "unknown":
            out += (
                "; capture is not in this log, so graphs may also be off entirely "
                "(check the engine's graphs-off setting)"
            )
        return out

    def adjust(self, m: RunMetrics, fired: Mapping[str, Finding], remedies: list[str]) -> list[str]:
        if "GD120" not in fired or m.window.eager_cause != "above_ceiling":
            return remedies
        cap = m.flags.concurrency_flag or "the engine's concurrency limit"
        a = m.sizing
        if a is not None and m.window.ceiling is not None and a.ceiling > m.window.ceiling:
            # the advice already prices the larger set's graph memory against the squeezed pool
            return [
                *remedies,
                f"GD120 holds too: the recommended ceiling is priced with its graph memory "
                f"against the squeezed KV pool; if KV capacity matters more than these eager "
                f"batches, cap concurrency with {cap} at the current ceiling instead.",
            ]
        return [
            f"Graph memory already squeezes the KV pool (GD120): cap concurrency with {cap} "
            "near the current ceiling before capturing larger sizes, which would take more of "
            "the pool.",
            *remedies,
        ]
