"""The report: what ``analyze`` found, as Python objects and as the JSON contract.

``Report.to_dict()`` is the ``graphdiag.report/1`` document of INTERFACE.md. It is
deterministic: the same inputs give the same bytes apart from ``generated_at``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from diag.about import __version__
from diag.advise.bucket_sets import Advice as Advice  # a run's advice, as renderers read it
from diag.advise.fleet import FleetRun
from diag.advise.recommend import Recommendation as Recommendation  # as renderers read it
from diag.artifacts.trace import TraceAnalysis
from diag.batch_labels import EagerReason, eager_reasons
from diag.events import EventTables
from diag.facts.classify import Window
from diag.facts.load import has_load, load_timeline
from diag.facts.metric_counts import MetricCounts
from diag.facts.record import RunFacts
from diag.facts.requests import request_summary
from diag.facts.run_record import RankRecord
from diag.facts.run_record import RunRecord as RunRecord  # the record renderers read
from diag.facts.startup import Stage as Stage  # a start-up stage, as renderers read it
from diag.facts.throughput import DecodeSpeed as DecodeSpeed  # a run's speed, as printed
from diag.facts.throughput import decode_speeds
from diag.facts.throughput import eager_change as eager_change  # as renderers quote it
from diag.facts.verdict import Cut, RunState, Verdict, judge
from diag.model import SEVERITY_ORDER, Evidence, Finding, InputStatus, Snapshot, clean_json
from diag.spill import Held
from diag.summary import FleetSummary, fleet_summary

SCHEMA = "graphdiag.report/1"


@dataclass(frozen=True)
class RunParts:
    """What a run's report reads beside its facts and a fleet's cannot all keep in memory
    (held by :class:`diag.spill.Held`: whole while the run is judged, then spilled past the
    runs read last; the facts are held likewise, :attr:`RunReport.held_facts`)."""

    advice: Advice | None = None
    recommendation: Recommendation | None = None


@dataclass(frozen=True)
class LoadTimeline:
    """A run's load samples for drawing: the first rank's, binned past the page's budget
    (``bin_s``: the bin width, None: one row a sample), their stamps, and whether any KV
    usage or request count was logged at all."""

    frame: pd.DataFrame
    bin_s: float | None
    ts: np.ndarray
    logged: bool


@dataclass(init=False, eq=False)
class RunReport:
    # the advice (computed from facts before the rules, diag.advise.run_advice) and the
    # recommendation (the report stage's); the facts beside them
    held: Held[RunParts]
    held_facts: Held[RunFacts]
    # what every surface reads of the facts, kept so that reading it never reloads them
    _record: RunRecord = field(repr=False)
    window: Window = field(repr=False)  # RunFacts.window (JSON record, section)
    _notes: tuple[str, ...] = field(default=(), repr=False)
    ceiling: int | None = None  # RunFacts.ceiling
    ceiling_inferred: bool = False  # RunFacts.ceiling_inferred
    decode_speeds: tuple[DecodeSpeed, ...] = ()  # diag.facts.throughput, from the batches
    startup: tuple[Stage, ...] = ()  # RunFacts.startup
    startup_capture: tuple[float, float] | None = None  # RunFacts.startup_capture
    requests_summary: dict[str, Any] | None = None  # of the request rows (JSON "requests")
    # the rest of what the JSON record and a section without charts read of the facts
    # (RunFacts' fields of the same names): writing a fleet's run reloads only its parts
    ranks: tuple[RankRecord, ...] = ()
    year_source: str = "unknown"
    startup_phase: str | None = None
    metric_counts: MetricCounts | None = None
    kv_tokens_source: str | None = None
    agreement: dict[str, Any] | None = None
    memory_check: dict[str, Any] | None = None
    eager_reasons: tuple[EagerReason, ...] = ()  # of the batch rows (diag.batch_labels)
    flags: Any = None  # the recommendation's flags (its "flags"), None without one
    # the pooled traffic its advice was fitted on (one object for a server's runs): the
    # fleet summary tells by it whether a group is one server without reloading the advice
    advice_histogram: tuple[tuple[int, float], ...] | None = None
    findings: list[Finding] = field(default_factory=list)
    # what the fleet summary needs of the run, built with it (diag.advise.fleet); None alone
    fleet: FleetRun | None = None
    id: str = ""
    sources: tuple[str, ...] = ()  # the run's files (read without unpacking its facts)
    backend: str = "unknown"
    engine_version: str | None = None
    state: RunState | None = None
    cut: Cut | None = None  # an input of the run not read whole (Report: mark_cuts)
    # the run's name on every surface (run_labels, set once by the Report holding it)
    label: str = ""
    # notes of rules held back on this run (RuleEngine.judge), after the facts' own
    rule_notes: tuple[str, ...] = ()

    def __init__(
        self,
        facts: RunFacts,
        findings: list[Finding] | None = None,
        recommendation: Recommendation | None = None,
        advice: Advice | None = None,
        fleet: FleetRun | None = None,
        rule_notes: tuple[str, ...] = (),
        reload: Callable[[], RunFacts] | None = None,
        light: Callable[[], RunFacts] | None = None,
    ) -> None:
        """``reload``: gives ``facts`` again where they are kept packed already (the facts
        are then let go, not spilled a second time, once the run is judged); ``light``:
        gives them without their batch and request rows (:attr:`light`)."""
        self.held = Held(RunParts(advice, recommendation), bounded=False)
        self.flags = None if recommendation is None else recommendation["flags"]
        self.held_facts = Held(facts, bounded=False, reload=reload)
        self._light = light
        self.rule_notes = rule_notes
        self.findings = findings if findings is not None else []
        self.fleet = fleet
        self.id = facts.run.id
        self.sources = tuple(facts.run.sources)
        self._glance(facts)
        self.advice_histogram = None if advice is None else advice.histogram
        self.cut = None
        self.label = run_labels([self.id])[self.id]

    @property
    def facts(self) -> RunFacts:
        return self.held_facts.get()

    @facts.setter
    def facts(self, facts: RunFacts) -> None:
        self.held_facts.set(facts)
        self._light = None
        self._glance(facts)

    @property
    def light(self) -> RunFacts:
        """The facts for a reader of anything but the batch and request rows (a trace
        panel; the JSON record and a section without charts read the fields kept beside
        the facts instead): where the run is let go and kept packed, they
        come back without those rows (``batches`` and ``requests`` empty), which are most
        of what a run's reading back costs."""
        if self._light is None or self.held_facts.holds:
            return self.facts
        return self._light()

    def bound(self) -> None:
        """Judged: from now on its parts may be let go (past the runs read last)."""
        self.held.bound()
        self.held_facts.bound()

    def _glance(self, facts: RunFacts) -> None:
        """What every surface and the fleet summary read of the facts, kept beside them so
        that reading it never reloads a spilled run."""
        self.backend, self.engine_version = facts.backend, facts.engine_version
        self.state, self._record, self._notes = facts.state, facts.record, tuple(facts.notes)
        self.ceiling, self.ceiling_inferred = facts.ceiling, facts.ceiling_inferred
        self.decode_speeds = decode_speeds(facts.batches)
        self.startup, self.startup_capture = facts.startup, facts.startup_capture
        self.requests_summary = clean_json(request_summary(facts.requests))
        self.window, self.ranks = facts.window, tuple(facts.ranks)
        self.year_source, self.startup_phase = facts.year_source, facts.startup_phase
        self.metric_counts, self.kv_tokens_source = facts.metric_counts, facts.kv_tokens_source
        self.agreement, self.memory_check = facts.agreement, facts.memory_check
        self.eager_reasons = eager_reasons(facts.batches)

    @property
    def advice(self) -> Advice | None:
        return self.held.get().advice

    @property
    def recommendation(self) -> Recommendation | None:
        return self.held.get().recommendation

    @recommendation.setter
    def recommendation(self, recommendation: Recommendation | None) -> None:
        self.held.set(replace(self.held.get(), recommendation=recommendation))
        self.flags = None if recommendation is None else recommendation["flags"]

    @property
    def record(self) -> RunRecord:
        return self._record

    def load_timeline(self, max_points: int) -> LoadTimeline:
        """The run's KV usage and queue over time, as its page draws them (at most
        ``max_points`` samples: diag.facts.load bins a busy server's millions)."""
        frame, bin_s, ts = load_timeline(self.facts.tables, max_points)
        return LoadTimeline(frame, bin_s, ts, has_load(frame))

    @property
    def notes(self) -> list[str]:
        """The run's notes: its facts' (joins included), then the rules' held back."""
        return [*self._notes, *self.rule_notes]

    @property
    def verdict(self) -> Verdict:
        """ok | warn | capture_failed | startup_failed | serving_failed | incomplete."""
        return judge(self._state(), self.findings, self.cut)[0]

    @property
    def verdict_reason(self) -> str:
        """One sentence from the run's own evidence: why it got its verdict."""
        return judge(self._state(), self.findings, self.cut)[1]

    def _state(self) -> RunState:
        return self.state if self.state is not None else self.facts.state

    def worst(self) -> str | None:
        if not self.findings:
            return None
        return min((f.severity for f in self.findings), key=SEVERITY_ORDER.__getitem__)

    def to_dict(self) -> dict[str, Any]:
        # every key from what is kept beside the facts: writing it reloads only the parts
        state = self._state()
        failure, requests = state.engine_error, state.request_errors
        out: dict[str, Any] = {
            "id": self.id,
            "label": self.label,
            "backend": self.backend,
            "engine_version": self.engine_version,
            "sources": list(self.sources),
            "verdict": self.verdict,
            "verdict_reason": self.verdict_reason,
            # the engine error outside capture the verdict rests on (GD105), placed in its phase
            "engine_error": None if failure is None else asdict(failure),
            # an input of the run not read whole: incomplete unless the run ended before it
            "input_cut": None if self.cut is None else asdict(self.cut),
            # errors of single requests while the server served (never an outage; GD106)
            "request_errors": None if requests is None else requests.to_json(),
            "year_source": self.year_source,
            "startup_phase": self.startup_phase,
            "record": clean_json(self.record.to_json()),
            # beside the record (whose keys INTERFACE fixes): the start-up timeline, how
            # kv_tokens is known
            "startup": [clean_json(s.to_json()) for s in self.startup],
            # graph passes per mode from /metrics scrapes (totals, deltas between scrapes)
            "metrics": (None if self.metric_counts is None else self.metric_counts.to_json()),
            "kv_tokens_source": self.kv_tokens_source,
            "ranks": [clean_json(r.to_json()) for r in self.ranks],
            "findings": [finding.to_dict() for finding in self.findings],
            "classification": {
                "inference_agreement": clean_json(self.agreement),
                "window_sizes_inferred": self.window.sizes_inferred,
            },
            "requests": self.requests_summary,
            "memory_check": clean_json(self.memory_check),
            "notes": self.notes,
        }
        if self.recommendation is not None:
            out["recommendation"] = clean_json(self.recommendation)
        return out


@dataclass
class Report:
    inputs: list[InputStatus]
    runs: list[RunReport]
    profiles: list[dict[str, Any]]
    snapshots: list[Snapshot]
    tables: EventTables
    generated_at: str | None = None
    traces: list[TraceAnalysis] = field(default_factory=list)  # torch-profiler traces
    # two runs or more: groups, outliers, one bucket set (diag.summary), made once here, once
    # every run is judged; the renderers only read it
    fleet: FleetSummary | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        note_inputs_without_runs(self.inputs, self.runs)
        mark_cuts(self.inputs, self.runs)
        labels = run_labels([r.id for r in self.runs])
        for r in self.runs:
            r.label = labels[r.id]
        self.fleet = fleet_summary(self.runs)

    def inputs_to_show(self) -> list[InputStatus]:
        """Inputs a reader must hear about: not fully read, or read without making a run
        (files skipped only for not being logs, e.g. a README in a folder, are left out)."""
        return [
            i
            for i in self.inputs
            if (i.status != "ok" or i.reason) and not (i.reason or "").startswith("not a log")
        ]

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.runs for f in r.findings]

    def readable(self) -> bool:
        """Did any input yield anything at all?"""
        return any(i.status != "skipped" for i in self.inputs)

    def recognised(self) -> bool:
        """Did anything read turn out to be an engine log, a table or a snapshot?"""
        return bool(
            self.runs
            or self.profiles
            or self.snapshots
            or any(t.kind == "step_trace" or not t.captures.empty for t in self.traces)
            or any(i.backend != "unknown" and i.status != "skipped" for i in self.inputs)
        )

    def to_dict(self, runs: bool = True) -> dict[str, Any]:
        """The document; ``runs=False``: ``runs`` left empty, for a writer that makes each
        run's part in turn (``diag.render.serialize.to_json``)."""
        return {
            "schema": SCHEMA,
            "tool_version": __version__,
            "generated_at": self.generated_at,
            "inputs": [i.to_dict() for i in self.inputs],
            "runs": [r.to_dict() for r in self.runs] if runs else [],
            "profiles": clean_json(self.profiles),
            "snapshots": clean_json(self.snapshots),
            "traces": [clean_json(t.to_dict()) for t in self.traces],
        }


NO_RUN = "read, but made no run"
STDIN = "-"


def run_labels(ids: list[str]) -> dict[str, str]:
    """Each run's name for people: the shortest suffix of its file's path (whole folder
    names) that no other file of the analysis shares, then its ``#n``
    (``06-sglang-oom/server.log#1`` where 23 runs are all ``server.log``); stdin is
    ``stdin``. Computed once per analysis so every renderer names a run alike."""
    split: dict[str, tuple[str, str]] = {}
    for rid in ids:
        stream, hash_, n = rid.rpartition("#")
        split[rid] = (stream, n) if hash_ and n.isdigit() else (rid, "")
    comps = {
        stream: ["stdin"] if stream == STDIN else [c for c in stream.split("/") if c] or [stream]
        for stream, _ in split.values()
    }
    depth = dict.fromkeys(comps, 1)

    def name(stream: str) -> str:
        return "/".join(comps[stream][-depth[stream] :])

    while True:
        seen: dict[str, list[str]] = {}
        for stream in comps:
            seen.setdefault(name(stream), []).append(stream)
        grow = [s for same in seen.values() if len(same) > 1 for s in same]
        grow = [s for s in grow if depth[s] < len(comps[s])]
        if not grow:
            break
        for stream in grow:
            depth[stream] += 1
    labels = {}
    for rid, (stream, n) in split.items():
        tail = "" if not n or (stream == STDIN and n == "1") else f"#{n}"
        labels[rid] = name(stream) + tail
    if len(set(labels.values())) < len(labels):  # paths alike but for slashes: the ids
        return {rid: rid for rid in ids}
    return labels


def note_inputs_without_runs(inputs: list[InputStatus], runs: list[RunReport]) -> None:
    """Every log that was read but made no run says why in its ``reason`` (INTERFACE:
    "every input that makes no run says why"): nothing in its lines is a start-up,
    capture, batch, stats or error line graphdiag reads."""
    used = {s for r in runs for s in r.sources}
    for item in inputs:
        if item.kind != "log" or item.status != "ok" or item.reason or item.path in used:
            continue
        lines = (
            f"{item.lines:,} line{'s' if item.lines != 1 else ''}" if item.lines else "its lines"
        )
        item.reason = (
            f"{NO_RUN}: none of {lines} is a start-up, capture, batch, stats or error line "
            f"graphdiag reads ({item.events or 0} events)"
        )


CUT_NOTE = "cut inside a traceback"  # the traceback parser's input note


_STAMPED = re.compile(rb"\d{2}:\d{2}:\d{2}")  # a logger's header: the line was a log line


def _unterminated(path: str) -> bytes | None:
    """The last line of a plain file that ends without a line end (None when it ends with
    one, is compressed or cannot be read): a logger writes whole lines, a cut does not."""
    try:
        with open(path, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                return None
            end = fh.seek(0, 2)
            fh.seek(max(0, end - 4096))
            tail = fh.read()
    except OSError:
        return None
    if not tail or tail.endswith((b"\n", b"\r")):
        return None
    return tail.rsplit(b"\n", 1)[-1]


def _cut_reason(item: InputStatus, runs: list[RunReport]) -> str | None:
    """Why a log input was not read whole: its partial read, the traceback it ends in, or
    a last log line cut before its end (no line end, and no event read from it)."""
    if item.kind != "log":
        return None
    if item.status == "partial":
        return item.reason or "read only in part"
    note = next((n for n in item.notes if n.startswith(CUT_NOTE)), None)
    if note is not None or not item.lines:
        return note
    tail = _unterminated(item.path)
    if tail is None or not _STAMPED.search(tail[:80]):
        return None
    if any(_lines_of(r, item.path, item.lines) for r in runs if item.path in r.sources):
        return None  # its last line was read whole (a paste without its final line end)
    return f"its last line ({item.lines:,}) ends mid-line (no line end, and no whole line)"


def _lines_of(run: RunReport, path: str, line: int) -> bool:
    """Does an event of the run come from this line of the file?"""
    for frame in run.facts.tables._frames.values():
        if not frame.empty and "source" in frame.columns:
            if ((frame["source"] == path) & (frame["line"] == line)).any():
                return True
    return False


def _last_line(run: RunReport, path: str) -> int:
    last = 0
    for frame in run.facts.tables._frames.values():
        if not frame.empty and "source" in frame.columns:
            mine = frame["line"][frame["source"] == path]
            if len(mine):
                last = max(last, int(mine.max()))
    return last


def mark_cuts(inputs: list[InputStatus], runs: list[RunReport]) -> None:
    """Tell each run about a cut input of its own (issue 34 point 7): the run holding the
    input's last lines has the cut inside it; a run of that input that ended before holds
    it after its end."""
    for item in inputs:
        reason = _cut_reason(item, runs)
        if reason is None:
            continue
        mine = [r for r in runs if item.path in r.sources]
        if not mine:
            continue
        ends = [_last_line(r, item.path) for r in mine]
        last = max(range(len(mine)), key=ends.__getitem__)
        for i, run in enumerate(mine):
            if run.cut is None or (i == last and not run.cut.in_run):
                run.cut = Cut(item.path, reason, in_run=i == last)


__all__ = ["Evidence", "Finding", "Report", "RunReport", "SCHEMA", "clean_json"]
__all__ = [
    "Evidence",
    "Finding",
    "Report",
    "RunReport",
    "SCHEMA",
    "clean_json",
    "run_labels",
]
