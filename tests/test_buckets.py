"""Bucket optimiser: the DP must equal brute force, including its tie-break; the plans'
figures equal a step-by-step recount in plain Python."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.advise.buckets import BucketPlan, BucketSolver
from diag.advise.cost_model import estimate_capture_memory, estimate_capture_time

QS = [0.5, 0.9, 0.99, 1.0]


def recount(sizes: Iterable[int], hist: dict[int, int]) -> tuple[int, int, int, int]:
    """(covered, total, padded slots, graph slots), batch by batch: the oracle."""
    ss = sorted(set(sizes))
    covered = total = padded = slots = 0
    for b, n in hist.items():
        for _ in range(n):
            total += 1
            bucket = next((s for s in ss if s >= b), None)
            if bucket is not None:
                covered += 1
                padded += bucket - b
                slots += bucket
    return covered, total, padded, slots


def coverage(sizes: Iterable[int], hist: dict[int, int]) -> float:
    covered, total, _, _ = recount(sizes, hist)
    return covered / total if total else 0.0


def padding_waste(sizes: Iterable[int], hist: dict[int, int]) -> float | None:
    _, _, padded, slots = recount(sizes, hist)
    return padded / slots if slots else None


def solve(
    hist: dict[int, int],
    max_buckets: int,
    min_coverage: float = 0.99,
    always_include: Iterable[int] = (),
    allowed: Callable[[int], bool] | None = None,
) -> BucketPlan:
    return BucketSolver(hist, min_coverage, always_include, allowed).plan(max_buckets)


def brute_force(
    hist: dict[int, int],
    k_max: int,
    q: float,
    pool: Iterable[int],
    forced: Iterable[int] = (),
) -> tuple[int, int, tuple[int, ...]] | None:
    """Best (padded slots, n buckets, sizes) over every subset of ``pool`` (+ forced sizes)."""
    fixed = set(forced)
    free = sorted(set(pool) - fixed)
    best = None
    for r in range(0, k_max - len(fixed) + 1):
        for combo in combinations(free, r):
            sizes = tuple(sorted(fixed | set(combo)))
            if not sizes or coverage(sizes, hist) < q:
                continue
            key = (recount(sizes, hist)[2], len(sizes), sizes)
            if best is None or key < best:
                best = key
    return best


def check(
    hist: dict[int, int],
    k: int,
    q: float,
    pool: Iterable[int],
    forced: Iterable[int] = (),
    allowed: Callable[[int], bool] | None = None,
) -> None:
    expected = brute_force(hist, k, q, pool, forced)
    if expected is None:
        with pytest.raises(ValueError):
            solve(hist, k, q, always_include=forced, allowed=allowed)
        return
    plan = solve(hist, k, q, always_include=forced, allowed=allowed)
    assert (plan.padded_slots, len(plan.sizes), tuple(plan.sizes)) == expected
    assert plan.coverage >= q
    assert plan.coverage == coverage(plan.sizes, hist)
    assert plan.padding_waste == padding_waste(plan.sizes, hist)
    assert plan == BucketPlan.evaluate(plan.sizes, hist)
    assert set(forced) <= set(plan.sizes)
    if allowed is not None:
        assert all(allowed(s) or s in set(forced) for s in plan.sizes)


hists = st.dictionaries(st.integers(1, 40), st.integers(1, 50), min_size=1, max_size=11)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(hist=hists, k=st.integers(1, 5), q=st.sampled_from(QS))
def test_dp_matches_brute_force_over_observed_sizes(hist: dict[int, int], k: int, q: float) -> None:
    check(hist, k, q, pool=hist)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    hist=st.dictionaries(st.integers(1, 14), st.integers(1, 20), min_size=1, max_size=8),
    k=st.integers(1, 5),
    q=st.sampled_from(QS),
)
def test_restriction_to_observed_sizes_loses_nothing(
    hist: dict[int, int], k: int, q: float
) -> None:
    """Brute force over *every* integer bucket 1..14, not just observed sizes."""
    check(hist, k, q, pool=range(1, 15))


@settings(max_examples=200, deadline=None)
@given(
    hist=st.dictionaries(st.integers(1, 16), st.integers(1, 20), min_size=1, max_size=8),
    k=st.integers(1, 5),
    q=st.sampled_from(QS),
    step=st.integers(1, 6),
    forced=st.sets(st.integers(1, 24), max_size=2),
)
def test_allowed_and_always_include_match_brute_force(
    hist: dict[int, int], k: int, q: float, step: int, forced: set[int]
) -> None:
    def allowed(v: int) -> bool:
        return v % step == 0

    pool = [v for v in range(1, 16 + step + 1) if allowed(v)]
    check(hist, k, q, pool=pool, forced=sorted(forced), allowed=allowed)


def test_padding_waste_by_hand() -> None:
    # buckets [4, 8]: 3x1 -> 4 (pad 1), 5x2 -> 8 (pad 3 each), 8x1 -> 8, 10x4 eager.
    hist = {3: 1, 5: 2, 8: 1, 10: 4}
    plan = BucketPlan.evaluate([8, 4], hist)
    assert plan.sizes == [4, 8]
    assert plan.padded_slots == 1 + 2 * 3  # 7
    assert plan.graph_slots == 4 + 2 * 8 + 8  # 28
    assert plan.to_dict() == {
        "sizes": [4, 8],
        "coverage": 0.5,
        "padding_waste": 0.25,
        "padded_slots": 7,
        "graph_slots": 28,
    }


def test_known_optimum() -> None:
    hist = {1: 10, 2: 5, 3: 5, 7: 1, 8: 3, 100: 1}
    # Q=0.9 needs 22/25 -> ceiling 8 (100 left eager); K=2: {3, 8} pads 1*5+2*10+1 = 26,
    # {2, 8} pads 10+5*6+1 = 41, {1, 8} pads 5*6+5*5+1 = 56 -> {3, 8}.
    plan = solve(hist, 2, 0.9)
    assert plan.sizes == [3, 8]
    assert plan.padded_slots == 26
    assert plan.coverage == pytest.approx(24 / 25)


def test_ties_prefer_fewer_then_smaller() -> None:
    assert solve({4: 1}, 3, 1.0).sizes == [4]
    # {1:1, 3:1}, K=1, Q=0.5: ceiling is 1 (cost 0) rather than 3.
    assert solve({1: 1, 3: 1}, 1, 0.5).sizes == [1]


def test_empty_and_invalid_inputs() -> None:
    assert BucketPlan.evaluate([], {1: 3}).coverage == 0.0
    assert BucketPlan.evaluate([4], {}).coverage == 0.0
    assert BucketPlan.evaluate([], {1: 3}).padding_waste is None
    assert BucketPlan.evaluate([2], {5: 1}).padding_waste is None
    with pytest.raises(ValueError):
        solve({}, 3)
    with pytest.raises(ValueError):
        solve({1: 1}, 0)
    with pytest.raises(ValueError):
        solve({1: 1}, 2, 1.5)
    with pytest.raises(ValueError):
        solve({1: -1}, 2)
    with pytest.raises(ValueError):
        solve({1: 1, 2: 1}, 1, always_include=[1, 2])
    with pytest.raises(ValueError):  # nothing allowed at all
        solve({1: 1}, 2, allowed=lambda v: False)


def test_capture_estimates_reproduce_current_point() -> None:
    cur = [1, 2, 4, 8, 16]
    assert estimate_capture_memory(cur, 0.8, cur) == pytest.approx(0.8)
    assert estimate_capture_time(cur, 12.0, cur) == pytest.approx(12.0)
    smaller = estimate_capture_memory(cur, 0.8, [1, 2, 4])
    bigger = estimate_capture_memory(cur, 0.8, cur + [32, 64])
    assert smaller is not None and bigger is not None
    assert smaller < 0.8 < bigger
    # Linear model: alpha * sum(size + 16).
    assert smaller == pytest.approx(0.8 * (7 + 48) / (31 + 80))
    assert estimate_capture_memory([], 0.8, cur) is None
    assert estimate_capture_time(cur, None, cur) is None
    assert estimate_capture_time(cur, 3.0, []) == 0.0
