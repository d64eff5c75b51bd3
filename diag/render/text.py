"""Human summaries: plain text for the terminal (fits 100 columns) and Markdown for tickets."""

from __future__ import annotations

import textwrap
from typing import Any

from diag.report import Report, RunReport
from diag.rules.engine import finding_key

WIDTH = 100


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _val(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return _sizes(v)
    return str(v)


def _sizes(sizes: list[int] | None) -> str:
    if not sizes:
        return "n/a"
    if len(sizes) <= 12:
        return "[" + ", ".join(str(s) for s in sizes) + "]"
    return f"[{', '.join(str(s) for s in sizes[:6])}, ... {sizes[-1]}] ({len(sizes)} sizes)"


HEAD = {"error": "FAIL", "warning": "WARN", "info": "NOTE", None: "OK"}


def verdict(run: RunReport) -> str:
    """``FAIL run-id [engine]: ...``: the run's worst severity, then :func:`verdict_text`."""
    return f"{HEAD[run.worst()]:4} {verdict_text(run)}"


def verdict_text(run: RunReport) -> str:
    """What a run came to in one line, without the severity head (HTML shows a badge)."""
    rec = run.record
    b = rec["batches"]
    parts = [f"graphs {rec['graph_mode']}"]
    if rec["capture_error"]:
        parts.append(f"capture failed ({rec['capture_error']['class']})")
    if b["graph"] + b["eager"]:
        parts.append(
            f"{_pct(rec['captured_share'])} of {b['graph'] + b['eager']} decode batches on graphs "
            f"({b['source']})"
        )
    if rec["cuda_graph_max_bs"]:
        parts.append(f"ceiling {rec['cuda_graph_max_bs']}")
    return f"{run.id} [{run.facts.backend}]: " + "; ".join(parts)


def _record_lines(run: RunReport) -> list[str]:
    rec = run.record
    shape = rec["decode_batch_shape"]
    lines = [
        f"mode: {rec['graph_mode']} ({_val(rec['cudagraph_mode'])}), capture sizes {_sizes(rec['graph_capture_sizes'])}, "
        f"max bs {_val(rec['cuda_graph_max_bs'])}, max running {_val(rec['max_running_requests'])}",
        f"capture: {_val(rec['capture_time_s'])} s, {_val(rec['capture_mem_gib'])} GiB; "
        f"KV: {_val(rec['kv_tokens'])} tokens, {_val(rec['kv_cache_gib'])} GiB, "
        f"{_val(rec['gpu_blocks'])} blocks, concurrency {_val(rec['max_concurrency'])}",
    ]
    if shape:
        lines.append(
            f"decode batch sizes: n={shape['count']} min {shape['min']} p50 {shape['p50']} "
            f"p90 {shape['p90']} p99 {shape['p99']} max {shape['max']}; "
            f"padding waste {_pct(rec['padding_waste'])}"
        )
    perf = rec["perf"]
    if perf["throughput_in_window"] is not None or perf["throughput_out_window"] is not None:
        lines.append(
            f"gen throughput in window {_val(perf['throughput_in_window'])} tok/s, "
            f"out of window {_val(perf['throughput_out_window'])} tok/s"
        )
    return lines


def render_text(report: Report) -> str:
    out: list[str] = []
    findings = sorted(
        ((f, r) for r in report.runs for f in r.findings),
        key=lambda fr: finding_key(fr[0]),
    )
    if findings:
        out.append(f"Findings ({len(findings)}), worst first:")
        for f, run in findings:
            out.extend(
                textwrap.wrap(
                    f"{f.severity.upper():7} {f.code} {f.name} [{run.id}]: {f.message}",
                    WIDTH,
                    subsequent_indent="        ",
                )
            )
            if f.remediation:
                out.extend(
                    textwrap.wrap(
                        f"-> {f.remediation[0]}",
                        WIDTH,
                        initial_indent="        ",
                        subsequent_indent="           ",
                    )
                )
            for ev in f.evidence[:1]:
                out.extend(
                    textwrap.wrap(f"at {ev.path}:{ev.line}", WIDTH, initial_indent="        ")
                )
        out.append("")
    else:
        out.append("No findings.")
        out.append("")
    out.append("Runs:")
    for run in report.runs:
        out.extend(textwrap.wrap(verdict(run), WIDTH, subsequent_indent="     "))
        for line in _record_lines(run) + [f"note: {n}" for n in run.facts.notes]:
            out.extend(
                textwrap.wrap(line, WIDTH, initial_indent="     ", subsequent_indent="       ")
            )
    skipped = [
        i
        for i in report.inputs
        if i.status != "ok" and not (i.reason or "").startswith("not a log")
    ]
    if skipped:
        out.append("")
        out.append("Inputs not fully read:")
        for i in skipped:
            out.extend(
                textwrap.wrap(
                    f"{i.status}: {i.path}: {i.reason}",
                    WIDTH,
                    initial_indent="  ",
                    subsequent_indent="    ",
                )
            )
    return "\n".join(out) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def render_markdown(report: Report) -> str:
    from diag.render.serialize import to_yaml

    out = ["## graphdiag report", ""]
    for run in report.runs:
        out.append(f"- **{_md_escape(verdict(run))}**")
    out.append("")
    findings = sorted(
        ((f, r) for r in report.runs for f in r.findings),
        key=lambda fr: finding_key(fr[0]),
    )
    if findings:
        out += [
            "### Findings",
            "",
            "| severity | code | run | finding | first remedy |",
            "|---|---|---|---|---|",
        ]
        for f, run in findings:
            out.append(
                f"| {f.severity} | {f.code} {f.name} | {_md_escape(run.id)} | {_md_escape(f.message)} | "
                f"{_md_escape(f.remediation[0]) if f.remediation else ''} |"
            )
        out.append("")
        for f, run in findings:
            if f.evidence:
                out.append(f"<details><summary>{f.code} evidence ({_md_escape(run.id)})</summary>")
                out.append("")
                out.append("```text")
                out.extend(f"{e.path}:{e.line}: {e.text}".replace("```", "'''") for e in f.evidence)
                out.append("```")
                out.append("</details>")
                out.append("")
    out += ["### Ticket record", "", "```yaml", to_yaml(report).rstrip(), "```", ""]
    return "\n".join(out)
