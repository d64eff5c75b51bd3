"""The ``graphdiag`` command line (thin: everything real lives in :mod:`diag.api`).

Exit codes as ruff/sqlfluff: 0 analysed, no finding at or above --fail-on; 1 such
findings; 2 usage error or no input could be read at all. stdout carries the chosen
output only; progress and warnings go to stderr.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import click

from diag.about import __version__

FORMATS = ("text", "json", "yaml", "markdown")
FAIL_LEVELS = {"error": 0, "warning": 1, "info": 2, "never": -1}


_received: list[int] = []


def _terminate(signum: int, _frame: Any) -> None:
    """SIGINT/SIGTERM -> KeyboardInterrupt, so atomic writers remove their temporary files.

    The signal is also remembered: an exception raised inside a fork or a finaliser can be
    swallowed, so writers check :func:`_check_interrupted` before renaming anything."""
    _received.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def _check_interrupted() -> None:
    if _received:
        raise KeyboardInterrupt(f"signal {_received[0]}")


def _exit_interrupted() -> None:
    """Exit as shells expect after a signal: 128 + signal number (130 SIGINT, 143 SIGTERM)."""
    _warn("interrupted; no report written")
    sys.exit(128 + (_received[0] if _received else signal.SIGINT))


class Progress:
    """Bytes, lines/s-ish throughput and ETA on stderr, only on a terminal and after ~1 s."""

    def __init__(self, quiet: bool) -> None:
        self.enabled = not quiet and sys.stderr.isatty()
        self.start = time.monotonic()
        self.last = 0.0
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        elapsed = now - self.start
        if elapsed < 1.0 or now - self.last < 0.2:
            return
        self.last = now
        rate = done / elapsed if elapsed else 0
        eta = (total - done) / rate if rate and total else 0
        pct = f"{100 * done / total:5.1f}%" if total else "     "
        sys.stderr.write(
            f"\rgraphdiag: {pct} {done / 2**20:,.0f}/{total / 2**20:,.0f} MiB "
            f"{rate / 2**20:,.1f} MiB/s ETA {eta:,.0f}s "
        )
        sys.stderr.flush()
        self.shown = True

    def finish(self) -> None:
        if self.shown:
            sys.stderr.write("\r" + " " * 70 + "\r")
            sys.stderr.flush()


def _warn(msg: str) -> None:
    click.echo(f"graphdiag: {msg}", err=True)


def _report_inputs(inputs: Any) -> None:
    """One line per input not fully read; non-log files met in folders stay in the report only."""
    for item in inputs:
        if item.status != "ok" and not (item.reason or "").startswith("not a log"):
            _warn(f"{item.status}: {item.path}: {item.reason}")


def _stem(paths: tuple[str, ...]) -> str:
    if len(paths) == 1 and paths[0] != "-":
        p = Path(paths[0])
        name = p.name or p.resolve().name
        for suffix in (".gz", ".log", ".txt"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        return name or "report"
    return "stdin" if paths == ("-",) else "incident"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="graphdiag")
def main() -> None:
    """Diagnose CUDA-graph capture in vLLM and SGLang logs."""
    _received.clear()
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "-o",
    "--output-dir",
    "out_dir",
    default="reports",
    show_default=True,
    help="Folder for <stem>.graphdiag.html / .json.",
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("--no-html", is_flag=True, help="Write only the JSON report file.")
@click.option("--fail-on", type=click.Choice(list(FAIL_LEVELS)), default="error", show_default=True)
@click.option(
    "--rules",
    "rules_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="YAML overriding thresholds, severities, or disabling rules.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=0),
    default=0,
    show_default="0 = auto",
    help="Worker processes for reading logs: 0 = auto (one per core, up to 8, when inputs "
    "exceed 64 MiB), 1 = none.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
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
        _report_inputs(report.inputs)
        if not report.readable():
            _warn("no input could be read")
            sys.exit(2)
        stem = _stem(paths)
        out = Path(out_dir)
        json_text = to_json(report)
        html_text = None
        if not no_html:
            from diag.render.html import render_html

            html_text = render_html(report)
        _check_interrupted()
        write_atomic(out / f"{stem}.graphdiag.json", json_text)
        if html_text is not None:
            _check_interrupted()
            write_atomic(out / f"{stem}.graphdiag.html", html_text)
    except RulesError as exc:
        progress.finish()
        _warn(str(exc))
        sys.exit(2)
    except KeyboardInterrupt:
        progress.finish()
        _exit_interrupted()
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


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "csv", "parquet"]),
    default="jsonl",
    show_default=True,
)
@click.option(
    "-o",
    "--output",
    "output",
    default=None,
    help="File (jsonl/csv; default stdout) or folder (parquet).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=0),
    default=0,
    show_default="0 = auto",
    help="Worker processes for reading logs: 0 = auto (one per core, up to 8, when inputs "
    "exceed 64 MiB), 1 = none.",
)
@click.option("--quiet", "-q", is_flag=True)
def parse(paths: tuple[str, ...], fmt: str, output: str | None, jobs: int, quiet: bool) -> None:
    """Export the event tables for your own pandas / DuckDB work."""
    from diag.export import export_events
    from diag.ingest import ingest

    progress = Progress(quiet)
    ing = ingest(list(paths), progress, jobs=jobs or None)
    progress.finish()
    _report_inputs(ing.inputs)
    if not any(i.status != "skipped" for i in ing.inputs):
        _warn("no input could be read")
        sys.exit(2)
    if fmt == "parquet" and not output:
        _warn("--format parquet needs -o FOLDER")
        sys.exit(2)
    try:
        export_events(ing, fmt, output)
    except ImportError as exc:
        _warn(f"{exc} (pip install 'graphdiag[parquet]')")
        sys.exit(2)


@main.command()
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def rules(fmt: str) -> None:
    """The rule catalogue: code, name, severity, trigger, thresholds, remediation."""
    from diag.rules.engine import RuleEngine

    engine = RuleEngine.load()
    if fmt == "json":
        click.echo(json.dumps([r.to_dict() for r in engine.rules], indent=2))
        return
    for r in engine.rules:
        click.echo(f"{r.code} {r.name} [{r.severity}]")
        for line in r.doc.strip().splitlines():
            click.echo(f"    {line}")
        click.echo(f"    when: {' '.join(r.when.split())}")
        for k, v in r.thresholds.items():
            why = r.why.get(k)
            click.echo(f"    threshold {k} = {v}" + (f"  ({why})" if why else ""))
        first = r.remedies({"backend": "sglang", "capture_error_class": "oom"})
        if first:
            click.echo(f"    remedy (sglang): {first[0]}")
        click.echo("")


from diag import cli_advise  # noqa: E402,F401  (registers recommend and compare)

if __name__ == "__main__":  # pragma: no cover
    main()
