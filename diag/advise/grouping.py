"""Group-by steps of the advice on whole numpy columns (millions of sampled steps).

The advice groups step rows by a small integer (a batch size in requests or tokens): these
helpers give the same results as ``np.unique`` / per-group ``np.median`` without sorting or
masking every row once per group.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DIRECT_MAX = 1 << 20  # non-negative ints up to this are binned directly instead of sorted
#: the largest batch size advice reads (the largest size a config key is read as): a row of a
#: larger one is a garbled count no engine runs (``diag.engines.config.CONFIG_INT_LIMIT``)
MAX_SIZE = 1 << 22
#: the most steps the integer bucket solver counts in all (its sums of steps x sizes stay
#: within int64: 2**40 x MAX_SIZE = 2**62)
MAX_INT_STEPS = 1 << 40


def joined(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays end to end; one array as it is (np.concatenate would copy it: a run of
    millions of steps held twice), runs of one whole-number constant as a zero-byte view."""
    if len(arrays) == 1:
        return arrays[0]
    first = whole_constant(arrays[0])
    if first is not None and all(whole_constant(a) == first for a in arrays):
        return np.broadcast_to(arrays[0][:1], (sum(len(a) for a in arrays),))
    return np.concatenate(arrays)


def every_row(mask: np.ndarray) -> np.ndarray | None:
    """``mask``, or None when it keeps every row (so :func:`pooled` copies nothing)."""
    return None if mask.all() else mask


def pooled(
    arrays: Sequence[np.ndarray], masks: Sequence[np.ndarray | None], dtype: type = float
) -> np.ndarray:
    """``np.concatenate([a[m] ...]).astype(dtype)`` written straight into one array (a run's
    masked copy and the concatenation are not both held); one whole run is its own array."""
    if len(arrays) == 1 and masks[0] is None:
        return np.asarray(arrays[0]).astype(dtype, copy=False)
    counts = [
        len(a) if m is None else int(np.count_nonzero(m))
        for a, m in zip(arrays, masks, strict=True)
    ]
    out: np.ndarray = np.empty(sum(counts), dtype)
    pos = 0
    for a, m, k in zip(arrays, masks, counts, strict=True):
        dst = out[pos : pos + k]
        if m is None:
            dst[...] = a
        elif a.dtype == out.dtype:
            np.compress(m, a, out=dst)
        else:
            dst[...] = a[m]
        pos += k
    return out


def whole_constant(a: np.ndarray) -> float | None:
    """The value of a zero-stride column of one whole number (``np.broadcast_to``), else None:
    its sums over any rows are exact, so they need no pooled copy to come out the same."""
    if a.ndim != 1 or not len(a) or a.strides[0] != 0:
        return None
    v = float(a[0])
    return v if v.is_integer() and abs(v) * len(a) < 2**52 else None


def masked_sum(arrays: Sequence[np.ndarray], masks: Sequence[np.ndarray | None]) -> float:
    """``float(np.concatenate([a[m] ...]).sum())``, bit for bit: by counts when every column is
    a whole-number constant (integer sums are exact in any order), else over the pooled rows."""
    consts = [whole_constant(a) for a in arrays]
    if all(c is not None for c in consts):
        return float(
            sum(
                c * (len(a) if m is None else int(np.count_nonzero(m)))
                for c, a, m in zip(consts, arrays, masks, strict=True)
                if c is not None
            )
        )
    return float(pooled(arrays, masks).sum())


def unique_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for an int array (sorted distinct values,
    and each row's index into them), by one bincount when the values are small."""
    if len(values) == 0 or values.min() < 0 or values.max() > DIRECT_MAX:
        return np.unique(values, return_inverse=True)
    present = np.bincount(values) > 0
    uniq = np.flatnonzero(present)
    # 16-bit indexes where they fit: a row-long index of millions of steps in a quarter the bytes
    slot = np.zeros(len(present), dtype=np.int16 if len(uniq) < 2**15 else np.intp)
    slot[uniq] = np.arange(len(uniq))
    return uniq.astype(values.dtype, copy=False), slot[values]


def group_medians(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """``np.median(values[group == i])`` for i < n (no group empty): the values grouped by one
    stable sort of the group ids (a radix sort for 16-bit ids), then each group's middle
    partitioned in place (two row-long arrays at most, where sorting by value held four)."""
    ids = group.astype(np.int16, copy=False) if n < 2**15 else group
    v = values[np.argsort(ids, kind="stable")]
    cnt = np.bincount(group, minlength=n)
    out = np.empty(n)
    start = 0
    for i, c in enumerate(cnt.tolist()):
        seg, h = v[start : start + c], c // 2
        if c % 2:
            seg.partition(h)
            out[i] = seg[h]
        else:  # np.median: the mean of the middle two
            seg.partition((h - 1, h))
            out[i] = (seg[h - 1] + seg[h]) / 2
        start += c
    return out


def weighted_quantile(sizes: np.ndarray, weights: np.ndarray, q: float) -> int:
    """The size at which the step-weighted cumulative share first reaches ``q``: the sizes
    sorted with their weights cumulated (the last size if float rounding never gets there).
    Whole-number weights sum exactly in any order, so for them one bincount per distinct
    size gives the same answer as sorting every step."""
    if len(sizes) and sizes.min() >= 0 and sizes.max() <= DIRECT_MAX:
        c = whole_constant(weights)
        if c is not None or (
            bool(np.all(weights == np.floor(weights))) and float(np.abs(weights).sum()) < 2**52
        ):
            uniq, inv = unique_inverse(sizes)
            cum = np.cumsum(_bin_sums(inv, weights, c, len(uniq)))
            cum = cum / weights.sum()
            return int(uniq[min(int(np.searchsorted(cum, q)), len(cum) - 1)])
    order = np.argsort(sizes)
    cum = np.cumsum(weights[order]) / weights.sum()
    return int(sizes[order][min(int(np.searchsorted(cum, q)), len(cum) - 1)])


def step_histogram(sizes: np.ndarray, steps: np.ndarray) -> dict[int, float]:
    """``{size: steps}`` over sizes >= 1 with steps > 0. Each bin sums its steps in input
    order either way (a direct bincount, or over sorted distinct sizes when they are huge)."""
    ok = (sizes >= 1) & (sizes <= MAX_SIZE) & np.isfinite(steps)
    s, w = (sizes, steps) if ok.all() else (sizes[ok], steps[ok])  # (no copy: every size known)
    if len(s) and int(s.max()) <= DIRECT_MAX:
        per = _bin_sums(s.astype(np.int64, copy=False), w, whole_constant(w), 0)
        uniq = np.flatnonzero(per > 0)
        return {int(k): float(x) for k, x in zip(uniq.tolist(), per[uniq].tolist(), strict=True)}
    uniq, inv = np.unique(s, return_inverse=True)
    per = np.bincount(inv, weights=w, minlength=len(uniq))
    return {int(k): float(x) for k, x in zip(uniq.tolist(), per.tolist(), strict=True) if x > 0}


def _bin_sums(bins: np.ndarray, w: np.ndarray, const: float | None, n: int) -> np.ndarray:
    """``np.bincount(bins, weights=w, minlength=n)``; a whole-number constant weight as counts
    times it (exact, so the same figures, without a row-long copy of the weights)."""
    if const is None:
        return np.bincount(bins, weights=w, minlength=n)
    return np.bincount(bins, minlength=n) * const


def int_histogram(hist: dict[int, float]) -> dict[int, int]:
    """The bucket solver counts in ints: scale fractional step weights (argmin unchanged)."""
    lo = min(hist.values())
    scale = 1.0 if all(float(v).is_integer() for v in hist.values()) else 1000.0 / lo
    total = math.fsum(hist.values()) * scale
    if total > MAX_INT_STEPS:  # huge or far-apart weights: shares kept, counts within int64
        scale *= MAX_INT_STEPS / total
    return {s: max(1, int(round(v * scale))) for s, v in hist.items()}


@dataclass(frozen=True)
class RunColumns:
    """The runs' columns the fit reads, one array per run (nothing pooled: a server's runs of
    millions of steps are only ever concatenated in the rows one figure needs)."""

    size: list[np.ndarray]
    t: list[np.ndarray]
    graph: list[np.ndarray]
    usage: list[np.ndarray]
    steps: list[np.ndarray]

    def timed(self, graph: bool) -> tuple[np.ndarray, np.ndarray]:
        """Pooled size and step time of the rows with both, replayed (graph 1 or -1) or eager."""
        rows = [
            every_row(np.isfinite(t) & (t > 0) & (s >= 1) & ((g != 0) if graph else (g == 0)))
            for s, t, g in zip(self.size, self.t, self.graph, strict=True)
        ]
        return pooled(self.size, rows, np.int64), pooled(self.t, rows)

    def usage_share(self, full: float) -> float | None:
        """``np.average(usage >= full, weights=steps)`` over the rows with a usage."""
        known = [np.isfinite(u) for u in self.usage]
        if not any(k.any() for k in known):
            return None
        rows = [every_row(k) for k in known]
        if all(whole_constant(w) is not None for w in self.steps):  # exact counts, any order
            sat = [every_row(k & (u >= full)) for k, u in zip(known, self.usage, strict=True)]
            return masked_sum(self.steps, sat) / masked_sum(self.steps, rows)
        over = pooled([u >= full for u in self.usage], rows, bool)
        return float(np.average(over, weights=pooled(self.steps, rows)))

    def busy_s(self, rows: list[np.ndarray | None], base: float, slot: float) -> float:
        """``np.sum(steps * (base + slot * size))`` over the pooled ``rows``, in one buffer."""
        buf = pooled(self.size, rows)
        if buf.base is not None or buf is self.size[0]:  # (never write into a run's own array)
            buf = buf.copy()
        buf *= slot
        buf += base
        pos = 0
        for w, m in zip(self.steps, rows, strict=True):
            c = whole_constant(w)
            k = len(w) if m is None else int(np.count_nonzero(m))
            if c is not None:
                buf[pos : pos + k] *= c
            else:
                buf[pos : pos + k] *= w if m is None else w[m]
            pos += k
        return float(np.sum(buf))
