"""What a run came to: its verdict and the sentence that says why, from the run's own lines.

Computed once per run, in two steps, because half of it needs the rules:

* :func:`run_state` (facts, in ``build_facts``): what the log shows of the server's life -
  a capture error, an engine error outside capture and the phase it hit (start-up or
  serving), whether capture ended, whether the server was seen serving. Its verdict is
  never ``warn``; ``ok`` here means "captured (or eager) and served, no error line".
* :func:`judge` (where the findings are known, ``RunReport``): an ``ok`` state with a
  finding at warning or above becomes ``warn``; every other state stands.

The verdict names are INTERFACE.md's (``verdict`` / ``verdict_reason`` of each run).
A run is ``ok`` only where the logs show it: a server that captured graphs (or ran eager)
and served. A log cut before that is ``incomplete`` with what is missing, never a green OK.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd

from diag.engines.phases import CAPTURE_PHASES, REQUEST_PHASE
from diag.events import EventTables
from diag.facts.access import box_value, col, equals, orders
from diag.facts.capture_totals import first_root_error, unfinished_capture
from diag.facts.request_errors import RequestErrors, request_scoped, summarise
from diag.facts.run_record import BatchCounts, RunRecord
from diag.model import Finding, headline

Verdict = Literal["ok", "warn", "capture_failed", "startup_failed", "serving_failed", "incomplete"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
# verdicts that say the server did not do its job: rendered as failures, never as OK
FAILED: frozenset[Verdict] = frozenset({"capture_failed", "startup_failed", "serving_failed"})
PlacedBy = Literal["frames", "follow_on", "log", "order", "none"]

# periodic lines of a serving engine (batches, stats, per-step graph lines)
SERVING_KINDS = ("decode_batch", "prefill_batch", "stats", "graph_step")
_BEFORE_SERVING = "before serving"
FLAGGED = "ran decode batches on graphs (the engine's own per-batch flag)"


@dataclass(frozen=True)
class EngineError:
    """The engine error a run without a capture error died of (GD105's evidence).

    ``phase`` is where it struck: the innermost deciding traceback frame's phase, else
    ``serving`` when serving lines precede it, else the last phase a log line opened, else
    the frames of a follow-on report of it (vLLM's front-end ``EngineDeadError`` raised in
    its serving loop: the core died serving) (``placed_by`` says which), else ``unknown``."""

    phase: str
    placed_by: PlacedBy
    error_class: str
    message: str  # the full message as parsed (first line first, tail lines after it)
    path: str
    line: int
    others: int  # further error lines in the run
    served_after: bool  # serving lines follow it
    frame_cause: str | None = None  # the cause its innermost frames name (frame_causes.py)

    @property
    def headline(self) -> str:
        return headline(self.message)

    @property
    def at(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def during(self) -> str:
        """The phase in words, as a reason sentence uses it."""
        if self.phase == "unknown":
            return "in a phase the log does not show"
        if self.phase == "serving":
            return "while serving"
        if self.phase == "warmup_after_capture":
            return "in the warm-up after capture"
        if self.phase in CAPTURE_PHASES:
            return f"while {self.phase.replace('_', ' ')} was under way"
        return f"during {self.phase.replace('_', ' ')}"


@dataclass(frozen=True)
class RunState:
    """The evidence part of a run's verdict (see :func:`judge` for the final one)."""

    verdict: Verdict
    reason: str
    engine_error: EngineError | None = None
    # errors of single requests while the server served: counted, never an outage
    request_errors: RequestErrors | None = None


def _order(frame: pd.DataFrame) -> np.ndarray:
    if len(frame) == 0:
        return np.zeros(0, np.int64)
    return orders(frame)


def _text(v: Any) -> str | None:
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    return str(v) or None


def _serving_orders(t: EventTables) -> np.ndarray:
    """The first and last order of each kind of serving line: what is read of them (their
    min and max), not a copy of every serving row's order (15 MB on a 700 MB log)."""
    parts = [_order(t[k]) for k in SERVING_KINDS]
    ph = t["phase"]
    if len(ph) > 0:
        parts.append(_order(ph)[equals(col(ph, "phase"), "serving")])
    ends = [np.array([p.min(), p.max()], dtype=np.int64) for p in parts if len(p)]
    return np.concatenate(ends) if ends else np.zeros(0, np.int64)


def _follow_on_phase(errors: pd.DataFrame, order: np.ndarray, key: int) -> str | None:
    """The frame-placed phase of the first follow-on error (errors.yaml ``secondary``) after
    the one at ``key``: a front end re-raising a dead core's error places where it died."""
    secondary = errors["secondary"].fillna(False).astype(bool).to_numpy()
    for at in np.argsort(order, kind="stable"):
        if int(order[at]) > key and secondary[at]:
            phase = _text(errors.iloc[int(at)].get("phase"))
            if phase == REQUEST_PHASE:
                return "serving"
            if phase is not None and phase != "unknown":
                return phase
    return None


def request_errors(t: EventTables) -> tuple[np.ndarray, RequestErrors | None]:
    """The mask of the run's error rows that are one request's (diag/facts/request_errors.py)
    and their summary (None when there are none)."""
    errors = t["error"]
    if len(errors) == 0:  # (no error: the serving lines need not be read)
        return np.zeros(0, bool), None
    order = _order(errors)
    serving = _serving_orders(t)
    mask = request_scoped(errors, order, serving)
    return mask, summarise(errors, mask, order, serving)


def engine_error(t: EventTables, requests: np.ndarray | None = None) -> EngineError | None:
    """The run's first root error (a cut traceback, then a follow-on, only when nothing else),
    placed in its phase; the rows ``requests`` marks (one request's errors) are left out.
    Call it for runs without a capture error."""
    errors = t["error"]
    if requests is not None and requests.any():
        errors = errors[~requests]
    if len(errors) == 0:
        return None
    order = _order(errors)
    at = first_root_error(errors)
    row = errors.iloc[at]
    key = int(order[at])
    serving = _serving_orders(t)
    frame_phase = _text(row.get("phase"))
    log_phase = _text(row.get("log_phase"))
    phase: str
    placed: PlacedBy
    if frame_phase == REQUEST_PHASE:  # a handler's frames place no phase of the server
        frame_phase = None
    if frame_phase is not None and frame_phase != "unknown":
        phase, placed = frame_phase, "frames"
    elif len(serving) and int(serving.min()) < key:
        phase, placed = "serving", "order"
    elif log_phase is not None and log_phase != "unknown":
        phase, placed = log_phase, "log"
    elif (later := _follow_on_phase(errors, order, key)) is not None:
        phase, placed = later, "follow_on"
    else:
        phase, placed = "unknown", "none"
    return EngineError(
        phase=phase,
        placed_by=placed,
        error_class=str(row["error_class"]),
        message=str(row["message"]),
        path=str(row["source"]),
        line=int(row["line"]),
        others=len(errors) - 1,
        served_after=bool(len(serving) and int(serving.max()) > key),
        frame_cause=_text(row.get("frame_cause")),
    )


def _one_line(text: str, limit: int = 200) -> str:
    """A message as a reason quotes it: whitespace collapsed, cut at ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'es' if what.endswith('batch') and n != 1 else 's' if n != 1 else ''}"


def _served(t: EventTables, batches: BatchCounts) -> str | None:
    """How the log shows the server serving, in words; None when it does not."""
    decided = batches.graph + batches.eager + batches.unknown
    if decided and batches.source == "metrics":
        return f"served {_count(decided, 'decode step')} by its /metrics counters"
    if decided:
        return f"served {_count(decided, 'decode batch')}"
    for kind, what in (
        ("prefill_batch", "prefill batch"),
        ("stats", "stats line"),
        ("graph_step", "step line"),
    ):
        if not t[kind].empty:
            return f"logged {_count(len(t[kind]), what)}"
    ph = t["phase"]
    if len(ph) > 0 and (ph["phase"] == "serving").any():
        row = ph[ph["phase"] == "serving"].iloc[0]
        return f"came up (line {int(row['line'])} of {row['source']})"
    return None


def _captured(t: EventTables, record: RunRecord) -> str | None:
    """How the log shows graphs captured, in words; None when it does not."""
    if len(t["capture_end"]) > 0:
        secs = record.capture_time_s  # the record's one figure, as every surface prints it
        if secs is None:
            return "captured graphs"
        # other runners' captures (piecewise prefill, draft) are apart from that figure, as
        # GD140's breakdown says: name what it counts
        others = len([g for g in record.graphs if g.capture_time_s is not None]) > 1
        return f"captured {'decode graphs' if others else 'graphs'} in {secs:g} s"
    b = record.batches
    if b.graph and b.source in ("logged", "mixed"):
        return FLAGGED
    if b.graph and b.source == "metrics":
        return (
            f"captured graphs (its /metrics counters show {b.graph:,} graph-served decode passes)"
        )
    began = not (len(t["capture_begin"]) == 0 and len(t["capture_progress"]) == 0)
    if began and unfinished_capture(t) is None:
        return "captured graphs (the capture ran to its end)"
    return None


def run_state(t: EventTables, record: RunRecord, stalls: Sequence[Any] = ()) -> RunState:
    """The verdict the run's own lines support (never ``warn``: that needs the rules); a
    rank stuck in capture (``stalls``, diag.facts.stalls) makes it ``incomplete``."""
    err = record.capture_error
    if err is not None:
        phase = (err.phase or "unknown").replace("_", " ")
        where = "" if phase == "unknown" else f" in {phase}"
        return RunState(
            "capture_failed",
            f"graph capture failed ({err.error_class}){where} at {err.path}:{err.line}: "
            f"{_one_line(err.message)}",
        )
    served = _served(t, record.batches)
    scoped, requests = request_errors(t)
    stop, stopping = _shutdown(t)
    state = _state(t, record, served, engine_error(t, scoped | stopping), stalls)
    if stop is not None and stopping.any() and state.verdict == "ok":
        n = int(stopping.sum())
        state = RunState(
            state.verdict,
            f"{state.reason}; stopped on request (SIGTERM) at {stop}: "
            + ("the error line after it is" if n == 1 else f"the {n:,} error lines after it are")
            + " the shutdown's, not a failure",
            state.engine_error,
        )
    if requests is None:
        return state
    reason = state.reason
    if state.verdict == "ok":
        went_on = ", and it went on serving" if requests.served_after else ""
        reason += f"; {requests.summary()}{went_on}"
    return RunState(state.verdict, reason, state.engine_error, requests)


def _shutdown(t: EventTables) -> tuple[str | None, np.ndarray]:
    """Where the operator asked the server to stop (PATH:LINE, None if the log does not say
    so) and the mask of the error rows after it: a child killed by that signal and the
    clean-up's SIGQUIT report are the stop, not an engine failure."""
    errors = t["error"]
    startup = t["startup"]
    none = np.zeros(len(errors), bool)
    if len(errors) == 0 or len(startup) == 0 or "marker" not in startup.columns:
        return None, none
    asked = np.flatnonzero(equals(col(startup, "marker"), "shutdown_requested"))
    if len(asked) == 0:
        return None, none
    keys = _order(startup)[asked]
    first = int(np.argmin(keys))
    source, line = (box_value(col(startup, c), int(asked[first])) for c in ("source", "line"))
    return f"{source}:{int(line)}", _order(errors) > int(keys[first])


def _state(
    t: EventTables,
    record: RunRecord,
    served: str | None,
    failure: EngineError | None,
    stalls: Sequence[Any] = (),
) -> RunState:
    """The verdict of a run without a capture error (request errors left out)."""
    if failure is not None:
        after = "; the log shows serving lines after it" if failure.served_after else ""
        said = f"{_one_line(failure.headline)} ({failure.at})"
        if failure.phase == "serving":
            how = (
                " (its follow-on report was raised serving)"
                if failure.placed_by == "follow_on"
                else ""
            )
            return RunState(
                "serving_failed", f"the engine failed while serving{how}: {said}{after}", failure
            )
        if failure.phase == "unknown":
            return RunState(
                "incomplete",
                f"an engine error in a phase the log does not show (no start-up, capture or "
                f"serving line before it): {said}",
                failure,
            )
        return RunState(
            "startup_failed",
            f"the engine failed {failure.during}, {_BEFORE_SERVING}: {said}{after}",
            failure,
        )
    if stalls:
        return RunState(
            "incomplete",
            "a rank is stuck in graph capture: "
            + "; ".join(s.sentence() for s in stalls[:3])
            + (f" (and {len(stalls) - 3} more)" if len(stalls) > 3 else ""),
        )
    cut = unfinished_capture(t)
    if cut is not None:
        return RunState("incomplete", f"the log ends during capture: {cut}")
    mode = record.graph_mode
    captured = _captured(t, record)
    if mode == "disabled":
        done = "ran with graphs off (eager)"
    elif captured is not None:
        done = captured
    elif served is None:
        return RunState("incomplete", _not_up(t))
    elif mode == "enabled":
        return RunState(
            "incomplete",
            f"the server {served}, but the log shows no capture and no batch the engine "
            "flagged as graph-served (graphs are on in its settings): too little to judge",
        )
    else:
        return RunState(
            "incomplete",
            f"the server {served}, but the log does not show whether graphs were captured "
            "(no capture line, no per-batch graph flag, no graph setting): too little to judge",
        )
    if served is None and _documented(t):
        return RunState(
            "incomplete",
            f"the server {done} (its server info says so), and nothing read shows its batches: "
            "its log or a /metrics dump of it says whether they ran on graphs",
        )
    if served is None:
        return RunState("incomplete", f"the server {done}, and the log ends before it served")
    if done == FLAGGED:  # the batches show both: say it once
        g = record.batches.graph
        return RunState(
            "ok", f"the server {served}, {g:,} of them on graphs by the engine's own per-batch flag"
        )
    return RunState("ok", f"the server {done} and {served}")


def _documented(t: EventTables) -> bool:
    """Does the run hold a server-info document (diag.parsers.server_info)?"""
    startup = t["startup"]
    return len(startup) > 0 and bool((startup["marker"] == "server_info").any())


def _not_up(t: EventTables) -> str:
    """Why a run with no error, no capture and no serving line is incomplete."""
    if _documented(t):
        return (
            "its server info shows the server's settings, not its capture or its batches: "
            "its log or a /metrics dump of it says whether they ran on graphs"
        )
    ph = t["phase"]
    if len(ph) > 0:
        row = ph.iloc[int(np.argmax(_order(ph)))]
        last = str(row["phase"]).replace("_", " ")
        return (
            f"the log ends during start-up: the last phase it shows is {last} (line "
            f"{int(row['line'])} of {row['source']}), with no capture and no serving line after it"
        )
    return (
        "the log shows no start-up phase, capture or serving line graphdiag reads (settings "
        "or sizing lines only): too little to judge"
    )


@dataclass(frozen=True)
class Cut:
    """An input of the run that was not read whole (issue 34 point 7): a truncated archive,
    a read error, a log cut inside a traceback. ``in_run``: the cut falls inside this run
    (its last lines are the input's last); else the run ended before the cut."""

    path: str
    reason: str
    in_run: bool

    @property
    def said(self) -> str:
        return f"{self.path} is cut: {self.reason}"


# the parser's text for a traceback the input ends inside (diag/parsers/traceback.py)
CUT_TRACEBACK = "the exception line is not in the log"


def _cut_failure(state: RunState) -> bool:
    """The failure the verdict rests on is a traceback the cut left without its exception."""
    e = state.engine_error
    return e is not None and CUT_TRACEBACK in e.message


def judge(
    state: RunState, findings: Sequence[Finding], cut: Cut | None = None
) -> tuple[Verdict, str]:
    """The run's final verdict: an ``ok`` state with a finding at warning or above is
    ``warn``, naming those findings; every other state stands as the facts found it. A cut
    inside the run makes an ``ok``/``warn`` run (or one whose failure is the cut traceback
    itself) ``incomplete``, the cut said first: what came after it is unknown. A run that
    ended before its input's cut keeps its verdict, which names the cut."""
    verdict, reason = _judged(state, findings)
    if cut is None:
        return verdict, reason
    if not cut.in_run:
        return verdict, f"{reason} (after this run, the input {cut.said})"
    if verdict in ("ok", "warn", "incomplete") or _cut_failure(state):
        return "incomplete", f"the input {cut.said}; what was read before the cut: {reason}"
    return verdict, f"{reason}; the input {cut.said}"


def _judged(state: RunState, findings: Sequence[Finding]) -> tuple[Verdict, str]:
    if state.verdict != "ok":
        return state.verdict, state.reason
    serious = [f for f in findings if f.severity in ("error", "warning")]
    if not serious:
        return "ok", state.reason
    codes = ", ".join(dict.fromkeys(f"{f.code} {f.name}" for f in serious))
    return "warn", f"{state.reason}, with findings to act on: {codes}"
