"""GD180 trace-contradicts-log."""

from __future__ import annotations

from diag.facts.record import RunFacts
from diag.model import Evidence
from diag.rules.base import Remedy, Rule, Threshold
from diag.rules.metrics import RunMetrics
from diag.rules.selectors import MAX_EVIDENCE, selector


@selector("trace_contradictions")
def _contradictions(f: RunFacts) -> list[Evidence]:
    """The log lines of the batches the trace contradicts, each with the step it met."""
    check = f.trace_check
    if check is None or check.disagree.empty:
        return []
    out: list[Evidence] = []
    for row in check.disagree.head(MAX_EVIDENCE - 1).itertuples(index=False):
        out.append(Evidence(row.source, int(row.line), ""))
    row = check.disagree.iloc[0]
    out.append(
        Evidence(
            str(row["trace"]),
            0,
            f"{row['step']}: {row['trace_verdict']} in the trace (batch size {row['batch_size']})",
        )
    )
    return out


class GD180(Rule):
    """The profiler trace contradicts the log: a decode batch the log counts as graph-served
    ran its forward pass eagerly in the trace, or the reverse.

    Each profiled step (vLLM ``execute_*``, SGLang ``step[...]``) is joined to the log's
    decode batch of the same rank and batch size by time (``--tz`` for logs stamped in
    local time); the trace's verdict comes from the step's launches: a graph launch whose
    GPU ops carry its correlation id is a replay, kernel launches one by one are eager.
    The trace is the ground truth: the log's flag is the engine's check made just before the
    forward pass (SGLang's ``cuda graph:`` is the runner's ``can_run_graph(forward_batch)``,
    ``sglang==0.5.23:sglang/srt/model_executor/model_runner.py:1991-2011``) or, without a
    flag, graphdiag's inference from the bucket list. Steps whose graph launches carry no GPU op are
    unverified and never count here (GD181).

    Fires::

        incident: sglang-trace-contradiction

    Near miss (the trace agrees with every joined batch)::

        incident: sglang-trace-verified
    """

    code = "GD180"
    name = "trace-contradicts-log"
    severity = "warning"
    trigger = "at least min_batches decode batches joined to a profiled step disagree with it"
    impact = 30
    evidence = "trace_contradictions"
    reads = (
        "trace.trace_batches_source",
        "trace.trace_log_eager_trace_graph",
        "trace.trace_log_graph_trace_eager",
        "trace.trace_matched",
    )
    thresholds = {
        "min_batches": Threshold(
            1,
            "One batch the trace contradicts already shows the log's graph/eager counts are "
            "not the server's: every count built on them is in doubt.",
        )
    }
    remedies = (
        Remedy(
            "Trust the trace: read the batch sizes of the steps that ran eagerly in the "
            "'verified by trace' panel of the report (or the trace_step rows of `graphdiag "
            "parse`) and make "
            "sure --cuda-graph-bs / --cuda-graph-max-bs capture them.",
            engine="sglang",
            flags=("--cuda-graph-bs", "--cuda-graph-max-bs"),
            when=lambda m: m.trace.trace_log_graph_trace_eager > 0,
        ),
        Remedy(
            "Trust the trace: read the batch sizes of the steps that ran eagerly in the "
            "'verified by trace' panel of the report (or the trace_step rows of `graphdiag "
            "parse`) and make "
            "sure the cudagraph_capture_sizes of --compilation-config capture them.",
            engine="vllm",
            flags=("cudagraph_capture_sizes",),
            when=lambda m: m.trace.trace_log_graph_trace_eager > 0,
        ),
        Remedy(
            "The run's graph/eager verdicts are inferred from its bucket list: where the trace "
            "contradicts them, the bucket list or mode read from the log is not what the "
            "server ran; quote the trace's counts (record trace_verified) instead.",
            when=lambda m: m.trace.trace_batches_source in ("inferred", "mixed"),
        ),
        Remedy(
            "Check that the log and the trace come from the same server and clock: for a log "
            "stamped in local time, give graphdiag analyze its zone (the tz option, e.g. "
            "Asia/Shanghai or +08:00), or the join pairs the wrong steps.",
            acts=False,
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        return m.trace.trace_log_graph_trace_eager + m.trace.trace_log_eager_trace_graph >= self.t(
            "min_batches"
        )

    def message(self, m: RunMetrics) -> str:
        parts = []
        if m.trace.trace_log_graph_trace_eager:
            parts.append(
                f"{m.trace.trace_log_graph_trace_eager} the log counts as graph-served ran eagerly"
            )
        if m.trace.trace_log_eager_trace_graph:
            parts.append(
                f"{m.trace.trace_log_eager_trace_graph} the log counts as eager replayed a graph"
            )
        bad = m.trace.trace_log_graph_trace_eager + m.trace.trace_log_eager_trace_graph
        how = {"logged": "logged by the engine", "inferred": "inferred from the bucket list"}.get(
            m.trace.trace_batches_source, "logged or inferred"
        )
        return (
            f"The profiler trace contradicts the log on {bad} of {m.trace.trace_matched} decode "
            f"batches joined to a profiled step ({'; '.join(parts)}); the log's verdicts are "
            f"{how}"
        )
