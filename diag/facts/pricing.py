"""What a bucket set serves of weighted decode steps: coverage and padding, computed one way.

A step of size ``b`` replays the graph of the smallest bucket ``>= b`` (``bucket - b`` padded
slots of wasted compute); a step above the largest bucket, or between sizes with padding off,
runs eagerly (not covered, no padding). The record's measured padding waste
(:func:`diag.facts.classify.padding_waste`, each step's own bucket), the cost model's
:func:`diag.advise.cost_model.set_cost` and the bucket solver's plans
(:mod:`diag.advise.buckets`) all tally here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Served", "price", "serve", "tally"]


@dataclass(frozen=True)
class Served:
    """Weights served and slots spent; sums in the weights' dtype (int64 weights: exact)."""

    covered: float  # weight of the steps a graph serves
    total: float  # weight of every step
    padded_slots: float  # sum of (bucket - size) * weight over served steps
    graph_slots: float  # sum of bucket * weight over served steps

    @property
    def coverage(self) -> float:
        """Share of the weight a graph serves (0.0 where there is none)."""
        return float(self.covered / self.total) if self.total > 0 else 0.0

    @property
    def padding_waste(self) -> float | None:
        """Padded slots / graph slots; None where no graph serves a step (not "no waste")."""
        return float(self.padded_slots / self.graph_slots) if self.graph_slots else None


def tally(
    bucket: np.ndarray, padded: np.ndarray, weights: np.ndarray, served: np.ndarray
) -> Served:
    """The figures of steps each replayed at ``bucket`` with ``padded`` slots, where ``served``."""
    w = weights[served]
    return Served(
        covered=w.sum(),
        total=weights.sum(),
        padded_slots=(padded[served] * w).sum(),
        graph_slots=(bucket[served] * w).sum(),
    )


def serve(
    sizes: np.ndarray, xs: np.ndarray, ws: np.ndarray, *, padding: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(bucket, served) per step size ``xs`` under the sorted distinct bucket ``sizes``:
    bucket 0 where none serves; ``padding`` False (SGLang ``--disable-cuda-graph-padding``):
    only exact sizes replay."""
    if not len(sizes) or not len(xs):
        return np.zeros(len(xs), dtype=np.int64), np.zeros(len(xs), dtype=bool)
    idx = np.searchsorted(sizes, xs, side="left")
    served = idx < len(sizes)
    bucket = np.where(served, sizes[np.minimum(idx, len(sizes) - 1)], 0)
    if not padding:
        served &= bucket == xs
    return bucket, served


def price(sizes: np.ndarray, xs: np.ndarray, ws: np.ndarray, *, padding: bool = True) -> Served:
    """Coverage and padding of the sorted distinct bucket ``sizes`` on steps of sizes ``xs``
    weighted ``ws`` (int64 weights sum exactly)."""
    bucket, served = serve(sizes, xs, ws, padding=padding)
    return tally(bucket, bucket - xs, ws, served)
