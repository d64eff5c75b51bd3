"""Was an error raised in graph capture? Evidence for and against, each piece citable.

An engineer reading a failed start-up weighs several signs; each is one :class:`Evidence`:

(a) ``frames``: the innermost deciding traceback frame is in capture code (or, against, in
    another step) (diag/engines/data/phases.yaml);
(b) ``process_phase``: the phase the error's own process had opened (a capture begun and not
    ended, or another step);
(c) where the process is unknown or opened no phase: ``neighbours``, the capture lines other
    processes logged just before it (by position, and by time where both are stamped), and
    ``capture_bar``, a capture progress bar cut at k/N with nothing between it and the error;
(d) ``message``: words raised only while capturing (data/errors.yaml ``capture: true``);
(e) ``advice_block``: the engine's own capture-failure advice (SGLang's "Possible
    solutions"), printed only after a failed capture;
(f) ``capture_code``: a runtime code raised only while a stream captures (cudaErrorStreamCapture*);
(g) against: frames or words of weight loading, memory profiling, KV allocation, request
    handling, and another process's own later phase outside capture.

Strengths: a ``proof`` decides alone (the strongest kind wins where proofs disagree: the
advice block, then frames, then a capture-only code, then the message); else ``strong`` signs
(the process's own phase, a cut bar, words of another step), the most recent winning where
they disagree; else ``weak`` ones (neighbours). A capture error is ``certain`` on a proof, or
on a strong sign for an error whose class or text names something; ``likely`` otherwise. What
the decision overrules is kept (``conflict``) so the finding can say it.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from diag.engines import capture_evidence as words
from diag.engines.phases import CAPTURE_PHASES
from diag.events import EventTables
from diag.facts.access import Row, box_value, col, first_min, records
from diag.facts.verdict import SERVING_KINDS

Confidence = Literal["certain", "likely", "no"]
EvidenceKind = Literal[
    "frames",
    "process_phase",
    "neighbours",
    "capture_bar",
    "message",
    "advice_block",
    "capture_code",
]
Strength = Literal["proof", "strong", "weak"]
#: proofs that disagree: the first kind here decides
PROOF_ORDER: tuple[EvidenceKind, ...] = ("advice_block", "frames", "capture_code", "message")
#: a neighbour's capture line further back than this (both lines stamped) is not "just before"
NEAR_S = 300.0

# the capture phase a log line's runner names (capture_begin / capture_progress ``phase``)
LOG_CAPTURE_PHASE = {
    "decode": "capture_decode",
    "verify": "capture_decode",
    "all": "capture_decode",
    "mixed": "capture_decode",
    "metrics": "capture_decode",
    "prefill": "capture_piecewise",
    "piecewise": "capture_piecewise",
    "draft": "capture_draft",
    "draft_extend": "capture_draft",
    "draft_verify": "capture_draft",
    "draft_prefill": "capture_draft",
}
_ENDED = "capture_ended"  # a capture_end line: the phase after it is not capture


@dataclass(frozen=True)
class Evidence:
    """One sign, with the sentence that cites it."""

    kind: EvidenceKind
    for_capture: bool
    strength: Strength
    says: str
    phase: str | None = None  # the phase it places the error in
    key: int = -1  # its position in the run (positional signs: the more recent wins)


@dataclass(frozen=True)
class Attribution:
    """The decision for one error and what decided it."""

    confidence: Confidence
    decided_by: Evidence | None
    conflict: tuple[Evidence, ...] = ()  # signs the decision overrules

    @property
    def in_capture(self) -> bool:
        return self.confidence != "no"

    @property
    def placed_by(self) -> str:
        return self.decided_by.kind if self.decided_by is not None else "none"

    def conflict_note(self) -> str | None:
        if not self.conflict:
            return None
        side = "against" if self.in_capture else "for"
        return f"evidence {side} capture, overruled: " + "; ".join(e.says for e in self.conflict)


@dataclass(frozen=True)
class _Signal:
    key: int
    rank: str
    phase: str  # a phases.yaml phase, or _ENDED
    line: int
    ts: float
    at: str  # PATH:LINE as a sentence quotes it (a run may span rotated files)


@dataclass(frozen=True)
class _Bar:
    key: int
    done: int
    total: int
    phase: str
    line: int
    ts: float
    rank: str  # "": a bar no process prefix names (tqdm to stderr)
    at: str


class Timeline:
    """The run's phase lines per process and its capture bars, in order (built once a run)."""

    def __init__(self, tables: EventTables) -> None:
        sig: list[_Signal] = []
        for row in records(tables["phase"]):
            if _text(row.get("phase")):
                sig.append(_signal(row, str(row["phase"])))
        for row in records(tables["capture_begin"]):
            sig.append(_signal(row, _capture_phase(row.get("phase"))))
        for row in records(tables["capture_end"]):
            sig.append(_signal(row, _ENDED))
        bars = []
        for row in records(tables["capture_progress"]):
            if _text(row.get("rank")):  # a bar a process prefix names is that process's line
                sig.append(_signal(row, _capture_phase(row.get("phase"))))
            done, total = _int(row.get("done")), _int(row.get("total"))
            if done is not None and total is not None:
                phase = _capture_phase(row.get("phase"))
                rank = _text(row.get("rank")) or ""
                bars.append(
                    _Bar(_key(row), done, total, phase, int(row["line"]), _ts(row), rank, _at(row))
                )
        self.signals = sorted(sig, key=lambda s: s.key)
        self.bars = sorted(bars, key=lambda b: b.key)
        # where serving shows first: a batch, stats or step line, or a serving phase line (the
        # first row of each serving table by its order: a big log has millions of them)
        firsts = [(s.key, s.at) for s in sig if s.phase == "serving"]
        for kind in SERVING_KINDS:
            frame = tables[kind]
            if len(frame) > 0:
                order = np.asarray(col(frame, "_order" if "_order" in frame.columns else "line"))
                at = first_min(order)  # (an event column: read-only; the row's two fields)
                row = {c: box_value(col(frame, c), at) for c in ("source", "line")}
                firsts.append((int(order.min()), _at(row)))
        first = min(firsts, default=None)
        self.first_serving = first[0] if first else None
        self.serving_at = first[1] if first else ""

    def before(self, key: int) -> list[_Signal]:
        return [s for s in self.signals if s.key <= key]


#: the last run's timeline, with weak references to the frames it was read from
_LAST: list[tuple[tuple[weakref.ref[pd.DataFrame], ...], Timeline]] = []
_TIMELINE_KINDS = ("phase", "capture_begin", "capture_end", "capture_progress", *SERVING_KINDS)


def _timeline(tables: EventTables) -> Timeline:
    """The run's :class:`Timeline`, built once for the placement and the notes of its errors
    (~1.5 ms on a small run, twice a run with errors); the frames are not held."""
    frames = tuple(tables[k] for k in _TIMELINE_KINDS)
    if _LAST and all(r() is f for r, f in zip(_LAST[0][0], frames, strict=True)):
        return _LAST[0][1]
    timeline = Timeline(tables)
    _LAST[:] = [(tuple(weakref.ref(f) for f in frames), timeline)]
    return timeline


def collect(row: Row, timeline: Timeline) -> list[Evidence]:
    """Every sign for and against capture the run shows for one error row."""
    out: list[Evidence] = []
    key, message = _key(row), str(row.get("message") or "")
    frame_phase = _text(row.get("phase"))
    if frame_phase is not None:  # (a) / (g)
        inside = frame_phase in CAPTURE_PHASES
        out.append(
            Evidence(
                "frames",
                inside,
                "proof",
                f"its innermost deciding traceback frame is in {_words(frame_phase)}",
                frame_phase,
            )
        )
    elif (graph := _text(row.get("graph_frame"))) is not None:  # (a) an op only graphs run
        phase, func = graph.split("|", 1)
        first = timeline.first_serving
        replay = first is not None and first < key
        out.append(
            Evidence(
                "frames",
                not replay,
                "strong",
                f"its frame {func} runs only inside a {_words(phase).removesuffix(' capture')}, "
                "captured at start-up or replayed while serving, and "
                + (
                    f"the server was serving before it ({timeline.serving_at}): a replay"
                    if replay
                    else "no serving line comes before it: its capture"
                ),
                None if replay else phase,
            )
        )
    if (row_ := words.advice_block(message)) is not None:  # (e)
        out.append(
            Evidence(
                "advice_block",
                True,
                "proof",
                f"the engine's capture-failure advice follows it ({row_.id}, {row_.source.split(';')[0]})",
            )
        )
    code = words.capture_code(message)
    if code is not None:  # (f)
        out.append(
            Evidence(
                "capture_code",
                True,
                "proof",
                f"it quotes {code.name}, a {code.runtime} code raised only while a stream captures",
            )
        )
    elif _flag(row.get("explicit_capture")):  # (d)
        sig = words.capture_words(message)
        check = words.capture_check(message) if sig is None else None
        if check is not None:
            site = check.sites[0]
            said = (
                f"it prints the CUDA check at {site.file}:{site.line} ({site.func}: {site.call}), "
                f"which runs only during capture in every vLLM release with a check there "
                f"({', '.join(s.versions for s in check.sites)})"
            )
        else:
            said = "its text is raised only while capturing" + (f" ({sig.id})" if sig else "")
        out.append(Evidence("message", True, "proof", said))
    if (other := words.outside_capture(message)) is not None:  # (g) its words
        out.append(
            Evidence(
                "message",
                False,
                "strong",
                f"its text is raised in {_words(other.phase or 'another step')} ({other.source.split(';')[0]})",
                other.phase,
            )
        )
    out += _positional(row, key, timeline)
    return out


def _positional(row: Row, key: int, timeline: Timeline) -> list[Evidence]:
    """(b) the process's own phase; (c) the neighbours' capture lines and a cut bar; (g) a
    neighbour's later phase outside capture."""
    out: list[Evidence] = []
    rank = _text(row.get("rank")) or ""
    who = rank or "the un-prefixed lines"
    seen = timeline.before(key)
    own = [s for s in seen if s.rank == rank]
    last = own[-1] if own else None
    if last is not None:
        inside = last.phase in CAPTURE_PHASES
        where = "a capture that had not ended" if inside else _words(last.phase)
        out.append(
            Evidence(
                "process_phase",
                inside,
                "strong",
                f"its process ({who}) was in {where} ({last.at})",
                last.phase if inside else None,
                last.key,
            )
        )
    # the last bar before it that is its own process's or names none (another process's bar
    # is that process's phase line: a neighbour)
    bar = next((b for b in reversed(timeline.bars) if b.key <= key and b.rank in ("", rank)), None)
    after_bar = [s for s in seen if bar is not None and s.key > bar.key]
    if bar is not None and bar.done < bar.total and not after_bar:
        out.append(
            Evidence(
                "capture_bar",
                True,
                "strong",
                f"a capture bar stopped at {bar.done}/{bar.total} just before it ({bar.at})",
                bar.phase,
                bar.key,
            )
        )
    if last is not None:
        return out
    ts = _ts(row)
    latest: dict[str, _Signal] = {}
    for s in seen:
        if s.rank != rank:
            latest[s.rank] = s
    open_ = [
        s
        for s in latest.values()
        if s.phase in CAPTURE_PHASES and not (ts - s.ts > NEAR_S)  # NaN compares False
    ]
    if open_:
        s = max(open_, key=lambda x: x.key)
        names = ", ".join(sorted({x.rank or "un-prefixed" for x in open_}))
        out.append(
            Evidence(
                "neighbours",
                True,
                "weak",
                f"{'its process is not named' if not rank else f'its process ({rank}) shows no phase'}"
                f", and {names} had begun a capture just before it ({s.at})",
                s.phase,
                s.key,
            )
        )
    newest_capture = max((s.key for s in open_), default=-1)
    later = [
        s
        for s in latest.values()
        if s.phase not in CAPTURE_PHASES and s.phase != _ENDED and s.key > newest_capture
    ]
    if later and open_:
        s = max(later, key=lambda x: x.key)
        out.append(
            Evidence(
                "neighbours",
                False,
                "weak",
                f"{s.rank or 'the un-prefixed lines'} had moved on to {_words(s.phase)} ({s.at})",
                None,
                s.key,
            )
        )
    return out


def decide(evidence: list[Evidence], named: bool) -> Attribution:
    """Combine the signs (module docstring); ``named``: the error's class or text names
    something (not a bare class ``other``)."""
    proofs = [e for e in evidence if e.strength == "proof"]
    if proofs:
        best = min(proofs, key=lambda e: PROOF_ORDER.index(e.kind))
        return Attribution(
            "certain" if best.for_capture else "no", best, _other_side(evidence, best)
        )
    for strength in ("strong", "weak"):
        tier = [e for e in evidence if e.strength == strength]
        if not tier:
            continue
        # the most recent positional sign decides (on one line, the more specific: a cut bar)
        best = max(tier, key=lambda e: (e.key, e.kind == "capture_bar"))
        fors = [e for e in tier if e.for_capture]
        if fors and any(not e.for_capture and e.key < 0 for e in tier):
            # words of another step against the log's position: neither is sure of it
            best = max(fors, key=lambda e: e.key)
            return Attribution("likely", best, _other_side(evidence, best))
        if not best.for_capture:
            return Attribution("no", best, _other_side(evidence, best))
        sure = strength == "strong" and named
        return Attribution("certain" if sure else "likely", best, _other_side(evidence, best))
    return Attribution("no", None)


@dataclass(frozen=True)
class Placed:
    """The run's capture error: its error row, the decision and the phase it places it in."""

    row: Row
    attribution: Attribution
    decided: Evidence
    phase: str
    reason: str | None

    @property
    def confidence(self) -> Literal["certain", "likely"]:
        return "certain" if self.attribution.confidence == "certain" else "likely"


def place_capture_error(tables: EventTables) -> Placed | None:
    """The error the evidence places in capture (``certain`` or ``likely``). Among several,
    a root error beats a follow-on (CUDA 901) and a cut traceback, then certain beats
    likely, a named class an ``other``, and the earliest wins."""
    errors = tables["error"]
    if len(errors) == 0:
        return None
    timeline = _timeline(tables)
    chosen = None
    rows = records(errors)
    roots = any(not _flag(r.get("secondary")) for r in rows)
    for row in rows:
        cls_ = str(row["error_class"])
        reason = _text(row.get("reason"))
        if roots and _flag(row.get("secondary")) and not _flag(row.get("explicit_capture")):
            continue  # a follow-on report (a parent's "child died") is where its root error is
        evidence = collect(row, timeline)
        verdict = decide(evidence, cls_ != "other" or reason is not None)
        if not verdict.in_capture or verdict.decided_by is None:
            continue
        quality = 0 if not _flag(row.get("secondary")) and reason is None else 1
        rank = (quality, verdict.confidence != "certain", cls_ == "other", _key(row))
        if chosen is None or rank < chosen[0]:
            chosen = (rank, row, verdict, evidence, reason)
    if chosen is None:
        return None
    _, row, verdict, evidence, reason = chosen
    decided = verdict.decided_by
    assert decided is not None
    logged = _text(row.get("log_phase"))
    phase = decided.phase or next(
        (e.phase for e in evidence if e.for_capture and e.phase),
        logged if logged in CAPTURE_PHASES else "unknown",
    )
    return Placed(row, verdict, decided, phase, reason)


def overruled(tables: EventTables) -> list[str]:
    """Notes for errors not read as capture errors although some evidence says capture
    (conflicting evidence is said, not hidden)."""
    errors = tables["error"]
    if len(errors) == 0:
        return []
    timeline = _timeline(tables)
    out = []
    for row in records(errors):
        named = str(row["error_class"]) != "other" or _text(row.get("reason")) is not None
        verdict = decide(collect(row, timeline), named)
        if verdict.in_capture or not verdict.conflict or verdict.decided_by is None:
            continue
        out.append(
            f"the error at line {int(row['line'])} is not read as a capture failure, because "
            f"{verdict.decided_by.says}; {verdict.conflict_note()}"
        )
    return out


def _other_side(evidence: list[Evidence], best: Evidence) -> tuple[Evidence, ...]:
    return tuple(e for e in evidence if e.for_capture != best.for_capture)


# ------------------------------------------------------------------ helpers
def _words(phase: str) -> str:
    return {
        _ENDED: "the phase after its capture ended",
        "capture_decode": "decode graph capture",
        "capture_piecewise": "piecewise graph capture",
        "capture_draft": "draft graph capture",
        "backend_init": "the attention backends' initialisation (before capture)",
    }.get(phase, phase.replace("_", " "))


def _capture_phase(p: Any) -> str:
    return LOG_CAPTURE_PHASE.get(str(_text(p) or ""), "capture_decode")


def _signal(row: Row, phase: str) -> _Signal:
    rank = _text(row.get("rank")) or ""
    return _Signal(_key(row), rank, phase, int(row["line"]), _ts(row), _at(row))


def _at(row: Row) -> str:
    return f"{row.get('source') or 'line'}:{int(row['line'])}"


def _key(row: Row) -> int:
    return int(row.get("_order", row["line"]))


def _ts(row: Row) -> float:
    v = row.get("ts")
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan


def _int(v: Any) -> int | None:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return int(v)


def _flag(v: Any) -> bool:
    return bool(v) if v is not None and v is not pd.NA and not _isnan(v) else False


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _text(v: Any) -> str | None:
    return None if v is None or v is pd.NA or _isnan(v) or v == "" else str(v)
