"""The self-contained HTML report: one file, readable offline and without JavaScript.

Layout, top to bottom: verdict; for several runs the runs table (worst first, quiet runs
folded into one row) linked to each run's section; findings (cards for a few runs, one
row per code and remedy for many); the ticket record; one section per run (folded when
there are many, each then holding its own finding cards); artifacts not tied to a run;
the inputs.

Safety: the page is a Jinja2 template with autoescape on, so every value, log text
included, is escaped unless marked :class:`markupsafe.Markup`, which happens only in
:func:`render_html` for the two fixed scripts, the fixed CSS and figure JSON made inert
by :func:`json_for_script` (it sits in ``<script type="application/json">``, parsed as
data, never run). The two executable scripts are allowed by their SHA-256 in a
Content-Security-Policy that also forbids every network fetch (``default-src 'none'``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, TypeVar

from markupsafe import Markup

from diag.about import __version__
from diag.model import SEVERITY_ORDER, Finding, Snapshot, finding_key, first_change
from diag.render import trace_panel
from diag.render.fleet import fleet_view
from diag.render.html_page import Page, csp_hash, environment, plotly_js, template
from diag.render.html_run import run_view, unattached_view
from diag.render.inputs import input_lines
from diag.render.numbers import fmt_num, joined
from diag.render.serialize import record_chunks, record_yaml
from diag.render.text import VERDICT_BADGE, headline, verdict_text
from diag.render.view import EvidenceLine, FindingCard, FindingGroup, FirstChange, RunRow
from diag.report import Report, RunReport

_T = TypeVar("_T")

MAX_EVIDENCE = 6
MANY_RUNS = 3  # above this, runs table first, runs folded, findings grouped
#: above this many runs a page draws the charts of this many runs at most, the worst first,
#: and never a quiet run's: a fleet's page of 3,000 pods was 123 MB of charts (18,000 of
#: them) and a third of the analysis time for runs with nothing to show, and a many-shape
#: fleet's page of 10,000 pods 254 MB (the half with a finding drawn), more than a browser
#: opens; 25 runs still fit a ticket with every chart (tests/test_report_size.py)
FIGURE_RUNS = 25
MAX_FIRST_CHANGES = 3

__all__ = ["html_chunks", "record_yaml", "render_html"]


def _by_sev(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=finding_key)


def _row(index: int, run: RunReport) -> RunRow:
    rec = run.record
    decided = rec.batches.decided
    share = rec.captured_share
    counts = {s: sum(1 for f in run.findings if f.severity == s) for s in SEVERITY_ORDER}
    return RunRow(
        index=index,
        anchor=f"run-{index}",
        id=run.id,
        name=run.label,
        worst=run.worst(),
        engine=run.backend,
        version=run.engine_version,
        share=None if share is None else f"{share:.0%} of {decided:,}",
        capture=joined(fmt_num(rec.capture_time_s, 1, "s"), fmt_num(rec.capture_mem_gib, 2, "GiB")),
        kv_tokens=fmt_num(rec.kv_tokens),
        counts=counts,
        codes=sorted({f.code for f in run.findings}),
        summary=verdict_text(run, with_id=False),
        verdict_line=verdict_text(run),
        verdict=run.verdict,
        verdict_reason=run.verdict_reason,
        badge=VERDICT_BADGE[run.verdict],
    )


def _card(f: Finding, row: RunRow) -> FindingCard:
    shown = f.evidence[:MAX_EVIDENCE]
    n = len(f.evidence)
    label = f"Evidence ({n} line{'s' if n != 1 else ''}" + (
        f", first {len(shown)} shown)" if n > len(shown) else ")"
    )
    return FindingCard(
        severity=f.severity,
        code=f.code,
        name=f.name,
        run=row.name,
        anchor=row.anchor,
        message=f.message,
        remedies=list(f.remediation),
        evidence=[EvidenceLine(ev.where, ev.text) for ev in shown],
        evidence_label=label,
    )


def _groups(pairs: list[tuple[Finding, RunRow]]) -> list[FindingGroup]:
    """One row per (code, cause): the first instance's message and remedy, the other runs'
    own messages and remedies folded under it (their numbers differ run by run)."""
    keyed: dict[tuple[str, str | None], list[tuple[Finding, RunRow]]] = {}
    for f, row in pairs:  # the cause too: runs whose causes differ never share a row
        keyed.setdefault((f.code, f.cause), []).append((f, row))
    out = []
    for items in keyed.values():
        f0, _ = items[0]
        runs = list(dict.fromkeys((r.anchor, r.name, f"#{r.index}") for _, r in items))
        out.append(
            FindingGroup(
                severity=f0.severity,
                code=f0.code,
                name=f0.name,
                message=f0.message if len(runs) == 1 else f"{f0.message} ({runs[0][1]})",
                remedy=f0.remediation[0] if f0.remediation else None,
                runs=runs,
                others=[
                    (r.anchor, r.name, f.message, f.remediation[0] if f.remediation else None)
                    for f, r in items[1:]
                ],
            )
        )
    return sorted(out, key=lambda g: (SEVERITY_ORDER[g.severity], -len(g.runs), g.code))


def _first_changes(runs: list[tuple[RunRow, RunReport]], limit: int | None) -> list[FirstChange]:
    """Each run's first change; with a limit (many runs) one line per distinct change,
    naming its first run and how many others share it."""
    out: list[FirstChange] = []
    seen: dict[tuple[str, str | None, str], list[RunRow]] = {}
    for row, run in sorted(runs, key=lambda rr: SEVERITY_ORDER.get(rr[1].worst() or "", 9)):
        fix = first_change(run.findings)
        if not fix:
            continue
        key = (fix.code, fix.cause, fix.remediation[0])  # never one line for two causes
        if limit is not None and key in seen:
            seen[key].append(row)
            continue
        seen[key] = [row]
        out.append(FirstChange(row.anchor, row.name, fix.code, fix.remediation[0], cause=fix.cause))
    if limit is None:
        return out
    named = []
    for c in out[:limit]:
        more = len(seen[(c.code, c.cause, c.text)]) - 1
        also = f" and {more} other run{'s' if more != 1 else ''}" if more else ""
        named.append(FirstChange(c.anchor, c.run_name, c.code, c.text, also, c.cause))
    return named


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


def _inputs(report: Report) -> list[dict[str, Any]]:
    """The inputs table; a log that made no run says so, with why (diag.render.inputs)."""
    runless = {i.path: i.reason for i in input_lines(report) if i.problem == "no run"}
    return [
        {
            "path": i.path,
            "kind": i.kind,
            "backend": i.backend,
            "status": "no run" if i.path in runless else i.status,
            "cls": "partial" if i.path in runless else i.status,
            "reason": runless.get(i.path) or i.reason,
            "notes": list(i.notes),
            "lines": fmt_num(i.lines) or "",
            "events": fmt_num(i.events) or "",
        }
        for i in report.inputs
    ]


def _rank(row: RunRow) -> int:
    """Worst first: by the worst finding or the verdict, whichever is worse (a cut log with
    no finding sorts with the notes, above the runs that are ok)."""
    return min(SEVERITY_ORDER.get(row.worst or "", 9), SEVERITY_ORDER.get(row.badge[0], 9))


def _worst(report: Report) -> str:
    """The verdict box's colour: the worst finding, or the worst run verdict where that is
    worse (a cut log with no finding is never green; no run at all is not either)."""
    sevs = [f.severity for f in report.findings]
    sevs += [VERDICT_BADGE[r.verdict][0] for r in report.runs]
    if not report.runs:
        sevs.append("info")
    known = [s for s in sevs if s in SEVERITY_ORDER]
    return min(known, key=SEVERITY_ORDER.__getitem__) if known else "ok"


def _charted(order: Sequence[tuple[RunRow, RunReport]]) -> set[int]:
    """The indexes of the runs whose sections draw charts: every run on a page of up to
    :data:`FIGURE_RUNS`; past that the first :data:`FIGURE_RUNS` of the worst-first order
    that are not quiet."""
    if len(order) <= FIGURE_RUNS:
        return {row.index for row, _ in order}
    loud = (row.index for row, _ in order if not row.quiet)
    return set(islice(loud, FIGURE_RUNS))


def _figures_left_out(row: RunRow, run: RunReport, n_runs: int) -> str:
    """Why a run's section on a page of ``n_runs`` runs draws no figure."""
    sources = " ".join(run.sources) or "its log"
    why = (
        "a quiet run (verdict ok, no finding)"
        if row.quiet
        else f"not among the {FIGURE_RUNS} runs ranked worst, whose charts this page draws"
    )
    return (
        f"No charts for {why} on a page of {n_runs:,} runs; "
        f"the JSON report has its figures, and `graphdiag analyze {sources}` draws them."
    )


def render_html(report: Report) -> str:
    """The whole report as one HTML document (plotly.js inlined once, no network use)."""
    return "".join(html_chunks(report))


def html_chunks(report: Report) -> Iterator[str]:
    """:func:`render_html`'s document in pieces, made as they are written: each run's
    section is built, written and let go in turn, its figures' data right after it, so a
    fleet's page is never whole in memory (nor its runs' views)."""
    page = Page()
    many = len(report.runs) > MANY_RUNS
    ids = {r.id for r in report.runs}
    profiles, loose_profiles = _by_run(report.profiles, ids)
    snapshots, loose_snapshots = _by_run(report.snapshots, ids)
    pairs = [(_row(i, run), run) for i, run in enumerate(report.runs, start=1)]
    order = sorted(pairs, key=lambda rr: (_rank(rr[0]), rr[0].index))
    charted = _charted(order)
    findings = sorted(
        ((f, row) for row, run in pairs for f in run.findings),
        key=lambda fr: finding_key(fr[0]),
    )
    # many runs: the findings section is one row per code, so each run's own section holds
    # its finding cards (message, remedies, evidence), as the single-run page does on top
    trace_views, loose_traces = trace_panel.views(report)

    def runs() -> Iterator[dict[str, Any]]:  # each run's view, built as its section is written
        for row, run in pairs:
            left_out = None if row.index in charted else _figures_left_out(row, run, len(pairs))
            yield {
                **run_view(
                    page, row, run, profiles.get(run.id, []), snapshots.get(run.id, []), left_out
                ),
                "findings": [_card(f, row) for f in _by_sev(run.findings)] if many else [],
                "traces": trace_views.get(run.id),
            }

    def take_figures() -> list[dict[str, Any]]:  # the figures registered since the last call
        taken = [{"id": fid, "json": Markup(data)} for fid, data in page.figures]
        page.figures.clear()
        return taken

    rows = [row for row, _ in (order if many else pairs)]
    fleet = report.fleet  # two runs or more
    anchors = {run.id: row.anchor for row, run in pairs}
    loose = unattached_view(page, loose_profiles, loose_snapshots)
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
        title += " - " + report.runs[0].label
    return (
        environment()
        .get_template("report.html.j2")
        .generate(
            csp=csp,
            version=__version__,
            title=title,
            generated_at=report.generated_at,
            n_runs=len(report.runs),
            n_inputs=len(report.inputs),
            many=many,
            worst=_worst(report),
            headline=headline(report),
            all_ok=bool(report.runs) and all(r.verdict == "ok" for r in report.runs),
            first_changes=_first_changes(pairs, MAX_FIRST_CHANGES if many else None),
            rows=rows,
            fleet=None
            if fleet is None
            else fleet_view(fleet, anchors, {r.id: r.label for r in report.runs}),
            n_findings=len(findings),
            groups=_groups(findings) if many else [],
            cards=[] if many else [_card(f, row) for f, row in findings],
            record_yaml=record_chunks(report),
            runs=runs(),
            loose=loose,
            loose_traces=loose_traces,
            inputs=_inputs(report),
            input_problems=input_lines(report, with_non_logs=False),
            take_figures=take_figures,
            plotly_js=Markup(plotly_script),
            app_js=Markup(app_js),
            css=Markup(template("report.css")),
        )
    )
