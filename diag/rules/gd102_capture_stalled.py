"""GD102 capture-stalled."""

from __future__ import annotations

from diag.rules.base import Remedy, Rule
from diag.rules.metrics import RunMetrics


class GD102(Rule):
    """A rank began a graph runner's capture and logged no end: the server is stuck there.

    Each rank logs its own begin and end per runner (SGLang 2026:
    ``Capture {target|draft} {decode|verify|prefill|extend} CUDA graph begin/end`` on every
    rank); one whose end never comes while its peers ended theirs, or while the log went
    on, or with the log ending there, waits in capture: a collective waiting on a peer, a
    custom all-reduce hang (errors during capture are hidden there: sgl-project/sglang PR
    11275), a long first-size compile. No error line says so, so the run is never ``ok``.

    Fires::

        incident: sglang-2026-stall-one-rank-of-four

    Near miss (every rank ends every runner)::

        incident: sglang-2026-every-runner
    """

    code = "GD102"
    name = "capture-stalled"
    severity = "error"
    trigger = "a rank's capture begin line has no end line of that runner on that rank"
    impact = 95
    evidence = "capture_stall"
    reads = ("capture.capture_stalls", "settings.custom_all_reduce_off")
    thresholds = {}
    remedies = (
        Remedy(
            "Re-run with NCCL_DEBUG=INFO and the engine at DEBUG level: the stuck rank's last "
            "collective names the peer it waits for.",
        ),
        Remedy(
            "If the stuck rank waits in custom all-reduce, start with --disable-custom-all-reduce "
            "(a capture error there is otherwise hidden, sgl-project/sglang PR 11275).",
            flags=("--disable-custom-all-reduce",),
            in_effect=lambda m: m.settings.custom_all_reduce_off is not None,
        ),
        Remedy(
            "Give the first capture size time: a JIT or Inductor compile of the first size can "
            "take minutes without a line (compare the rank's silence with its peers' capture time).",
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        return bool(m.capture.capture_stalls)

    def message(self, m: RunMetrics) -> str:
        more = (
            f" (and {len(m.capture.capture_stalls) - 3} more)"
            if len(m.capture.capture_stalls) > 3
            else ""
        )
        return "Capture stalled: " + "; ".join(m.capture.capture_stalls[:3]) + more
