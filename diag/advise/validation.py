"""Out-of-sample validation of candidate sets: folds by run or time block, priced held out.

Step 3 of :mod:`diag.advise.bucket_sets`: folds by time block (one run: 5 blocks) or by run
(several runs). For each fold the ceiling and the set are fitted on the other folds only and
priced on the held-out one; held-out coverage, waste and cost are the promise.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from diag.advise.candidates import Solvers, UsedSizes, fit_set
from diag.advise.cost_model import CostParameters, set_cost
from diag.advise.grouping import joined, step_histogram
from diag.advise.limits import CeilingPolicy, EngineLimits, ceiling_policy

__all__ = [
    "DEFAULT_FOLDS",
    "quietest_window",
    "MAX_RUN_FOLDS",
    "MIN_BLOCK_LINES",
    "Fold",
    "HeldOut",
    "heldout",
    "make_folds",
]

DEFAULT_FOLDS = 5
MAX_RUN_FOLDS = 10  # a fleet (pods of one config): folds of runs, not one per run (quadratic)
MIN_BLOCK_LINES = 20  # a held-out block smaller than this says nothing about tomorrow


@dataclass(frozen=True)
class Fold:
    train: dict[int, float]
    test: dict[int, float]
    ceiling: int
    # the held-out sizes (ascending, as step_histogram makes them) and running step sums over them:
    # the steps up to any size are a prefix, summed in the same order as a loop would
    sizes: list[int] = field(init=False, repr=False, compare=False)
    running: list[float] = field(init=False, repr=False, compare=False)
    ascending: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sizes = list(self.test)
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "running", list(accumulate(self.test.values(), initial=0)))
        object.__setattr__(
            self, "ascending", all(a < b for a, b in zip(sizes, sizes[1:], strict=False))
        )

    def steps_up_to(self, top: int) -> float:
        """``sum(v for s, v in test.items() if s <= top)``."""
        if not self.ascending:  # (never made so: kept general)
            return sum(v for s, v in self.test.items() if s <= top)
        return self.running[bisect_right(self.sizes, top)]


Part = tuple[np.ndarray, np.ndarray]  # sizes, steps


def make_folds(
    runs: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    limits: EngineLimits,
    n_blocks: int,
    policy: CeilingPolicy,
) -> tuple[list[Fold], str]:
    """Leave-one-run-out with several runs, else contiguous time blocks of one run and, as a
    fold of its own, its quietest window (:func:`quietest_window`): whole time windows, never
    random steps, so a set is priced on the hour it was not fitted to."""
    pairs: list[tuple[list[Part], Part]] = []  # (fit on, held out)
    if len(runs) > MAX_RUN_FOLDS:  # a fleet: runs dealt round-robin into folds
        parts = [
            (
                joined([r[0] for r in runs[j::MAX_RUN_FOLDS]]),
                joined([r[1] for r in runs[j::MAX_RUN_FOLDS]]),
            )
            for j in range(MAX_RUN_FOLDS)
        ]
        pairs = _leave_one_out(parts)
        how = (
            f"{MAX_RUN_FOLDS} folds over {len(runs)} runs (every {MAX_RUN_FOLDS}th run held out "
            "together, fit on the others)"
        )
    elif len(runs) > 1:
        pairs = _leave_one_out([(s, w) for s, w, _ in runs])
        how = f"leave-one-run-out over {len(runs)} runs"
    else:
        s, w, t = runs[0]
        n = len(t)
        if not bool((t[1:] >= t[:-1]).all()):  # in time order (stable: ties as logged)
            order = np.argsort(t, kind="stable")
            s, w = s[order], w[order]
        # the blocks and the quiet window as row ranges of the time-ordered steps: views, not
        # copies (a log in time order, the rule, sorts nothing; a constant weight stays one)
        n_parts = max(1, min(n_blocks, n // MIN_BLOCK_LINES))
        bounds = np.cumsum([0] + [n // n_parts + (i < n % n_parts) for i in range(n_parts)])
        parts = [(s[a:b], w[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
        pairs = _leave_one_out(parts)
        how = f"{len(parts)} time blocks (fit on the others, price the held-out one)"
        quiet = quietest_window(s, w, n // (2 * max(1, n_blocks)))
        if len(parts) > 1 and quiet is not None and not _is_block(quiet, bounds):
            lo, hi = quiet
            outside = [(s[a:b], w[a:b]) for a, b in ((0, lo), (hi, n)) if b > a]
            pairs.append((outside, (s[lo:hi], w[lo:hi])))
            how = (
                f"{len(parts)} time blocks and the quietest window of {hi - lo} lines "
                "(fit on the others, price the held-out one)"
            )
    out: list[Fold] = []
    for rest, test in pairs:
        if not rest:
            continue
        ts = joined([p[0] for p in rest])
        tw = joined([p[1] for p in rest])
        if not (ts >= 1).any() or not (test[0] >= 1).any():
            continue
        c, _ = ceiling_policy(ts, tw, limits, policy)
        out.append(Fold(step_histogram(ts, tw), step_histogram(*test), c))
    return out, how


def _leave_one_out(parts: Sequence[Part]) -> list[tuple[list[Part], Part]]:
    return [([p for j, p in enumerate(parts) if j != i], parts[i]) for i in range(len(parts))]


def _is_block(window: tuple[int, int], bounds: np.ndarray) -> bool:
    """Is the window one of the contiguous blocks already held out?"""
    lo, hi = window
    return any(int(a) == lo and int(b) == hi for a, b in zip(bounds[:-1], bounds[1:], strict=True))


def quietest_window(sizes: np.ndarray, steps: np.ndarray, length: int) -> tuple[int, int] | None:
    """(start, end) of the ``length`` consecutive lines (in time order, at least
    :data:`MIN_BLOCK_LINES`) with the lowest mean batch size weighted by steps: the quiet hour a
    set must hold on too. None where the run is shorter than two such windows."""
    length = max(length, MIN_BLOCK_LINES)
    n = len(sizes)
    if n < 2 * length:
        return None
    # running sums written in place (each a row-long array once, not three times)
    ok = sizes >= 1
    wz = np.where(ok, steps, 0.0).astype(float, copy=False)
    num, den = np.zeros(n + 1), np.zeros(n + 1)
    np.multiply(wz, np.where(ok, sizes, 0), out=num[1:])
    np.cumsum(num[1:], out=num[1:])
    np.cumsum(wz, out=den[1:])
    del ok, wz
    mean = num[length:] - num[:-length]
    del num
    win_den = den[length:] - den[:-length]
    del den
    some = win_den > 0
    np.divide(mean, win_den, out=mean, where=some)
    mean[~some] = np.inf
    lo = int(np.argmin(mean))
    return (lo, lo + length) if np.isfinite(mean[lo]) else None


class HeldOut(NamedTuple):
    """Held-out figures weighted by held-out steps; ``capture_s_h`` is the capture part of
    ``total_s_h`` (measured seconds x start rate, not fitted: the decision prices it apart)."""

    coverage: float
    waste: float | None
    total_s_h: float
    capture_s_h: float


def heldout(
    folds: Sequence[Fold],
    k: int,
    forced_min: int,
    grid_for: Callable[[int], Sequence[int] | None],
    params: CostParameters,
    padding: bool,
    kept: Sequence[int] = (),
    solvers: Solvers | None = None,
    used: UsedSizes | None = None,
    fixed: Sequence[int] | None = None,
) -> HeldOut:
    """Held-out coverage, waste and cost (GPU-s/h), weighted by held-out steps: of the set
    fitted on each fold's other folds, or of one ``fixed`` set (the current one) priced on
    the same held-out folds."""
    if not folds:
        return HeldOut(math.nan, None, math.nan, math.nan)
    cov = tot = cap = pad_num = pad_den = 0.0
    weight = 0.0
    for f in folds:
        sizes = (
            tuple(sorted(set(fixed)))
            if fixed is not None
            else fit_set(
                f.train, k, f.ceiling, forced_min, grid_for(f.ceiling), kept, solvers, used
            )
        )
        c = set_cost(sizes, f.test, params, padding=padding)
        w = f.running[-1]  # sum(f.test.values())
        cov += c.coverage * w
        tot += c.total_s_h * w
        cap += c.capture_s_h * w
        if c.padding_waste is not None:
            served = f.steps_up_to(max(sizes))
            pad_num += c.padding_waste * served
            pad_den += served
        weight += w
    waste = pad_num / pad_den if pad_den else None
    return HeldOut(cov / weight, waste, tot / weight, cap / weight)
