"""The analysis, stage by stage: read this file top to bottom to follow ``graphdiag analyze``.

    inputs -> ingest -> runs -> facts (artifact, trace and metrics joins as inputs)
           -> advice -> rules -> report

:func:`analyze` runs them (``diag.api.analyze`` is it). Each stage is one function from a
typed input to a typed output, named in :data:`STAGES`. The inputs are cut into groups (a
rotated set with the artifacts of its folder, :mod:`diag.sources.groups`); stages 2-4 run
group by group (:func:`read_group`), each group's facts held packed when there are several
(:mod:`diag.facts.packed`), and every group goes to the same last three stages
(:func:`judge_groups`): advice pools one server's runs across groups, so advice, rules and the
report wait for all of them. A fleet on a Dask cluster (``diag.fleet``) reads its groups on
the workers with the same :func:`read_group` and judges them here. Renderers
(``diag.render``) only read the :class:`~diag.report.Report` the last stage makes.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, Protocol

from diag.artifacts.trace import TraceAnalysis
from diag.event_frames import release_freed_memory
from diag.events import EventTables
from diag.ingest import Ingested, ProgressFn, StageFn, ingest_files
from diag.model import InputStatus, Snapshot
from diag.sources.discover import Problem
from diag.sources.groups import GroupPlan, InputGroup, plan_groups
from diag.sources.readers import LineAnchor
from diag.spill import ReadOnAsk, Spilled, spill

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from diag.advise.bucket_sets import Advice
    from diag.advise.fleet import FleetRun
    from diag.advise.traffic import RunEvidence
    from diag.evidence import LineReader
    from diag.facts.joins import JoinKey
    from diag.facts.record import RunFacts
    from diag.facts.runs import Run
    from diag.report import Report, RunReport
    from diag.rules.engine import RuleEngine

#: the stages, in order; each has its function below (``<name>_stage``)
STAGES: tuple[str, ...] = ("inputs", "ingest", "runs", "facts", "advice", "rules", "report")

#: ``tell(step, done, total)``: where the analysis is, for a progress meter
Tell = Callable[[str, int, int], None]


def quiet(step: str, done: int = 0, total: int = 0) -> None:
    """A :data:`Tell` that tells no one."""


#: the modules of stages 3-7 (and pandas, which they load). Each stage imports what it uses
#: in its own body; the ingest loads them all at once while its scan workers read
#: (:func:`load_later_stages`): ~0.5 s of imports that were serial time ahead of the workers
#: (issue 37), and that the workers, forked before them, never load
LATER_STAGES: tuple[str, ...] = (
    "diag.facts.runs",
    "diag.facts.record",
    "diag.facts.joins",
    "diag.facts.packed",
    "diag.facts.deferred",
    "diag.advise.run_advice",
    "diag.advise.fleet",
    "diag.advise.recommend",
    "diag.rules.engine",
    "diag.evidence",
    "diag.report",
)


def load_later_stages() -> None:
    """Import :data:`LATER_STAGES` (what the parent does while its workers scan)."""
    for name in LATER_STAGES:
        importlib.import_module(name)


# ------------------------------------------------------------------ the analysis
def analyze(
    paths: Sequence[str],
    *,
    rules_file: str | os.PathLike[str] | None = None,
    generated_at: str,
    tz: tzinfo | None = None,
    jobs: int | None = None,
    progress: ProgressFn | None = None,
    stage: StageFn | None = None,
    starts_per_day: float | None = None,
    keep_tables: bool = True,
) -> Report:
    """Every stage in order: the inputs cut into groups, stages 2-4 group by group (each
    group's event tables let go once its facts are built, so a folder of many pod logs stays
    bounded), then stages 5-7 over every group: the report one pass would make.
    ``keep_tables=False``: no event tables on the report, and each run's facts without the
    raw rows they digested (:data:`DIGESTED`): what a caller that only writes the report
    needs (the command line)."""
    plan = inputs_stage(paths)
    parts = read_groups(
        plan, tz, jobs=jobs, progress=progress, stage=stage, keep_tables=keep_tables
    )
    return judge_groups(
        plan.problems, parts, rules_file, generated_at, teller(stage), starts_per_day
    )


def read_groups(
    plan: GroupPlan,
    tz: tzinfo | None,
    *,
    jobs: int | None = None,
    progress: ProgressFn | None = None,
    stage: StageFn | None = None,
    keep_tables: bool = True,
) -> list[GroupFacts]:
    """Stages 2-4 of every group, in order. One group is read with the caller's byte meter
    and stages, held as it is; several are counted in files read, each held packed."""
    if len(plan.groups) <= 1:
        group = plan.groups[0] if plan.groups else InputGroup(())
        return [
            read_group(
                group,
                tz,
                jobs=jobs,
                progress=progress,
                stage=stage,
                keep_tables=keep_tables,
                packed=False,
            )
        ]
    deferred = [g.deferred for g in plan.groups]  # artifacts joined once all are read
    keyed = any(deferred)
    parts, done = [], 0
    for group in plan.groups:
        if stage is not None:
            stage("reading files", done, plan.files)
        parts.append(read_group(group, tz, jobs=jobs, keep_tables=keep_tables, keyed=keyed))
        done += len(group.files)
    if keyed:
        from diag.facts.deferred import join_deferred

        join_deferred(parts, deferred, tz)
    return parts


def read_group(
    group: InputGroup,
    tz: tzinfo | None = None,
    *,
    jobs: int | None = None,
    progress: ProgressFn | None = None,
    stage: StageFn | None = None,
    keep_tables: bool = True,
    packed: bool = True,
    keyed: bool = False,
) -> GroupFacts:
    """Stages 2-4 on one group: ingest, runs, facts with joins (packed: see
    :func:`group_facts`; ``keyed``: with its runs' join keys)."""
    ing = ingest_stage(
        group, jobs=jobs, progress=progress, stage=stage, meanwhile=load_later_stages
    )
    return group_facts(ing, tz, keep_tables, stage, packed, keyed)


def teller(stage: StageFn | None) -> Tell:
    """A stage meter as a :data:`Tell` (one that tells no one when there is none)."""
    return quiet if stage is None else stage


# ------------------------------------------------------------------ 1. inputs
def inputs_stage(paths: Sequence[str]) -> GroupPlan:
    """The files to read, discovered and cut into groups that give the same runs alone (and
    what discovery could not list)."""
    return plan_groups(paths, defer=True)


# ------------------------------------------------------------------ 2. ingest
def ingest_stage(
    group: InputGroup,
    *,
    jobs: int | None = None,
    progress: ProgressFn | None = None,
    stage: StageFn | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> Ingested:
    """Every file of a group read into event tables (logs, metrics dumps, server info),
    snapshots, profiler tables and traces. ``meanwhile``: run here while worker processes
    read, if they do (:func:`diag.ingest.ingest_files`)."""
    return ingest_files(group.files, (), progress, jobs=jobs, stage=stage, meanwhile=meanwhile)


# ------------------------------------------------------------------ 3. runs
def runs_stage(ing: Ingested, tell: Tell = quiet) -> list[Run]:
    """The event tables cut into server runs (one stream, one start each)."""
    from diag.facts.runs import split_runs

    tell("splitting runs", 0, 0)
    return split_runs(ing.tables, ing.streams)


# ------------------------------------------------------------------ 4. facts
#: the event kinds a run's facts digest whole (its decode steps, batches and requests are
#: built from them) and nothing after stage 4 reads: a big log's largest frames (graph_step
#: 113 MB and request 43 MB of a 700 MB vLLM log), let go where no one asks for the tables
DIGESTED = ("graph_step", "request")


def facts_stage(
    runs: Sequence[Run],
    ing: Ingested,
    tz: tzinfo | None,
    tell: Tell = quiet,
    keep_tables: bool = True,
) -> list[RunFacts]:
    """Each run's facts, frozen: built from its event tables (metrics counters included),
    then the snapshots, tables and traces of its folder joined as inputs of the same build
    (:mod:`diag.facts.joins`). ``tz``: the zone of log stamps without one, for traces.
    ``keep_tables=False``: each run's tables without the :data:`DIGESTED` kinds."""
    from diag.facts.joins import join_runs, joined
    from diag.facts.record import build_facts

    built = []
    for i, run in enumerate(runs):
        tell("facts per run", i, len(runs))
        f = build_facts(run)
        if not keep_tables:
            frames = {k: v for k, v in f.run.tables._frames.items() if k not in DIGESTED}
            f = replace(f, run=replace(f.run, tables=EventTables(frames)))
        built.append(f)
    release_freed_memory()  # the stages' temporaries, kept by the allocators otherwise
    joins = join_runs(built, ing.profiles, ing.snapshots, ing.traces, tz)
    return [joined(f, joins.get(f.run.id)) for f in built]


class HeldRun(Protocol):
    """A run's facts as a group keeps them (packed when several groups are read,
    :mod:`diag.facts.packed`):
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
    (``Report.tables``; spilled in a fleet, None where they stay on a cluster worker).
    ``runs`` is emptied once the rules judged them (:func:`judge`)."""

    inputs: list[InputStatus]
    runs: list[HeldRun]
    run_profiles: list[dict[str, Any]]  # operator tables logged inside the runs
    profiles: list[dict[str, Any]]  # standalone table files
    snapshots: list[Snapshot]
    traces: list[TraceAnalysis] = field(default_factory=list)
    tables: Spilled | dict[str, pd.DataFrame] | None = None
    line_anchors: dict[str, tuple[LineAnchor, ...]] = field(default_factory=dict)  # Ingested's
    keys: list[JoinKey] | None = None  # each run's, where artifacts join later (deferred)


def group_stages(
    ing: Ingested,
    tz: tzinfo | None,
    hold: Callable[[RunFacts], HeldRun] = LiveRun,
    tables: Spilled | dict[str, pd.DataFrame] | None = None,
    tell: Tell = quiet,
    keep_tables: bool = True,
    keyed: bool = False,
) -> GroupFacts:
    """Stages 3-4 of one ingested group: its runs' facts, each kept by ``hold`` (``keyed``:
    with each run's join key, :mod:`diag.facts.deferred`)."""
    from diag.facts.joins import join_key, run_profiles

    facts = facts_stage(runs_stage(ing, tell), ing, tz, tell, keep_tables)
    keys = [join_key(f) for f in facts] if keyed else None
    return GroupFacts(
        ing.inputs,
        [hold(f) for f in facts],
        run_profiles(facts),
        [dict(p) for p in ing.profiles],
        ing.snapshots,
        ing.traces,
        tables,
        ing.line_anchors,
        keys,
    )


def group_facts(
    ing: Ingested,
    tz: tzinfo | None = None,
    keep_tables: bool = True,
    stage: StageFn | None = None,
    packed: bool = True,
    keyed: bool = False,
) -> GroupFacts:
    """Stages 3-4 of what one group's ingest read, artifacts joined, frames packed.

    ``packed=False`` (the only group of an analysis: one large log, nothing to bound) keeps
    the runs and tables as they are: packing them would only cost time and a second copy."""
    from diag.facts.packed import PackedRun, live

    tables = (spill(ing.tables._frames) if packed else ing.tables._frames) if keep_tables else None
    hold = PackedRun.of if packed else live
    return group_stages(ing, tz, hold, tables, teller(stage), keep_tables, keyed)


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
    same evidence on the same read of each run (a fleet's runs are read back one at a time)."""
    from diag.advise.fleet import fleet_run
    from diag.advise.run_advice import advise_runs

    tell("advice (bucket sets)", 0, 0)
    evidence: dict[str, RunEvidence | None] = {}  # each run's, built once for both steps
    fleet: dict[str, FleetRun] = {}

    def binned(f: RunFacts) -> None:  # on the advice's one read of the run
        fleet[f.run.id] = fleet_run(f, snapshots, evidence)

    advice = advise_runs(
        runs, snapshots, evidence, starts_per_day, binned if len(runs) > 1 else None
    )
    evidence.clear()  # (each let go: the fleet entries hold what they need)
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
    from diag.facts.packed import PackedRun
    from diag.report import RunReport

    f = held.facts()
    got = advised.advice.get(f.run.id)
    findings, notes = engine.judge(f, snapshots, got)
    return RunReport(
        f,
        findings,
        advice=got,
        fleet=advised.fleet.get(f.run.id),
        rule_notes=notes,
        # packed facts are let go once judged, not spilled again; live ones are spilled
        reload=held.facts if isinstance(held, PackedRun) and held.packed else None,
        light=(lambda: held.light) if isinstance(held, PackedRun) and held.packed else None,
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
    from diag.advise.recommend import attach_recommendations
    from diag.evidence import resolve_evidence

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
    from diag.evidence import rotation_chain
    from diag.report import Report
    from diag.rules.engine import RuleEngine

    inputs = [InputStatus(p.path, status="skipped", reason=p.reason) for p in problems]
    inputs += [i for part in parts for i in part.inputs]
    snapshots = [s for part in parts for s in part.snapshots]
    chain = rotation_chain([i.path for i in inputs if i.kind == "log"])
    engine = RuleEngine.load(rules_file)
    every = [r for part in parts for r in part.runs]  # advice reads each run when it asks
    advised = advice_stage(
        ReadOnAsk(len(every), lambda i: every[i].light), snapshots, starts_per_day, tell
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
        for run in mine:  # judged: from here on only the runs read last stay unpacked
            run.bound()
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


def judge_groups(
    problems: Sequence[Problem],
    parts: list[GroupFacts],
    rules_file: str | os.PathLike[str] | None,
    generated_at: str,
    tell: Tell = quiet,
    starts_per_day: float | None = None,
    read: LineReader | None = None,
) -> Report:
    """Stages 5-7 over the groups read (:func:`judge`), their event tables joined when first
    read. ``read``: how evidence lines are read (None: from the files here, seeking to the
    line anchors each group's reading left; a cluster reads them on its workers)."""
    from diag.evidence import read_all
    from diag.facts.packed import JoinedTables

    if read is None:
        anchors = {path: a for part in parts for path, a in part.line_anchors.items()}

        def read(wanted: Mapping[str, set[int]]) -> Mapping[str, Mapping[int, str]]:
            return read_all(wanted, anchors)

    tables = JoinedTables([part.tables for part in parts if part.tables is not None])
    return judge(problems, parts, tables, rules_file, generated_at, read, tell, starts_per_day)
