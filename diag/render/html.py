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

from collections.abc import Iterable
from pathlib import Path
from string import Template
from typing import Any, TypeVar

import yaml

from diag.about import __version__
from diag.model import SEVERITY_ORDER, Finding, Snapshot
from diag.render.html_page import SEV_CLASS, Page, badge, csp_hash, e, fmt_num, plotly_js, template
from diag.render.html_run import run_section, unattached_section
from diag.render.serialize import ticket_records
from diag.render.text import verdict_text
from diag.report import Report, RunReport
from diag.rules.engine import first_change

_T = TypeVar("_T")

MAX_EVIDENCE = 6


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
        text = verdict_text(run).strip()
        fix = first_change(run.findings)
        todo = (
            f'<div class="next">First change ({e(fix.code)}): {e(fix.remediation[0])}</div>'
            if fix
            else ""
        )
        lines.append(f"<li>{badge(run.worst())} {e(text)}{todo}</li>")
    return (
        f'<section id="verdict" class="verdict {SEV_CLASS[worst]}">'
        f'<p class="headline">{badge(worst)} {e(headline)}</p>'
        f"<ul>{''.join(lines)}</ul></section>"
    )


def _finding(f: Finding, run: RunReport) -> str:
    out = [
        f'<article class="finding {SEV_CLASS[f.severity]}">',
        f'<div class="title">{badge(f.severity)} <span class="code">{e(f.code)}</span>{e(f.name)}</div>',
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


def _inputs(report: Report) -> str:
    rows = []
    for i in report.inputs:
        rows.append(
            f'<tr class="status-{e(i.status)}"><td class="name">{e(i.path)}</td><td>{e(i.kind)}</td>'
            f"<td>{e(i.backend)}</td><td>{e(i.status)}</td><td>{e(i.reason or '')}</td>"
            f'<td class="num">{e(fmt_num(i.lines))}</td><td class="num">{e(fmt_num(i.events))}</td></tr>'
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
    page = Page()
    ids = {r.id for r in report.runs}
    profiles, loose_profiles = _by_run(report.profiles, ids)
    snapshots, loose_snapshots = _by_run(report.snapshots, ids)
    body = ["<main>", _toc(report), _verdict(report), _findings(report), _record(report)]
    for i, run in enumerate(report.runs, start=1):
        body.append(run_section(page, i, run, profiles.get(run.id, []), snapshots.get(run.id, [])))
    body.append(unattached_section(page, loose_profiles, loose_snapshots))
    body.append(_inputs(report))
    body.append("</main>")
    body.append(page.data_blocks())
    plotly_script = plotly_js()
    app_js = template("report.js")
    csp = "; ".join(
        [
            "default-src 'none'",
            f"script-src {csp_hash(plotly_script)} {csp_hash(app_js)}",
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
    return Template(template("report.html")).substitute(
        csp=e(csp),
        version=e(__version__),
        title=e(title),
        css=template("report.css"),
        body=_header(report) + "\n" + "\n".join(body),
        plotlyjs=plotly_script,
        appjs=app_js,
    )
