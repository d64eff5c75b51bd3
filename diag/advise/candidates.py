"""Candidate sets per budget K: the exact minimum-padding set under a ceiling on the engine's grid.

Step 2 of :mod:`diag.advise.bucket_sets`: for a fixed ceiling and budget K,
:class:`diag.advise.buckets.BucketSolver` gives the exact minimum-padding set over the
engine's conventional sizes; size 1 (or the TBO/DP-attention multiple) is kept, and the
current sizes the traffic uses are put back where dropping them costs more than keeping them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from diag.advise.buckets import BucketSolver
from diag.advise.cost_model import CostParameters
from diag.advise.decision import keep_used_sizes
from diag.advise.grouping import int_histogram
from diag.advise.quiet import keep_quiet_sizes

__all__ = ["Solvers", "UsedSizes", "allowed_in", "fit_set"]


def allowed_in(grid: Sequence[int]) -> Callable[[int], bool]:
    members = frozenset(grid)
    return lambda s: s in members


@dataclass(frozen=True)
class UsedSizes:
    """The current sizes a fitted set must not drop below their padding cost, and the prices."""

    sizes: tuple[int, ...]
    params: CostParameters
    padding: bool
    max_k: int | None  # the caller's budget (--max-buckets): never exceeded to keep a size
    quiet: bool = False  # also the grid's small sizes a quiet hour needs (diag.advise.quiet)


# solvers of one advise call: (id(hist), ceiling, forced, grid) -> (hist, solver); the hist
# is kept so its id cannot be reused while the entry lives
Solvers = dict[
    tuple[int, int, tuple[int, ...], tuple[int, ...] | None], tuple[object, BucketSolver]
]


def fit_set(
    hist: dict[int, float],
    k: int,
    ceiling: int,
    forced_min: int,
    grid: Sequence[int] | None,
    kept: Sequence[int] = (),
    solvers: Solvers | None = None,
    used: UsedSizes | None = None,
) -> tuple[int, ...]:
    """Exact minimum-padding set of <= k sizes with this ceiling (None grid: any size), plus
    the ``kept`` sizes above it (vLLM mixed steps the logs do not size, see :func:`diag.advise.bucket_sets.advise`),
    plus the current sizes ``used`` puts back where dropping them costs more than they do
    (:func:`diag.advise.decision.keep_used_sizes`, priced on this ``hist``).
    ``solvers``: the DP of each (histogram, ceiling, forced, grid) is built once per advise
    call and read for every K (see :class:`diag.advise.buckets.BucketSolver`)."""
    forced = (forced_min, ceiling) if k >= 2 and forced_min < ceiling else (ceiling,)
    key = (id(hist), ceiling, forced, None if grid is None else tuple(grid))
    got = solvers.get(key) if solvers is not None else None
    if got is not None and got[0] is hist:
        solver = got[1]
    else:
        below = {s: w for s, w in hist.items() if s <= ceiling} or {ceiling: 1.0}
        allowed = allowed_in(grid) if grid is not None else None
        solver = BucketSolver(int_histogram(below), 0.0, forced, allowed)
        if solvers is not None:
            solvers[key] = (hist, solver)
    plan = solver.plan(max(k, len(forced)))
    out = tuple(sorted(set(plan.sizes) | {s for s in kept if s > ceiling}))
    if used is None:
        return out
    if used.sizes:
        out = keep_used_sizes(out, hist, used.sizes, ceiling, used.params, used.padding, used.max_k)
    if used.quiet and grid is not None:
        out = keep_quiet_sizes(out, hist, grid, forced_min, used.params, used.padding, used.max_k)
    return out
