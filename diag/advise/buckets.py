"""The exact minimum-padding bucket set of a batch-size histogram (:class:`BucketSolver`).

A decode batch of size ``b`` replays the graph of the smallest bucket ``>= b`` (``bucket - b``
padded slots of wasted compute); a batch above the largest bucket runs eagerly (not covered,
no padding). See vLLM formats sections 11-12 and SGLang formats sections 6-7.

Conventions shared by every function here:

* ``hist`` maps batch size (int >= 1) to the number of batches observed with that size;
  zero counts are ignored, negative counts or non-positive sizes raise ``ValueError``.
* ``sizes`` is a collection of bucket sizes (ints >= 1, duplicates ignored).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from diag.facts.pricing import Served, price

__all__ = ["BucketPlan", "BucketSolver"]

# ``allowed`` can only be probed on finitely many integers: bucket values are searched up to
# ``2 * max(observed size) + _ALLOWED_SEARCH_SLACK``.
_ALLOWED_SEARCH_SLACK = 1024
# Sentinel "infinite" cost; real costs must stay below _MAX_COST so INF + INF fits in int64.
_INF = 2**61
_MAX_COST = 2**60


def _clean_hist(hist: Mapping[int, int]) -> list[tuple[int, int]]:
    """Validate ``hist`` and return sorted ``(size, count)`` pairs with count > 0.

    ``operator.index`` rejects floats so a fractional size/count never gets silently truncated.
    """
    items: list[tuple[int, int]] = []
    for raw_size, raw_count in hist.items():
        size, count = operator.index(raw_size), operator.index(raw_count)
        if count < 0:
            raise ValueError(f"negative count {count} for batch size {size}")
        if count == 0:
            continue
        if size < 1:
            raise ValueError(f"batch size must be >= 1, got {size}")
        items.append((size, count))
    items.sort()
    return items


def _clean_sizes(sizes: Iterable[int]) -> list[int]:
    """Sorted distinct bucket sizes; non-positive sizes are a caller bug, so raise."""
    out = sorted({operator.index(s) for s in sizes})
    if out and out[0] < 1:
        raise ValueError(f"bucket sizes must be >= 1, got {out[0]}")
    return out


@dataclass(frozen=True)
class BucketPlan:
    """A bucket set with the figures a report needs to justify it."""

    sizes: list[int]
    coverage: float
    padding_waste: float | None  # None only if the plan covers no batch
    padded_slots: int
    graph_slots: int

    @classmethod
    def evaluate(cls, sizes: Iterable[int], hist: Mapping[int, int]) -> BucketPlan:
        """Score any bucket set (e.g. the engine's current one) the same way as the optimum."""
        ss = _clean_sizes(sizes)
        items = _clean_hist(hist)
        xs = np.array([b for b, _ in items], dtype=np.int64)
        ws = np.array([n for _, n in items], dtype=np.int64)
        return cls.of(ss, price(np.array(ss, dtype=np.int64), xs, ws))

    @classmethod
    def of(cls, sizes: list[int], got: Served) -> BucketPlan:
        """The plan of ``sizes`` from what it serves of a histogram (exact int64 sums)."""
        return cls.from_counts(
            sizes, int(got.covered), int(got.total), int(got.padded_slots), int(got.graph_slots)
        )

    @classmethod
    def from_counts(
        cls, sizes: list[int], covered: int, total: int, padded: int, slots: int
    ) -> BucketPlan:
        """The plan of ``sizes`` from its served weight, total weight, padded and graph slots."""
        return cls(
            sizes=sizes,
            coverage=covered / total if total else 0.0,
            padding_waste=padded / slots if slots else None,
            padded_slots=padded,
            graph_slots=slots,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (copies the list so callers cannot mutate the plan)."""
        return {
            "sizes": list(self.sizes),
            "coverage": self.coverage,
            "padding_waste": self.padding_waste,
            "padded_slots": self.padded_slots,
            "graph_slots": self.graph_slots,
        }


def _canonical_values(xs: list[int], allowed: Callable[[int], bool] | None) -> list[int | None]:
    """For each observed size, the smallest allowed bucket value >= it (None if none found).

    ``allowed`` is called at most once per integer, scanning upwards from the smallest size.
    """
    if allowed is None:
        return list(xs)
    limit = 2 * xs[-1] + _ALLOWED_SEARCH_SLACK
    out: list[int | None] = []
    found: int | None = None
    v = xs[0]
    for b in xs:
        if found is not None and found >= b:
            out.append(found)
            continue
        v = max(v, b)
        while v <= limit and not allowed(v):
            v += 1
        if v > limit:
            out.extend([None] * (len(xs) - len(out)))
            break
        found = v
        out.append(v)
    return out


class BucketSolver:
    """Exact minimum-padding bucket sets covering >= ``min_coverage`` of one histogram, for any
    budget ``max_buckets`` (:meth:`plan`).

    Objective: minimise total padded slots ``sum((bucket(b) - b) * count)`` over covered batches,
    subject to ``coverage >= min_coverage`` (the share of the count-weighted batches at or below the ceiling),
    ``len(sizes) <= max_buckets``, every ``always_include`` size present (used as given, not
    checked against ``allowed``) and every other size satisfying ``allowed``. Ties: fewer
    buckets, then the lexicographically smallest sorted list. The plan has >= 1 bucket.

    Why the search space can be restricted (so the DP is exact, not a heuristic):

    * Candidates. Take a non-forced bucket ``s`` with predecessor ``p`` in the set. If no
      observed size lies in ``(p, s]`` it serves nobody and can be dropped (same padding and
      coverage, fewer buckets). Otherwise let ``m`` be the largest observed size in ``(p, s]``
      and ``s'`` the smallest allowed value ``>= m``: ``p < s' <= s``, the same batches map to
      it with no more padding and coverage is unchanged. So some optimum (and the tie-broken
      one, which is elementwise no larger) uses only these canonical values plus the forced ones;
      with ``allowed=None`` these are exactly the observed sizes.
    * Ceiling. A larger ceiling never reduces padding: it only adds covered batches, each with
      padding >= 0. Let ``C = max(max(always_include), smallest candidate with coverage >= Q)``
      (the Q-quantile size, rounded up to an allowed value). Any feasible ``S`` has
      ``max(S) >= C``; replacing ``S`` by ``(S ∩ [1, C)) ∪ {C}`` keeps the forced sizes and
      feasibility, does not add buckets, maps every batch ``<= C`` to a bucket no larger than
      before and uncovers the rest. So the ceiling is exactly ``C``.

    DP over the sorted candidates ``c_1 < ... < c_m = C`` (state 0 = "no bucket yet"):
    ``E[k][i]`` = least padding to finish with exactly ``k`` more buckets after ``c_i``;
    ``cost(i, j) = c_j * (W(c_j) - W(c_i)) - (X(c_j) - X(c_i))`` from prefix sums of counts ``W``
    and ``count * size`` ``X``; a transition may not skip a forced size. O(K * m^2) in numpy;
    reconstructing forward taking the first (smallest) optimal successor gives the lexicographic
    tie-break. Row ``k`` of the DP table depends only on row ``k - 1``, so the table of a
    budget is a prefix of every larger one's: it is grown on demand and each budget reads its
    prefix (the frontier asks for every K of the same fold). Raises ``ValueError`` on empty
    input or an infeasible request.
    """

    def __init__(
        self,
        hist: Mapping[int, int],
        min_coverage: float = 0.99,
        always_include: Iterable[int] = (),
        allowed: Callable[[int], bool] | None = None,
    ) -> None:
        if not 0.0 <= min_coverage <= 1.0 or math.isnan(min_coverage):
            raise ValueError(f"min_coverage must be within [0, 1], got {min_coverage}")
        items = self.items = _clean_hist(hist)
        if not items:
            raise ValueError("empty batch-size histogram")
        forced = _clean_sizes(always_include)
        xs = [b for b, _ in items]
        xs_np = self.xs = np.array(xs, dtype=np.int64)
        ws_np = self.ws = np.array([n for _, n in items], dtype=np.int64)
        cum_w = np.concatenate(([0], np.cumsum(ws_np)))
        cum_x = np.concatenate(([0], np.cumsum(ws_np * xs_np)))
        total = int(cum_w[-1])

        canon = {c for c in _canonical_values(xs, allowed) if c is not None}
        cands = sorted(canon | set(forced))
        c_np = np.array(cands, dtype=np.int64)
        idx = np.searchsorted(xs_np, c_np, side="right")
        cov_ok = [int(w) / total >= min_coverage for w in cum_w[idx]]
        feasible = [c for c, ok in zip(cands, cov_ok, strict=True) if ok]
        if not feasible:
            raise ValueError(
                f"no allowed bucket reaches coverage {min_coverage} "
                f"(searched allowed sizes up to {2 * xs[-1] + _ALLOWED_SEARCH_SLACK})"
            )
        ceiling = max(feasible[0], forced[-1] if forced else 0)
        self.ceiling = ceiling
        self.required = set(forced) | {ceiling}
        self.too_large = ceiling * total >= _MAX_COST
        if self.too_large:
            return  # (reported by plan, after the budget check)

        # States 0..m: 0 = no bucket yet, i >= 1 = candidate cands[i-1]; only values <= ceiling.
        cands = [c for c in cands if c <= ceiling]
        m = self.m = len(cands)
        cv = self.cv = np.concatenate(([0], np.array(cands, dtype=np.int64)))
        pos = np.concatenate(([0], np.searchsorted(xs_np, cv[1:], side="right")))
        wv, xv = cum_w[pos], cum_x[pos]

        # lo[j]: the predecessor state of bucket j may not lie before the last forced state < j.
        is_forced = np.zeros(m + 1, dtype=bool)
        is_forced[1:] = [c in self.required for c in cands]
        last_forced = np.maximum.accumulate(np.where(is_forced, np.arange(m + 1), 0))
        lo = np.concatenate(([0], last_forced[:-1]))

        cost = cv[None, :] * (wv[None, :] - wv[:, None]) - (xv[None, :] - xv[:, None])
        rows = np.arange(m + 1)[:, None]
        cols = np.arange(m + 1)[None, :]
        cost[(cols <= rows) | (rows < lo[None, :])] = _INF
        self.cost = cost

        e_prev = np.full(m + 1, _INF, dtype=np.int64)
        e_prev[m] = 0  # finishing is only possible at the ceiling
        self.table = [e_prev]
        self._plans: dict[int, BucketPlan] = {}

    def _evaluate(self, chosen: list[int]) -> BucketPlan:
        """``BucketPlan.evaluate(chosen, hist)`` on the histogram's arrays (exact int64 sums:
        the ceiling check bounds every product), not a Python loop over its sizes."""
        sizes = _clean_sizes(chosen)
        return BucketPlan.of(sizes, price(np.array(sizes, dtype=np.int64), self.xs, self.ws))

    def _grow(self, levels: int) -> None:
        if len(self.table) > levels:
            return
        buf = np.empty_like(self.cost)
        while len(self.table) <= levels:
            np.add(self.cost, self.table[-1][None, :], out=buf)
            e_k = buf.min(axis=1)
            np.minimum(e_k, _INF, out=e_k)
            self.table.append(e_k)

    def plan(self, max_buckets: int) -> BucketPlan:
        """The optimum with at most ``max_buckets`` sizes (>= 1)."""
        if operator.index(max_buckets) < 1:
            raise ValueError(f"max_buckets must be >= 1, got {max_buckets}")
        if len(self.required) > max_buckets:
            raise ValueError(
                f"{len(self.required)} sizes are required (always_include + ceiling "
                f"{self.ceiling}) but max_buckets={max_buckets}"
            )
        if self.too_large:
            raise ValueError("histogram too large for int64 padding arithmetic")
        levels = min(max_buckets, self.m)
        if levels in self._plans:
            return self._plans[levels]
        self._grow(levels)
        table = self.table
        starts = [int(t[0]) for t in table[1 : levels + 1]]
        best = min(starts)
        if best >= _INF:  # unreachable given the checks above; kept as a guard
            raise ValueError("no feasible bucket set")
        k = starts.index(best) + 1

        chosen: list[int] = []
        state = 0
        for r in range(k, 0, -1):
            row = self.cost[state] + table[r - 1]
            state = int(np.flatnonzero(row == table[r][state])[0])
            chosen.append(int(self.cv[state]))
        plan = self._evaluate(chosen)
        assert plan.padded_slots == best, (plan.padded_slots, best)
        self._plans[levels] = plan
        return plan
