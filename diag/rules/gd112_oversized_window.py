"""GD112 oversized-window."""

from __future__ import annotations

from diag.rules.base import Remedy, Rule, Threshold
from diag.rules.metrics import RunMetrics
from diag.rules.quotes import advised_ceiling, advised_set, decode_capture_cost


def _lower(m: RunMetrics) -> str | None:
    ceiling = advised_ceiling(m)
    if ceiling is None:
        return None
    s = advised_set(m)
    return f"Lower the capture ceiling to {ceiling}" + (f": capture {s}" if s else "") + "."


def _lower_flag(m: RunMetrics) -> str | None:
    """The version's own ceiling flag (the flag table's answer), when no advice is known."""
    if not m.ceiling_flag:
        return None
    return (
        f"Lower the capture ceiling ({m.ceiling_flag}) to the advised ceiling "
        "`graphdiag recommend` prints: less capture time and memory, more KV cache."
    )


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
        if m.advice is not None:
            return float(m.advice.ceiling)
        if m.token_window:
            return None  # decode running counts do not size a token window
        return m.observed_p99

    def fires(self, m: RunMetrics) -> bool:
        needed = self._needed(m)
        return (
            m.graph_on
            and m.observed_count >= self.t("min_batches")
            and m.ceiling is not None
            and m.ceiling >= self.t("min_ceiling")
            and needed is not None
            and needed > 0
            and m.ceiling >= self.t("min_ratio") * needed
        )

    def message(self, m: RunMetrics) -> str:
        needed = self._needed(m) or 1.0
        ratio = (m.ceiling or 0) / needed
        if m.advice is not None:
            against = f"the recommended ceiling {m.advice.ceiling} {m.advice.unit}"
        else:
            against = f"the observed p99 batch size {needed:g}"
        out = f"Capture ceiling {m.ceiling} is {ratio:.1f}x {against}"
        if m.observed_max is not None:
            out += f" (largest batch {m.observed_max:g})"
        cost = decode_capture_cost(m)
        out += (
            f"; the decode capture took {cost}" if cost else "; the capture cost is not in the log"
        )
        return out
