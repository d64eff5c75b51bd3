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

from diag.events import EventTables
from diag.facts.runs import Run, split_runs
from diag.fleet.groups import GroupPlan, InputGroup, plan_groups
from diag.fleet.merge import merge_groups
from diag.fleet.partial import GroupFacts, group_facts, read_group
from diag.ingest import Ingested, ProgressFn, StageFn, ingest
from diag.report import Report


def parse_events(
    paths: Sequence[str], progress: ProgressFn | None = None, jobs: int | None = None
) -> EventTables:
    """The event tables of the inputs, one DataFrame per event kind."""
    return ingest(paths, progress, jobs=jobs).tables


def runs_of(ingested: Ingested) -> list[Run]:
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
) -> Report:
    """Read the inputs, build facts per run, run the rules, return the :class:`Report`:
    the stages of :mod:`diag.pipeline`, in its order.

    The inputs are read group by group (:mod:`diag.fleet`: rotated sets, with the
    artifacts of their folder; stages 1-4, :func:`diag.pipeline.group_stages`), then
    advice, rules and the report over every group (:func:`diag.pipeline.judge`); each
    group's event tables let go once its facts are built,
    so a folder of many pod logs stays bounded; the report is the one a single pass makes.
    ``tz``: the zone of log time stamps that carry none (``--tz``), to meet profiler traces'
    epoch times; None reads them as UTC. ``stage(name, done, total)`` hears of each step
    (files counted while groups are read, runs where a step goes run by run), so a meter
    moves through the whole analysis. ``starts_per_day``: how often the server starts, which
    prices capture time in the bucket advice (None: the stated default, one a day)."""

    def tell(name: str, done: int = 0, total: int = 0) -> None:
        if stage is not None:
            stage(name, done, total)

    with fewer_collections():
        if ingested is not None:
            plan, parts = GroupPlan((), ()), [group_facts(ingested, tz, packed=False)]
        else:
            plan = plan_groups(paths)
            parts = read_groups(plan, tz, jobs=jobs, progress=progress, stage=stage)
        return merge_groups(
            plan.problems,
            parts,
            rules_file,
            generated_at or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            tell,
            starts_per_day=starts_per_day,
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


def read_groups(
    plan: GroupPlan,
    tz: tzinfo | None,
    *,
    jobs: int | None = None,
    progress: ProgressFn | None = None,
    stage: StageFn | None = None,
) -> list[GroupFacts]:
    """Every group read in this process, in order. One group is read with the caller's byte
    meter and stages; several are counted in files read."""
    if len(plan.groups) <= 1:
        group = plan.groups[0] if plan.groups else InputGroup(())
        return [read_group(group, tz, jobs=jobs, progress=progress, stage=stage, packed=False)]
    parts, done = [], 0
    for group in plan.groups:
        if stage is not None:
            stage("reading files", done, plan.files)
        parts.append(read_group(group, tz, jobs=jobs))
        done += len(group.files)
    return parts
