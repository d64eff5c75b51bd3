"""One run's section of the HTML report: cards, eager traffic, ranks, plots, operator
tables and snapshot pools (each read from the run's facts, never recomputed)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diag.facts.classify import Reason
from diag.model import Snapshot
from diag.render import advice_plots, memory_plots, plots
from diag.render.html_page import Page, badge, e, fmt_bytes, fmt_num, fmt_pct, fmt_sizes
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


def cards(run: RunReport) -> str:
    rec = run.record
    b = rec["batches"]
    shape = rec["decode_batch_shape"] or {}
    perf = rec["perf"] or {}
    decided = b["graph"] + b["eager"]
    share = rec["captured_share"]
    items: list[tuple[str, str, str]] = [
        (
            "graphs",
            e(rec["graph_mode"])
            + (f" ({e(rec['cudagraph_mode'])})" if rec["cudagraph_mode"] else ""),
            "",
        ),
        (
            "on graphs",
            f"{fmt_pct(share)}" + (f" of {decided:,}" if decided else ""),
            "" if share is None else ("good" if share >= 0.9 else "bad"),
        ),
        ("eager batches", f"{b['eager']:,}", "bad" if b["eager"] else ""),
        (
            "ceiling / max batch",
            f"{fmt_num(rec['cuda_graph_max_bs'])} / {fmt_num(shape.get('max'))}",
            "bad"
            if rec["cuda_graph_max_bs"]
            and shape.get("max")
            and shape["max"] > rec["cuda_graph_max_bs"]
            else "",
        ),
        ("batch p50 / p99", f"{fmt_num(shape.get('p50'))} / {fmt_num(shape.get('p99'))}", ""),
        (
            "capture",
            f"{fmt_num(rec['capture_time_s'], unit='s')} · {fmt_num(rec['capture_mem_gib'], unit='GiB')}",
            "",
        ),
        (
            "KV pool",
            f"{fmt_num(rec['kv_tokens'])} tok · {fmt_num(rec['kv_cache_gib'], unit='GiB')}",
            "",
        ),
        ("padding waste", fmt_pct(rec["padding_waste"]), ""),
        (
            "tok/s in / out window",
            f"{fmt_num(perf.get('throughput_in_window'), 0)} / "
            f"{fmt_num(perf.get('throughput_out_window'), 0)}",
            "",
        ),
    ]
    if rec["capture_error"]:
        items.insert(0, ("capture error", e(rec["capture_error"]["class"]), "bad"))
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card {cls}"><div class="k">{e(k)}</div><div class="v">{v}</div></div>'
            for k, v, cls in items
        )
        + "</div>"
    )


def eager_breakdown(batches: pd.DataFrame) -> pd.DataFrame:
    """Eager decode batches by reason: weighted count and batch-size range."""
    empty = pd.DataFrame(columns=["reason", "batches", "min", "max"])
    if batches is None or batches.empty:
        return empty
    mask = plots.verdict_codes(batches["verdict"]) == 1
    if not mask.any():
        return empty
    codes, uniques = pd.factorize(batches["reason"][mask], use_na_sentinel=False)
    frame = pd.DataFrame(
        {
            "code": codes,
            "size": pd.to_numeric(batches["batch_size"][mask], errors="coerce").to_numpy(
                dtype="float64", na_value=np.nan
            ),
            "weight": pd.to_numeric(batches["weight"][mask], errors="coerce").to_numpy(
                dtype="float64", na_value=1.0
            ),
        }
    )
    out = (
        frame.groupby("code", sort=True)
        .agg(batches=("weight", "sum"), min=("size", "min"), max=("size", "max"))
        .reset_index()
    )
    names = np.asarray(
        [
            (
                "unknown"
                if u is None or u is pd.NA or (isinstance(u, float) and math.isnan(u))
                else str(u)
            )
            for u in uniques
        ],
        dtype=object,
    )
    out.insert(0, "reason", names[out.pop("code").to_numpy()])
    return out.sort_values("batches", ascending=False).reset_index(drop=True)


def batch_counts(batches: pd.DataFrame) -> dict[str, int]:
    """Weighted graph / eager / unknown counts of the classify frame (what the plots show)."""
    if batches is None or batches.empty:
        return {"graph": 0, "eager": 0, "unknown": 0}
    codes = plots.verdict_codes(batches["verdict"])
    weight = pd.to_numeric(batches["weight"], errors="coerce").to_numpy(
        dtype="float64", na_value=1.0
    )
    sums = np.bincount(codes, weights=weight, minlength=3)
    return {name: int(round(sums[i])) for i, name in enumerate(plots.VERDICTS)}


def eager_summary(run: RunReport) -> str:
    rec = run.record
    b = batch_counts(run.facts.batches)
    decided = b["graph"] + b["eager"]
    if not decided:
        if b["unknown"]:
            return (
                f'<p class="eager-summary">{b["unknown"]:,} decode batches seen, but whether they ran on '
                "graphs is not in the logs (no per-batch flag and no bucket list).</p>"
            )
        return '<p class="absent">Decode batches: not in the logs.</p>'
    if not b["eager"]:
        return (
            f'<p class="eager-summary none">All {decided:,} decided decode batches ran on captured '
            "graphs.</p>"
        )
    table = eager_breakdown(run.facts.batches)
    rows = []
    for _, r in table.iterrows():
        rng = (
            "n/a"
            if pd.isna(r["min"])
            else (
                f"{int(r['min'])}" if r["min"] == r["max"] else f"{int(r['min'])}–{int(r['max'])}"
            )
        )
        reason = str(r["reason"])
        why = EAGER_REASONS[reason] if reason in EAGER_REASONS else reason  # type: ignore[index]
        rows.append(
            f'<tr><td>{e(why)}</td><td class="num">{r["batches"]:,.0f}</td>'
            f'<td class="num">{r["batches"] / decided:.0%}</td><td class="num">{e(rng)}</td></tr>'
        )
    ceiling = rec["cuda_graph_max_bs"]
    lead = (
        f"<strong>{b['eager']:,} of {decided:,} decode batches ({b['eager'] / decided:.0%}) ran eagerly"
        + (f"</strong> with a capture ceiling of {e(ceiling)}." if ceiling else ".</strong>")
    )
    return (
        f'<div class="eager-summary"><p>{lead} Which traffic fell back:</p>'
        '<table><thead><tr><th>reason</th><th class="num">batches</th><th class="num">share</th>'
        '<th class="num">batch sizes</th></tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table></div>"
    )


def ranks_table(run: RunReport) -> str:
    ranks = run.facts.ranks or []
    if len(ranks) <= 1:
        return ""
    cols = [
        c
        for c in (
            "capture_time_s",
            "capture_mem_gib",
            "kv_tokens",
            "kv_cache_gib",
            "gpu_blocks",
            "captured_share",
        )
        if any(r.get(c) is not None for r in ranks)
    ]
    if not cols:
        return ""
    head = "".join(f'<th class="num">{e(c)}</th>' for c in cols)
    body = "".join(
        "<tr><td>"
        + e(r.get("rank") or "(none)")
        + "</td>"
        + "".join(f'<td class="num">{e(fmt_num(r.get(c)))}</td>' for c in cols)
        + "</tr>"
        for r in ranks
    )
    return (
        f"<details><summary>Per-rank figures ({len(ranks)} ranks)</summary>"
        f"<table><thead><tr><th>rank</th>{head}</tr></thead><tbody>{body}</tbody></table></details>"
    )


PROFILE_COLS = {
    "self_cuda_s": "self CUDA (ms)",
    "cuda_total_s": "CUDA total (ms)",
    "self_cpu_s": "self CPU (ms)",
    "cpu_total_s": "CPU total (ms)",
    "calls": "calls",
}


def profile_section(p: Mapping[str, Any], open_: bool = True) -> str:
    """One operator table, top rows only, a data bar on the sort column; later tables fold."""
    rows = list(p.get("rows") or [])
    sort_by = str(p.get("sort_by") or "")
    key = {
        "cuda_time_total": "cuda_total_s",
        "self_cuda_time_total": "self_cuda_s",
        "cpu_time_total": "cpu_total_s",
        "self_cpu_time_total": "self_cpu_s",
    }.get(sort_by)
    cols = [
        c
        for c in ("self_cuda_s", "cuda_total_s", "self_cpu_s", "cpu_total_s", "calls")
        if any(r.get(c) is not None for r in rows)
    ]
    if key is None or key not in cols:
        key = next(
            (c for c in ("cuda_total_s", "self_cuda_s", "cpu_total_s", "self_cpu_s") if c in cols),
            None,
        )
    if key:
        rows.sort(key=lambda r: -(r.get(key) or 0))
    shown = rows[:MAX_PROFILE_ROWS]
    top = max((float(r.get(key) or 0) for r in shown), default=0.0) if key else 0.0
    shapes = any(r.get("input_shapes") for r in shown)
    head = (
        "<th>operator</th>"
        + ("<th>input shapes</th>" if shapes else "")
        + "".join(f'<th class="num">{e(PROFILE_COLS[c])}</th>' for c in cols)
    )
    body = []
    for r in shown:
        cells = []
        for c in cols:
            v = r.get(c)
            text = (
                fmt_num(v) if c == "calls" else ("n/a" if v is None else f"{float(v) * 1e3:,.3f}")
            )
            bar = ""
            if c == key and top > 0 and v is not None:
                bar = (
                    f'<span class="bar" style="width:{max(1, int(60 * float(v) / top))}px"></span>'
                )
            cells.append(f'<td class="num">{bar}{e(text)}</td>')
        body.append(
            f'<tr><td class="name">{e(r.get("name"))}</td>'
            + (f'<td class="name">{e(r.get("input_shapes") or "")}</td>' if shapes else "")
            + "".join(cells)
            + "</tr>"
        )
    totals = (
        f"self CPU total {fmt_num(p.get('self_cpu_total_s'), 4, 's')}, "
        f"self CUDA total {fmt_num(p.get('self_cuda_total_s'), 4, 's')}"
    )
    more = f", top {len(shown)} of {len(rows)} rows" if len(rows) > len(shown) else ""
    title = f"Operators sorted by {sort_by}" if sort_by else "Operators (sort key not printed)"
    where = (
        f'<p class="small muted">{e(p.get("path"))}:{e(p.get("line"))} · {e(totals)}{e(more)}</p>'
    )
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    if open_:
        return f"<h4>{e(title)}</h4>{where}{table}"
    name = Path(str(p.get("path", ""))).name
    return f"<details><summary>{e(title)}: {e(name)}</summary>{where}{table}</details>"


def snapshot_section(snap: Snapshot) -> str:
    s = snap.to_dict()
    pools = list(s.get("pools") or [])
    rows = "".join(
        f'<tr><td>{e(p.get("kind"))}</td><td class="mono">{e(p.get("pool_id"))}</td>'
        f'<td class="num">{e(fmt_bytes(p.get("reserved_bytes")))}</td>'
        f'<td class="num">{e(fmt_bytes(p.get("allocated_bytes")))}</td>'
        f'<td class="num">{e(fmt_num(p.get("segments")))}</td></tr>'
        for p in pools
    )
    graph = snap.graph_pool_bytes
    summary = (
        f"reserved {fmt_bytes(s.get('total_reserved_bytes'))}, allocated {fmt_bytes(s.get('total_allocated_bytes'))}, "
        f"peak {fmt_bytes(s.get('peak_bytes'))}, graph pools {fmt_bytes(graph)}, "
        f"OOM events {fmt_num(s.get('oom_events'))}, format {s.get('torch_format') or 'n/a'}, "
        f"status {s.get('status')}"
    )
    allocs = list(s.get("top_allocations") or [])[:MAX_SNAPSHOT_ALLOCS]
    alloc_html = ""
    if allocs:
        alloc_html = (
            "<details><summary>Largest allocations</summary><table><thead><tr>"
            '<th class="num">size</th><th>allocated at</th></tr></thead><tbody>'
            + "".join(
                f'<tr><td class="num">{e(fmt_bytes(a.get("bytes")))}</td>'
                f'<td class="name">{e((a.get("frames") or ["n/a"])[0])}</td></tr>'
                for a in allocs
            )
            + "</tbody></table></details>"
        )
    table = (
        (
            '<table><thead><tr><th>pool</th><th>id</th><th class="num">reserved</th>'
            '<th class="num">allocated</th><th class="num">segments</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>"
        )
        if pools
        else '<p class="absent">No pools in this snapshot.</p>'
    )
    return (
        f"<h4>Memory snapshot {e(Path(str(s.get('path', ''))).name)}</h4>"
        f'<p class="small muted">{e(s.get("path"))} · {e(summary)}</p>{table}{alloc_html}'
    )


def throughput_caption(batches: pd.DataFrame) -> str:
    """What the throughput plot says, in words: the per-request rate is what users feel."""
    table = plots.throughput_table(batches)
    if len(table) == 1:
        only = "graph-served" if table["verdict"].iloc[0] == "graph" else "eager"
        return (
            f'<p class="small muted">Only {only} batches carry a throughput figure: no in/out '
            "comparison possible from these logs.</p>"
        )
    if len(table) != 2:
        return ""
    g, x = (table[table["verdict"] == v].iloc[0] for v in ("graph", "eager"))
    a, b = float(g["per_req_p50"]), float(x["per_req_p50"])
    if a <= 0:
        return ""
    change = (b - a) / a
    word = "slower" if change < 0 else "faster"
    return (
        f'<p class="small">Per request, eager (out-of-window) decode runs at {b:,.1f} tok/s against '
        f"{a:,.1f} in the window: <strong>{abs(change):.0%} {word}</strong> (medians). The engine total "
        "grows with batch size, so compare the right-hand panel.</p>"
    )


def memory_caption(rows: list[tuple[str, dict[str, float]]], rec: Mapping[str, Any]) -> str:
    """Capture memory as a share of the KV pool and as KV tokens it could have held."""
    logs = dict(rows).get("logs (rank 0)") or {}
    graph = logs.get("CUDA graph capture", logs.get("CUDA graph capture (estimated)"))
    kv = logs.get("KV cache pool")
    if not graph or not kv:
        return ""
    text = f"Graph capture holds {graph:,.2f} GiB, {graph / kv:.1%} of the KV pool ({kv:,.2f} GiB)"
    if rec.get("kv_tokens"):
        text += f", about {graph / kv * float(rec['kv_tokens']):,.0f} KV tokens"
    return f'<p class="small">{e(text)}.</p>'


def capture_time_section(page: Page, capture_end: pd.DataFrame) -> str:
    """A bar per rank when several ranks reported; one rank is a sentence, not a plot;
    nothing at all is ``""`` (the caller words the absence)."""
    timed = (
        capture_end[pd.to_numeric(capture_end["time_s"], errors="coerce").notna()]
        if not capture_end.empty
        else capture_end
    )
    if len(timed) == 1:
        row = timed.iloc[0]
        mem = pd.to_numeric(pd.Series([row.get("mem_gib")]), errors="coerce").iloc[0]
        return (
            f"<p>Capture time: <strong>{e(fmt_num(float(row['time_s']), unit='s'))}</strong>"
            f"{', ' + e(fmt_num(float(mem), unit='GiB')) if pd.notna(mem) else ''} "
            f"({e(row.get('phase') or 'capture')} phase, rank {e(row.get('rank') or '0')}, "
            f"{e(row.get('source'))}:{e(row.get('line'))}).</p>"
        )
    fig = memory_plots.capture_time_figure(capture_end)
    return "" if fig is None else page.plot(fig, "", "Capture time per rank")


def run_section(
    page: Page,
    index: int,
    run: RunReport,
    profiles: Sequence[Mapping[str, Any]],
    snapshots: list[Snapshot],
) -> str:
    facts = run.facts
    rec = run.record
    sizes = list(facts.window.sizes) if facts.window.sizes else rec["graph_capture_sizes"]
    ceiling = max(sizes) if sizes else rec["cuda_graph_max_bs"]
    out = [
        f'<section class="run" id="run-{index}">',
        f"<h2>{badge(run.worst())} Run {index}: {e(run.id)}</h2>",
        f'<p class="sources">{e(facts.backend)} {e(facts.engine_version or "")} · sources: '
        + ", ".join(e(s) for s in facts.run.sources)
        + "</p>",
        cards(run),
    ]
    if sizes:
        out.append(
            f'<p class="small">Capture buckets{" (engine default, inferred)" if facts.window.sizes_inferred else ""}: '
            f'<span class="mono">{e(fmt_sizes(sizes))}</span>; padding '
            f"{'on' if facts.window.padding else 'off'}.</p>"
        )
    if run.recommendation and run.recommendation.get("flags"):
        out.append(
            f'<p class="small">Suggested flags (<code>graphdiag recommend</code>): '
            f"<code>{e(run.recommendation['flags'])}</code></p>"
        )
    out.append("<h3>Which traffic ran eagerly</h3>")
    out.append(eager_summary(run))
    batches = plots.prepare_batches(facts.batches)
    hist = plots.batch_size_figure(batches, sizes, facts.window.sizes_inferred)
    if hist is None:
        out.append(
            '<p class="absent">Batch-size distribution, timeline and throughput split: not in the '
            "logs (no decode batch lines).</p>"
        )
    else:
        out.append(page.plot(hist, "", "Decode batch sizes against the capture window"))
        out.append(
            page.plot(
                plots.timeline_figure(batches, ceiling),
                "no decode batch lines",
                "Decode batch size over time",
            )
        )
        out.append(
            page.plot(
                plots.throughput_figure(batches),
                "no per-batch generation throughput",
                "Throughput in vs out of the capture window",
            )
        )
        out.append(throughput_caption(batches))
    out.append(advice_plots.advice_blocks(page, run.advice))
    out.append("<h3>Capture cost</h3>")
    mem_rows = memory_plots.memory_budget_rows(
        facts.tables["sizing"], rec, facts.tables["capture_end"], snapshots
    )
    memory = memory_plots.memory_figure(mem_rows)
    capture = capture_time_section(page, facts.tables["capture_end"])
    if memory is None and not capture:
        out.append(
            '<p class="absent">Memory budget and capture time: not in the logs (no weight, KV or '
            "capture memory figures, no capture end line).</p>"
        )
    else:
        out.append(
            page.plot(memory, "no weight, KV or capture memory figures", "GPU memory budget")
        )
        out.append(memory_caption(mem_rows, rec))
        out.append(
            capture
            or '<p class="absent">Capture time per rank: not in the logs '
            "(no capture end line with a duration).</p>"
        )
    out.append(ranks_table(run))
    if profiles:
        out.append("<h3>Capture-phase operator tables</h3>")
        out += [profile_section(p, open_=i < 2) for i, p in enumerate(profiles)]
    if snapshots:
        out.append("<h3>Memory snapshot pools</h3>")
        out += [snapshot_section(s) for s in snapshots]
    notes = [n for n in facts.notes if not (snapshots and n.startswith("snapshot "))]
    if notes:
        out.append('<p class="small muted">Notes: ' + "; ".join(e(n) for n in notes) + "</p>")
    out.append("</section>")
    return "".join(out)


def unattached_section(
    page: Page, profiles: Sequence[Mapping[str, Any]], snapshots: list[Snapshot]
) -> str:
    if not profiles and not snapshots:
        return ""
    out = ['<section id="artifacts"><h2>Profiles and snapshots not tied to a run</h2>']
    if snapshots:
        out.append(
            page.plot(
                memory_plots.memory_figure(
                    memory_plots.memory_budget_rows(pd.DataFrame(), {}, pd.DataFrame(), snapshots)
                ),
                "no pools in the snapshots",
                "Memory snapshot pools",
            )
        )
        out += [snapshot_section(s) for s in snapshots]
    out += [profile_section(p, open_=i < 2) for i, p in enumerate(profiles)]
    out.append("</section>")
    return "".join(out)
