"""The Python API the CLI itself uses.

report = diag.analyze(["incident/"])          # runs, records, findings, event tables
tables = diag.parse_events(["incident/"])     # just the event DataFrames
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone, tzinfo
from typing import TYPE_CHECKING

from diag import pipeline
from diag.events import EventTables
from diag.ingest import Ingested, ProgressFn, StageFn, ingest

if TYPE_CHECKING:  # pragma: no cover
    # the analysis' modules load while the ingest's workers read (diag.pipeline.LATER_STAGES)
    from diag.facts.runs import Run
    from diag.report import Report


def parse_events(
    paths: Sequence[str], progress: ProgressFn | None = None, jobs: int | None = None
) -> EventTables:
    """The event tables of the inputs, one DataFrame per event kind."""
    return ingest(paths, progress, jobs=jobs).tables


def runs_of(ingested: Ingested) -> list[Run]:
    from diag.facts.runs import split_runs

    return split_runs(ingested.tables, ingested.streams)


def analyze(
    paths: Sequence[str],
    rules_file: str | os.PathLike[str] | None = None,
    progress: ProgressFn | None = None,
    ingested: Ingested | None = None,
    generated_at: str | None = None,
    jobs: int | None = None,
    tz: tzinfo | None = None,
    stage: StageFn | None = None,
    starts_per_day: float | None = None,
    keep_tables: bool = True,
) -> Report:
    """Read the inputs, build facts per run, run the rules, return the :class:`Report`:
    :func:`diag.pipeline.analyze`, the stages in order (``ingested``: inputs already read,
    one group, from stage 3 on).

    ``tz``: the zone of log time stamps that carry none (``--tz``), to meet profiler traces'
    epoch times; None reads them as UTC. ``stage(name, done, total)`` hears of each step
    (files counted while groups are read, runs where a step goes run by run), so a meter
    moves through the whole analysis. ``starts_per_day``: how often the server starts, which
    prices capture time in the bucket advice (None: the stated default, one a day).
    ``keep_tables=False``: the report without its event tables and each run's facts without
    the raw rows they digested (:data:`diag.pipeline.DIGESTED`; what writing the report
    needs: the command line's memory on a big log)."""
    when = generated_at or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with fewer_collections():
        if ingested is not None:
            parts = [pipeline.group_facts(ingested, tz, keep_tables, packed=False)]
            tell = pipeline.teller(stage)
            return pipeline.judge_groups((), parts, rules_file, when, tell, starts_per_day)
        return pipeline.analyze(
            paths,
            rules_file=rules_file,
            generated_at=when,
            tz=tz,
            jobs=jobs,
            progress=progress,
            stage=stage,
            starts_per_day=starts_per_day,
            keep_tables=keep_tables,
        )


@contextmanager
def fewer_collections(gen0: int = 50_000) -> Iterator[None]:
    """A higher first-generation threshold for the cyclic collector while an analysis runs.

    A fleet's analysis keeps many small objects alive (each run's facts, records, findings);
    at the default threshold (700 allocations) the collector walks them again and again, so
    the time per pod log grew with the folder (68 -> 77 ms from 300 to 1,000 logs,
    bench/many_files.py). Nothing of the analysis relies on cycles being freed early; the
    old thresholds come back afterwards."""
    old = gc.get_threshold()
    gc.set_threshold(gen0, old[1], old[2])
    try:
        yield
    finally:
        gc.set_threshold(*old)
