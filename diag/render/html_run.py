"""One run's section of the HTML report as a view (see :mod:`diag.render.view`): tiles,
the KV and queue timeline, eager traffic, batch panels, capture cost, ranks, operator
tables and snapshot pools, each read from the run's facts, never recomputed.

The figure slots of a run are the functions of :data:`RUN_PANELS` (diag.render.html_panels), called in order with
one :class:`RunContext`; each returns panels (a chart, a small table for fewer than
:data:`~diag.render.axes.MIN_CHART_POINTS` points, or a sentence saying what is not in
the logs). A new figure is one more function in that list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from diag.batch_labels import Reason
from diag.figures import share
from diag.model import Snapshot
from diag.render import memory_plots, plots
from diag.render.axes import time_axis
from diag.render.html_page import Page
from diag.render.html_panels import (
    RunContext,
    advice_panels,
    batch_panels,
    capture_panels,
    load_panels,
    throughput_panels,
)
from diag.render.numbers import fmt_bytes, fmt_num, fmt_pct, joined
from diag.render.runners import RUNNER_COLUMNS, runner_rows, startup_view
from diag.render.sizes import compact_sizes
from diag.render.view import Card, Panel, RunRow
from diag.report import RunReport

MAX_PROFILE_ROWS = 15
MAX_SNAPSHOT_ALLOCS = 5

EAGER_REASONS: dict[Reason, str] = {
    "above_ceiling": "above the capture ceiling",
    "unpadded_gap": "between buckets with padding disabled",
    "engine_reported_eager": "inside the window, but the engine ran them eager",
    "graphs_disabled": "graphs disabled for the run",
    "logged_eager": "logged eager (window not in the logs)",
}


def cards(run: RunReport) -> list[Card]:
    """Tiles for known values only; the engine's mode word sits on its own line (a long
    word like FULL_AND_PIECEWISE never cuts the tile)."""
    rec = run.record
    b = rec.batches
    shape = rec.decode_batch_shape
    decided = b.decided
    on_graphs = rec.captured_share
    out: list[Card] = []
    if rec.capture_error:
        out.append(Card("capture error", rec.capture_error.error_class, cls="bad"))
    out.append(Card("graphs", rec.graph_mode, sub=rec.cudagraph_mode or None))
    if on_graphs is not None:
        out.append(
            Card(
                "on graphs",
                share(on_graphs) + (f" of {decided:,}" if decided else ""),
                cls="good" if on_graphs >= 0.9 else "bad",
            )
        )
    if decided:
        out.append(Card("eager batches", f"{b.eager:,}", cls="bad" if b.eager else ""))
    ceiling, top = run.ceiling, shape.max if shape else None
    default = "engine default" if run.ceiling_inferred else None
    if ceiling is not None and top is not None:
        bad = "bad" if top > ceiling else ""
        value = f"{fmt_num(ceiling)} / {fmt_num(top)}"
        out.append(Card("ceiling / max batch", value, sub=default, cls=bad))
    elif ceiling is not None:
        out.append(Card("capture ceiling", str(fmt_num(ceiling)), sub=default))
    elif top is not None:
        out.append(Card("largest decode batch", str(fmt_num(top))))
    p50 = joined(fmt_num(shape.p50), fmt_num(shape.p99), sep=" / ") if shape else None
    if p50:
        out.append(Card("batch p50 / p99", p50))
    cap = joined(fmt_num(rec.capture_time_s, unit="s"), fmt_num(rec.capture_mem_gib, unit="GiB"))
    if cap:
        out.append(Card("capture", cap))
    kv = joined(fmt_num(rec.kv_tokens, unit="tokens"), fmt_num(rec.kv_cache_gib, unit="GiB"))
    if kv:
        out.append(Card("KV pool", kv))
    if rec.padding_waste is not None:
        out.append(Card("padding waste", share(rec.padding_waste)))
    return out


def eager_view(run: RunReport) -> dict[str, Any]:
    b = run.record.batches  # the run's one count of graph / eager / undecided steps
    decided = b.decided
    if not decided:
        if b.unknown:
            return {"kind": "undecided", "unknown": f"{b.unknown:,}"}
        return {"kind": "none"}
    if not b.eager:
        return {"kind": "all-graph", "decided": f"{decided:,}"}
    rows = []
    for r in run.eager_reasons:  # (kept beside the facts: no rows read back)
        lo, hi = r.min_size, r.max_size
        rng = (
            ""
            if lo is None or hi is None
            else (f"{int(lo)}" if lo == hi else f"{int(lo)}–{int(hi)}")
        )
        why = EAGER_REASONS[r.reason] if r.reason in EAGER_REASONS else r.reason
        rows.append([why, f"{r.batches:,.0f}", f"{r.batches / decided:.0%}", rng])
    return {
        "kind": "eager",
        "eager": f"{b.eager:,}",
        "decided": f"{decided:,}",
        "share": f"{b.eager / decided:.0%}",
        "ceiling": None
        if run.ceiling is None
        else f"{run.ceiling}" + (" (engine default)" if run.ceiling_inferred else ""),
        "rows": rows,
    }


RANK_COLUMNS = {
    "capture_time_s": "capture time (s)",
    "capture_mem_gib": "capture memory (GiB)",
    "kv_tokens": "KV tokens",
    "kv_cache_gib": "KV pool (GiB)",
    "gpu_blocks": "GPU blocks",
    "captured_share": "on graphs",
}


def ranks_view(run: RunReport) -> dict[str, Any] | None:
    ranks = [r.to_json() for r in run.ranks]  # (columns picked by the JSON's names)
    if len(ranks) <= 1:
        return None
    cols = [c for c in RANK_COLUMNS if any(r[c] is not None for r in ranks)]
    if not cols:
        return None
    rows = [
        [str(r["rank"] or "(none)")]
        + [(fmt_pct(r[c]) if c == "captured_share" else fmt_num(r[c])) or "" for c in cols]
        for r in ranks
    ]
    return {"columns": ["rank"] + [RANK_COLUMNS[c] for c in cols], "rows": rows}


PROFILE_COLS = {
    "self_cuda_s": "self CUDA (ms)",
    "cuda_total_s": "CUDA total (ms)",
    "self_cpu_s": "self CPU (ms)",
    "cpu_total_s": "CPU total (ms)",
    "calls": "calls",
}


def distinct_names(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Operator names as shown, never two alike: torch cuts long kernel names in its table
    (``sm90_xmma_gemm_...``), so rows the cut made equal are told apart by their input
    shapes where those differ, else by their place among the rows named alike."""
    names = [str(r.get("name") or "") for r in rows]
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for r, n in zip(rows, names, strict=True):
        if counts[n] == 1:
            out.append(n)
            continue
        seen[n] = seen.get(n, 0) + 1
        shapes = str(r.get("input_shapes") or "")
        out.append(f"{n} [{shapes}]" if shapes else f"{n} ({seen[n]} of {counts[n]})")
    if len(set(out)) < len(out):  # shapes alike too: their place tells them apart
        alike: dict[str, int] = {}
        for n in out:
            alike[n] = alike.get(n, 0) + 1
        seen2: dict[str, int] = {}
        for i, n in enumerate(list(out)):
            if alike[n] > 1:
                seen2[n] = seen2.get(n, 0) + 1
                out[i] = f"{n} ({seen2[n]} of {alike[n]})"
    return out


def profile_view(p: Mapping[str, Any], open_: bool = True) -> dict[str, Any]:
    """One operator table, top rows only, a data bar on the sort column; later tables fold."""
    rows = list(p.get("rows") or [])
    sort_by = str(p.get("sort_by") or "")
    key = {
        "cuda_time_total": "cuda_total_s",
        "self_cuda_time_total": "self_cuda_s",
        "cpu_time_total": "cpu_total_s",
        "self_cpu_time_total": "self_cpu_s",
    }.get(sort_by)
    cols = [c for c in PROFILE_COLS if any(r.get(c) is not None for r in rows)]
    if key is None or key not in cols:
        key = next(
            (c for c in ("cuda_total_s", "self_cuda_s", "cpu_total_s", "self_cpu_s") if c in cols),
            None,
        )
    if key:
        rows.sort(key=lambda r: -(r.get(key) or 0))
    shown = rows[:MAX_PROFILE_ROWS]
    top = max((float(r.get(key) or 0) for r in shown), default=0.0) if key else 0.0
    out_rows = []
    for r, name in zip(shown, distinct_names(shown), strict=True):
        cells = []
        for c in cols:
            v = r.get(c)
            text = (
                fmt_num(v) if c == "calls" else (None if v is None else f"{float(v) * 1e3:,.3f}")
            ) or ""
            bar = max(1, int(60 * float(v) / top)) if c == key and top > 0 and v is not None else 0
            cells.append({"text": text, "bar": bar})
        out_rows.append(
            {
                "name": name,
                "shapes": str(r.get("input_shapes") or ""),
                "cells": cells,
            }
        )
    totals = joined(
        *(
            f"{label} total {fmt_num(p.get(k), 4, 's')}"
            for k, label in (("self_cpu_total_s", "self CPU"), ("self_cuda_total_s", "self CUDA"))
            if fmt_num(p.get(k)) is not None
        ),
        sep=", ",
    )
    more = f"top {len(shown)} of {len(rows)} rows" if len(rows) > len(shown) else None
    return {
        "open": open_,
        "title": f"Operators sorted by {sort_by}"
        if sort_by
        else "Operators (sort key not printed)",
        "name": Path(str(p.get("path", ""))).name,
        "where": joined(f"{p.get('path')}:{p.get('line')}", totals, more),
        "columns": [PROFILE_COLS[c] for c in cols],
        "shapes": any(r.get("input_shapes") for r in shown),
        "rows": out_rows,
    }


def snapshot_view(snap: Snapshot) -> dict[str, Any]:
    s = snap.to_dict()
    pools = [
        [
            str(p.get("kind") or ""),
            str(p.get("pool_id") or ""),
            fmt_bytes(p.get("reserved_bytes")) or "",
            fmt_bytes(p.get("allocated_bytes")) or "",
            fmt_num(p.get("segments")) or "",
        ]
        for p in s.get("pools") or []
    ]
    parts = [
        (
            f"reserved {fmt_bytes(s.get('total_reserved_bytes'))}"
            if fmt_bytes(s.get("total_reserved_bytes"))
            else None
        ),
        (
            f"allocated {fmt_bytes(s.get('total_allocated_bytes'))}"
            if fmt_bytes(s.get("total_allocated_bytes"))
            else None
        ),
        (f"peak {fmt_bytes(s.get('peak_bytes'))}" if fmt_bytes(s.get("peak_bytes")) else None),
        (
            f"graph pools {fmt_bytes(snap.graph_pool_bytes)}"
            if fmt_bytes(snap.graph_pool_bytes)
            else None
        ),
        (f"OOM events {fmt_num(s.get('oom_events'))}" if fmt_num(s.get("oom_events")) else None),
        (f"format {s.get('torch_format')}" if s.get("torch_format") else None),
        (f"status {s.get('status')}" if s.get("status") else None),
    ]
    allocs = [
        [fmt_bytes(a.get("bytes")) or "", str((a.get("frames") or [""])[0])]
        for a in list(s.get("top_allocations") or [])[:MAX_SNAPSHOT_ALLOCS]
    ]
    return {
        "name": Path(str(s.get("path", ""))).name,
        "path": str(s.get("path") or ""),
        "summary": joined(*parts, sep=", ") or "",
        "pools": pools,
        "allocs": allocs,
    }


#: the run section's figure slots, in page order after the eager-traffic summary
RUN_PANELS: list[Callable[[RunContext], list[Panel]]] = [
    batch_panels,
    throughput_panels,
    advice_panels,
    capture_panels,
]


def run_view(
    page: Page,
    row: RunRow,
    run: RunReport,
    profiles: Sequence[Mapping[str, Any]],
    snapshots: list[Snapshot],
    figures_left_out: str | None = None,
) -> dict[str, Any]:
    """The run's section; ``figures_left_out``: why it draws no figure (a quiet run on a
    fleet's page), said where they would be."""
    # a section without charts reads nothing but what the report keeps beside the facts
    sizes = list(run.window.sizes or ())  # the record's list, or the engine's default
    above, below = ([], []) if figures_left_out else _figure_panels(page, run, sizes, snapshots)
    notes = [n for n in run.notes if not (snapshots and n.startswith("snapshot "))]
    return {
        "row": row,
        "sources": list(run.sources),
        "cards": cards(run),
        "buckets": compact_sizes(sizes),
        "buckets_inferred": run.window.sizes_inferred,
        "padding": run.window.padding,
        "flags": run.flags or None,
        "load_panels": above,
        "eager": eager_view(run),
        "panels": below,
        "figures_left_out": figures_left_out,
        "ranks": ranks_view(run),
        "graphs": {"columns": RUNNER_COLUMNS, "rows": runner_rows(run)}
        if run.record.graphs
        else None,
        "startup": startup_view(run),
        "profiles": [profile_view(p, open_=i < 2) for i, p in enumerate(profiles)],
        "snapshots": [snapshot_view(s) for s in snapshots],
        "notes": notes,
    }


def _figure_panels(
    page: Page, run: RunReport, sizes: list[int], snapshots: list[Snapshot]
) -> tuple[list[Panel], list[Panel]]:
    """The run's load panels (above the eager-traffic summary) and figure panels (below)."""
    facts = run.facts
    batches = plots.prepare_batches(facts.batches)
    load = run.load_timeline(plots.MAX_TIMELINE_POINTS)
    axis = time_axis([batches["ts"].to_numpy(), load.ts], facts.year_source)
    ctx = RunContext(
        page=page,
        run=run,
        batches=batches,
        load=load.frame,
        load_logged=load.logged,
        axis=axis,
        sizes=sizes or None,
        ceiling=facts.ceiling,
        snapshots=snapshots,
        load_bin_s=load.bin_s,
    )
    return load_panels(ctx), [p for make in RUN_PANELS for p in make(ctx)]


def unattached_view(
    page: Page, profiles: Sequence[Mapping[str, Any]], snapshots: list[Snapshot]
) -> dict[str, Any] | None:
    if not profiles and not snapshots:
        return None
    panels = []
    if snapshots:
        fig = memory_plots.memory_figure(
            memory_plots.memory_budget_rows(pd.DataFrame(), None, pd.DataFrame(), snapshots)
        )
        if fig is not None:
            panels.append(
                Panel(
                    "memory-budget", chart=page.chart(fig, "Memory snapshot pools", "memory-budget")
                )
            )
    return {
        "panels": panels,
        "snapshots": [snapshot_view(s) for s in snapshots],
        "profiles": [profile_view(p, open_=i < 2) for i, p in enumerate(profiles)],
    }
