"""What a CUDA-graph bucket set costs, in one unit: GPU-seconds per hour of the observed traffic.

Why one unit: the seed's trade-off has three sides (padded compute, eager steps, capture time and
the graph memory the KV pool loses) and they can only be weighed against each other once they are
priced alike. Every term is "GPU time per hour of this traffic", per rank (all ranks of a TP group
do the same step, so the factor is common and changes no choice):

* padded compute  ``sum_b steps_h(b) * (bucket(b) - b) * slot_step_s`` over graph-served steps;
* eager penalty   ``sum_b steps_h(b) * eager_penalty_s`` over steps no graph serves (above the
  ceiling, or between sizes when padding is off);
* capture time    ``capture_time(S) * starts_per_day / 24``: paid on every server start (restarts,
  autoscaling, rolling deploys), priced exactly: measured capture seconds times the start rate,
  an input (``--starts-per-day``, default :data:`DEFAULT_STARTS_PER_DAY`), never fitted;
* graph memory    ``saturated_share * tokens_lost(S) / kv_pool_tokens * busy_s_h``: graph memory
  converted to KV tokens (``kv_tokens_per_gib``); while the pool is full, throughput is bound by
  KV capacity, so losing a share of the pool costs that share of the decode GPU time. While the
  pool has room the tokens lost cost nothing and are only reported.

Sizes are in the engine's own unit (SGLang: requests per step; vLLM: tokens per step, see
:func:`engine_size`). Each parameter is a :class:`Param` with its value, where it came from
(``run``, ``snapshot`` or ``default``) and why, so the output can show it.
Coverage and padding are counted by :mod:`diag.facts.pricing` (the one pricing arithmetic).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np

from diag.advise.traffic import Source
from diag.facts.pricing import serve, tally

__all__ = [
    "DEFAULT_STARTS_PER_DAY",
    "CostParameters",
    "Param",
    "SetCost",
    "estimate_capture_memory",
    "estimate_capture_time",
    "set_cost",
]


# Defaults, each with the evidence it rests on (formats examples are real log lines); the
# base step time is the step fact's (diag.facts.steps.DEFAULT_BASE_STEP_S).
DEFAULT_SLOT_STEP_S = 4e-5
DEFAULT_EAGER_PENALTY_S = 0.005
DEFAULT_CAPTURE_S_PER_GRAPH = 0.2
DEFAULT_CAPTURE_GIB_PER_GRAPH = 0.02
DEFAULT_STARTS_PER_DAY = 1.0  # one (re)start a day unless told (--starts-per-day)
SATURATED_USAGE = 0.95


@dataclass(frozen=True)
class Param:
    """One model parameter as the output shows it. ``value`` None: unknown, ``why`` says so."""

    value: float | None
    unit: str
    source: Source
    why: str

    def to_dict(self) -> dict[str, object]:
        return {"value": self.value, "unit": self.unit, "source": self.source, "why": self.why}


@dataclass(frozen=True)
class CostParameters:
    """The model's parameters; :func:`fit_parameters` fills them from the run where it can."""

    base_step_s: Param
    slot_step_s: Param
    eager_penalty_s: Param
    capture_s_per_graph: Param
    capture_gib_per_graph: Param
    kv_tokens_per_gib: Param
    kv_pool_tokens: Param
    saturated_share: Param
    starts_per_day: Param
    steps_per_hour: Param
    # The measured capture the per-graph figures come from (scaled by size, see estimate_capture_time).
    measured_sizes: tuple[int, ...] = ()
    measured_time_s: float | None = None
    measured_mem_gib: float | None = None

    def table(self) -> dict[str, Param]:
        """Name -> Param, in declaration order (what the text/JSON/HTML output lists)."""
        return {f.name: v for f in fields(self) if isinstance(v := getattr(self, f.name), Param)}

    def capture_time_s(self, sizes: Sequence[int]) -> float:
        """Capture seconds of ``sizes``: the run's measurement scaled per graph and size
        (:func:`estimate_capture_time`), else per-graph default x number of graphs."""
        est = estimate_capture_time(self.measured_sizes, self.measured_time_s, sizes)
        if est is not None:
            return est
        return float(self.capture_s_per_graph.value or 0.0) * len(set(sizes))

    def capture_gib(self, sizes: Sequence[int]) -> float:
        """Graph memory of ``sizes`` (GiB), scaled like :meth:`capture_time_s`."""
        est = estimate_capture_memory(self.measured_sizes, self.measured_mem_gib, sizes)
        if est is not None:
            return est
        return float(self.capture_gib_per_graph.value or 0.0) * len(set(sizes))

    def starts_per_hour(self) -> float:
        """Server starts per hour, each paying the whole capture."""
        v = self.starts_per_day.value
        return (DEFAULT_STARTS_PER_DAY if v is None else float(v)) / 24.0

    def step_s(self, size: np.ndarray) -> np.ndarray:
        """Graph step time at ``size`` (linear fit)."""
        return float(self.base_step_s.value or 0.0) + float(self.slot_step_s.value or 0.0) * size


# ------------------------------------------------------------------ capture, scaled by size
def _scale_by_slots(
    current_sizes: Iterable[int],
    current_value: float | None,
    new_sizes: Iterable[int],
    overhead_slots: float,
) -> float | None:
    """Shared linear model: ``value = alpha * sum(size + overhead_slots)`` fitted on ``current``."""
    cur, new = sorted(set(current_sizes)), sorted(set(new_sizes))
    if current_value is None or not cur or not math.isfinite(current_value) or current_value < 0:
        return None
    if overhead_slots < 0:
        raise ValueError("overhead_slots must be >= 0")
    # (integer sizes and slots: the sums are exact, as one term per size gave them)
    denom = sum(cur) + overhead_slots * len(cur)  # > 0: sizes are >= 1
    return current_value * (sum(new) + overhead_slots * len(new)) / denom


def estimate_capture_memory(
    current_sizes: Iterable[int],
    current_mem_gib: float | None,
    new_sizes: Iterable[int],
    overhead_slots: float = 16.0,
) -> float | None:
    """ESTIMATE of graph-capture memory (GiB) for ``new_sizes`` from one measured point.

    Model: each graph costs ``alpha * (size + overhead_slots)``, i.e. memory proportional to its
    batch size plus a fixed per-graph overhead worth ``overhead_slots`` batch slots (an assumed
    ratio, not measured); ``alpha`` is fitted so the model reproduces ``current_mem_gib`` for
    ``current_sizes``. Real pools are shared across graphs (captured largest-first), so treat
    the result as an order of magnitude for comparing bucket sets, not a budget.
    Returns ``None`` when there is no usable current measurement.
    """
    return _scale_by_slots(current_sizes, current_mem_gib, new_sizes, overhead_slots)


def estimate_capture_time(
    current_sizes: Iterable[int],
    current_time_s: float | None,
    new_sizes: Iterable[int],
    overhead_slots: float = 64.0,
) -> float | None:
    """ESTIMATE of capture time (s) for ``new_sizes`` from one measured point.

    Same linear model as ``estimate_capture_memory`` with a larger default per-graph overhead,
    because each capture pays warm-up runs and launch/instantiation work that barely depend on
    batch size. Fitted to reproduce ``current_time_s``; an estimate, not a prediction.
    Returns ``None`` when there is no usable current measurement.
    """
    return _scale_by_slots(current_sizes, current_time_s, new_sizes, overhead_slots)


# ------------------------------------------------------------------ evaluation
@dataclass(frozen=True)
class SetCost:
    """A bucket set priced on a histogram: coverage and waste, and the cost terms (GPU-s per h)."""

    sizes: tuple[int, ...]
    coverage: float
    padding_waste: float | None
    capture_gib: float
    capture_time_s: float
    kv_tokens_lost: float | None
    padded_s_h: float
    eager_s_h: float
    capture_s_h: float
    memory_s_h: float

    @property
    def total_s_h(self) -> float:
        return self.padded_s_h + self.eager_s_h + self.capture_s_h + self.memory_s_h


def set_cost(
    sizes: Sequence[int],
    hist: Mapping[int, float],
    params: CostParameters,
    *,
    padding: bool = True,
) -> SetCost:
    """Price ``sizes`` on ``hist`` ({size: steps}, any positive weights: rescaled to the
    parameters' steps per hour). ``padding`` False: SGLang ``--disable-cuda-graph-padding``,
    only exact sizes replay, the rest runs eager."""
    ss = np.array(sorted(set(int(s) for s in sizes)), dtype=np.int64)
    keys = np.fromiter(hist.keys(), dtype=np.int64, count=len(hist))
    steps = np.fromiter(hist.values(), dtype=float, count=len(hist))
    xs, ws = keys[steps > 0], steps[steps > 0]
    total_w = float(ws.sum())
    per_h = float(params.steps_per_hour.value or 0.0) / total_w if total_w > 0 else 0.0
    bucket, served = serve(ss, xs, ws, padding=padding)
    got = tally(bucket, bucket - xs, ws, served)
    slot_s = float(params.slot_step_s.value or 0.0)
    padded = float(got.padded_slots) * slot_s * per_h
    eager = float(ws[~served].sum()) * float(params.eager_penalty_s.value or 0.0) * per_h
    cap_gib = params.capture_gib(ss.tolist()) if len(ss) else 0.0
    cap_t = params.capture_time_s(ss.tolist()) if len(ss) else 0.0
    capture = cap_t * params.starts_per_hour()
    per_gib, pool = params.kv_tokens_per_gib.value, params.kv_pool_tokens.value
    lost = cap_gib * per_gib if per_gib else None
    memory = 0.0
    if lost is not None and pool:
        busy_h = float(np.sum(ws * params.step_s(xs.astype(float)))) * per_h
        memory = float(params.saturated_share.value or 0.0) * lost / pool * busy_h
    return SetCost(
        sizes=tuple(ss.tolist()),
        coverage=got.coverage,
        padding_waste=got.padding_waste,
        capture_gib=cap_gib,
        capture_time_s=cap_t,
        kv_tokens_lost=lost,
        padded_s_h=padded,
        eager_s_h=eager,
        capture_s_h=capture,
        memory_s_h=memory,
    )
