"""Keep or change: a new set only where it beats the current one held out, by a stated margin.

Only from enough evidence (issue 24 point 3).

Why: the frontier finds the cheapest set *the fit* can see; on short or squeezed traffic that
set can cost more than what the server runs today by the advice's own prices. So the current
set (or, with graphs off, the engine's default list) is priced under the same cost on the same
held-out folds, and a change is advised only when it is cheaper by the margin of
:func:`margin_s_h` (a share of the current set's cost, and never less than the step-time fit's
resolution over the decode GPU time of the steps the two sets price differently); otherwise the
advice is "keep the current set", with both figures. Capture time is not fitted: measured
seconds x the start rate (``--starts-per-day``), so a set that pads every step as today's does
and captures fewer sizes saves exactly that, and the decision says at which start rate keeping
the current set would win (:class:`StartRate`).
Below :data:`MIN_STEPS` decode steps, :data:`MIN_LINES` step lines, :data:`MIN_SPAN_S` seconds
or :data:`MIN_SIZES` distinct sizes no sizing advice is given: the advice says what is missing and how to log it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from diag.advise.cost_model import CostParameters, set_cost

__all__ = [
    "CHANGE_MARGIN_OF_COST",
    "TIE_TOLERANCE",
    "MIN_LINES",
    "MIN_SIZES",
    "MIN_SPAN_S",
    "MIN_STEPS",
    "Decision",
    "Evidence",
    "StartRate",
    "keep_used_sizes",
]

# Costs closer than this share of the traffic's decode GPU time are "equal": the step-time fit
# that prices padding is not finer than that (the frontier's ties use it too).
TIE_TOLERANCE = 0.0025
# A change must save this share of what the current set costs (and at least TIE_TOLERANCE of
# decode GPU time): a new set to paste and restart for is worth it only beyond the noise.
CHANGE_MARGIN_OF_COST = 0.05


def margin_s_h(current_s_h: float, busy_s_h: float, differing: float = 1.0) -> float:
    """What a change must save, GPU-s per hour: a share of today's cost, and the step-time
    fit's resolution over the ``differing`` share of decode time the two sets price apart
    (steps both sets serve alike cost the same under any fit)."""
    return max(CHANGE_MARGIN_OF_COST * current_s_h, TIE_TOLERANCE * busy_s_h * differing)


def _margin_words(current_s_h: float, busy_s_h: float, differing: float = 1.0) -> str:
    m = margin_s_h(current_s_h, busy_s_h, differing)
    if m == TIE_TOLERANCE * busy_s_h * differing and m > 0:
        over = "" if differing >= 1.0 else f" over the {differing:.1%} the two sets price apart"
        return (
            f"{m:,.2f} GPU-s/h ({TIE_TOLERANCE:.2%} of decode GPU time{over}, the fit's resolution)"
        )
    return f"{m:,.2f} GPU-s/h ({CHANGE_MARGIN_OF_COST:.0%} of the current cost)"


@dataclass(frozen=True)
class StartRate:
    """The capture part of both costs, and the start rates at which the change wins.

    Capture seconds are paid on every start, so each cost is ``fitted + capture_s x rate / 24``
    (rate in starts a day): linear in the rate. The change wins on the interval
    ``(wins_from, wins_until)`` of rates (``None`` until: no upper end; ``None`` from: never)."""

    starts_per_day: float
    candidate_capture_s: float  # capture seconds per start of the candidate set
    current_capture_s: float  # ... and of the baseline set
    wins_from: float | None
    wins_until: float | None

    def words(self, baseline: str) -> str:
        """'keeping the current set would win below 0.03 starts a day' and the like."""
        lo, hi = self.wins_from, self.wins_until
        if lo is None:
            return f"keeping {baseline} wins at any start rate"
        parts = []
        if lo > 0:
            parts.append(f"below {_rate(lo)}")
        if hi is not None:
            parts.append(f"above {_rate(hi)}")
        if not parts:
            return (
                f"keeping {baseline} would win at no start rate (the set saves decode time "
                "even with no restart)"
            )
        return f"keeping {baseline} would win {' and '.join(parts)}"

    def to_dict(self) -> dict[str, object]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 4)

        return {
            "starts_per_day": self.starts_per_day,
            "candidate_capture_s": round(self.candidate_capture_s, 2),
            "current_capture_s": round(self.current_capture_s, 2),
            "change_wins_from_starts_per_day": r(self.wins_from),
            "change_wins_until_starts_per_day": r(self.wins_until),
        }


def _rate(r: float) -> str:
    """Starts a day in words, with the interval where it is under one a day."""
    if r >= 1:
        return f"{r:,.3g} starts a day"
    return f"{r:.2g} starts a day (one start every {1 / r:,.0f} days)" if r > 0 else "0"


def _half_line(a: float, b: float) -> tuple[float, float]:
    """Rates r >= 0 with ``a + b r > 0``, as an open interval (lo, hi); empty: lo >= hi."""
    if b > 0:
        return max(0.0, -a / b), math.inf
    if b < 0:
        return 0.0, -a / b
    return (0.0, math.inf) if a > 0 else (math.inf, 0.0)


def start_rate(
    cand_fitted: float,
    base_fitted: float,
    cand_capture_s: float,
    base_capture_s: float,
    starts_per_day: float,
    resolution: float,
) -> StartRate:
    """Where ``saved(r) > margin(r)``: saved(r) = base(r) - cand(r), margin(r) = max(share x
    base(r), resolution), each cost ``fitted + capture_s x r / 24`` (r in starts a day)."""
    d_fit = base_fitted - cand_fitted
    d_cap = (base_capture_s - cand_capture_s) / 24.0
    cm = CHANGE_MARGIN_OF_COST
    lo1, hi1 = _half_line(d_fit - cm * base_fitted, d_cap - cm * base_capture_s / 24.0)
    lo2, hi2 = _half_line(d_fit - resolution, d_cap)
    lo, hi = max(lo1, lo2), min(hi1, hi2)
    if lo >= hi:
        return StartRate(starts_per_day, cand_capture_s, base_capture_s, None, None)
    return StartRate(
        starts_per_day, cand_capture_s, base_capture_s, lo, None if math.isinf(hi) else hi
    )


# about a minute of decode at 25-60 ms a step (the SGLang formats examples); 25 Decode batch
# lines at SGLang's default decode_log_interval of 40
MIN_STEPS = 1000
# two held-out blocks of 20 lines (bucket_sets.MIN_BLOCK_LINES): fewer cannot be validated, and
# a stats line's steps are estimated (interval / step time), not logged one by one
MIN_LINES = 40
MIN_SPAN_S = 60.0  # a minute of traffic: shorter is one burst (or one stats interval)
MIN_SIZES = 3  # a set fitted to one or two batch sizes is a guess about all the others

DecisionKind = Literal["change", "keep", "insufficient"]
Basis = Literal["held-out", "in sample"]
Baseline = Literal["current", "default"]


@dataclass(frozen=True)
class Evidence:
    """How much decode traffic the advice rests on."""

    steps: float  # decode steps the sized lines stand for (a batch line: its log interval)
    lines: int  # the sized lines themselves
    span_s: float | None  # wall time the lines' clocks span (None: the lines carry none)
    sizes: int  # distinct step sizes

    def to_dict(self) -> dict[str, object]:
        span = None if self.span_s is None else round(self.span_s, 1)
        return {
            "steps": int(round(self.steps)),
            "lines": self.lines,
            "span_s": span,
            "sizes": self.sizes,
        }

    def missing(self, how: str) -> list[str]:
        """One sentence per shortfall, each saying how to get more; empty when enough."""
        out = []
        if self.steps < MIN_STEPS or self.lines < MIN_LINES:
            out.append(
                f"{self.steps:,.0f} decode steps in {self.lines:,} lines, fewer than "
                f"{MIN_STEPS:,} steps in {MIN_LINES} lines: log {how}"
            )
        if self.span_s is not None and self.span_s < MIN_SPAN_S:
            out.append(
                f"the step lines span {self.span_s:.3g} s, less than {MIN_SPAN_S:g} s: analyze a "
                "longer window of serving (hours of the usual traffic)"
            )
        if self.sizes < MIN_SIZES:
            out.append(
                f"{self.sizes} distinct batch size(s), fewer than {MIN_SIZES}: a window with the "
                "usual load swings"
            )
        return out


@dataclass(frozen=True)
class Decision:
    """What the advice concludes, with the two figures it compared (GPU-s per hour)."""

    kind: DecisionKind
    why: str  # the figures behind the kind, lower case, no verb of its own ("cheaper than ...")
    current_s_h: float | None  # the baseline set's cost on the basis below
    candidate_s_h: float | None  # the frontier's pick on the same basis
    margin_s_h: float
    basis: Basis
    baseline: Baseline | None
    rate: StartRate | None = None  # the capture part and the start rates the change wins at

    @property
    def start_rate_words(self) -> str | None:
        """'at 1 start a day (the default; --starts-per-day); keeping the current set would
        win below ...', or None where no set is compared."""
        if self.rate is None or self.kind == "insufficient" or self.baseline is None:
            return None
        what = "the current set" if self.baseline == "current" else "the engine's default set"
        r = self.rate.starts_per_day
        return f"at {r:g} start{'s' if r != 1 else ''} a day, {self.rate.words(what)}"

    @property
    def headline(self) -> str:
        """One sentence: what to do, then why ("Keep the current set: the best candidate ...")."""
        rate = f"; {w}" if (w := self.start_rate_words) else ""
        if self.kind == "keep":
            what = "the current set" if self.baseline == "current" else "the engine's default set"
            return f"Keep {what}: {self.why}{rate}"
        if self.kind == "insufficient":
            return f"No bucket set advised: {self.why}"
        return f"Change the set: {self.why}{rate}"

    def to_dict(self) -> dict[str, object]:
        def r(v: float | None) -> float | None:
            return None if v is None or not math.isfinite(v) else round(v, 3)

        return {
            "kind": self.kind,
            "why": self.why,
            "headline": self.headline,
            "current_cost_s_h": r(self.current_s_h),
            "candidate_cost_s_h": r(self.candidate_s_h),
            "margin_s_h": r(self.margin_s_h),
            "basis": self.basis,
            "baseline": self.baseline,
            "start_rate": None if self.rate is None else self.rate.to_dict(),
            "start_rate_words": self.start_rate_words,
        }


def decide(
    candidate_s_h: float,
    baseline_s_h: float | None,
    baseline: Baseline | None,
    busy_s_h: float,
    basis: Basis,
    missing: Sequence[str],
    *,
    differing: float = 1.0,
    rate: StartRate | None = None,
    in_sample: tuple[float, float] | None = None,
) -> Decision:
    """Change only when the candidate wins by the margin; missing evidence withholds advice.
    ``differing``: the share of decode time the two sets price apart (the fit's resolution
    applies there only); ``rate``: the capture part, said with the decision; ``in_sample``:
    (candidate, baseline) on all the traffic, where the candidate must not cost more."""
    margin = margin_s_h(baseline_s_h or 0.0, busy_s_h, differing)
    what = "the current set" if baseline == "current" else "the engine's default set"
    if missing:
        return Decision(
            "insufficient",
            "too little decode traffic to size buckets: " + "; ".join(missing),
            baseline_s_h,
            candidate_s_h,
            margin,
            basis,
            baseline,
        )
    if baseline_s_h is None:
        return Decision(
            "change", "no current set to compare with", None, candidate_s_h, margin, basis, None
        )
    words = _margin_words(baseline_s_h, busy_s_h, differing)
    saved = baseline_s_h - candidate_s_h
    if saved > margin and in_sample is not None and in_sample[0] > in_sample[1] + 1e-9:
        why = (
            f"the best candidate saves {saved:,.2f} GPU-s/h on {basis} traffic but costs "
            f"{in_sample[0] - in_sample[1]:,.2f} GPU-s/h more on all of it ({in_sample[0]:,.2f} "
            f"against {in_sample[1]:,.2f} GPU-s/h): a change is never dearer than {what} on "
            "the traffic the logs show"
        )  # (no start rate said: the held-out break-even is not what decided)
        return Decision("keep", why, baseline_s_h, candidate_s_h, margin, basis, baseline)
    if saved > margin:
        why = (
            f"cheaper than {what} by {saved:,.2f} GPU-s/h on {basis} traffic "
            f"({candidate_s_h:,.2f} against {baseline_s_h:,.2f}), more than the margin of {words}"
        )
        return Decision("change", why, baseline_s_h, candidate_s_h, margin, basis, baseline, rate)
    if saved > 0:
        how = f"saves only {saved:,.2f} GPU-s/h"
    elif saved == 0:
        how = "costs the same"
    else:
        how = f"costs {-saved:,.2f} GPU-s/h more"
    why = (
        f"the best candidate {how} on {basis} traffic ({candidate_s_h:,.2f} "
        f"against {baseline_s_h:,.2f} GPU-s/h), a change must save more than {words}"
    )
    return Decision("keep", why, baseline_s_h, candidate_s_h, margin, basis, baseline, rate)


def keep_used_sizes(
    sizes: tuple[int, ...],
    hist: Mapping[int, float],
    used: Sequence[int],
    ceiling: int,
    params: CostParameters,
    padding: bool,
    max_k: int | None = None,
) -> tuple[int, ...]:
    """``sizes`` with each of ``used`` (current sizes the traffic runs at) put back where
    dropping it costs more in padding or eager steps than its graph costs in capture time and
    memory: a size the traffic uses is never dropped below its padding cost (within the
    caller's ``max_k`` budget, which wins)."""
    out = tuple(sorted(set(sizes)))
    cost = set_cost(out, hist, params, padding=padding).total_s_h
    for s in sorted(set(used)):
        if max_k is not None and len(out) >= max_k:
            break
        if s in out or s > ceiling or hist.get(s, 0.0) <= 0:
            continue
        trial = tuple(sorted({*out, s}))
        c = set_cost(trial, hist, params, padding=padding).total_s_h
        if c < cost:
            out, cost = trial, c
    return out
