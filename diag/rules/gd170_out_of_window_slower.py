"""GD170 out-of-window-slower."""

from __future__ import annotations

from collections.abc import Mapping

from diag.model import Finding
from diag.rules.base import Remedy, Rule, Standstill, Threshold, acts, num, pct
from diag.rules.metrics import RunMetrics


class GD170(Rule):
    """Requests served out of the window are measurably slower: per-request decode speed
    (generation throughput / running requests) of eager batches against graph batches.

    The remedy is GD110's: it quotes GD110's first remedy when GD110 fired on the run.

    Fires::

        incident: sglang-out-of-window

    Near miss (no eager batches to compare)::

        incident: sglang-healthy
    """

    code = "GD170"
    name = "out-of-window-slower"
    severity = "warning"
    trigger = "at least min_samples graph and eager intervals and eager decode at least min_slowdown slower per request"
    impact = 55
    evidence = "speed"
    reads = (
        "window.speed_in",
        "window.speed_out",
        "window.speed_samples_in",
        "window.speed_samples_out",
    )
    thresholds = {
        "min_slowdown": Threshold(
            0.15,
            "Interval-to-interval noise in logged throughput is ~10 %; 15 % is a real difference.",
        ),
        "min_samples": Threshold(3, "Both sides need a few logged intervals."),
    }
    remedies = (
        Remedy(
            "Bring the eager batches into the graph path (GD110's remedy), then re-measure with graphs on.",
            specific=lambda m: (
                f"Bring the eager batches ({m.window.eager_breakdown}) into the graph path "
                "(GD110's remedy), then re-measure with graphs on."
            ),
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        slow = m.window.slowdown
        return (
            m.window.speed_samples_in >= self.t("min_samples")
            and m.window.speed_samples_out >= self.t("min_samples")
            and slow is not None
            and slow >= self.t("min_slowdown")
        )

    def message(self, m: RunMetrics) -> str:
        return (
            f"Out-of-window decode is {pct(m.window.slowdown or 0)} slower per request "
            f"({num(m.window.speed_out or 0)} vs {num(m.window.speed_in or 0)} tok/s per request, over {m.window.speed_samples_out} "
            f"eager and {m.window.speed_samples_in} graph intervals)"
        )

    def adjust(self, m: RunMetrics, fired: Mapping[str, Finding], remedies: list[str]) -> list[str]:
        gd110 = fired.get("GD110")
        if gd110 is None or not gd110.remediation:
            return remedies
        first = gd110.remediation[0]
        text = f"Apply GD110's remedy: {first}"
        return [text if acts(first) else Standstill(text)]
