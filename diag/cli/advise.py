"""``graphdiag recommend`` and ``graphdiag compare``: advice from one or two analyses.

Same conventions as ``analyze``: stdout carries only the chosen output, warnings go to
stderr, exit 2 on usage errors or when nothing can be read or recommended.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from diag.cli.common import (
    Progress,
    format_option,
    quiet_option,
    report_inputs,
    starts_option,
    warn,
)

RECOMMEND_EPILOG = """\b
Examples:
  graphdiag recommend logs/
  graphdiag recommend server.log --max-buckets 8
  graphdiag recommend logs/ --coverage 0.99 --format json > buckets.json
  graphdiag recommend logs/ --starts-per-day 24   # an autoscaled server starting hourly
  kubectl logs pod/sglang-0 | graphdiag recommend - --engine sglang

\b
Output: the current and the recommended bucket sets (coverage, padding waste, capture
memory), then the flags to paste. Unreadable inputs are named on stderr.

\b
Exit codes: 0 a bucket set recommended; 2 usage error, no input could be read, or
nothing to recommend from (e.g. the engine cannot be told: pass --engine; the reason is
on stderr); 130/143 interrupted.
"""

COMPARE_EPILOG = """\b
Examples:
  graphdiag compare eager.log graphs.log
  graphdiag compare --before old/rank0.log --before old/rank1.log --after new/
  graphdiag compare before.log after.log --format html -o compare.html

\b
Each side's main run (the one with most decode batches) is compared: captured share,
eager batches, capture time and memory, KV tokens, findings that disappeared, appeared
or persist. A side with graphs disabled gets a warning (its numbers are not the graph
path's).

\b
Exit codes: 0 compared; 2 usage error (not exactly two sides) or a side with no
readable input; 130/143 interrupted.
"""


def _analyze(
    paths: list[str], quiet: bool, what: str = "", starts_per_day: float | None = None
) -> Any:
    """Analyse one path set; exit 2 when no input of it could be read."""
    from diag.api import analyze

    progress = Progress(quiet)
    report = analyze(paths, progress=progress, stage=progress.stage, starts_per_day=starts_per_day)
    progress.finish()
    prefix = f"{what}: " if what else ""
    report_inputs(report.inputs, prefix, all_inputs=True)
    if not report.readable():
        warn(f"{prefix}no input could be read")
        sys.exit(2)
    return report


@click.command(epilog=RECOMMEND_EPILOG)
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--engine",
    type=click.Choice(["vllm", "sglang"]),
    default=None,
    help="Engine to spell the flags for (default: the runs' engine).",
)
@click.option(
    "--max-buckets",
    "max_buckets",
    type=click.IntRange(min=1),
    default=None,
    help="At most K capture sizes (default: as many as the run captured, else the engine default's count).",
)
@click.option(
    "--coverage",
    type=click.FloatRange(0.0, 1.0),
    default=None,
    help="Let the ceiling drop to the size covering this share of decode steps "
    "(default: the observed peak plus 10% headroom).",
)
@starts_option
@format_option(["text", "json"])
@quiet_option()
def recommend(
    paths: tuple[str, ...],
    engine: str | None,
    max_buckets: int | None,
    coverage: float | None,
    starts_per_day: float | None,
    fmt: str,
    quiet: bool,
) -> None:
    """A capture bucket set for the observed decode batches, with the flags to paste."""
    from diag.advise.recommend import RecommendError
    from diag.advise.recommend import recommend as make
    from diag.render.recommend_text import render_text

    report = _analyze(list(paths), quiet, starts_per_day=starts_per_day)
    try:
        rec = make(
            report.runs,
            report.snapshots,
            engine=engine,
            max_buckets=max_buckets,
            min_coverage=coverage,
            starts_per_day=starts_per_day,
        )
    except RecommendError as exc:
        warn(str(exc))
        sys.exit(2)
    if fmt == "json":
        from diag.model import clean_json

        click.echo(json.dumps(clean_json(rec), indent=2, ensure_ascii=False))
    else:
        click.echo(render_text(rec), nl=False)


@click.command(epilog=COMPARE_EPILOG)
@click.argument("paths", nargs=-1)
@click.option(
    "--before", "before", multiple=True, metavar="PATH", help="A BEFORE input (repeatable)."
)
@click.option(
    "--after", "after", multiple=True, metavar="PATH", help="An AFTER input (repeatable)."
)
@format_option(["text", "json", "html"])
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write to FILE instead of stdout.",
)
@quiet_option()
def compare(
    paths: tuple[str, ...],
    before: tuple[str, ...],
    after: tuple[str, ...],
    fmt: str,
    output: str | None,
    quiet: bool,
) -> None:
    """Two runs side by side: BEFORE AFTER, or --before P... --after P... for path sets.

    Each side's main run (most decode batches) is compared, with its verdict; a side with
    graphs disabled gets a warning (eager numbers are not the graph path's). Across engines,
    or vLLM versions whose sizes count other things (V0 before 0.8.0: sequences; V1:
    tokens), no metric is called better or worse, and that is said first.
    """
    from diag.comparison import compare as make
    from diag.output import WriteError, write_atomic
    from diag.render.compare import render_html, render_json, render_text

    if paths and (before or after):
        raise click.UsageError("give either two paths BEFORE AFTER or --before/--after, not both")
    if paths:
        if len(paths) != 2:
            raise click.UsageError(
                f"expected two paths BEFORE AFTER, got {len(paths)}; "
                "use --before/--after for path sets"
            )
        before, after = (paths[0],), (paths[1],)
    if not before or not after:
        raise click.UsageError("need a BEFORE and an AFTER side")
    rb = _analyze(list(before), quiet, "before")
    ra = _analyze(list(after), quiet, "after")
    doc = make(rb, ra, before, after)
    if fmt != "text" or output:  # the text on stdout already begins with them
        for w in doc["warnings"]:
            warn(w)
    text = {"text": render_text, "json": render_json, "html": render_html}[fmt](doc)
    if output:
        try:
            write_atomic(Path(output), text)
        except WriteError as exc:
            warn(str(exc))
            sys.exit(2)
    else:
        click.echo(text, nl=False)
