"""GD101 too-many-capture-sizes."""

from __future__ import annotations

from diag.rules.base import Remedy, Rule, Threshold
from diag.rules.metrics import RunMetrics
from diag.rules.quotes import advised_set


def _advised(m: RunMetrics) -> str | None:
    s = advised_set(m)
    return f"Capture {s}." if s else None


# the capture-failure classes a large set can cause (stream resources, per-size ops)
_SET_CAUSED = ("stream_capture_invalid", "unsupported_op", "other")


class GD101(Rule):
    """A very large bucket set: capture is slow and, past a point, exhausts CUDA streams or
    graph resources so that capture fails.

    Fires on a bucket set above ``max_buckets``, or on a stream-capture, unsupported-op or
    unexplained (``other``) capture failure with more than ``failure_buckets`` sizes where the set is larger than the
    engine's own default for the version and config (the user enlarged it, so the failure is
    attributable to the set's size). A failure with the engine's default set, an OOM (memory)
    or a distributed failure (NCCL/gloo transport) is not blamed on the set: GD100 names its
    cause, and advising fewer sizes there would send the reader the wrong way. The remedy
    quotes the run's bucket advice when there is one; without decode traffic it says to capture
    an explicit, smaller list in the version's own flag.

    Fires::

        incident: sglang-too-many-sizes

    Near miss (the 52-size default list and a gloo failure: the transport, not the set)::

        incident: sglang-capture-nccl
    """

    code = "GD101"
    name = "too-many-capture-sizes"
    severity = "warning"
    trigger = (
        "more than max_buckets capture sizes, or a stream-capture/unsupported-op/other capture "
        "failure with more than failure_buckets sizes, more than the engine's default set"
    )
    impact = 40
    evidence = "buckets"
    reads = (
        "capture.capture_error_class",
        "capture.default_bucket_count",
        "capture.n_buckets",
        "window.ceiling",
    )
    thresholds = {
        "max_buckets": Threshold(
            96,
            "Both engines' largest defaults are 83 (vLLM on SM10x) and 67/52 elsewhere; beyond "
            "~96 sizes capture time and stream use grow with no coverage gain.",
        ),
        "failure_buckets": Threshold(
            48,
            "A stream-capture or unsupported-op failure with more than ~48 sizes, more than "
            "the engine's default set, is most often cured by a smaller set.",
        ),
    }
    remedies = (
        Remedy(
            "Capture an explicit, smaller list with --cuda-graph-bs (the -decode spelling where "
            "the config echo shows per-phase keys); `graphdiag recommend` gives the set.",
            engine="sglang",
            flags=("--cuda-graph-bs",),
            specific=_advised,
        ),
        Remedy(
            "Capture an explicit, smaller cudagraph_capture_sizes list in --compilation-config; "
            "`graphdiag recommend` gives the set in tokens.",
            engine="vllm",
            flags=("cudagraph_capture_sizes",),
            specific=_advised,
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        n = m.capture.n_buckets
        if n is None:
            return False
        if n > self.t("max_buckets"):
            return True
        return self._failure_of_the_set(m) and n > self.t("failure_buckets")

    @staticmethod
    def _failure_of_the_set(m: RunMetrics) -> bool:
        """A capture failure the set's size can explain: stream/op class, user-enlarged set."""
        if not m.capture_failed or m.capture.capture_error_class not in _SET_CAUSED:
            return False
        default = m.capture.default_bucket_count
        return (
            default is not None
            and m.capture.n_buckets is not None
            and m.capture.n_buckets > default
        )

    def message(self, m: RunMetrics) -> str:
        ceiling = f" up to {m.window.ceiling}" if m.window.ceiling is not None else ""
        out = f"{m.capture.n_buckets} capture sizes{ceiling}: capture time and graph resources grow with every size"
        if self._failure_of_the_set(m):
            out += (
                f"; capture failed ({m.capture.capture_error_class}) with this many sizes, more than "
                f"the engine's default {m.capture.default_bucket_count}"
            )
        return out
