"""``graphdiag parse``: the event tables, for your own pandas / DuckDB work."""

from __future__ import annotations

import sys

import click

from diag.cli.common import Progress, jobs_option, quiet_option, report_inputs, warn


@click.command()
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
@jobs_option
@quiet_option(None)
def parse(paths: tuple[str, ...], fmt: str, output: str | None, jobs: int, quiet: bool) -> None:
    """Export the event tables for your own pandas / DuckDB work."""
    from diag.export import export_events
    from diag.ingest import ingest

    progress = Progress(quiet)
    ing = ingest(list(paths), progress, jobs=jobs or None)
    progress.finish()
    report_inputs(ing.inputs)
    if not any(i.status != "skipped" for i in ing.inputs):
        warn("no input could be read")
        sys.exit(2)
    if fmt == "parquet" and not output:
        warn("--format parquet needs -o FOLDER")
        sys.exit(2)
    try:
        export_events(ing, fmt, output)
    except ImportError as exc:
        warn(f"{exc} (pip install 'graphdiag[parquet]')")
        sys.exit(2)
