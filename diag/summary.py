"""The fleet summary of a report with several runs: groups, verdicts, outliers, one bucket set.

Made from per-run results only (each run's verdict, its reason and the small
:class:`~diag.advise.fleet.FleetRun` built with it), never from event tables, so a fleet
analysed group by group gives the same summary. Groups come from :mod:`diag.facts.fleet`, the
pooled advice from :mod:`diag.advise.fleet`; this module picks the advice a group quotes.
The report makes it once (``Report.fleet``); the renderers write it
(:mod:`diag.render.fleet`: the JSON ``fleet`` key, the text summary, the HTML page).

Which advice a group quotes: where its runs are exactly one server of the per-run advice
(the runs ``analyze`` pooled already, whose advice the rules and ``recommend`` quote), that
advice, so the summary names the same ceiling and set as GD110/GD112 and ``recommend``;
otherwise the group's binned traffic priced together by the same advice function.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from diag.advise.bucket_sets import Advice
from diag.advise.cost_model import SetCost
from diag.advise.fleet import FleetRun, pooled_advice
from diag.advise.recommend import bucket_flags
from diag.facts.fleet import CaptureConfig as CaptureConfig  # the groups' key, as renderers read it
from diag.facts.fleet import FleetGroup as FleetGroup
from diag.facts.fleet import FleetMember, capture_config, group_fleet
from diag.facts.record import RunFacts
from diag.facts.verdict import Verdict

__all__ = ["FleetEntry", "FleetSummary", "GroupAdvice", "SummaryRun", "fleet_summary"]

AdviceSource = Literal["server", "pooled"]


@dataclass(frozen=True)
class GroupAdvice:
    """The bucket advice of one group, and how it is to be read."""

    advice: Advice
    source: AdviceSource  # the per-run (server) advice the rules quote, or pooled here
    runs_pooled: tuple[str, ...]
    current_sizes: tuple[int, ...]  # the group's own set ((): graphs off or not logged)
    # the flags that capture the recommended set; "" where nothing changes (keep, too little
    # evidence, or the set already in effect)
    flags: str
    headline: str  # one sentence: what to do and why
    # the group's own set priced on its traffic (None: no set), and the decode steps counted
    current: SetCost | None = None
    decode_steps: int = 0


@dataclass(frozen=True)
class FleetEntry:
    group: FleetGroup
    advice: GroupAdvice | None
    no_advice: str | None  # why the group has no bucket advice (None when it has one)


@dataclass(frozen=True)
class FleetSummary:
    runs: int
    entries: tuple[FleetEntry, ...]


class SummaryRun(Protocol):
    """What the summary reads of a judged run (``diag.report.SummaryRun``)."""

    @property
    def id(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def engine_version(self) -> str | None: ...
    @property
    def fleet(self) -> FleetRun | None: ...
    @property
    def advice(self) -> Advice | None: ...
    @property
    def advice_histogram(self) -> tuple[tuple[int, float], ...] | None: ...
    @property
    def verdict(self) -> Verdict: ...
    @property
    def verdict_reason(self) -> str: ...
    @property
    def facts(self) -> RunFacts: ...


def fleet_summary(runs: Sequence[SummaryRun]) -> FleetSummary | None:
    """The summary of two runs or more (None for fewer): made once, with the report
    (``Report.fleet``); text, JSON and HTML read it."""
    return _summary(runs) if len(runs) >= 2 else None


def _summary(runs: Sequence[SummaryRun]) -> FleetSummary:
    per_run = {r.id: (r, _fleet_value(r)) for r in runs}
    members = [
        FleetMember(
            run.id,
            run.backend,
            run.engine_version,
            value.model,
            value.config,
            run.verdict,
            run.verdict_reason,
        )
        for run, value in per_run.values()
    ]
    entries = []
    for group in group_fleet(members):
        advice, why = _group_advice(group, [per_run[i] for i in group.run_ids])
        entries.append(FleetEntry(group, advice, why))
    return FleetSummary(len(runs), tuple(entries))


def _fleet_value(run: SummaryRun) -> FleetRun:
    """The run's fleet value as built with it. A run built without one (analysed alone,
    merged later) is grouped by its record and config, without traffic to pool: its event
    tables may be gone."""
    if run.fleet is not None:
        return run.fleet
    model, config = capture_config(run.facts)
    return FleetRun(model, config, None, kept=False)


def _group_advice(
    group: FleetGroup, runs: list[tuple[SummaryRun, FleetRun]]
) -> tuple[GroupAdvice | None, str | None]:
    traffic = [v.traffic for _, v in runs if v.traffic is not None]
    if group.config.prefill_node:
        return None, "prefill nodes of a disaggregated deployment capture no decode buckets"
    if not traffic and not all(v.kept for _, v in runs):
        return None, "its runs were analysed without keeping their decode traffic"
    if not traffic:
        return None, "no run of the group logged a decode step with a known batch size"
    if len(traffic) > 1 and not group.config.echoed:
        return None, (
            "its logs echo no engine config, so that its runs share one is not known: their "
            "traffic is not pooled (each run's own advice is in its findings)"
        )
    pooled: dict[int, float] = {}
    for t in traffic:
        for size, steps in t.histogram().items():
            pooled[size] = pooled.get(size, 0.0) + steps
    server = [r for r, v in runs if v.traffic is not None]
    source: AdviceSource = "pooled"
    adv: Advice | None
    if all(
        r.advice_histogram is not None and _same_hist(dict(r.advice_histogram), pooled)
        for r in server
    ):
        adv, source = server[-1].advice, "server"
    else:
        adv = pooled_advice(traffic)
    if adv is None:
        return None, "the group's decode traffic gives the advice nothing to size buckets for"
    current = group.config.capture_sizes or ()
    decision = adv.decision
    rec = adv.recommended.sizes
    headline = decision.headline if decision is not None else "Change the set"
    flags = ""
    if adv.changes and tuple(sorted(rec)) == tuple(sorted(current)):
        headline = "Keep the current set: it is already the set the advice picks"
    elif adv.changes:  # spelled for the config of the run the limits come from (the last)
        last = [r for r, v in runs if v.traffic is not None][-1].facts
        flags = bucket_flags(adv.engine, group.engine_version, dict(last.config.raw), rec, [])
    ids = tuple(t.run_id for t in traffic)
    priced = adv.price(current) if current else None
    steps = int(round(sum(adv.hist().values())))
    return GroupAdvice(adv, source, ids, current, flags, headline, priced, steps), None


def _same_hist(a: dict[int, float], b: dict[int, float]) -> bool:
    return a.keys() == b.keys() and all(math.isclose(a[k], b[k], rel_tol=1e-9) for k in a)
