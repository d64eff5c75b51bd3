"""The self-contained HTML report: one file, readable offline and without JavaScript.

Layout, top to bottom: verdict, findings (evidence, remediation), the ticket record,
one section per run (eager traffic, plots, operator tables, snapshot pools), artifacts
not tied to a run, and the inputs with what was skipped and why.

Safety: log text reaches the page only through :func:`e` (``html.escape``) or as JSON
inside ``<script type="application/json">`` with ``<``, ``>`` and ``&`` escaped, which
the browser parses as data, never as code. The two executable scripts (plotly.js and
ours) are fixed text, allowed by their SHA-256 in a Content-Security-Policy that also
forbids every network fetch (``default-src 'none'``).
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
from collections.abc import Iterable, Mapping, Sequence
from functools import cache, lru_cache
from pathlib import Path
from string import Template
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import plotly.io as pio
import yaml

from diag.about import __version__
from diag.model import SEVERITY_ORDER, Finding, Snapshot
from diag.render import plots
from diag.render.serialize import ticket_records
from diag.render.text import verdict as verdict_line
from diag.report import Report, RunReport
from diag.resources import package_file

_T = TypeVar("_T")

HEAD = {"error": "FAIL", "warning": "WARN", "info": "NOTE", None: "OK"}
SEV_CLASS = {"error": "sev-error", "warning": "sev-warning", "info": "sev-info", None: "sev-ok"}
MAX_EVIDENCE = 6
MAX_PROFILE_ROWS = 15
MAX_SNAPSHOT_ALLOCS = 5
EAGER_REASONS = {
    "above_ceiling": "above the capture ceiling",
    "unpadded_gap": "between buckets with padding disabled",
    "engine_reported_eager": "inside the window, but the engine ran them eager",
    "graphs_disabled": "graphs disabled for the run",
    "logged_eager": "logged eager (window not in the logs)",
}


def e(value: Any) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def json_for_script(text: str) -> str:
    """JSON text made safe inside ``<script type="application/json">``: no ``</script>``,
    no ``<!--``, no entity, no JS line separators can appear in it."""
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def csp_hash(script: str) -> str:
    return (
        "'sha256-"
        + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
        + "'"
    )


@cache
def _template(name: str) -> str:
    return Path(package_file("render", "templates", name)).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs().replace("\r\n", "\n").replace("\r", "\n")
    if "</script" in js.lower():  # pragma: no cover - would break the page
        raise RuntimeError("plotly.js contains '</script'; cannot inline it")
    return js


# ------------------------------------------------------------------ formatting
def _num(v: Any, digits: int = 2, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        text = f"{v:,}"
    elif isinstance(v, float):
        text = f"{v:,.{digits}f}".rstrip("0").rstrip(".") if abs(v) < 1e6 else f"{v:,.0f}"
    else:
        text = str(v)
    return text + (f" {unit}" if unit else "")


def _pct(v: Any) -> str:
    return "n/a" if v is None else f"{float(v):.0%}"


def _sizes(sizes: Sequence[int] | None) -> str:
    if not sizes:
        return "n/a"
    if len(sizes) <= 16:
        return ", ".join(str(s) for s in sizes)
    return f"{', '.join(str(s) for s in sizes[:8])}, … {sizes[-1]} ({len(sizes)} sizes)"


def _bytes(v: Any) -> str:
    if v is None:
        return "n/a"
    return f"{float(v) / 2**30:,.2f} GiB"


def _badge(sev: str | None) -> str:
    return f'<span class="badge {SEV_CLASS[sev]}">{HEAD[sev]}</span>'


# ------------------------------------------------------------------ page state
class _Page:
    """Collects figures while the body is written; figures become JSON data blocks."""

    def __init__(self) -> None:
        self.figures: list[tuple[str, str]] = []

    def plot(self, fig: Any, absent: str, label: str) -> str:
        """The figure's div plus its data, or a one-line note when there is nothing to draw."""
        if fig is None:
            return f'<p class="absent">{e(label)}: not in the logs ({e(absent)}).</p>'
        fid = f"fig-{len(self.figures) + 1}"
        data = pio.to_json(fig, validate=False, pretty=False, remove_uids=True)
        self.figures.append((fid, json_for_script(data)))
        return (
            f'<div class="plot" id="{fid}" role="img" aria-label="{e(label)}">'
            f'<p class="nojs">{e(label)}: interactive plot, needs JavaScript.</p></div>'
        )

    def data_blocks(self) -> str:
        return "\n".join(
            f'<script type="application/json" class="gd-figure" data-target="{fid}">{data}</script>'
            for fid, data in self.figures
        )


# ------------------------------------------------------------------ sections
def _header(report: Report) -> str:
    n_runs = len(report.runs)
    return (
        '<header class="top"><div class="inner"><h1>graphdiag: CUDA-graph capture report</h1>'
        f'<span class="meta">{n_runs} run{"s" if n_runs != 1 else ""} · {len(report.inputs)} input'
        f"{'s' if len(report.inputs) != 1 else ''} · generated {e(report.generated_at or 'n/a')} · "
        f"graphdiag {e(__version__)}</span></div></header>"
    )


def _toc(report: Report) -> str:
    links = [
        '<a href="#verdict">Verdict</a>',
        '<a href="#findings">Findings</a>',
        '<a href="#record">Ticket record</a>',
    ]
    links += [f'<a href="#run-{i}">Run {i}</a>' for i in range(1, len(report.runs) + 1)]
    links.append('<a href="#inputs">Inputs</a>')
    return '<nav class="toc">' + "".join(links) + "</nav>"


def _worst(report: Report) -> str | None:
    sevs = [f.severity for f in report.findings]
    return min(sevs, key=SEVERITY_ORDER.__getitem__) if sevs else None


def _verdict(report: Report) -> str:
    worst = _worst(report)
    counts = {s: sum(1 for f in report.findings if f.severity == s) for s in SEVERITY_ORDER}
    if report.findings:
        parts = [f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
        headline = (
            f"{len(report.findings)} finding{'s' if len(report.findings) != 1 else ''}: "
            + ", ".join(parts)
        )
    elif report.runs:
        headline = "No findings."
    else:
        headline = "No server run found in the inputs."
    lines = []
    for run in report.runs:
        text = (
            verdict_line(run).split(" ", 1)[1].strip()
            if " " in verdict_line(run)
            else verdict_line(run)
        )
        first = sorted(run.findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.code))
        fix = next((f for f in first if f.remediation), None)
        todo = (
            f'<div class="next">First change ({e(fix.code)}): {e(fix.remediation[0])}</div>'
            if fix
            else ""
        )
        lines.append(f"<li>{_badge(run.worst())} {e(text)}{todo}</li>")
    return (
        f'<section id="verdict" class="verdict {SEV_CLASS[worst]}">'
        f'<p class="headline">{_badge(worst)} {e(headline)}</p>'
        f"<ul>{''.join(lines)}</ul></section>"
    )


def _finding(f: Finding, run: RunReport) -> str:
    out = [
        f'<article class="finding {SEV_CLASS[f.severity]}">',
        f'<div class="title">{_badge(f.severity)} <span class="code">{e(f.code)}</span>{e(f.name)}</div>',
        f'<div class="run">run {e(run.id)}</div>',
        f'<p class="msg">{e(f.message)}</p>',
    ]
    if f.remediation:
        out.append('<div class="label">What to change</div><ol class="fix">')
        out += [f"<li>{e(r)}</li>" for r in f.remediation]
        out.append("</ol>")
    if f.evidence:
        shown = f.evidence[:MAX_EVIDENCE]
        more = len(f.evidence) - len(shown)
        out.append(
            f'<div class="label">Evidence ({len(f.evidence)} line{"s" if len(f.evidence) != 1 else ""}'
            f"{', first ' + str(len(shown)) + ' shown' if more else ''})</div>"
        )
        out.append(
            '<pre class="evidence">'
            + "\n".join(
                f'<span class="loc">{e(ev.path)}:{e(ev.line)}</span>\n{e(ev.text)}' for ev in shown
            )
            + "</pre>"
        )
    out.append("</article>")
    return "".join(out)


def _findings(report: Report) -> str:
    pairs = sorted(
        ((f, r) for r in report.runs for f in r.findings),
        key=lambda fr: (SEVERITY_ORDER[fr[0].severity], fr[0].code),
    )
    body = (
        "".join(_finding(f, r) for f, r in pairs)
        if pairs
        else '<p class="muted">No rule fired: capture looks healthy for the traffic in these logs.</p>'
    )
    return f'<section id="findings"><h2>Findings</h2>{body}</section>'


class _CompactDumper(yaml.SafeDumper):
    """Flow style for short lists and maps of scalars (bucket lists, histograms), so the
    record reads in one screen; the data is the same as :func:`to_yaml`'s."""


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _repr_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(_is_scalar(v) for v in data) and len(data) <= 512
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


def _repr_dict(dumper: yaml.SafeDumper, data: dict[Any, Any]) -> yaml.Node:
    flow = (
        bool(data)
        and all(_is_scalar(v) and not isinstance(v, str) for v in data.values())
        and all(str(k).lstrip("-").isdigit() for k in data)
    )
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=flow)


_CompactDumper.add_representer(list, _repr_list)
_CompactDumper.add_representer(dict, _repr_dict)


def record_yaml(report: Report) -> str:
    """The ticket record (same content as ``to_yaml``), short lists and histograms inline."""
    doc = {"schema": "graphdiag.ticket/1", "runs": ticket_records(report)}
    return yaml.dump(doc, Dumper=_CompactDumper, sort_keys=False, allow_unicode=True, width=100)


def _record(report: Report) -> str:
    text = record_yaml(report)
    return (
        '<section id="record"><div class="record-head"><h2>Ticket record</h2>'
        '<button type="button" class="copy" data-copy="record-yaml" hidden>Copy</button></div>'
        '<p class="small muted">Paste into the ticket (YAML; <code>null</code> where the logs do not '
        "show the field).</p>"
        f'<pre id="record-yaml">{e(text)}</pre></section>'
    )


def _cards(run: RunReport) -> str:
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
            f"{_pct(share)}" + (f" of {decided:,}" if decided else ""),
            "" if share is None else ("good" if share >= 0.9 else "bad"),
        ),
        ("eager batches", f"{b['eager']:,}", "bad" if b["eager"] else ""),
        (
            "ceiling / max batch",
            f"{_num(rec['cuda_graph_max_bs'])} / {_num(shape.get('max'))}",
            "bad"
            if rec["cuda_graph_max_bs"]
            and shape.get("max")
            and shape["max"] > rec["cuda_graph_max_bs"]
            else "",
        ),
        ("batch p50 / p99", f"{_num(shape.get('p50'))} / {_num(shape.get('p99'))}", ""),
        (
            "capture",
            f"{_num(rec['capture_time_s'], unit='s')} · {_num(rec['capture_mem_gib'], unit='GiB')}",
            "",
        ),
        ("KV pool", f"{_num(rec['kv_tokens'])} tok · {_num(rec['kv_cache_gib'], unit='GiB')}", ""),
        ("padding waste", _pct(rec["padding_waste"]), ""),
        (
            "tok/s in / out window",
            f"{_num(perf.get('throughput_in_window'), 0)} / "
            f"{_num(perf.get('throughput_out_window'), 0)}",
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


def _eager_summary(run: RunReport) -> str:
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
        why = EAGER_REASONS.get(str(r["reason"]), str(r["reason"]))
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


def _ranks_table(run: RunReport) -> str:
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
        + "".join(f'<td class="num">{e(_num(r.get(c)))}</td>' for c in cols)
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


def _profile(p: Mapping[str, Any], open_: bool = True) -> str:
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
            text = _num(v) if c == "calls" else ("n/a" if v is None else f"{float(v) * 1e3:,.3f}")
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
        f"self CPU total {_num(p.get('self_cpu_total_s'), 4, 's')}, "
        f"self CUDA total {_num(p.get('self_cuda_total_s'), 4, 's')}"
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


def _snapshot(snap: Snapshot) -> str:
    s = snap.to_dict()
    pools = list(s.get("pools") or [])
    rows = "".join(
        f'<tr><td>{e(p.get("kind"))}</td><td class="mono">{e(p.get("pool_id"))}</td>'
        f'<td class="num">{e(_bytes(p.get("reserved_bytes")))}</td>'
        f'<td class="num">{e(_bytes(p.get("allocated_bytes")))}</td>'
        f'<td class="num">{e(_num(p.get("segments")))}</td></tr>'
        for p in pools
    )
    graph = snap.graph_pool_bytes
    summary = (
        f"reserved {_bytes(s.get('total_reserved_bytes'))}, allocated {_bytes(s.get('total_allocated_bytes'))}, "
        f"peak {_bytes(s.get('peak_bytes'))}, graph pools {_bytes(graph)}, "
        f"OOM events {_num(s.get('oom_events'))}, format {s.get('torch_format') or 'n/a'}, "
        f"status {s.get('status')}"
    )
    allocs = list(s.get("top_allocations") or [])[:MAX_SNAPSHOT_ALLOCS]
    alloc_html = ""
    if allocs:
        alloc_html = (
            "<details><summary>Largest allocations</summary><table><thead><tr>"
            '<th class="num">size</th><th>allocated at</th></tr></thead><tbody>'
            + "".join(
                f'<tr><td class="num">{e(_bytes(a.get("bytes")))}</td>'
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


def _throughput_caption(batches: pd.DataFrame) -> str:
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


def _memory_caption(rows: list[tuple[str, dict[str, float]]], rec: Mapping[str, Any]) -> str:
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


def _capture_time(page: _Page, capture_end: pd.DataFrame) -> str:
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
            f"<p>Capture time: <strong>{e(_num(float(row['time_s']), unit='s'))}</strong>"
            f"{', ' + e(_num(float(mem), unit='GiB')) if pd.notna(mem) else ''} "
            f"({e(row.get('phase') or 'capture')} phase, rank {e(row.get('rank') or '0')}, "
            f"{e(row.get('source'))}:{e(row.get('line'))}).</p>"
        )
    fig = plots.capture_time_figure(capture_end)
    return "" if fig is None else page.plot(fig, "", "Capture time per rank")


def _run(
    page: _Page,
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
        f"<h2>{_badge(run.worst())} Run {index}: {e(run.id)}</h2>",
        f'<p class="sources">{e(facts.backend)} {e(facts.engine_version or "")} · sources: '
        + ", ".join(e(s) for s in facts.run.sources)
        + "</p>",
        _cards(run),
    ]
    if sizes:
        out.append(
            f'<p class="small">Capture buckets{" (engine default, inferred)" if facts.window.sizes_inferred else ""}: '
            f'<span class="mono">{e(_sizes(sizes))}</span>; padding '
            f"{'on' if facts.window.padding else 'off'}.</p>"
        )
    if run.recommendation and run.recommendation.get("flags"):
        out.append(
            f'<p class="small">Suggested flags (<code>graphdiag recommend</code>): '
            f"<code>{e(run.recommendation['flags'])}</code></p>"
        )
    out.append("<h3>Which traffic ran eagerly</h3>")
    out.append(_eager_summary(run))
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
        out.append(_throughput_caption(batches))
    out.append("<h3>Capture cost</h3>")
    mem_rows = plots.memory_budget_rows(
        facts.tables["sizing"], rec, facts.tables["capture_end"], snapshots
    )
    memory = plots.memory_figure(mem_rows)
    capture = _capture_time(page, facts.tables["capture_end"])
    if memory is None and not capture:
        out.append(
            '<p class="absent">Memory budget and capture time: not in the logs (no weight, KV or '
            "capture memory figures, no capture end line).</p>"
        )
    else:
        out.append(
            page.plot(memory, "no weight, KV or capture memory figures", "GPU memory budget")
        )
        out.append(_memory_caption(mem_rows, rec))
        out.append(
            capture
            or '<p class="absent">Capture time per rank: not in the logs '
            "(no capture end line with a duration).</p>"
        )
    out.append(_ranks_table(run))
    if profiles:
        out.append("<h3>Capture-phase operator tables</h3>")
        out += [_profile(p, open_=i < 2) for i, p in enumerate(profiles)]
    if snapshots:
        out.append("<h3>Memory snapshot pools</h3>")
        out += [_snapshot(s) for s in snapshots]
    notes = [n for n in facts.notes if not (snapshots and n.startswith("snapshot "))]
    if notes:
        out.append('<p class="small muted">Notes: ' + "; ".join(e(n) for n in notes) + "</p>")
    out.append("</section>")
    return "".join(out)


def _unattached(
    page: _Page, profiles: Sequence[Mapping[str, Any]], snapshots: list[Snapshot]
) -> str:
    if not profiles and not snapshots:
        return ""
    out = ['<section id="artifacts"><h2>Profiles and snapshots not tied to a run</h2>']
    if snapshots:
        out.append(
            page.plot(
                plots.memory_figure(
                    plots.memory_budget_rows(pd.DataFrame(), {}, pd.DataFrame(), snapshots)
                ),
                "no pools in the snapshots",
                "Memory snapshot pools",
            )
        )
        out += [_snapshot(s) for s in snapshots]
    out += [_profile(p, open_=i < 2) for i, p in enumerate(profiles)]
    out.append("</section>")
    return "".join(out)


def _inputs(report: Report) -> str:
    rows = []
    for i in report.inputs:
        rows.append(
            f'<tr class="status-{e(i.status)}"><td class="name">{e(i.path)}</td><td>{e(i.kind)}</td>'
            f"<td>{e(i.backend)}</td><td>{e(i.status)}</td><td>{e(i.reason or '')}</td>"
            f'<td class="num">{e(_num(i.lines))}</td><td class="num">{e(_num(i.events))}</td></tr>'
        )
    skipped = [i for i in report.inputs if i.status != "ok"]
    note = (
        (
            f'<p class="small">{len(skipped)} input{"s" if len(skipped) != 1 else ""} not fully read; '
            "the reason is in the table.</p>"
        )
        if skipped
        else ""
    )
    return (
        '<section id="inputs"><h2>Inputs</h2>'
        + note
        + "<table><thead><tr><th>path</th><th>kind</th><th>backend</th><th>status</th><th>reason</th>"
        '<th class="num">lines</th><th class="num">events</th></tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table></section>"
    )


def _by_run(items: Iterable[_T], run_ids: set[str]) -> tuple[dict[str, list[_T]], list[_T]]:
    """Profiles (JSON records) and snapshots grouped by the run they were joined to."""
    tied: dict[str, list[_T]] = {}
    loose: list[_T] = []
    for item in items:
        rid = item.run if isinstance(item, Snapshot) else item.get("run")  # type: ignore[attr-defined]
        if rid in run_ids:
            tied.setdefault(str(rid), []).append(item)
        else:
            loose.append(item)
    return tied, loose


def render_html(report: Report) -> str:
    """The whole report as one HTML document (plotly.js inlined once, no network use)."""
    page = _Page()
    ids = {r.id for r in report.runs}
    profiles, loose_profiles = _by_run(report.profiles, ids)
    snapshots, loose_snapshots = _by_run(report.snapshots, ids)
    body = ["<main>", _toc(report), _verdict(report), _findings(report), _record(report)]
    for i, run in enumerate(report.runs, start=1):
        body.append(_run(page, i, run, profiles.get(run.id, []), snapshots.get(run.id, [])))
    body.append(_unattached(page, loose_profiles, loose_snapshots))
    body.append(_inputs(report))
    body.append("</main>")
    body.append(page.data_blocks())
    plotly_js = _plotly_js()
    app_js = _template("report.js")
    csp = "; ".join(
        [
            "default-src 'none'",
            f"script-src {csp_hash(plotly_js)} {csp_hash(app_js)}",
            "style-src 'unsafe-inline'",
            "img-src data: blob:",
            "font-src data:",
            "connect-src 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )
    title = "graphdiag report"
    if len(report.runs) == 1:
        title += " - " + Path(report.runs[0].id.split("#", 1)[0]).name
    return Template(_template("report.html")).substitute(
        csp=e(csp),
        version=e(__version__),
        title=e(title),
        css=_template("report.css"),
        body=_header(report) + "\n" + "\n".join(body),
        plotlyjs=plotly_js,
        appjs=app_js,
    )
