"""Keep or change: a new set only where it beats the current one held out, by a stated margin.

Only from enough evidence (issue 24 point 3).

Why: the frontier finds the cheapest set *the fit* can see; on short or squeezed traffic that
set can cost more than what the server runs today by the advice's own prices. So the current
set (or, with graphs off, the engine's default list) is priced under the same cost on the same
held-out folds, and a change is advised only when it is cheaper by the margin of
:func:`margin_s_h` (a share of the current set's cost, and never less than the step-time fit's
resolution in decode GPU time); otherwise the advice is "keep the current set", with both figures.
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
    "keep_used_sizes",
]

# Costs closer than this share of the traffic's decode GPU time are "equal": the step-time fit
# that prices padding is not finer than that (the frontier's ties use it too).
TIE_TOLERANCE = 0.0025
# A change must save this share of what the current set costs (and at least TIE_TOLERANCE of
# decode GPU time): a new set to paste and restart for is worth it only beyond the noise.
CHANGE_MARGIN_OF_COST = 0.05


def margin_s_h(current_s_h: float, busy_s_h: float) -> float:
    """What a change must save, GPU-s per hour."""
    return max(CHANGE_MARGIN_OF_COST * current_s_h, TIE_TOLERANCE * busy_s_h)


def _margin_words(current_s_h: float, busy_s_h: float) -> str:
    m = margin_s_h(current_s_h, busy_s_h)
    if m == TIE_TOLERANCE * busy_s_h:
        return f"{m:,.2f} GPU-s/h ({TIE_TOLERANCE:.2%} of decode GPU time, the fit's resolution)"
    return f"{m:,.2f} GPU-s/h ({CHANGE_MARGIN_OF_COST:.0%} of the current cost)"


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

    @property
    def headline(self) -> str:
        """One sentence: what to do, then why ("Keep the current set: the best candidate ...")."""
        if self.kind == "keep":
            what = "the current set" if self.baseline == "current" else "the engine's default set"
            return f"Keep {what}: {self.why}"
        if self.kind == "insufficient":
            return f"No bucket set advised: {self.why}"
        return f"Change the set: {self.why}"

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
        }


def decide(
    candidate_s_h: float,
    baseline_s_h: float | None,
    baseline: Baseline | None,
    busy_s_h: float,
    basis: Basis,
    missing: Sequence[str],
) -> Decision:
    """Change only when the candidate wins by the margin; missing evidence withholds advice."""
    margin = margin_s_h(baseline_s_h or 0.0, busy_s_h)
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
    saved = baseline_s_h - candidate_s_h
    if saved > margin:
        why = (
            f"cheaper than {what} by {saved:,.2f} GPU-s/h on {basis} traffic "
            f"({candidate_s_h:,.2f} against {baseline_s_h:,.2f}), more than the margin of "
            f"{_margin_words(baseline_s_h, busy_s_h)}"
        )
        return Decision("change", why, baseline_s_h, candidate_s_h, margin, basis, baseline)
    if saved > 0:
        how = f"saves only {saved:,.2f} GPU-s/h"
    elif saved == 0:
        how = "costs the same"
    else:
        how = f"costs {-saved:,.2f} GPU-s/h more"
    why = (
        f"the best candidate {how} on {basis} traffic ({candidate_s_h:,.2f} "
        f"against {baseline_s_h:,.2f} GPU-s/h), a change must save more than "
        f"{_margin_words(baseline_s_h, busy_s_h)}"
    )
    return Decision("keep", why, baseline_s_h, candidate_s_h, margin, basis, baseline)


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
