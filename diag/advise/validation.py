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
from diag.advise.limits import EngineLimits, ceiling_policy

__all__ = [
    "DEFAULT_FOLDS",
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


def make_folds(
    runs: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    limits: EngineLimits,
    n_blocks: int,
    ceil_kw: dict[str, object],
) -> tuple[list[Fold], str]:
    """Leave-one-run-out with several runs, else contiguous time blocks of one run."""
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    if len(runs) > MAX_RUN_FOLDS:  # a fleet: runs dealt round-robin into folds
        parts = [
            (
                joined([r[0] for r in runs[j::MAX_RUN_FOLDS]]),
                joined([r[1] for r in runs[j::MAX_RUN_FOLDS]]),
            )
            for j in range(MAX_RUN_FOLDS)
        ]
        how = (
            f"{MAX_RUN_FOLDS} folds over {len(runs)} runs (every {MAX_RUN_FOLDS}th run held out "
            "together, fit on the others)"
        )
    elif len(runs) > 1:
        parts = [(s, w) for s, w, _ in runs]
        how = f"leave-one-run-out over {len(runs)} runs"
    else:
        s, w, t = runs[0]
        order = np.argsort(t, kind="stable")
        blocks = np.array_split(order, max(1, min(n_blocks, len(order) // MIN_BLOCK_LINES)))
        parts = [(s[b], w[b]) for b in blocks if len(b)]
        how = f"{len(parts)} time blocks (fit on the others, price the held-out one)"
    out: list[Fold] = []
    for i in range(len(parts)):
        rest = [p for j, p in enumerate(parts) if j != i]
        if not rest:
            continue
        ts = joined([p[0] for p in rest])
        tw = joined([p[1] for p in rest])
        if not (ts >= 1).any() or not (parts[i][0] >= 1).any():
            continue
        c, _ = ceiling_policy(ts, tw, limits, **ceil_kw)  # type: ignore[arg-type]
        out.append(Fold(step_histogram(ts, tw), step_histogram(*parts[i]), c))
    return out, how


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
