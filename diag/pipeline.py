"""The analysis, stage by stage: read this file top to bottom to follow ``graphdiag analyze``.

    inputs -> ingest -> runs -> facts (artifact, trace and metrics joins as inputs)
           -> advice -> rules -> report

Each stage is one function from a typed input to a typed output, named in :data:`STAGES`.
``diag.api.analyze`` runs them; a fleet (``diag.fleet``) runs the first four group by
group (an input group is a rotated set with the artifacts of its folder, see
:mod:`diag.fleet.groups`), keeps each group's facts packed, and hands every group to the
same last three stages (:func:`judge`): advice pools one server's runs across groups, so
advice, rules and the report wait for all of them. Renderers (``diag.render``) only read
the :class:`~diag.report.Report` the last stage makes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any, Protocol

import pandas as pd

from diag.advise.bucket_sets import Advice
from diag.advise.fleet import FleetRun, fleet_run
from diag.advise.recommend import attach_recommendations
from diag.advise.run_advice import advise_runs
from diag.advise.traffic import RunEvidence
from diag.artifacts.trace import TraceAnalysis
from diag.event_frames import release_freed_memory
from diag.events import EventTables
from diag.evidence import LineReader, resolve_evidence, rotation_chain
from diag.facts.joins import join_runs, joined, run_profiles
from diag.facts.record import RunFacts, build_facts
from diag.facts.runs import Run, split_runs
from diag.ingest import Ingested, ProgressFn, StageFn, ingest_files
from diag.model import InputStatus, Snapshot
from diag.report import Report, RunReport
from diag.rules.engine import RuleEngine
from diag.sources.discover import InputFile, Problem
from diag.sources.readers import LineAnchor

#: the stages, in order; each has its function below (``<name>_stage``)
STAGES: tuple[str, ...] = ("inputs", "ingest", "runs", "facts", "advice", "rules", "report")

#: ``tell(step, done, total)``: where the analysis is, for a progress meter
Tell = Callable[[str, int, int], None]


def quiet(step: str, done: int = 0, total: int = 0) -> None:
    """A :data:`Tell` that tells no one."""


# ------------------------------------------------------------------ 1. inputs
@dataclass(frozen=True)
class Inputs:
    """What discovery found: files in reading order, and what it could not list."""

    files: tuple[InputFile, ...]
    problems: tuple[Problem, ...] = ()


def inputs_stage(files: Sequence[InputFile], problems: Sequence[Problem] = ()) -> Inputs:
    """The files to read (discovered and, for a fleet, cut into groups by
    :func:`diag.fleet.groups.plan_groups`: each group goes through stages 2-4 alone)."""
    return Inputs(tuple(files), tuple(problems))


# ------------------------------------------------------------------ 2. ingest
def ingest_stage(
    inputs: Inputs,
    *,
    jobs: int | None = None,
    progress: ProgressFn | None = None,
    stage: StageFn | None = None,
) -> Ingested:
    """Every file read into event tables (logs), snapshots, profiler tables and traces."""
    return ingest_files(inputs.files, inputs.problems, progress, jobs=jobs, stage=stage)


# ------------------------------------------------------------------ 3. runs
def runs_stage(ing: Ingested, tell: Tell = quiet) -> list[Run]:
    """The event tables cut into server runs (one stream, one start each)."""
    tell("splitting runs", 0, 0)
    return split_runs(ing.tables, ing.streams)


# ------------------------------------------------------------------ 4. facts
def facts_stage(
    runs: Sequence[Run], ing: Ingested, tz: tzinfo | None, tell: Tell = quiet
) -> list[RunFacts]:
    """Each run's facts, frozen: built from its event tables (metrics counters included),
    then the snapshots, tables and traces of its folder joined as inputs of the same build
    (:mod:`diag.facts.joins`). ``tz``: the zone of log stamps without one, for traces."""
    built = []
    for i, run in enumerate(runs):
        tell("facts per run", i, len(runs))
        built.append(build_facts(run))
    release_freed_memory()  # the stages' temporaries, kept by the allocators otherwise
    joins = join_runs(built, ing.profiles, ing.snapshots, ing.traces, tz)
    return [joined(f, joins.get(f.run.id)) for f in built]


class HeldRun(Protocol):
    """A run's facts as a group keeps them (a fleet packs them, :mod:`diag.fleet.partial`):
    ``light`` is what advice reads, :meth:`facts` the whole run."""

    @property
    def light(self) -> RunFacts: ...

    def facts(self) -> RunFacts: ...


@dataclass(frozen=True)
class LiveRun:
    """A run's facts held as they are (nothing to bound)."""

    light: RunFacts

    def facts(self) -> RunFacts:
        return self.light


@dataclass
class GroupFacts:
    """One group after stage 4: its inputs' statuses, runs, artifacts, and its event tables
    (``Report.tables``; packed bytes in a fleet, None where they stay on a cluster worker).
    ``runs`` is emptied once the rules judged them (:func:`judge`)."""

    inputs: list[InputStatus]
    runs: list[HeldRun]
    run_profiles: list[dict[str, Any]]  # operator tables logged inside the runs
    profiles: list[dict[str, Any]]  # standalone table files
    snapshots: list[Snapshot]
    traces: list[TraceAnalysis] = field(default_factory=list)
    tables: bytes | dict[str, pd.DataFrame] | None = None
    line_anchors: dict[str, tuple[LineAnchor, ...]] = field(default_factory=dict)  # Ingested's


def group_stages(
    ing: Ingested,
    tz: tzinfo | None,
    hold: Callable[[RunFacts], HeldRun] = LiveRun,
    tables: bytes | dict[str, pd.DataFrame] | None = None,
    tell: Tell = quiet,
) -> GroupFacts:
    """Stages 3-4 of one ingested group: its runs' facts, each kept by ``hold``."""
    facts = facts_stage(runs_stage(ing, tell), ing, tz, tell)
    return GroupFacts(
        ing.inputs,
        [hold(f) for f in facts],
        run_profiles(facts),
        [dict(p) for p in ing.profiles],
        ing.snapshots,
        ing.traces,
        tables,
        ing.line_anchors,
    )


# ------------------------------------------------------------------ 5. advice
@dataclass(frozen=True)
class Advised:
    """Stage 5's output: the bucket advice per run id, and (two runs or more) what the
    fleet summary needs of each run."""

    advice: Mapping[str, Advice]  # by run id
    fleet: Mapping[str, FleetRun]


def advice_stage(
    runs: Sequence[RunFacts],
    snapshots: Sequence[Snapshot],
    starts_per_day: float | None,
    tell: Tell = quiet,
) -> Advised:
    """The bucket advice, from facts alone (the rules and every renderer quote it): runs of
    one server pooled across groups. The fleet summary's binned traffic is built from the
    same evidence, each let go once binned."""
    tell("advice (bucket sets)", 0, 0)
    evidence: dict[str, RunEvidence | None] = {}  # each run's, built once for both steps
    advice = advise_runs(runs, snapshots, evidence, starts_per_day)
    fleet: dict[str, FleetRun] = {}
    for f in runs if len(runs) > 1 else ():
        fleet[f.run.id] = fleet_run(f, snapshots, evidence)
        evidence.pop(f.run.id, None)
    del evidence
    release_freed_memory()
    return Advised(advice, fleet)


# ------------------------------------------------------------------ 6. rules
def rules_stage(
    engine: RuleEngine,
    held: HeldRun,
    snapshots: Sequence[Snapshot],
    advised: Advised,
) -> RunReport:
    """One run judged: its findings and the notes of rules held back, beside its advice."""
    f = held.facts()
    got = advised.advice.get(f.run.id)
    findings, notes = engine.judge(f, snapshots, got)
    return RunReport(
        f,
        findings,
        advice=got,
        fleet=advised.fleet.get(f.run.id),
        restore=held.facts,
        rule_notes=notes,
    )


# ------------------------------------------------------------------ 7. report
def report_stage(
    runs: list[RunReport],
    snapshots: Sequence[Snapshot],
    read: LineReader,
    chain: Mapping[str, str],
    starts_per_day: float | None,
    tell: Tell = quiet,
) -> None:
    """Each finding's evidence lines read from its file, then each run's recommendation
    (the set to capture, priced), on one group's runs."""
    tell("evidence", 0, 0)
    resolve_evidence(runs, read, chain)
    tell("recommendations", 0, 0)
    attach_recommendations(runs, snapshots, starts_per_day)


def judge(
    problems: Sequence[Problem],
    parts: list[GroupFacts],
    tables: EventTables,
    rules_file: str | os.PathLike[str] | None,
    generated_at: str,
    read: LineReader,
    tell: Tell = quiet,
    starts_per_day: float | None = None,
) -> Report:
    """Stages 5-7 over every group: advice across groups, then group by group the rules and
    the report's evidence and recommendations, each run's facts read back only while it is
    judged; the :class:`Report` in reading order (groups are contiguous ranges of it), which
    makes the fleet summary once, for every renderer to read (``Report.fleet``)."""
    inputs = [InputStatus(p.path, status="skipped", reason=p.reason) for p in problems]
    inputs += [i for part in parts for i in part.inputs]
    snapshots = [s for part in parts for s in part.snapshots]
    chain = rotation_chain([i.path for i in inputs if i.kind == "log"])
    engine = RuleEngine.load(rules_file)
    advised = advice_stage(
        [r.light for part in parts for r in part.runs], snapshots, starts_per_day, tell
    )
    total = sum(len(part.runs) for part in parts)
    runs: list[RunReport] = []
    for part in parts:
        mine: list[RunReport] = []
        for held in part.runs:
            tell("rules per run", len(runs) + len(mine), total)
            mine.append(rules_stage(engine, held, snapshots, advised))
        part.runs = []
        report_stage(mine, snapshots, read, chain, starts_per_day, tell)
        runs += mine
    return Report(
        inputs,
        runs,
        [p for part in parts for p in part.run_profiles]
        + [p for part in parts for p in part.profiles],
        snapshots,
        tables,
        generated_at,
        traces=[t for part in parts for t in part.traces],
    )
