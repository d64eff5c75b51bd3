"""GD181 graph-launches-without-ops."""

from __future__ import annotations

from diag.facts.record import RunFacts
from diag.model import Evidence
from diag.rules.base import Remedy, Rule, Threshold, pct
from diag.rules.metrics import RunMetrics
from diag.rules.selectors import selector


@selector("trace_lost_ops")
def _lost(f: RunFacts) -> list[Evidence]:
    """The traces whose graph launches carry no GPU op (a trace has no line to point at)."""
    check = f.trace_check
    if check is None:
        return []
    return [
        Evidence(path, 0, f"{check.graph_launches_without_ops} graph launches without GPU ops")
        for path in check.traces[:1]
    ]


class GD181(Rule):
    """Graph launches in the profiler trace carry no GPU ops: CUPTI lost them, so the
    trace cannot prove those replays, and an empty join is no evidence of idle GPUs.

    Every node a ``cudaGraphLaunch`` / ``hipGraphLaunch`` runs appears as a kernel (or
    memcpy/memset) event carrying the launch's ``args.correlation``. When none does, the
    activity records were lost: a CUPTI warm-up before capture (the profiler started
    before the graphs were captured), a buffer overflow, or a profile without CUDA
    activities. The steps holding them are ``unverified``: neither graph nor eager.

    Fires::

        incident: sglang-trace-lost-ops

    Near miss (every graph launch carries its kernels)::

        incident: sglang-trace-verified
    """

    code = "GD181"
    name = "graph-launches-without-ops"
    severity = "warning"
    trigger = "at least min_share of the trace's graph launches carry no GPU op"
    impact = 20
    evidence = "trace_lost_ops"
    reads = ("trace.trace_graph_launches", "trace.trace_launches_without_ops")
    thresholds = {
        "min_share": Threshold(
            0.01,
            "Any lost replay makes its step unverified; one in a hundred is where the "
            "trace's graph/eager split stops being exact.",
        )
    }
    remedies = (
        Remedy(
            "Start the profile once capture is done and the server has served a few "
            "requests (POST /start_profile after start-up), so that CUPTI's warm-up does "
            "not fall before the graphs are captured.",
            source="/work/shared/formats/torch-traces.md §1 (kineto issues 1062, 1165)",
        ),
        Remedy(
            "Profile with CUDA activities on: give SGLang's /start_profile both CPU and GPU "
            "in its activities list.",
            engine="sglang",
            source="sglang scheduler_profiler_mixin.py (torch-traces.md §2)",
        ),
    )

    def share(self, m: RunMetrics) -> float:
        return (
            m.trace.trace_launches_without_ops / m.trace.trace_graph_launches
            if m.trace.trace_graph_launches
            else 0.0
        )

    def fires(self, m: RunMetrics) -> bool:
        return m.trace.trace_launches_without_ops > 0 and self.share(m) >= self.t("min_share")

    def message(self, m: RunMetrics) -> str:
        return (
            f"{m.trace.trace_launches_without_ops} of {m.trace.trace_graph_launches} graph launches in the "
            f"profiler trace ({pct(self.share(m))}) carry no GPU op: CUPTI lost their kernels, "
            "so the steps holding them are unverified"
        )
