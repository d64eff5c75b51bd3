"""The "verified by trace" panel: what the run's profiler traces show, beside what its log says.

A view model only (the frames come from :mod:`diag.artifacts.trace`, the join from
:mod:`diag.facts.trace_join`); ``templates/trace_panel.html.j2`` draws it. Per run: steps by
verdict, the log batches joined to steps and those the trace contradicts, per trace the
launches, ops per graph launch and GPU time on graphs vs eager, the capture traces per size
beside the log's capture sizes, and the first profiled steps (``graphdiag parse`` exports
them all). Every cell is a figure or words; nothing the trace does not show is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from diag.artifacts.trace import TraceAnalysis
from diag.render.numbers import fmt_num, fmt_pct
from diag.report import Report, RunReport

MAX_STEP_ROWS = 20
MAX_CONTRADICTIONS = 10
VERDICT_LABELS = {
    "graph": "full graph replay",
    "piecewise": "piecewise (graph pieces, eager ops between)",
    "eager": "eager",
    "unverified": "unverified (graph launches without GPU ops)",
    "no_launches": "no kernel launch",
}


def _ms(us: float) -> str:
    return f"{us / 1000:,.2f} ms"


def _n(v: Any) -> str:
    return fmt_num(v, 0) or "0"


def _trace_row(t: TraceAnalysis) -> list[str]:
    s = t.summary
    spread = s["ops_per_graph_launch"]
    ops = (
        f"{spread['p50']} (min {spread['min']}, max {spread['max']})"
        if spread
        else "no graph launch"
    )
    total = s["gpu_us_graphs"] + s["gpu_us_eager"]
    share = f" ({fmt_pct(s['gpu_us_graphs'] / total)} on graphs)" if total else ""
    return [
        Path(t.path).name,
        "" if t.rank is None else str(t.rank),
        _n(s["graph_launches"]),
        _n(s["eager_launches"]),
        ops,
        f"{_ms(s['gpu_us_graphs'])} / {_ms(s['gpu_us_eager'])}{share}",
        _n(sum(s["steps"].values())),
    ]


def _capture_rows(traces: list[TraceAnalysis]) -> list[list[str]]:
    rows = []
    for t in traces:
        for c in t.captures.to_dict("records"):
            nodes = c["nodes_per_graph"]
            per_graph = (
                ", ".join(map(str, nodes))
                if len(nodes) <= 6
                else f"{min(nodes)}-{max(nodes)} ({sum(nodes):,} in all)"
            )
            in_log = {None: "no size list in the log", True: "yes", False: "no"}[
                t.in_log(c["size"])
            ]
            rows.append(
                [
                    str(c["size"]),
                    str(c["mode"]),
                    f"{c['dur_ms']:,.1f} ms",
                    _n(c["graphs"]),
                    _n(c["instantiated"]),
                    per_graph or "none recorded",
                    in_log,
                    Path(t.path).name,
                ]
            )
    return rows


def _step_rows(traces: list[TraceAnalysis]) -> tuple[list[list[str]], int]:
    rows: list[list[str]] = []
    total = 0
    for t in traces:
        total += len(t.steps)
        for r in t.steps.head(max(0, MAX_STEP_ROWS - len(rows))).to_dict("records"):
            bs = r["batch_size"]
            rows.append(
                [
                    str(r["step"])[:60],
                    "" if bs is None or bs != bs else str(bs),
                    VERDICT_LABELS[str(r["verdict"])],
                    _n(r["graph_launches"]),
                    _n(r["eager_launches"]),
                    _n(r["ops_on_graphs"]),
                    _n(r["ops_eager"]),
                    _ms(r["gpu_us_graphs"]),
                    _ms(r["gpu_us_eager"]),
                ]
            )
    return rows, total - len(rows)


def panel(traces: list[TraceAnalysis], run: RunReport | None) -> dict[str, Any]:
    """The panel of one run's traces (``run`` None: traces no run was found for)."""
    step_traces = [t for t in traces if t.kind == "step_trace"]
    steps: dict[str, int] = {}
    for t in step_traces:
        for v, n in t.summary["steps"].items():
            steps[v] = steps.get(v, 0) + int(n)
    n_steps = sum(steps.values())
    parts = [f"{n} {VERDICT_LABELS[v]}" for v, n in steps.items() if n]
    summary = (
        f"{n_steps} profiled step{'s' if n_steps != 1 else ''} in {len(step_traces)} trace"
        f"{'s' if len(step_traces) != 1 else ''}: {', '.join(parts)}."
        if n_steps
        else ""
    )
    check = run.light.trace_check if run is not None else None
    join = ""
    contradictions: list[list[str]] = []
    if check is not None:
        m = check.matches
        if not m.empty:
            agree = int(m["agree"].sum())
            join = (
                f"{len(m)} decode batch{'es' if len(m) != 1 else ''} of the log joined to a "
                f"profiled step of the same rank by time and batch size: {agree} agree, "
                f"{len(m) - agree} contradict the log."
            )
        for r in check.disagree.head(MAX_CONTRADICTIONS).to_dict("records"):
            contradictions.append(
                [
                    f"{Path(r['source']).name}:{r['line']}",
                    str(r["rank"]),
                    str(r["batch_size"]),
                    f"{r['log_verdict']} ({'logged' if r['logged'] else 'inferred'})",
                    VERDICT_LABELS[r["trace_verdict"]],
                    str(r["step"])[:60],
                ]
            )
    logged_sizes = run.record.graph_capture_sizes if run is not None else None
    step_rows, more = _step_rows(step_traces)
    capture_s = run.record.capture_time_s if run is not None else None
    return {
        "summary": summary,
        "join": join,
        "verdicts": [[VERDICT_LABELS[v], _n(n)] for v, n in steps.items() if n],
        "traces": [_trace_row(t) for t in traces if t.kind == "step_trace"],
        "captures": _capture_rows(traces),
        "capture_log": (
            f"The log's capture took {fmt_num(capture_s, 1)} s over "
            f"{len(logged_sizes or [])} sizes."
            if capture_s is not None and logged_sizes
            else ""
        ),
        "contradictions": contradictions,
        "steps": step_rows,
        "steps_more": more,
    }


def views(report: Report) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
    """The panel per run id, and the one of traces joined to no run (None if none)."""
    by_run: dict[str, list[TraceAnalysis]] = {}
    loose: list[TraceAnalysis] = []
    for t in report.traces:
        (by_run.setdefault(t.run, []) if t.run is not None else loose).append(t)
    runs = {r.id: r for r in report.runs}
    out = {rid: panel(ts, runs.get(rid)) for rid, ts in by_run.items() if rid in runs}
    return out, (panel(loose, None) if loose else None)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _launches(n: int, what: str) -> str:
    return f"{n:,} {what} launch{'' if n == 1 else 'es'}"


def trace_lines(report: Report) -> list[str]:
    """One line per trace for the text summary: launches, ops joined, steps or captures."""
    out = []
    for t in report.traces:
        s = t.summary
        where = ", ".join(
            x
            for x in (
                f"rank {t.rank}" if t.rank is not None else "",
                t.kind.replace("_", " "),
                f"run {t.run}" if t.run else "",
            )
            if x
        )
        if t.kind == "capture_trace":
            text = f"{t.path} [{where}]: {_launches(s['eager_launches'], 'kernel')} under capture"
        else:
            text = (
                f"{t.path} [{where}]: {_launches(s['graph_launches'], 'graph')} "
                f"({s['gpu_ops_on_graphs']:,} GPU ops on graphs), "
                f"{_launches(s['eager_launches'], 'eager')}"
            )
        steps = [f"{n} {VERDICT_LABELS[v]}" for v, n in s["steps"].items() if n]
        if steps:
            text += "; steps: " + ", ".join(steps)
        caps = [
            f"{c['size']} {c['mode']} ({_plural(c['graphs'], 'graph')}, "
            f"{sum(c['nodes_per_graph']):,} kernels)"
            for c in t.captures.to_dict("records")
        ]
        if caps:
            text += "; captured: " + ", ".join(caps)
        out.append(text)
        out.extend(f"note: {p}" for p in t.problems)
    return out
