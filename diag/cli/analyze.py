"""``graphdiag analyze``: the report (HTML + JSON files, the chosen format on stdout)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from datetime import timedelta, timezone, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING

import click

from diag.cli.common import (
    Progress,
    check_interrupted,
    exit_interrupted,
    format_option,
    jobs_option,
    quiet_option,
    report_input_lines,
    starts_option,
    warn,
)

if TYPE_CHECKING:  # pragma: no cover
    from diag.output import Content
    from diag.report import Report

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


SHORT = "Write the HTML and JSON reports of logs, tables and snapshots."
EPILOG = """\b
Examples:
  graphdiag analyze logs/
  graphdiag analyze server.log.gz rank1.log --format markdown > ticket.md
  docker logs sglang 2>&1 | graphdiag analyze - -o out/
  graphdiag analyze logs/ --fail-on warning --format json > report.json
  graphdiag analyze --cluster tcp://scheduler:8786 /shared/logs/
  graphdiag analyze --cluster tcp://scheduler:8786 --on-workers '/var/log/sglang/*.log'

\b
PATH: log files (plain, .gz, rotated; docker/k8s/ray prefixes are peeled), folders (read
recursively: logs, profiler tables, cuda_graph_runner_memory_usage.pickle snapshots), or -
for stdin. Several paths are one incident (e.g. one log per rank).

\b
Output: <stem>.graphdiag.html and .json in -o (the stem is the file or folder name,
"stdin" for -, "incident" for several paths); stdout gets --format. With --format text the
last lines name the files written; with json/yaml/markdown (data on stdout) those lines go
to stderr. Warnings about unreadable inputs go to stderr.

\b
--fail-on LEVEL: exit 1 when a finding at or above LEVEL exists (error > warning > info);
"never" exits 0 after any successful analysis. Reports are written either way.

\b
Exit codes: 0 no finding at or above --fail-on; 1 such a finding; 2 usage error, bad
--rules file, no input could be read, or the reports could not be written (one line; nothing
partial is left); 130/143 interrupted (the message says whether the reports exist: both
whole, or none).
"""


_OFFSET = re.compile(r"^(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$", re.I)


def parse_tz(text: str) -> tzinfo:
    """``UTC``, ``+08:00`` / ``-0530`` / ``UTC+8``, or an IANA name (DST-aware)."""
    t = text.strip()
    if t.upper() in ("UTC", "GMT", "Z"):
        return timezone.utc
    m = _OFFSET.match(t)
    if m:
        hours, minutes = int(m.group(2)), int(m.group(3) or 0)
        if hours > 14 or minutes > 59:
            raise click.BadParameter(f"{text!r} is not a UTC offset", param_hint="--tz")
        sign = -1 if m.group(1) == "-" else 1
        return timezone(sign * timedelta(hours=hours, minutes=minutes))
    try:
        from zoneinfo import ZoneInfo

        return ZoneInfo(t)
    except (ValueError, KeyError, OSError):
        raise click.BadParameter(
            f"{text!r} is neither a UTC offset (+08:00) nor a zone name (Asia/Shanghai)",
            param_hint="--tz",
        ) from None


@click.command(epilog=EPILOG, short_help=SHORT)
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
@click.option(
    "--fail-on",
    type=click.Choice(list(FAIL_LEVELS)),
    default="error",
    show_default=True,
    help="Exit 1 when a finding at or above this severity exists (never: always 0).",
)
@click.option(
    "--rules",
    "rules_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="YAML overriding thresholds, severities, or disabling rules.",
)
@click.option(
    "--tz",
    "tz",
    default=None,
    metavar="ZONE",
    help="Zone of log time stamps that carry none (e.g. Asia/Shanghai, +08:00), to join "
    "profiler-trace steps to log lines by time; default UTC.",
)
@click.option(
    "--cluster",
    "cluster",
    default=None,
    metavar="ADDRESS",
    help="Read the inputs in tasks of a Dask cluster: a scheduler address "
    "(tcp://scheduler:8786) or local[:N] for N worker processes here. Needs "
    "pip install 'graphdiag[cluster]'.",
)
@click.option(
    "--on-workers",
    is_flag=True,
    help="With --cluster: PATH is a glob each worker evaluates and reads itself (logs read "
    "where they lie); paths are shown as <worker name>:<path>.",
)
@starts_option
@jobs_option
@quiet_option()
def analyze(
    paths: tuple[str, ...],
    out_dir: str,
    fmt: str,
    no_html: bool,
    fail_on: str,
    rules_file: str | None,
    tz: str | None,
    cluster: str | None,
    on_workers: bool,
    starts_per_day: float | None,
    jobs: int,
    quiet: bool,
) -> None:
    """Analyse logs, profiler tables and snapshots in PATHS (or - for stdin); write the
    HTML and JSON reports and print a summary."""
    # only what reading needs before it starts: the analysis and the renderers load while the
    # scan workers read (diag.pipeline.LATER_STAGES), or after
    from diag.api import analyze as run_analysis
    from diag.output import InterruptedWrite, WriteError, write_set
    from diag.rules.errors import RulesError

    zone = parse_tz(tz) if tz else None
    if on_workers and cluster is None:
        raise click.UsageError("--on-workers reads paths on the workers of a --cluster")
    progress = Progress(quiet)
    try:
        if cluster is not None:
            report = _on_cluster(
                paths, cluster, on_workers, rules_file, zone, progress, starts_per_day
            )
        else:
            report = run_analysis(
                list(paths),
                rules_file=rules_file,
                progress=progress,
                jobs=jobs or None,
                tz=zone,
                stage=progress.stage,
                starts_per_day=starts_per_day,
                keep_tables=False,  # the report is all it writes
            )
        from diag.render.inputs import input_lines, why_nothing
        from diag.render.serialize import json_chunks

        if not report.readable() or not report.recognised():
            progress.finish()
            # each input's reason (at most 10, then a count), then one line saying why
            report_input_lines(input_lines(report))
            if not report.readable():
                warn(f"no input could be read ({why_nothing(report)})")
            else:
                warn(
                    "nothing recognised: no vLLM or SGLang log line, error, profiler table or "
                    f"allocator snapshot in the input ({why_nothing(report)})"
                )
            sys.exit(2)
        stem = _stem(paths)
        out = Path(out_dir)
        # the JSON and the HTML of one analysis appear together or not at all; each is
        # written as it is made, run by run (a fleet's report is never whole in memory)
        written: list[tuple[str, Path, Content]] = [
            (
                "JSON report",
                out / f"{stem}.graphdiag.json",
                _telling(json_chunks(report), progress, "writing the JSON report"),
            )
        ]
        if not no_html:
            from diag.render.html import html_chunks

            written.insert(
                0,
                (
                    "HTML report",
                    out / f"{stem}.graphdiag.html",
                    _telling(html_chunks(report), progress, "rendering the HTML report"),
                ),
            )
        write_set([(path, text) for _, path, text in written], check=check_interrupted)
        progress.finish()
        report_input_lines(input_lines(report))
    except (RulesError, WriteError) as exc:
        progress.finish()
        warn(str(exc) + ("; no report written" if isinstance(exc, WriteError) else ""))
        sys.exit(2)
    except InterruptedWrite as exc:
        progress.finish()
        exit_interrupted(exc.written)
    except KeyboardInterrupt:
        progress.finish()
        exit_interrupted()
    if fmt == "json":  # the report file's text, as written
        _echo_file(written[-1][1])
    else:
        click.echo(_rendered(report, fmt), nl=False)
    # where the files are, last: on stdout under the text summary, else on stderr (stdout
    # then carries data only)
    if fmt == "text":
        click.echo("")
        for label, path, _ in written:
            click.echo(f"{label}: {path}")
    elif not quiet:
        warn("wrote " + ", ".join(str(path) for _, path, _ in written))
    level = FAIL_LEVELS[fail_on]
    worst = [FAIL_LEVELS[f.severity] for f in report.findings]
    sys.exit(1 if level >= 0 and any(w <= level for w in worst) else 0)


def _telling(chunks: Iterable[str], progress: Progress, step: str) -> Iterator[str]:
    """``chunks``, the progress meter told when the first is made (files are written in turn)."""
    progress.stage(step)
    yield from chunks


def _echo_file(path: Path) -> None:
    """A written report on stdout, read back in pieces."""
    with path.open(encoding="utf-8") as fh:
        while piece := fh.read(1 << 20):
            click.echo(piece, nl=False)


def _rendered(report: Report, fmt: str) -> str:
    """stdout in ``fmt`` (not json: that is the report file's text). Each renderer is
    imported here, for its format only: the text views are ~10 ms of imports that
    ``--format json`` would load for nothing before its scan."""
    if fmt == "yaml":
        from diag.render.serialize import to_yaml

        return to_yaml(report)
    from diag.render.text import render_markdown, render_text

    return render_text(report) if fmt == "text" else render_markdown(report)


def _on_cluster(
    paths: tuple[str, ...],
    address: str,
    on_workers: bool,
    rules_file: str | None,
    zone: tzinfo | None,
    progress: Progress,
    starts_per_day: float | None = None,
) -> Report:
    """The report read by a Dask cluster's tasks; one line and exit 2 without Dask or a
    scheduler."""
    from diag.fleet.cluster import ClusterUnavailable, analyze_on_cluster, connect

    try:
        conn = connect(address)
    except ClusterUnavailable as exc:
        progress.finish()
        warn(str(exc))
        sys.exit(2)
    try:
        return analyze_on_cluster(
            list(paths),
            conn.client,
            on_workers=on_workers,
            rules_file=rules_file,
            tz=zone,
            stage=progress.stage,
            starts_per_day=starts_per_day,
        )
    finally:
        conn.close()
