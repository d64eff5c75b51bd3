"""GD112 oversized-window."""

from __future__ import annotations

from diag.rules.base import Remedy, Rule, Standstill, Threshold
from diag.rules.metrics import RunMetrics
from diag.rules.quotes import (
    advice_withheld,
    advised_ceiling,
    advised_set,
    decode_capture_cost,
    start_rate,
    withheld_lead,
)


def _lower(m: RunMetrics) -> str | None:
    withheld = advice_withheld(m)
    if withheld is not None:
        return Standstill(f"{withheld_lead(m, 'Lowering')}: {withheld}.{start_rate(m)}")
    ceiling = advised_ceiling(m)
    if ceiling is None:
        return None
    s = advised_set(m)
    return (
        f"Lower the capture ceiling to {ceiling}"
        + (f": capture {s}" if s else "")
        + f".{start_rate(m)}"
    )


def _lower_flag(m: RunMetrics) -> str | None:
    """The version's own ceiling flag (the flag table's answer), when no advice is known."""
    if not m.flags.ceiling_flag:
        return None
    return (
        f"Lower the capture ceiling ({m.flags.ceiling_flag}) to the advised ceiling "
        "`graphdiag recommend` prints: less capture time and memory, more KV cache."
    )


def _too_little(m: RunMetrics) -> bool:
    d = m.flags.advice.decision if m.flags.advice is not None else None
    return d is not None and d.kind == "insufficient"


class GD112(Rule):
    """The capture ceiling is far above what the traffic needs: the capture time and graph
    memory of the large sizes buy nothing, and that memory is not available to the KV cache.

    "What the traffic needs" is the run's bucket advice ceiling (headroom included; the same
    one ``graphdiag recommend`` prints): the rule fires when the current ceiling is at least
    ``min_ratio`` times it. Without advice it compares with the observed p99 batch, but only
    where capture sizes count requests (SGLang): vLLM windows are token counts that also
    serve mixed prefill+decode steps, so decode-only running counts from stats lines do not
    make a vLLM window oversized (the advice keeps the current ceiling then, and so does
    this rule).

    Fires::

        incident: sglang-oversized-window

    Near miss (vLLM default 512-token window, small decode batches from stats lines)::

        incident: vllm-healthy
    """

    code = "GD112"
    name = "oversized-window"
    severity = "info"
    trigger = "graphs on, at least min_batches batches, a ceiling of at least min_ceiling and min_ratio times the recommended ceiling (SGLang without advice: the observed p99)"
    impact = 20
    evidence = "window"
    reads = (
        "flags.advice",
        "flags.ceiling_flag",
        "window.ceiling",
        "window.observed_count",
        "window.observed_max",
        "window.observed_p99",
        "window.token_window",
    )
    thresholds = {
        "min_ratio": Threshold(
            4.0,
            "A ceiling 4x what the traffic needs leaves most captured sizes unused even under bursts.",
        ),
        "min_batches": Threshold(20, "Needs a real traffic sample before calling sizes unused."),
        "min_ceiling": Threshold(32, "Small windows cost little; not worth a finding."),
    }
    remedies = (
        Remedy(
            "Lower the capture ceiling (the version's ceiling flag) to the advised ceiling "
            "`graphdiag recommend` prints: less capture time and memory, more KV cache.",
            engine="sglang",
            flags=("--cuda-graph-max-bs",),
            specific=lambda m: _lower(m) or _lower_flag(m),
        ),
        Remedy(
            "Lower the capture ceiling in tokens (the version's ceiling flag) to the advised one "
            "`graphdiag recommend` prints.",
            engine="vllm",
            flags=("cudagraph_capture_sizes",),
            specific=lambda m: _lower(m) or _lower_flag(m),
        ),
    )

    def _needed(self, m: RunMetrics) -> float | None:
        if m.flags.advice is not None:  # the traffic's ceiling, unless too little traffic to tell
            return float(m.flags.advice.ceiling) if not _too_little(m) else None
        if m.window.token_window:
            return None  # decode running counts do not size a token window
        return m.window.observed_p99

    def fires(self, m: RunMetrics) -> bool:
        needed = self._needed(m)
        return (
            m.graph_on
            and m.window.observed_count >= self.t("min_batches")
            and m.window.ceiling is not None
            and m.window.ceiling >= self.t("min_ceiling")
            and needed is not None
            and needed > 0
            and m.window.ceiling >= self.t("min_ratio") * needed
        )

    def held_back(self, m: RunMetrics) -> str | None:
        """A ceiling far above the traffic's while the advice has too little traffic to size."""
        a = m.flags.advice
        withheld = advice_withheld(m)
        if a is None or withheld is None or not _too_little(m) or not m.graph_on:
            return None
        if m.window.ceiling is None:
            return None
        if (
            m.window.ceiling < self.t("min_ceiling")
            or m.window.ceiling < self.t("min_ratio") * a.ceiling
        ):
            return None
        return (
            f"capture ceiling {m.window.ceiling} is {m.window.ceiling / a.ceiling:.1f}x the traffic's ceiling "
            f"{a.ceiling} {a.unit}; not reported as {self.code} {self.name}: {withheld}"
        )

    def message(self, m: RunMetrics) -> str:
        needed = self._needed(m) or 1.0
        ratio = (m.window.ceiling or 0) / needed
        if m.flags.advice is not None:
            against = f"the traffic's ceiling {m.flags.advice.ceiling} {m.flags.advice.unit} (its peak plus headroom)"
        else:
            against = f"the observed p99 batch size {needed:g}"
        out = f"Capture ceiling {m.window.ceiling} is {ratio:.1f}x {against}"
        if m.window.observed_max is not None:
            out += f" (largest batch {m.window.observed_max:g})"
        cost = decode_capture_cost(m)
        out += (
            f"; the decode capture took {cost}" if cost else "; the capture cost is not in the log"
        )
        return out
