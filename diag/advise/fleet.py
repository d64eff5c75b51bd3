"""One bucket recommendation for a group of servers that share a configuration (issue 27 point 3).

A fleet incident brings hundreds of runs; the fleet summary prices one bucket set on the decode
traffic of all runs of a group together. It must be a pure function of per-run results (the
fleet pipeline drops every run's event tables once the run is analysed), so each run keeps a
:class:`RunTraffic`: its sampled decode steps binned by what the advice reads of a step (the
sizes the line shows, graph or eager, mixed or decode only, KV pool full or not), with its
capture and KV figures and the engine's limits for its config. Thousands of step lines become
a few dozen bins.

:func:`pooled_advice` expands the bins back into the :class:`RunEvidence` the advice reads and
hands them to :func:`diag.advise.bucket_sets.advise`, the one advice policy: the ceiling is its
``ceiling_policy``, the set its frontier, keep or change its decision. Exact on the bins: the
batch-size histogram in the engine's unit, the step and line counts, the share of saturated
steps, the runs' wall time and capture figures; so the ceiling, the coverage and the folds
(runs held out) are those of the raw lines. The step time of a bin is the median of its lines,
so fitted step-time parameters can differ slightly from a fit on every line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from diag.advise.bucket_sets import Advice, advise
from diag.advise.cost_model import SATURATED_USAGE
from diag.advise.limits import EngineLimits
from diag.advise.run_advice import engine_limits, run_evidence
from diag.advise.traffic import CaptureMeasurement, RunEvidence, Traffic
from diag.engines import spec_for
from diag.facts.fleet import CaptureConfig, capture_config
from diag.facts.record import RunFacts
from diag.model import Snapshot

__all__ = ["FleetRun", "RunTraffic", "StepBin", "fleet_run", "pooled_advice", "run_traffic_of"]

# a bin's KV state: the pool full (usage >= SATURATED_USAGE), not full, or not said
_FULL, _ROOM, _UNSAID = 1, 0, -1


class StepBin(NamedTuple):
    """Step lines of one run that the advice cannot tell apart, but for their time. A named
    tuple, not a frozen dataclass: a vLLM run of varied token counts makes thousands of bins,
    and a frozen dataclass's field-by-field ``__init__`` cost ~5 us each (67 ms for 13 k)."""

    requests: int  # what the lines show (-1: nothing)
    tokens: int
    graph: int  # 1 replayed, 0 eager, -1 not said
    mixed: bool
    kv_full: int  # _FULL / _ROOM / _UNSAID
    lines: int
    steps: float  # the steps the lines stand for
    step_time_s: float  # median of the lines' measured step times (NaN: none measured)
    t_s: float  # median offset of the lines from the run's first line (time blocks of one run)


@dataclass(frozen=True)
class RunTraffic:
    """What one run gives the fleet's pooled advice: its binned steps, figures and limits."""

    run_id: str
    limits: EngineLimits
    bins: tuple[StepBin, ...]
    span_s: float  # wall time the lines span (of an unclocked log: its line order)
    clocked: bool  # do the lines carry a clock
    capture: CaptureMeasurement
    kv_pool_tokens: int | None
    kv_pool_gib: float | None

    def histogram(self) -> dict[int, float]:
        """``{size in the engine's unit: steps}`` (what the ceiling and the sets are fitted on)."""
        out: dict[int, float] = {}
        for size, steps in zip(self._sizes(), (b.steps for b in self.bins), strict=True):
            if size >= 1:
                out[size] = out.get(size, 0.0) + steps
        return dict(sorted(out.items()))

    def _sizes(self) -> list[int]:
        spec = self.limits.spec_tokens
        if self.limits.unit == "requests":
            return [b.requests for b in self.bins]
        return [b.tokens if b.tokens >= 1 else b.requests * (1 + spec) for b in self.bins]

    def evidence(self) -> RunEvidence:
        """The run's evidence again, one row per logged line (each with its bin's figures)."""
        n = np.array([b.lines for b in self.bins], dtype=np.int64)

        def col(values: Sequence[float | int | bool], dtype: type) -> np.ndarray:
            return np.repeat(np.asarray(values, dtype=dtype), n)

        usage = [
            1.0 if b.kv_full == _FULL else 0.0 if b.kv_full == _ROOM else math.nan
            for b in self.bins
        ]
        tokens = col([b.tokens for b in self.bins], np.int64)
        traffic = Traffic(
            t_s=col([b.t_s for b in self.bins], float),
            requests=col([b.requests for b in self.bins], np.int64),
            steps=col([b.steps / b.lines for b in self.bins], float),
            tokens=tokens if bool((tokens >= 1).any()) else None,
            step_time_s=col([b.step_time_s for b in self.bins], float),
            graph=col([b.graph for b in self.bins], np.int8),
            mixed=col([b.mixed for b in self.bins], bool),
            token_usage=col(usage, float),
            observed_s=(self.span_s or None) if self.clocked else 0.0,
            run_id=self.run_id,
        )
        return RunEvidence(traffic, self.capture, self.kv_pool_tokens, self.kv_pool_gib)


def run_traffic_of(
    f: RunFacts,
    snapshots: Sequence[Snapshot] | None = None,
    known: Mapping[str, RunEvidence | None] | None = None,
) -> RunTraffic | None:
    """The run's binned decode traffic (None: no step with a known size, or no known engine),
    read through the advice's own per-run evidence and limits. ``known``: run id -> that
    evidence where ``advise_runs`` built it already (same snapshots)."""
    spec = spec_for(f.backend)
    if spec is None or spec.advice_rules is None or capture_config(f)[1].prefill_node:
        return None  # no advice for the engine; a prefill node captures no decode buckets
    ev = known[f.run.id] if known is not None and f.run.id in known else run_evidence(f, snapshots)
    return None if ev is None else _binned(ev, engine_limits(f))


def _binned(ev: RunEvidence, limits: EngineLimits) -> RunTraffic:
    tr = ev.traffic
    n = len(tr)
    req = np.asarray(tr.requests, dtype=np.int64)
    tok = np.asarray(tr.col("tokens", -1), dtype=np.int64)
    graph = np.asarray(tr.col("graph", -1), dtype=np.int64)
    mixed = np.asarray(tr.col("mixed", 0), dtype=bool).astype(np.int64)
    usage = np.asarray(tr.col("token_usage", math.nan), dtype=float)
    full = np.where(np.isnan(usage), _UNSAID, np.where(usage >= SATURATED_USAGE, _FULL, _ROOM))
    uniq, inv = unique_rows([req, tok, graph, mixed, full.astype(np.int64)])
    del tok, graph, mixed, usage, full
    k = len(uniq)
    steps = np.broadcast_to(np.asarray(tr.steps, dtype=float), (n,))
    lines = np.bincount(inv, minlength=k)
    summed = np.bincount(inv, weights=steps, minlength=k)
    step_t = _medians(inv, np.asarray(tr.col("step_time_s", math.nan), dtype=float), k)
    at = _medians(inv, np.asarray(tr.t_s, dtype=float), k)
    # (Python numbers by tolist, not a numpy scalar per field: thousands of bins)
    bins = tuple(
        StepBin(int(r), int(tk), int(g), bool(m), int(kv), n_lines, n_steps, t_step, t_at)
        for (r, tk, g, m, kv), n_lines, n_steps, t_step, t_at in zip(
            uniq.tolist(),
            lines.tolist(),
            summed.astype(float).tolist(),
            step_t.astype(float).tolist(),
            at.astype(float).tolist(),
            strict=True,
        )
    )
    return RunTraffic(
        tr.run_id,
        limits,
        bins,
        tr.span_h() * 3600.0,
        tr.observed_s != 0.0,
        ev.capture,
        ev.kv_pool_tokens,
        ev.kv_pool_gib,
    )


def unique_rows(cols: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)`` for int64 columns:
    the rows as one mixed-radix int64 key (first column most significant, so the same
    lexicographic order) where the ranges fit, a 1-D unique instead of a copy of every row
    as a 2-D array sorted row-wise (~150 MB at peak on 1.5 M steps, against ~50 MB)."""
    lo = [int(c.min()) for c in cols] if len(cols[0]) else []
    spans = [int(c.max()) - a + 1 for c, a in zip(cols, lo, strict=True)]
    if not spans or math.prod(spans) >= 1 << 62:
        uniq, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        return uniq, inv.reshape(-1)
    key = np.zeros(len(cols[0]), dtype=np.int64)
    for c, a, span in zip(cols, lo, spans, strict=True):
        key *= span
        key += c
        key -= a
    u, inv = _sorted_unique(key)
    del key
    uniq = np.empty((len(u), len(cols)), dtype=np.int64)
    for i in range(len(cols) - 1, -1, -1):
        uniq[:, i] = u % spans[i] + lo[i]
        u //= spans[i]
    return uniq, inv.reshape(-1)


def _sorted_unique(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_inverse=True)`` by a hash factorisation and a sort of the
    distinct keys only (~4x faster on a million step lines of a few thousand bins)."""
    codes, uniq = pd.factorize(key)
    order = np.argsort(uniq, kind="stable")
    rank = np.empty(len(uniq), dtype=np.intp)
    rank[order] = np.arange(len(uniq))
    return uniq[order], rank[codes]


def _medians(group: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """``np.median`` of each group's finite values (NaN for a group without one), in one sort:
    by value within group, the group keys in their smallest unsigned type (a radix sort for
    up to 65,536 bins); values already in order (the steps' times) need the group sort only."""
    ok = np.isfinite(values)
    g, v = group[ok], values[ok]
    small = g.astype(np.min_scalar_type(max(k - 1, 0)))
    if len(v) < 2 or bool(np.all(v[1:] >= v[:-1])):
        order = np.argsort(small, kind="stable")  # stable: each group's values stay in order
    else:
        order = np.lexsort((v, small))
    del small
    g, v = g[order], v[order]
    counts = np.bincount(g, minlength=k)
    starts = np.cumsum(counts) - counts
    out = np.full(k, math.nan)
    has = counts > 0
    lo = (starts + (counts - 1) // 2)[has]
    hi = (starts + counts // 2)[has]
    out[has] = (v[lo] + v[hi]) / 2.0
    return out


def pooled_advice(runs: Sequence[RunTraffic]) -> Advice | None:
    """One advice for the runs pooled (limits from the last run: the config the next start
    uses); None when the advice cannot be made (no sized step, degenerate traffic)."""
    if not runs:
        return None
    try:
        return advise([r.evidence() for r in runs], runs[-1].limits)
    except ValueError:
        return None


@dataclass(frozen=True)
class FleetRun:
    """The small per-run value the fleet summary needs, taken from the run's facts when the
    run is built (event tables may be gone when the summary is made)."""

    model: str | None
    config: CaptureConfig
    traffic: RunTraffic | None  # None: no decode step with a known size, or no bucket advice
    kept: bool = True  # False: built after the run's tables were gone (traffic unknown)


def fleet_run(
    f: RunFacts,
    snapshots: Sequence[Snapshot] | None = None,
    known: Mapping[str, RunEvidence | None] | None = None,
) -> FleetRun:
    model, config = capture_config(f)
    return FleetRun(model, config, run_traffic_of(f, snapshots, known))
