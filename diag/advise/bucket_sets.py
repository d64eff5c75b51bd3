"""The advice: a frontier over K of candidate sets, its pick, and keep or change (:class:`Advice`).

Bucket sets that hold on tomorrow's traffic: a ceiling with headroom, conventional sizes, and
a frontier over K priced by :mod:`diag.advise.cost_model` and validated out of sample. How a
set is chosen (issue 14):

1. **Ceiling** (:func:`diag.advise.limits.ceiling_policy`): the smallest conventional size at or above
   ``max(peak, p99.9) * (1 + headroom)`` over all runs pooled (so run 3's peak is covered by a set
   that run 2 alone would not reach), never below the peak unless the caller lowers
   ``headroom``/passes ``max_ceiling``, never above what the engine can run
   (SGLang ``max_running_requests``; vLLM ``max_num_batched_tokens`` for piecewise mixed steps, else
   ``max_num_seqs * (1 + k)``). vLLM with stats lines only (no per-step token counts) keeps at least
   the current or default ceiling: mixed prefill+decode steps served by piecewise graphs count
   their scheduled tokens, which decode running counts do not show.
2. **Sets per K** (:mod:`diag.advise.candidates`): for a fixed ceiling and budget K,
   :class:`diag.advise.buckets.BucketSolver` gives the exact minimum-padding set over the
   engine's conventional sizes (its own default step pattern from the engine specs in
   :mod:`diag.engines`); size 1 (or the TBO/DP-attention multiple) kept.
3. **Validation** (:mod:`diag.advise.validation`): folds by time block (one run: 5 blocks) or
   by run (several runs). For each fold the ceiling and the set are fitted on the other folds
   only and priced on the held-out one; held-out coverage, waste and cost are the promise.
4. **Pick**: lowest held-out total cost; costs within ``tie_tolerance`` x the traffic's decode GPU
   time per hour are equal, and then the fewer buckets win. Sets stay on the engine's
   conventional grid; current sizes the traffic uses are put back where dropping them costs
   more than keeping them (:func:`diag.advise.decision.keep_used_sizes`).
5. **Keep or change** (:mod:`diag.advise.decision`): the pick against the current set (or the
   engine's default list with graphs off) under the same cost on the same held-out folds; a
   change only when it wins by the stated margin, and sizing only from enough evidence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from diag.advise.candidates import Solvers, UsedSizes, fit_set
from diag.advise.cost_model import CostParameters, SetCost, set_cost
from diag.advise.decision import (
    TIE_TOLERANCE,
    Baseline,
    Basis,
    Decision,
    Evidence,
    decide,
    start_rate,
)
from diag.advise.fitting import fit_parameters
from diag.advise.grouping import joined, step_histogram
from diag.advise.limits import (
    _GRID_LIMIT,
    DEFAULT_HEADROOM,
    CeilingPolicy,
    EngineLimits,
    ceiling_policy,
    conventional_grid,
)
from diag.advise.traffic import Engine, RunEvidence, Traffic, engine_size
from diag.advise.validation import (
    DEFAULT_FOLDS,
    MIN_BLOCK_LINES,
    Fold,
    HeldOut,
    heldout,
    make_folds,
)
from diag.facts.pricing import serve

__all__ = [
    "Advice",
    "EngineLimits",
    "FrontierRow",
    "advise",
    "ceiling_policy",
    "conventional_grid",
    "traffic_histogram",
]

# costs within this share of decode GPU time are equal (decision.TIE_TOLERANCE says why)
DEFAULT_TIE_TOLERANCE = TIE_TOLERANCE
MAX_FRONTIER_K = 48


def _finite(v: float, nd: int) -> float | None:
    """JSON has no NaN: a figure that could not be measured (no held-out data) is None."""
    return round(v, nd) if math.isfinite(v) else None


@dataclass(frozen=True)
class FrontierRow:
    """One budget K: the set fitted on all traffic, priced in sample and validated out of sample."""

    k: int
    sizes: tuple[int, ...]
    conventional: bool
    cost: SetCost  # in sample, all traffic
    heldout_coverage: float
    heldout_waste: float | None
    heldout_total_s_h: float
    recommended: bool = False
    heldout_capture_s_h: float = math.nan  # the capture part of heldout_total_s_h

    def to_dict(self) -> dict[str, object]:
        c = self.cost
        return {
            "k": self.k,
            "sizes": list(self.sizes),
            "conventional": self.conventional,
            "coverage": round(c.coverage, 5),
            "padding_waste": None if c.padding_waste is None else round(c.padding_waste, 4),
            "capture_gib": round(c.capture_gib, 4),
            "capture_time_s": round(c.capture_time_s, 2),
            "kv_tokens_lost": None if c.kv_tokens_lost is None else round(c.kv_tokens_lost),
            "padded_s_h": round(c.padded_s_h, 3),
            "eager_s_h": round(c.eager_s_h, 3),
            "capture_s_h": round(c.capture_s_h, 3),
            "memory_s_h": round(c.memory_s_h, 3),
            "total_s_h": round(c.total_s_h, 3),
            "heldout_coverage": _finite(self.heldout_coverage, 5),
            "heldout_waste": None if self.heldout_waste is None else round(self.heldout_waste, 4),
            "heldout_total_s_h": _finite(self.heldout_total_s_h, 3),
            "recommended": self.recommended,
        }


@dataclass(frozen=True)
class Advice:
    """The one source of bucket advice: rules and renderers quote it, none recomputes it."""

    engine: Engine
    unit: str
    ceiling: int
    recommended: FrontierRow
    current: SetCost | None
    frontier: tuple[FrontierRow, ...]
    parameters: CostParameters
    folds: str
    busy_s_h: float  # decode GPU-s per hour of the traffic: the scale of every cost above
    notes: tuple[str, ...] = field(default_factory=tuple)
    # the pooled {size in the engine's unit: steps} it was fitted on (plots and compare read it)
    histogram: tuple[tuple[int, float], ...] = ()
    headroom: float = DEFAULT_HEADROOM
    max_ceiling: int | None = None
    max_k: int | None = None
    padding: bool = True  # SGLang --disable-cuda-graph-padding: only exact sizes replay
    # keep or change, against the current (or default) set; and the traffic it rests on
    decision: Decision | None = None
    evidence: Evidence | None = None

    def hist(self) -> dict[int, float]:
        return dict(self.histogram)

    @property
    def changes(self) -> bool:
        """Does the advice change the bucket set (not "keep", not "too little evidence")?"""
        return self.decision is None or self.decision.kind == "change"

    def price(self, sizes: Sequence[int], hist: dict[int, float] | None = None) -> SetCost:
        """Any set priced with this advice's parameters (on its own traffic by default)."""
        return set_cost(tuple(sizes), hist or self.hist(), self.parameters, padding=self.padding)

    @property
    def promised_coverage(self) -> float:
        """What the recommended set promises on new traffic: its held-out coverage (in-sample
        coverage when the traffic is too short to hold any out)."""
        r = self.recommended
        return r.heldout_coverage if math.isfinite(r.heldout_coverage) else r.cost.coverage

    def frontier_frame(self) -> pd.DataFrame:
        """One row per K (the HTML frontier plot reads this; plotting computes nothing)."""
        return pd.DataFrame([r.to_dict() for r in self.frontier])


# ------------------------------------------------------------------ fitting helpers
def traffic_histogram(traffic: Traffic, limits: EngineLimits) -> dict[int, float]:
    """``{size in the engine's unit: steps}`` of one run's traffic."""
    sizes = engine_size(traffic, limits.engine, limits.spec_tokens)
    return step_histogram(sizes, np.asarray(traffic.steps, dtype=float))


# ------------------------------------------------------------------ the advice
def advise(
    runs: Sequence[RunEvidence],
    limits: EngineLimits,
    *,
    headroom: float = DEFAULT_HEADROOM,
    max_ceiling: int | None = None,
    min_coverage: float | None = None,
    max_k: int | None = None,
    folds: int = DEFAULT_FOLDS,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
    starts_per_day: float | None = None,
) -> Advice:
    """Frontier over K and the recommended set for the pooled runs of one server."""
    if not runs:
        raise ValueError("no runs to advise on")
    params = fit_parameters(
        runs, limits.engine, spec_tokens=limits.spec_tokens, starts_per_day=starts_per_day
    )
    per_run = []
    has_tokens = False
    for ev in runs:
        tr: Traffic = ev.traffic
        s = engine_size(tr, limits.engine, limits.spec_tokens)
        has_tokens |= bool((tr.col("tokens", -1) >= 1).any())
        per_run.append((s, np.asarray(tr.steps, dtype=float), np.asarray(tr.t_s, dtype=float)))
    all_s = joined([r[0] for r in per_run])
    all_w = joined([r[1] for r in per_run])
    if not (all_s >= 1).any():
        raise ValueError("no step with a known size: nothing to size buckets for")
    policy = CeilingPolicy(headroom, max_ceiling, min_coverage, has_tokens)
    ceiling, notes = ceiling_policy(all_s, all_w, limits, policy)
    # vLLM, piecewise graphs, stats lines only: the decode steps are sized from running counts,
    # the mixed prefill+decode steps not at all. The set is fitted to the decode steps and the
    # current (or default) sizes above them are kept: mixed steps use those, and no line says
    # which, so none is dropped.
    kept: tuple[int, ...] = ()
    fit_ceiling = ceiling
    if limits.mixed_served() and not has_tokens:
        policy = replace(policy, has_token_counts=True)  # the folds fit decode ceilings too
        fit_ceiling, _ = ceiling_policy(all_s, all_w, limits, policy)
        if fit_ceiling < ceiling:
            base = limits.current_sizes or tuple(
                limits.rules.default_window(
                    limits.version, limits.max_running, limits.max_num_batched_tokens
                )
            )
            kept = tuple(sorted({s for s in base if fit_ceiling < s <= ceiling} | {ceiling}))
            notes.append(
                f"sizes above {fit_ceiling} tokens kept as the run has them ({len(kept)} sizes up "
                f"to {ceiling}): mixed prefill+decode steps replay those piecewise graphs and "
                "the stats lines do not show their token counts"
            )
        else:
            fit_ceiling = ceiling
    notes.extend(_engine_notes(limits))
    hist = step_histogram(all_s, all_w)
    forced_min = limits.multiple()
    grid = conventional_grid(limits, _GRID_LIMIT)

    def grid_for(c: int) -> list[int]:
        return [g for g in grid if g <= c] + ([c] if c not in grid else [])

    fold_list, how = make_folds(per_run, limits, folds, policy)
    n_kept = len([s for s in kept if s > fit_ceiling])
    k_hi = min(len(grid_for(fit_ceiling)), (max_k or MAX_FRONTIER_K) - n_kept)
    k_lo = 1 if forced_min >= fit_ceiling else 2
    rows: list[FrontierRow] = []
    seen: set[tuple[int, ...]] = set()
    solvers: Solvers = {}
    baseline = limits.current_sizes or limits.default_sizes
    budgets: list[int] = []
    for k in range(k_lo, max(k_lo, k_hi) + 1):
        sizes = fit_set(hist, k, fit_ceiling, forced_min, grid_for(fit_ceiling), kept, solvers)
        if sizes in seen:  # the budget is no longer binding: larger K gives the same set
            break
        seen.add(sizes)
        budgets.append(k)
        h = heldout(fold_list, k, forced_min, grid_for, params, limits.padding, kept, solvers)
        cost = set_cost(sizes, hist, params, padding=limits.padding)
        rows.append(_row(sizes, cost, h))
    key = [
        r.heldout_total_s_h if math.isfinite(r.heldout_total_s_h) else r.cost.total_s_h
        for r in rows
    ]
    s_arr = np.array(list(hist), dtype=float)
    w_arr = np.array(list(hist.values()))
    busy_s_h = float(np.sum(w_arr * params.step_s(s_arr)) / w_arr.sum()) * float(
        params.steps_per_hour.value or 0.0
    )
    eps = tie_tolerance * busy_s_h + 1e-12
    best = min(key)
    pick = next(i for i, v in enumerate(key) if v <= best + eps)
    chosen = rows[pick]
    # the pick's budget again, with the used current sizes put back and the small sizes a
    # quiet hour needs (diag.advise.quiet), validated so
    used = UsedSizes(baseline, params, limits.padding, max_k, quiet=True)
    k = budgets[pick]
    back = fit_set(hist, k, fit_ceiling, forced_min, grid_for(fit_ceiling), kept, solvers, used)
    fitted = set(chosen.sizes)
    if back != chosen.sizes:
        h = heldout(fold_list, k, forced_min, grid_for, params, limits.padding, kept, solvers, used)
        cost = set_cost(back, hist, params, padding=limits.padding)
        chosen = _row(back, cost, h)
        rows.append(chosen)
        key.append(h.total_s_h if math.isfinite(h.total_s_h) else cost.total_s_h)
        pick = len(rows) - 1
        added = set(back) - fitted
        in_use = {s for s in added if s in baseline and hist.get(s, 0.0) > 0}
        if in_use:
            notes.append(
                f"current sizes the traffic uses kept ({_named_sizes(in_use)}): "
                "dropping them costs more in padding than their graphs cost"
            )
        if added - in_use:
            floor = min(s for s in back if s > forced_min and s not in added - in_use)
            notes.append(
                f"small sizes kept for a quiet hour ({_named_sizes(added - in_use)}): each "
                f"costs less to capture than the padding it saves when batches fall below "
                f"{floor} {limits.unit}, which this traffic did not show"
            )
    if not fold_list:
        how = "not validated (in sample only)"
        notes.append(
            f"too few step lines to hold any out (fewer than {2 * MIN_BLOCK_LINES} in one run): "
            "coverage and waste are in sample only"
        )
    evidence = _evidence(runs, per_run, len(hist))
    decision, chosen = _decide(
        chosen, key[pick], baseline, hist, fold_list, params, limits, busy_s_h, evidence, grid
    )
    if not any(r is chosen for r in rows):
        rows.append(chosen)
    # one row per set: a set the grid met twice (or the chosen set met again) is listed once
    rows = [r for r in rows if r is chosen or r.sizes != chosen.sizes]
    rows = list({r.sizes: r for r in reversed(rows)}.values())
    rows = sorted((replace(r, recommended=r is chosen) for r in rows), key=lambda r: r.k)
    current = (
        set_cost(limits.current_sizes, hist, params, padding=limits.padding)
        if limits.current_sizes
        else None
    )
    return Advice(
        engine=limits.engine,
        unit=limits.unit,
        ceiling=ceiling,
        recommended=next(r for r in rows if r.recommended),
        current=current,
        frontier=tuple(rows),
        parameters=params,
        folds=how,
        busy_s_h=busy_s_h,
        notes=tuple(notes),
        histogram=tuple(sorted(hist.items())),
        headroom=headroom,
        max_ceiling=max_ceiling,
        max_k=max_k,
        padding=limits.padding,
        decision=decision,
        evidence=evidence,
    )


def _row(
    sizes: tuple[int, ...], cost: SetCost, h: HeldOut, conventional: bool = True
) -> FrontierRow:
    return FrontierRow(
        len(sizes),
        sizes,
        conventional,
        cost,
        h.coverage,
        h.waste,
        h.total_s_h,
        heldout_capture_s_h=h.capture_s_h,
    )


def _named_sizes(sizes: set[int]) -> str:
    return ", ".join(map(str, sorted(sizes)))


def _evidence(
    runs: Sequence[RunEvidence],
    per_run: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    n_sizes: int,
) -> Evidence:
    """Steps of the sized lines, the wall time they span (None: no clock in any run), sizes."""
    steps = sum(float(np.sum(w[s >= 1])) for s, w, _ in per_run)
    lines = sum(int(np.count_nonzero(s >= 1)) for s, _, _ in per_run)
    clocked = [ev.traffic for ev in runs if ev.traffic.observed_s != 0.0]
    span = sum(tr.span_h() for tr in clocked) * 3600.0 if clocked else None
    return Evidence(steps, lines, span, n_sizes)


def _decide(
    chosen: FrontierRow,
    chosen_key: float,
    baseline: tuple[int, ...],
    hist: dict[int, float],
    folds: Sequence[Fold],
    params: CostParameters,
    limits: EngineLimits,
    busy_s_h: float,
    evidence: Evidence,
    grid: Sequence[int],
) -> tuple[Decision, FrontierRow]:
    """The frontier's pick against the baseline (current set, else the engine's default list)
    under the same cost on the same held-out folds; the baseline row where it is kept.
    Capture time is priced apart from the fitted terms: the pasted set's measured-and-scaled
    capture seconds x the start rate, so the start rates at which the change wins are exact."""
    basis: Basis = "held-out" if folds else "in sample"
    missing = evidence.missing(limits.rules.more_evidence(limits.version))
    if not baseline:
        return decide(chosen_key, None, None, busy_s_h, basis, missing), chosen
    cost = set_cost(baseline, hist, params, padding=limits.padding)
    h = heldout(folds, 0, 1, lambda c: None, params, limits.padding, fixed=baseline)
    base_key = h.total_s_h if math.isfinite(h.total_s_h) else cost.total_s_h
    cand_cap_h = chosen.heldout_capture_s_h
    if not math.isfinite(chosen_key) or not math.isfinite(h.total_s_h):
        basis = "in sample"
        chosen_key, base_key = chosen.cost.total_s_h, cost.total_s_h
        cand_cap_h, base_cap_h = chosen.cost.capture_s_h, cost.capture_s_h
    else:
        base_cap_h = h.capture_s_h
    # the capture part at the pasted sets' own capture seconds (the held-out folds fit
    # slightly different sets; what a start pays is the set pasted)
    per_h = params.starts_per_hour()
    cand_fit, base_fit = chosen_key - cand_cap_h, base_key - base_cap_h
    cand_key = cand_fit + chosen.cost.capture_time_s * per_h
    base_key = base_fit + cost.capture_time_s * per_h
    differing = _differing_share(chosen.sizes, baseline, hist, params, limits.padding)
    resolution = TIE_TOLERANCE * busy_s_h * differing
    rate = start_rate(
        cand_fit,
        base_fit,
        chosen.cost.capture_time_s,
        cost.capture_time_s,
        float(params.starts_per_day.value or 0.0),
        resolution,
    )
    source: Baseline = "current" if limits.current_sizes else "default"
    decision = decide(
        cand_key,
        base_key,
        source,
        busy_s_h,
        basis,
        missing,
        differing=differing,
        rate=rate,
        in_sample=(chosen.cost.total_s_h, cost.total_s_h),
    )
    if decision.kind == "change":
        return decision, chosen
    members = set(grid)
    row = _row(baseline, cost, h, all(s in members for s in baseline))
    return decision, row


def _differing_share(
    a: Sequence[int],
    b: Sequence[int],
    hist: dict[int, float],
    params: CostParameters,
    padding: bool,
) -> float:
    """Share of decode GPU time in steps the two sets serve differently (another bucket, or
    graph in one and eager in the other): only there can the step-time fit's error move the
    comparison."""
    if not hist:
        return 1.0
    xs = np.fromiter(hist.keys(), dtype=np.int64, count=len(hist))
    ws = np.fromiter(hist.values(), dtype=float, count=len(hist))
    ba, sa = serve(np.array(sorted(set(a)), dtype=np.int64), xs, ws, padding=padding)
    bb, sb = serve(np.array(sorted(set(b)), dtype=np.int64), xs, ws, padding=padding)
    apart = (sa != sb) | (sa & (ba != bb))
    busy = ws * params.step_s(xs.astype(float))
    total = float(busy.sum())
    return float(busy[apart].sum()) / total if total > 0 else 1.0


def _engine_notes(limits: EngineLimits) -> list[str]:
    """Notes that apply to this engine and config only (texts from the engine spec)."""
    notes: list[str] = []
    rules = limits.rules
    # tokens: every spec step counts k+1 tokens; requests: only a named algorithm runs drafts
    if limits.spec_tokens > 0 and (rules.unit == "tokens" or limits.speculative_algorithm):
        notes.append(rules.spec_note(limits.speculative_algorithm, limits.spec_tokens))
    m = limits.multiple()
    if m > 1:
        why = "two-batch-overlap" if limits.two_batch_overlap else "DP attention"
        notes.append(f"{why}: only multiples of {m} are captured; {m} is kept instead of 1")
    if limits.dp_attention and rules.dp_attention_note:
        notes.append(rules.dp_attention_note)
    if not limits.padding:
        notes.append(
            "--disable-cuda-graph-padding is on: only exact sizes replay, the rest run eager"
        )
    return notes
