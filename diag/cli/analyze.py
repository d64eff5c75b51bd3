"""``graphdiag analyze``: the report (HTML + JSON files, the chosen format on stdout)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from diag.cli.common import (
    Progress,
    check_interrupted,
    exit_interrupted,
    format_option,
    jobs_option,
    quiet_option,
    report_inputs,
    warn,
)

FORMATS = ["text", "json", "yaml", "markdown"]
FAIL_LEVELS = {"error": 0, "warning": 1, "info": 2, "never": -1}


def _stem(paths: tuple[str, ...]) -> str:
    if len(paths) == 1 and paths[0] != "-":
        p = Path(paths[0])
        name = p.name or p.resolve().name
        for suffix in (".gz", ".log", ".txt"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        return name or "report"
    return "stdin" if paths == ("-",) else "incident"


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "-o",
    "--output-dir",
    "out_dir",
    default="reports",
    show_default=True,
    help="Folder for <stem>.graphdiag.html / .json.",
)
@format_option(FORMATS)
@click.option("--no-html", is_flag=True, help="Write only the JSON report file.")
@click.option("--fail-on", type=click.Choice(list(FAIL_LEVELS)), default="error", show_default=True)
@click.option(
    "--rules",
    "rules_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="YAML overriding thresholds, severities, or disabling rules.",
)
@jobs_option
@quiet_option()
def analyze(
    paths: tuple[str, ...],
    out_dir: str,
    fmt: str,
    no_html: bool,
    fail_on: str,
    rules_file: str | None,
    jobs: int,
    quiet: bool,
) -> None:
    """Analyse logs, profiler tables and snapshots; write the HTML and JSON reports."""
    from diag.api import analyze as run_analysis
    from diag.output import write_atomic
    from diag.render.serialize import to_json, to_yaml
    from diag.render.text import render_markdown, render_text
    from diag.rules.engine import RulesError

    progress = Progress(quiet)
    try:
        report = run_analysis(
            list(paths), rules_file=rules_file, progress=progress, jobs=jobs or None
        )
        progress.finish()
        report_inputs(report.inputs)
        if not report.readable():
            warn("no input could be read")
            sys.exit(2)
        if not report.recognised():
            warn(
                "nothing recognised: no vLLM or SGLang log line, error, profiler table or "
                "allocator snapshot in the input"
            )
            sys.exit(2)
        stem = _stem(paths)
        out = Path(out_dir)
        json_text = to_json(report)
        html_text = None
        if not no_html:
            from diag.render.html import render_html

            html_text = render_html(report)
        check_interrupted()
        write_atomic(out / f"{stem}.graphdiag.json", json_text)
        if html_text is not None:
            check_interrupted()
            write_atomic(out / f"{stem}.graphdiag.html", html_text)
    except RulesError as exc:
        progress.finish()
        warn(str(exc))
        sys.exit(2)
    except KeyboardInterrupt:
        progress.finish()
        exit_interrupted()
    rendered = {
        "text": render_text,
        "json": lambda r: json_text,
        "yaml": to_yaml,
        "markdown": render_markdown,
    }[fmt](report)
    click.echo(rendered, nl=False)
    level = FAIL_LEVELS[fail_on]
    worst = [FAIL_LEVELS[f.severity] for f in report.findings]
    sys.exit(1 if level >= 0 and any(w <= level for w in worst) else 0)
