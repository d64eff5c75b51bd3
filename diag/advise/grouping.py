"""Group-by steps of the advice on whole numpy columns (millions of sampled steps).

The advice groups step rows by a small integer (a batch size in requests or tokens): these
helpers give the same results as ``np.unique`` / per-group ``np.median`` without sorting or
masking every row once per group.
"""

from __future__ import annotations

import numpy as np

DIRECT_MAX = 1 << 20  # non-negative ints up to this are binned directly instead of sorted


def joined(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays end to end; one array as it is (np.concatenate would copy it: a run of
    millions of steps held twice)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for an int array (sorted distinct values,
    and each row's index into them), by one bincount when the values are small."""
    if len(values) == 0 or values.min() < 0 or values.max() > DIRECT_MAX:
        return np.unique(values, return_inverse=True)
    present = np.bincount(values) > 0
    uniq = np.flatnonzero(present)
    slot = np.zeros(len(present), dtype=np.intp)
    slot[uniq] = np.arange(len(uniq))
    return uniq.astype(values.dtype, copy=False), slot[values]


def group_medians(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """``np.median(values[group == i])`` for i < n (no group empty): the values sorted once,
    then grouped by a stable sort of the group ids (a radix sort for 16-bit ids)."""
    by_value = np.argsort(values)
    ids = group[by_value]
    if n < 2**15:
        ids = ids.astype(np.int16)
    v = values[by_value][np.argsort(ids, kind="stable")]  # by group, each group by value
    cnt = np.bincount(group, minlength=n)
    hi = np.cumsum(cnt) - cnt + cnt // 2
    odd = cnt % 2 == 1
    return np.where(odd, v[hi], (v[hi - 1 + odd] + v[hi]) / 2)  # np.median: mean of middle two


def weighted_quantile(sizes: np.ndarray, weights: np.ndarray, q: float) -> int:
    """The size at which the step-weighted cumulative share first reaches ``q``: the sizes
    sorted with their weights cumulated (the last size if float rounding never gets there).
    Whole-number weights sum exactly in any order, so for them one bincount per distinct
    size gives the same answer as sorting every step."""
    if len(sizes) and sizes.min() >= 0 and sizes.max() <= DIRECT_MAX:
        if bool(np.all(weights == np.floor(weights))) and float(np.abs(weights).sum()) < 2**52:
            uniq, inv = unique_inverse(sizes)
            cum = np.cumsum(np.bincount(inv, weights=weights, minlength=len(uniq)))
            cum = cum / weights.sum()
            return int(uniq[min(int(np.searchsorted(cum, q)), len(cum) - 1)])
    order = np.argsort(sizes)
    cum = np.cumsum(weights[order]) / weights.sum()
    return int(sizes[order][min(int(np.searchsorted(cum, q)), len(cum) - 1)])


def step_histogram(sizes: np.ndarray, steps: np.ndarray) -> dict[int, float]:
    """``{size: steps}`` over sizes >= 1 with steps > 0. Each bin sums its steps in input
    order either way (a direct bincount, or over sorted distinct sizes when they are huge)."""
    ok = sizes >= 1
    s, w = (sizes, steps) if ok.all() else (sizes[ok], steps[ok])  # (no copy: every size known)
    if len(s) and int(s.max()) <= DIRECT_MAX:
        per = np.bincount(s.astype(np.int64), weights=w)
        uniq = np.flatnonzero(per > 0)
        return {int(k): float(x) for k, x in zip(uniq.tolist(), per[uniq].tolist(), strict=True)}
    uniq, inv = np.unique(s, return_inverse=True)
    per = np.bincount(inv, weights=w, minlength=len(uniq))
    return {int(k): float(x) for k, x in zip(uniq.tolist(), per.tolist(), strict=True) if x > 0}


def int_histogram(hist: dict[int, float]) -> dict[int, int]:
    """optimal_buckets counts in ints: scale fractional step weights (argmin unchanged)."""
    lo = min(hist.values())
    scale = 1.0 if all(float(v).is_integer() for v in hist.values()) else 1000.0 / lo
    return {s: max(1, int(round(v * scale))) for s, v in hist.items()}
