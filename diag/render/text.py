"""Human summaries: plain text for the terminal (fits 100 columns) and Markdown for tickets.

Unknown values are left out (a clause with nothing known is dropped), never printed as
``n/a``. Long capture size lists are written compactly (:func:`compact_sizes`). Every
Markdown table cell goes through :func:`md_cell`, so no newline or ``|`` of a message can
break a row in GitHub or Jira.
"""

from __future__ import annotations

import textwrap
from functools import partial
from typing import Any

from diag.figures import number, share
from diag.model import SEVERITY_ORDER, finding_key
from diag.render import trace_panel
from diag.render.fleet import fleet_text
from diag.render.inputs import input_lines, input_notes, run_input_notes
from diag.render.mdtable import md_cell, md_table
from diag.render.runners import runner_lines, startup_line
from diag.render.sizes import compact_sizes
from diag.report import Report, RunReport, eager_change

WIDTH = 100
MAX_REMEDIES = 2
MAX_INPUTS = 10  # inputs listed by name in text and Markdown; the JSON and HTML list all

#: flags like --cuda-graph-max-bs are never split at their hyphens
wrap = partial(textwrap.wrap, break_on_hyphens=False, break_long_words=False)

# a run's verdict as a badge: (severity class, label); OK only for an ``ok`` verdict
VERDICT_BADGE: dict[str, tuple[str, str]] = {
    "ok": ("ok", "OK"),
    "warn": ("warning", "WARN"),
    "capture_failed": ("error", "FAIL"),
    "startup_failed": ("error", "FAIL"),
    "serving_failed": ("error", "FAIL"),
    "incomplete": ("info", "INCOMPLETE"),
}


def _num(v: Any, unit: str = "") -> str | None:
    if v is None:
        return None
    text = f"{v:,}" if isinstance(v, int) else f"{v:g}" if isinstance(v, float) else str(v)
    return text + (f" {unit}" if unit else "")


def _join(*parts: str | None, sep: str = ", ") -> str:
    return sep.join(p for p in parts if p)


def headline(report: Report) -> str:
    """The totals in one line: findings by severity, and over how many runs they fall."""
    findings = report.findings
    if findings:
        counts = {s: sum(1 for f in findings if f.severity == s) for s in SEVERITY_ORDER}
        parts = [f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
        text = f"{len(findings)} finding{'s' if len(findings) != 1 else ''}: " + ", ".join(parts)
        if len(report.runs) > 1:
            hit = sum(1 for r in report.runs if r.findings)
            text += f" in {hit} of {len(report.runs)} runs"
        return text
    text = no_findings(report)
    if len(report.runs) > 1 and text == "No findings.":
        return f"No findings in {len(report.runs)} runs."
    return text


def at_line(where: str, indent: str) -> str:
    """``at PATH:LINE`` (:attr:`Evidence.where`) as one unbroken line: a long path runs past
    the width rather than leaving a lone "at" with the path at column 0."""
    return f"{indent}at {where}"


def verdict(run: RunReport) -> str:
    """``FAIL run-id [engine]: capture_failed; ...``: the run's verdict badge, then
    :func:`verdict_text`."""
    return f"{VERDICT_BADGE[run.verdict][1]:4} {verdict_text(run)}"


def verdict_line(run: RunReport) -> str:
    """The verdict and its reason, as every renderer prints it under the run."""
    return f"verdict {run.verdict}: {run.verdict_reason}"


def no_findings(report: Report) -> str:
    """What stands where no rule fired: "No findings." only when every run is ``ok``;
    otherwise how many runs are not, so a failed or cut log never reads as healthy."""
    if not report.runs:
        return "No server run found in the inputs" + (
            f": {len(report.inputs)} input{'s' if len(report.inputs) != 1 else ''} made "
            "no run (why: the inputs list)."
            if report.inputs
            else "."
        )
    counts: dict[str, int] = {}
    for run in report.runs:
        if run.verdict != "ok":
            counts[run.verdict] = counts.get(run.verdict, 0) + 1
    if not counts:
        return "No findings."
    parts = ", ".join(f"{n} {v}" for v, n in counts.items())
    return f"No rule fired, but not every run is ok: {parts} (the verdicts below say why)."


def verdict_text(run: RunReport, with_id: bool = True) -> str:
    """What a run came to in one line, without the severity head (HTML shows a badge)."""
    rec = run.record
    b = rec.batches
    parts = [run.verdict, f"graphs {rec.graph_mode}"]
    if rec.capture_error:
        parts.append(f"capture failed ({rec.capture_error.error_class})")
    if b.decided and rec.captured_share is not None:
        parts.append(
            f"{share(rec.captured_share)} of {b.decided:,} decode batches on graphs ({b.source})"
        )
    if run.ceiling:
        default = " (engine default)" if run.ceiling_inferred else ""
        parts.append(f"ceiling {run.ceiling}{default}")
    head = f"{run.label} [{run.backend}]: " if with_id else ""
    return head + "; ".join(parts)


def throughput_line(run: RunReport) -> str | None:
    """Per-request decode speed first (what users feel); the engine total second, as it
    grows with batch size and makes big eager batches look faster."""
    by = {s.verdict: s for s in run.decode_speeds}
    g, x = by.get("graph"), by.get("eager")
    change = eager_change(run.decode_speeds)
    if g is not None and x is not None and change is not None:
        a, b = g.per_req[1], x.per_req[1]
        word = "slower" if change < 0 else "faster"
        return (
            f"decode speed per request: {number(b)} tok/s out of window vs {number(a)} in "
            f"(eager {abs(change):.0%} {word}, medians); engine total "
            f"{number(x.gen_throughput[1])} vs {number(g.gen_throughput[1])} "
            "tok/s grows with batch size"
        )
    only = g if g is not None else x
    if only is None:
        return None
    side = "graph-served" if g is not None else "eager"
    return f"decode speed per request {number(only.per_req[1])} tok/s ({side} batches only, median)"


def record_lines(run: RunReport) -> list[str]:
    """The run's figures that the logs show, one topic per line."""
    rec = run.record
    shape = rec.decode_batch_shape
    sizes = compact_sizes(rec.graph_capture_sizes)
    mode = f"mode: {rec.graph_mode}" + (f" ({rec.cudagraph_mode})" if rec.cudagraph_mode else "")
    lines = [
        _join(
            mode,
            f"capture sizes {sizes}" if sizes else None,
            f"max bs {rec.cuda_graph_max_bs}" if rec.cuda_graph_max_bs else None,
            f"max running {rec.max_running_requests}" if rec.max_running_requests else None,
        )
    ]
    capture = _join(_num(rec.capture_time_s, "s"), _num(rec.capture_mem_gib, "GiB"))
    kv = _join(
        _num(rec.kv_tokens, "tokens"),
        _num(rec.kv_cache_gib, "GiB"),
        _num(rec.gpu_blocks, "blocks"),
        f"concurrency {rec.max_concurrency:g}x" if rec.max_concurrency else None,
    )
    if capture or kv:
        lines.append(
            _join(f"capture: {capture}" if capture else None, f"KV: {kv}" if kv else None, sep="; ")
        )
    if shape:
        dist = f"min {shape.min} p50 {shape.p50} p90 {shape.p90} p99 {shape.p99} max {shape.max}"
        waste = rec.padding_waste
        lines.append(
            f"decode batch sizes: n={shape.count:,} {dist}"
            + (f"; padding waste {share(waste)}" if waste is not None else "")
        )
    tput = throughput_line(run)
    if tput:
        lines.append(tput)
    lines += runner_lines(run)
    boot = startup_line(run)
    if boot:
        lines.append(boot)
    return lines


def _sorted_findings(report: Report) -> list[tuple[Any, RunReport]]:
    return sorted(
        ((f, r) for r in report.runs for f in r.findings),
        key=lambda fr: finding_key(fr[0]),
    )


def render_text(report: Report) -> str:
    out: list[str] = [headline(report), ""]
    findings = _sorted_findings(report)
    if findings:
        out.append(f"Findings ({len(findings)}), worst first:")
        for f, run in findings:
            out.extend(
                wrap(
                    f"{f.severity.upper():7} {f.code} {f.name} [{run.label}]: {f.message}",
                    WIDTH,
                    subsequent_indent="        ",
                )
            )
            for i, remedy in enumerate(f.remediation[:MAX_REMEDIES]):
                out.extend(
                    wrap(
                        f"{i + 1}. {remedy}",
                        WIDTH,
                        initial_indent="        ",
                        subsequent_indent="           ",
                    )
                )
            for ev in f.evidence[:1]:
                out.append(at_line(ev.where, "        "))
        out.append("")
    if report.runs:
        out.append("Runs:")
    notes_of = input_notes(report)
    for run in report.runs:
        out.extend(wrap(verdict(run), WIDTH, subsequent_indent="     "))
        notes = run.notes + run_input_notes(notes_of, run.sources)
        lines = [verdict_line(run), *record_lines(run)]
        for line in lines + [f"note: {n}" for n in notes]:
            out.extend(wrap(line, WIDTH, initial_indent="     ", subsequent_indent="       "))
    fleet = report.fleet  # two runs or more
    if fleet is not None:
        out.append("")
        for line in fleet_text(fleet, {r.id: r.label for r in report.runs}):
            indent = " " * (len(line) - len(line.lstrip()))
            out.extend(wrap(line, WIDTH, subsequent_indent=indent + "    "))
    if report.traces:
        out.append("")
        out.append("Profiler traces:")
        for line in trace_panel.trace_lines(report):
            out.extend(wrap(line, WIDTH, initial_indent="  ", subsequent_indent="    "))
    problems = input_lines(report, with_non_logs=False)
    if problems:
        if out[-1]:
            out.append("")
        out.append("Inputs not fully read or without a run:")
        for item in problems[:MAX_INPUTS]:
            out.extend(wrap(item.text(), WIDTH, initial_indent="  ", subsequent_indent="    "))
        if len(problems) > MAX_INPUTS:
            out.append(f"  {more_inputs(len(problems))}")
    return "\n".join(out) + "\n"


def more_inputs(n: int) -> str:
    """The line that stands for the inputs past :data:`MAX_INPUTS` (a folder of many files)."""
    return (
        f"... and {n - MAX_INPUTS:,} more (the JSON report's inputs and the HTML inputs table "
        "list every one with its reason)"
    )


def render_markdown(report: Report) -> str:
    """A ticket body: verdict lines, runs table (several runs), findings table with the
    first remedy, evidence and second remedy folded per finding, then the ticket record."""
    from diag.render.serialize import record_yaml

    out = ["## graphdiag report", ""]
    if len(report.runs) > 1:
        rows = []
        for run in report.runs:
            rec = run.record
            on_graphs = rec.captured_share
            rows.append(
                [
                    f"{VERDICT_BADGE[run.verdict][1]} ({run.verdict})",
                    run.label,
                    _join(run.backend, run.engine_version, sep=" "),
                    "" if on_graphs is None else share(on_graphs),
                    _join(_num(rec.capture_time_s, "s"), _num(rec.capture_mem_gib, "GiB")),
                    _num(rec.kv_tokens) or "",
                    ", ".join(sorted({f.code for f in run.findings})),
                ]
            )
        out += md_table(
            ["verdict", "run", "engine", "on graphs", "capture", "KV tokens", "findings"], rows
        )
        out += ["", "<details><summary>Why each verdict</summary>", ""]
        out += [f"- {md_cell(run.label)}: {md_cell(verdict_line(run))}" for run in report.runs]
        out += ["", "</details>"]
    else:
        for run in report.runs:
            out.append(f"- **{md_cell(verdict(run))}**")
            out.append(f"  - {md_cell(verdict_line(run))}")
    if not report.runs or not report.findings:
        out += ["", no_findings(report)]
    out.append("")
    findings = _sorted_findings(report)
    if findings:
        out += ["### Findings", ""]
        out += md_table(
            ["severity", "code", "run", "finding", "first change"],
            [
                [
                    f.severity,
                    f"{f.code} {f.name}",
                    run.label,
                    f.message,
                    f.remediation[0] if f.remediation else "",
                ]
                for f, run in findings
            ],
        )
        out.append("")
        for f, run in findings:
            if not (f.evidence or len(f.remediation) > 1):
                continue
            out.append(f"<details><summary>{f.code} ({md_cell(run.label)})</summary>")
            out.append("")
            if len(f.remediation) > 1:
                out.append(f"Then: {md_cell(f.remediation[1])}")
                out.append("")
            if f.evidence:
                out.append("```text")
                out.extend(f"{e.where}: {e.text}".replace("```", "'''") for e in f.evidence)
                out.append("```")
            out.append("</details>")
            out.append("")
    shown = report.inputs_to_show()
    if shown:
        out += ["### Inputs not fully read or without a run", ""]
        out += md_table(
            ["input", "status", "why"],
            [[i.path, i.status, i.reason or ""] for i in shown[:MAX_INPUTS]],
        )
        if len(shown) > MAX_INPUTS:
            out += ["", more_inputs(len(shown))]
        out.append("")
    out += [
        "### Ticket record",
        "",
        "Long size lists compacted; the JSON report has them in full.",
        "",
        "```yaml",
        record_yaml(report).rstrip(),
        "```",
        "",
    ]
    return "\n".join(out)
