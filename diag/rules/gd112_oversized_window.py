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
            "Lower --cuda-graph-max-bs (--cuda-graph-max-bs-decode from SGLang 0.5.15) to the "
            "advised ceiling `graphdiag recommend` prints: less capture time and memory, more KV cache.",
            engine="sglang",
            flags=("--cuda-graph-max-bs",),
            specific=_lower,
        ),
        Remedy(
            "Lower the capture ceiling in tokens to the advised one `graphdiag recommend` prints "
            "(max_cudagraph_capture_size from vLLM 0.11.1, --cuda-graph-sizes on 0.9.2-0.11.0).",
            engine="vllm",
            since=(0, 9, 2),
            specific=_lower,
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
