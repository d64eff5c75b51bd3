"""GD101 too-many-capture-sizes."""

from __future__ import annotations

from diag.rules.base import Remedy, Rule, Threshold
from diag.rules.metrics import RunMetrics
from diag.rules.quotes import advised_set


def _advised(m: RunMetrics) -> str | None:
    s = advised_set(m)
    return f"Capture {s}." if s else None


class GD101(Rule):
    """A very large bucket set: capture is slow and, past a point, exhausts CUDA streams or
    graph resources so that capture fails.

    Fires on a bucket set above ``max_buckets``, or on a non-OOM capture failure with more
    than ``failure_buckets`` sizes (the failure is then attributable to the set's size). The
    remedy quotes the run's bucket advice when there is one; without decode traffic it says
    to capture an explicit, smaller list in the version's own flag.

    Fires::

        incident: sglang-too-many-sizes

    Near miss (52 sizes and an OOM capture failure: memory, not the set's size)::

        incident: sglang-capture-oom
    """

    code = "GD101"
    name = "too-many-capture-sizes"
    severity = "warning"
    trigger = "more than max_buckets capture sizes, or more than failure_buckets with a non-OOM capture failure"
    impact = 40
    evidence = "buckets"
    thresholds = {
        "max_buckets": Threshold(
            96,
            "Both engines' largest defaults are 83 (vLLM on SM10x) and 67/52 elsewhere; beyond "
            "~96 sizes capture time and stream use grow with no coverage gain.",
        ),
        "failure_buckets": Threshold(
            48,
            "A stream/distributed/unsupported-op capture failure with more than ~48 sizes is "
            "most often cured by a smaller set.",
        ),
    }
    remedies = (
        Remedy(
            "Capture an explicit, smaller list: --cuda-graph-bs (SGLang 0.4.3+; "
            "--cuda-graph-bs-decode from 0.5.15); `graphdiag recommend` gives the set.",
            engine="sglang",
            flags=("--cuda-graph-bs",),
            specific=_advised,
        ),
        Remedy(
            "Capture an explicit, smaller cudagraph_capture_sizes list in --compilation-config "
            "(vLLM 0.6.6+); `graphdiag recommend` gives the set in tokens.",
            engine="vllm",
            flags=("cudagraph_capture_sizes",),
            specific=_advised,
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        n = m.n_buckets
        if n is None:
            return False
        if n > self.t("max_buckets"):
            return True
        non_oom_failure = m.capture_failed and m.capture_error_class != "oom"
        return non_oom_failure and n > self.t("failure_buckets")

    def message(self, m: RunMetrics) -> str:
        ceiling = f" up to {m.ceiling}" if m.ceiling is not None else ""
        out = f"{m.n_buckets} capture sizes{ceiling}: capture time and graph resources grow with every size"
        if m.capture_failed and m.capture_error_class != "oom":
            out += f"; capture failed ({m.capture_error_class}) with this many sizes"
        return out
