"""``graphdiag parse``: the event tables, for your own pandas / DuckDB work."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from diag.cli.common import (
    FormatChoice,
    Progress,
    jobs_option,
    quiet_option,
    report_inputs,
    warn,
)

SHORT = "Export the event tables and every engine's decode steps (jsonl, csv, Parquet)."
EPILOG = """\b
Examples:
  graphdiag parse server.log > events.jsonl
  graphdiag parse logs/ --format csv -o events.csv
  graphdiag parse node-*/ --format parquet -o events/
  python -c "import duckdb; duckdb.sql(\\"FROM 'events/decode_step/*/*.parquet'\\").show()"
  kubectl logs pod/sglang-0 | graphdiag parse - -o events.jsonl

\b
Besides the raw event kinds, kind decode_step holds every engine's decode steps as
analyze counts them (SGLang decode lines, vLLM DEBUG steps, --cudagraph-metrics rows,
stats intervals; column step_source says which, weight the steps a row stands for,
cuda_graph true/false/null). Parquet is written with pyarrow (a required dependency);
DuckDB is not installed with graphdiag: pip install duckdb for its Python API.

\b
What it wrote: one line "wrote PATH: N rows (kind n, ...)" after the export. With -o it
goes to stdout (the data is in the file); without -o the rows themselves are stdout, so
the line goes to stderr and a pipe of jsonl/csv stays clean. -q leaves it out.

\b
Exit codes: 0 exported; 2 usage error or no input could be read; 130/143 interrupted.
"""


def summary_line(counts: dict[str, int], where: str) -> str:
    """``wrote events.jsonl: 1,234 rows (decode_batch 1,000, stats 200, ...)``, kinds by size."""
    kinds = sorted(((n, k) for k, n in counts.items() if n), key=lambda nk: (-nk[0], nk[1]))
    total = sum(counts.values())
    parts = ", ".join(f"{k} {n:,}" for n, k in kinds)
    return f"wrote {where}: {total:,} row{'s' if total != 1 else ''}" + (
        f" ({parts})" if parts else ""
    )


@click.command(epilog=EPILOG, short_help=SHORT)
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--format",
    "fmt",
    type=FormatChoice(["jsonl", "csv", "parquet"]),
    default="jsonl",
    show_default=True,
    help="jsonl/csv: all events in one long table (kind, source, line, ts, rank, fields); "
    "parquet: one dataset per kind, partitioned by run.",
)
@click.option(
    "-o",
    "--output",
    "output",
    default=None,
    help="File (jsonl/csv; default stdout) or folder (parquet, required).",
)
@jobs_option
@quiet_option("No progress and no summary line.")
def parse(paths: tuple[str, ...], fmt: str, output: str | None, jobs: int, quiet: bool) -> None:
    """Export the event tables of PATHS (files, folders, or - for stdin) for your own
    pandas / DuckDB work."""
    from diag.export import export_events
    from diag.export_parquet import write_parquet
    from diag.ingest import ingest

    progress = Progress(quiet)
    ing = ingest(list(paths), progress, jobs=jobs or None, stage=progress.stage)
    progress.stage("writing the export (decode steps classified per run)")
    if not any(i.status != "skipped" for i in ing.inputs):
        progress.finish()
        report_inputs(ing.inputs)
        warn("no input could be read")
        sys.exit(2)
    if fmt == "parquet" and not output:
        progress.finish()
        warn("--format parquet needs -o FOLDER")
        sys.exit(2)
    if fmt == "parquet":
        assert output is not None
        counts = write_parquet(ing, Path(output))
    else:
        counts = export_events(ing, "csv" if fmt == "csv" else "jsonl", output)
    progress.finish()
    report_inputs(ing.inputs)
    if not quiet:
        # a path as given, without a doubled or trailing slash (-o events/ is "events/")
        where = str(Path(output)) if output else "stdout"
        if fmt == "parquet":
            where = f"{where}/ (one folder per kind)"
        click.echo(summary_line(counts, where), err=not output)
