"""The figure slots of a run's section: each function takes the run's :class:`RunContext`
and returns panels, a chart, a small table for fewer than
:data:`~diag.render.axes.MIN_CHART_POINTS` points, or a sentence saying what is not in the
logs. :data:`diag.render.html_run.RUN_PANELS` lists them in page order: a new figure is one
more function there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pandas as pd

from diag.engines import spec_for
from diag.figures import number
from diag.model import Snapshot
from diag.render import advice_plots, load_plots, memory_plots, plots
from diag.render.axes import TimeAxis, wants_table
from diag.render.html_page import Page
from diag.render.numbers import fmt_num, joined
from diag.render.view import Panel, SmallTable
from diag.report import DecodeSpeed, RunRecord, RunReport, eager_change


# ------------------------------------------------------------------ figure slots
@dataclass
class RunContext:
    """What the panel functions of one run read: the page (figure collector), the run,
    its batches reduced for plotting, its load frame and the shared time axis."""

    page: Page
    run: RunReport
    batches: pd.DataFrame
    load: pd.DataFrame
    load_logged: bool  # any KV usage or request count logged (evictions alone draw nothing)
    axis: TimeAxis
    sizes: list[int] | None
    ceiling: int | None
    snapshots: list[Snapshot]
    load_bin_s: float | None = None  # the load samples were binned to this width (seconds)

    @property
    def evictions(self) -> str:
        spec = spec_for(self.run.facts.backend)
        return spec.eviction_word if spec else "preemptions"


def load_panels(ctx: RunContext) -> list[Panel]:
    """KV usage, running / waiting and evictions over time, where stats lines exist."""
    if not ctx.load_logged:
        return []
    rec = ctx.run.record
    share = rec.capture_mem_share
    heading = "KV cache and queue"
    note = load_plots.share_label(share, rec.capture_mem_gib) + "." if share else None
    if wants_table(len(ctx.load)):
        cols, rows = load_plots.kv_timeline_rows(ctx.load, ctx.axis, ctx.evictions)
        caption = (
            f"KV cache and queue: {len(rows)} sample{'s' if len(rows) != 1 else ''} logged; "
            f"{ctx.axis.origin()}"
        )
        return [
            Panel(
                "kv-timeline",
                table=SmallTable("kv-timeline", caption, cols, rows),
                caption=note,
                heading=heading,
            )
        ]
    fig = load_plots.kv_timeline_figure(
        ctx.load, ctx.axis, share, rec.capture_mem_gib, ctx.evictions, ctx.load_bin_s
    )
    if fig is None:
        return []
    chart = ctx.page.chart(fig, "KV cache and queue over time", "kv-timeline")
    return [Panel("kv-timeline", chart=chart, heading=heading)]


def batch_panels(ctx: RunContext) -> list[Panel]:
    """Histogram and timeline of decode batch sizes, or one small table for few batches."""
    rows = ctx.batches
    if rows.empty:
        return [
            Panel(
                "batches",
                absent="Batch-size distribution, timeline and throughput split: not in the logs "
                "(no decode batch lines).",
            )
        ]
    if wants_table(len(rows)):
        names = [plots.LABELS[v] for v in plots.VERDICTS]
        ts = rows["ts"].to_numpy()
        table_rows = [
            [
                ctx.axis.label(float(t)) if ctx.axis.kind != "sequence" else str(i + 1),
                f"{int(size):,}",
                str(names[int(v)]),
            ]
            for i, (t, size, v) in enumerate(zip(ts, rows["batch_size"], rows["v"], strict=True))
        ]
        caption = (
            f"Decode batches: {len(rows)} logged"
            + (f" (capture ceiling {ctx.ceiling})" if ctx.ceiling else "")
            + f"; {ctx.axis.origin()}"
        )
        return [
            Panel(
                "batches",
                table=SmallTable(
                    "batches", caption, ["time", "batch size", "served by"], table_rows
                ),
            )
        ]
    out = []
    hist = plots.batch_size_figure(rows, ctx.sizes, ctx.run.facts.window.sizes_inferred)
    if hist is not None:
        out.append(
            Panel(
                "batch-histogram",
                chart=ctx.page.chart(
                    hist, "Decode batch sizes against the capture window", "batch-histogram"
                ),
            )
        )
    timeline = plots.timeline_figure(rows, ctx.ceiling, ctx.axis)
    if timeline is not None:
        out.append(
            Panel(
                "batch-timeline",
                chart=ctx.page.chart(timeline, "Decode batch size over time", "batch-timeline"),
            )
        )
    return out


def throughput_panels(ctx: RunContext) -> list[Panel]:
    """Per-request decode speed first (what a user feels), engine total second: the total
    grows with batch size, so eager batches (the big ones) look faster there."""
    speeds = ctx.run.decode_speeds
    if not speeds:
        return []
    cols = [
        "served by",
        "batches",
        "per request (tok/s, median)",
        "p25–p75",
        "engine total (tok/s, median)",
    ]
    rows = []
    for s in speeds:
        name = "in window (graph)" if s.verdict == "graph" else "out of window (eager)"
        rows.append(
            [
                name,
                f"{s.n:,}",
                f"{s.per_req[1]:,.1f}",
                f"{s.per_req[0]:,.1f}–{s.per_req[2]:,.1f}",
                f"{s.gen_throughput[1]:,.0f}",
            ]
        )
    return [
        Panel(
            "throughput",
            table=SmallTable(
                "throughput", "Decode speed in vs out of the capture window", cols, rows
            ),
            caption=throughput_caption(speeds),
        )
    ]


def throughput_caption(speeds: Sequence[DecodeSpeed]) -> str | None:
    if len(speeds) == 1:
        only = "graph-served" if speeds[0].verdict == "graph" else "eager"
        return f"Only {only} batches carry a throughput figure: no in/out comparison possible from these logs."
    change = eager_change(speeds)
    if change is None:
        return None
    by = {s.verdict: s for s in speeds}
    a, b = by["graph"].per_req[1], by["eager"].per_req[1]
    word = "slower" if change < 0 else "faster"
    return (
        f"Per request, eager (out-of-window) decode runs at {number(b)} tok/s against {number(a)} in "
        f"the window: {abs(change):.0%} {word} (medians). The engine total grows with batch "
        "size, so it is no measure of speed per request."
    )


def memory_caption(rows: list[tuple[str, dict[str, float]]], rec: RunRecord) -> str | None:
    """Capture memory as a share of the KV pool and as KV tokens it could have held."""
    logs = dict(rows).get("logs (rank 0)") or {}
    graph = logs.get("CUDA graph capture", logs.get("CUDA graph capture (estimated)"))
    kv = logs.get("KV cache pool")
    if not graph or not kv:
        return None
    text = f"Graph capture holds {graph:,.2f} GiB, {graph / kv:.1%} of the KV pool ({kv:,.2f} GiB)"
    if rec.kv_tokens:
        text += f", about {graph / kv * float(rec.kv_tokens):,.0f} KV tokens"
    return text + "."


def capture_panels(ctx: RunContext) -> list[Panel]:
    """Memory budget (a chart only with two parts or more) and capture time per rank (a
    sentence for one rank, a table under 20 ranks)."""
    facts, rec = ctx.run.facts, ctx.run.record
    heading = "Capture cost"
    mem_rows = memory_plots.memory_budget_rows(
        facts.tables["sizing"], rec, facts.tables["capture_end"], ctx.snapshots
    )
    out: list[Panel] = []
    caption = memory_caption(mem_rows, rec)
    if memory_plots.components(mem_rows) >= 2:
        fig = memory_plots.memory_figure(mem_rows, memory_plots.oom_capacity(rec))
        if fig is not None:
            out.append(
                Panel(
                    "memory-budget",
                    chart=ctx.page.chart(fig, "GPU memory budget", "memory-budget"),
                    caption=caption,
                )
            )
    elif mem_rows:
        label, parts = mem_rows[0]
        name, value = next(iter(parts.items()))
        where = "rank 0, as logged" if label.startswith("logs") else label
        out.append(
            Panel(
                "memory-budget",
                caption=f"GPU memory budget: {name} {value:,.2f} GiB ({where}); no other part "
                "of the budget is in the logs, so no chart.",
            )
        )
    out.extend(capture_time_panels(facts.tables["capture_end"], ctx.page))
    if not out:
        out.append(
            Panel(
                "memory-budget",
                absent="Memory budget and capture time: not in the logs (no weight, KV or "
                "capture memory figures, no capture end line).",
            )
        )
    return [replace(out[0], heading=heading), *out[1:]]


def capture_time_panels(capture_end: pd.DataFrame, page: Page) -> list[Panel]:
    timed = (
        capture_end[pd.to_numeric(capture_end["time_s"], errors="coerce").notna()]
        if not capture_end.empty
        else capture_end
    )
    if timed.empty:
        return []
    if len(timed) == 1:
        row = timed.iloc[0]
        mem = pd.to_numeric(pd.Series([row.get("mem_gib")]), errors="coerce").iloc[0]
        where = f"{row.get('source')}:{row.get('line')}" if row.get("source") else None
        detail = joined(
            memory_plots.phase_words(row.get("phase")),
            f"rank {row.get('rank')}" if row.get("rank") else None,
            where,
            sep=", ",
        )
        text = f"Capture time: {fmt_num(float(row['time_s']), unit='s')}"
        if pd.notna(mem):
            text += f", {fmt_num(float(mem), unit='GiB')}"
        return [Panel("capture-time", caption=f"{text} ({detail}).")]
    if wants_table(len(timed)):
        rows = [
            [
                str(r.get("rank") or "(no rank)"),
                memory_plots.phase_words(r.get("phase")),
                fmt_num(float(r["time_s"]), unit="s") or "",
                fmt_num(
                    pd.to_numeric(pd.Series([r.get("mem_gib")]), errors="coerce").iloc[0],
                    unit="GiB",
                )
                or "",
            ]
            for _, r in timed.iterrows()
        ]
        return [
            Panel(
                "capture-time",
                table=SmallTable(
                    "capture-time",
                    "Capture time per rank",
                    ["rank", "graphs captured", "time", "memory"],
                    rows,
                ),
            )
        ]
    fig = memory_plots.capture_time_figure(capture_end)
    return (
        []
        if fig is None
        else [Panel("capture-time", chart=page.chart(fig, "Capture time per rank", "capture-time"))]
    )


def advice_panels(ctx: RunContext) -> list[Panel]:
    """The run's bucket advice (issue 14): frontier over K, current vs recommended buckets."""
    return advice_plots.advice_panels(ctx.page, ctx.run.advice)
