"""What a CUDA-graph bucket set costs, in one unit: GPU-seconds per hour of the observed traffic.

Why one unit: the seed's trade-off has three sides (padded compute, eager steps, capture time and
the graph memory the KV pool loses) and they can only be weighed against each other once they are
priced alike. Every term is "GPU time per hour of this traffic", per rank (all ranks of a TP group
do the same step, so the factor is common and changes no choice):

* padded compute  ``sum_b steps_h(b) * (bucket(b) - b) * slot_step_s`` over graph-served steps;
* eager penalty   ``sum_b steps_h(b) * eager_penalty_s`` over steps no graph serves (above the
  ceiling, or between sizes when padding is off);
* capture time    ``capture_time(S) / lifetime_h``: paid once per server start, amortised over
  the hours a server lives between restarts;
* graph memory    ``saturated_share * tokens_lost(S) / kv_pool_tokens * busy_s_h``: graph memory
  converted to KV tokens (``kv_tokens_per_gib``); while the pool is full, throughput is bound by
  KV capacity, so losing a share of the pool costs that share of the decode GPU time. While the
  pool has room the tokens lost cost nothing and are only reported.

Sizes are in the engine's own unit (SGLang: requests per step; vLLM: tokens per step, see
:func:`engine_size`). Each parameter is a :class:`Param` with its value, where it came from
(``run``, ``snapshot`` or ``default``) and why, so the output can show it.
Only numpy and the pure bucket arithmetic of :mod:`diag.advise.buckets` are used here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np

from diag.advise.buckets import estimate_capture_memory, estimate_capture_time
from diag.engines import spec_for
from diag.facts.pricing import serve, tally

__all__ = [
    "CaptureMeasurement",
    "CostParameters",
    "Param",
    "RunEvidence",
    "SetCost",
    "Traffic",
    "engine_size",
    "set_cost",
]

Engine = Literal["vllm", "sglang"]
Source = Literal["run", "snapshot", "default"]
StepKind = Literal["decode", "mixed"]

# Defaults, each with the evidence it rests on (formats examples are real log lines); the
# base step time is the step fact's (diag.facts.steps.DEFAULT_BASE_STEP_S).
DEFAULT_SLOT_STEP_S = 4e-5
DEFAULT_EAGER_PENALTY_S = 0.005
DEFAULT_CAPTURE_S_PER_GRAPH = 0.2
DEFAULT_CAPTURE_GIB_PER_GRAPH = 0.02
DEFAULT_LIFETIME_H = 24.0
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
    lifetime_h: Param
    steps_per_hour: Param
    # The measured capture the per-graph figures come from (to scale by size, see buckets.py).
    measured_sizes: tuple[int, ...] = ()
    measured_time_s: float | None = None
    measured_mem_gib: float | None = None

    def table(self) -> dict[str, Param]:
        """Name -> Param, in declaration order (what the text/JSON/HTML output lists)."""
        return {f.name: v for f in fields(self) if isinstance(v := getattr(self, f.name), Param)}

    def capture_time_s(self, sizes: Sequence[int]) -> float:
        """Capture seconds of ``sizes``: the run's measurement scaled per graph and size
        (``buckets.estimate_capture_time``), else per-graph default x number of graphs."""
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

    def step_s(self, size: np.ndarray) -> np.ndarray:
        """Graph step time at ``size`` (linear fit)."""
        return float(self.base_step_s.value or 0.0) + float(self.slot_step_s.value or 0.0) * size


@dataclass(frozen=True)
class Traffic:
    """Sampled steps of one run, one entry per logged step line, in plain arrays.

    ``requests``/``tokens``: what the line shows (-1 where it shows nothing); the engine unit is
    derived by :func:`engine_size`. ``steps``: how many steps the sample stands for (SGLang decode
    line: ``decode_log_interval``; vLLM DEBUG step line: 1; cudagraph-metrics row: its Count).
    ``step_time_s``: measured seconds per step (NaN if unknown). ``graph`` (int8): 1 replayed,
    0 eager, -1 not said. ``token_usage``: KV pool usage 0..1 (NaN if unknown). ``observed_s``: wall time the
    samples span (None: the time stamps' span).
    """

    t_s: np.ndarray
    requests: np.ndarray
    steps: np.ndarray
    tokens: np.ndarray | None = None
    step_time_s: np.ndarray | None = None
    graph: np.ndarray | None = None
    mixed: np.ndarray | None = None  # bool: a mixed prefill+decode step (else decode only)
    token_usage: np.ndarray | None = None
    observed_s: float | None = None
    run_id: str = "run"

    def __post_init__(self) -> None:
        n = len(self.t_s)
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray) and len(v) != n:
                raise ValueError(f"Traffic.{f.name} has {len(v)} entries, t_s has {n}")

    def __len__(self) -> int:
        return len(self.t_s)

    def col(self, name: str, fill: float) -> np.ndarray:
        """The column, or ``fill`` on every row as a read-only zero-byte view."""
        v = getattr(self, name)
        return np.broadcast_to(np.asarray(fill), (len(self),)) if v is None else np.asarray(v)

    def span_h(self) -> float:
        if self.observed_s is not None and self.observed_s > 0:
            return self.observed_s / 3600.0
        if len(self) < 2:
            return 0.0
        return float(np.nanmax(self.t_s) - np.nanmin(self.t_s)) / 3600.0

    def subset(self, mask: np.ndarray) -> Traffic:
        """The samples under ``mask``; ``observed_s`` scaled by the share of the time kept."""

        def pick(v: np.ndarray | None) -> np.ndarray | None:
            return None if v is None else np.asarray(v)[mask]

        share = float(mask.mean()) if len(self) else 0.0
        hours = self.span_h()
        return Traffic(
            t_s=self.t_s[mask],
            requests=self.requests[mask],
            steps=self.steps[mask],
            tokens=pick(self.tokens),
            step_time_s=pick(self.step_time_s),
            graph=pick(self.graph),
            mixed=pick(self.mixed),
            token_usage=pick(self.token_usage),
            observed_s=hours * 3600.0 * share if hours > 0 else None,
            run_id=self.run_id,
        )


@dataclass(frozen=True)
class CaptureMeasurement:
    """What the run says about its capture: sizes captured, time and memory (None: not logged)."""

    sizes: tuple[int, ...] = ()
    time_s: float | None = None
    mem_gib: float | None = None
    mem_source: Source = "run"  # "snapshot" when the graph pools of an allocator snapshot


@dataclass(frozen=True)
class RunEvidence:
    """Everything one run contributes: its traffic, capture and KV sizing figures."""

    traffic: Traffic
    capture: CaptureMeasurement = field(default_factory=CaptureMeasurement)
    kv_pool_tokens: int | None = None
    kv_pool_gib: float | None = None


def engine_size(traffic: Traffic, engine: Engine, spec_tokens: int = 0) -> np.ndarray:
    """Step size in the engine's capture unit (int array, 0 where unknown; never written into):
    vLLM captures tokens (a line's scheduled tokens where it shows them: DEBUG step lines,
    cudagraph-metrics rows; else ``requests * (1 + num_speculative_tokens)`` for decode), SGLang
    request counts (a speculative graph runs ``num_draft_tokens`` tokens per request, but
    ``--cuda-graph-bs`` still counts requests)."""
    req = np.asarray(traffic.requests, dtype=np.int64)
    if _unit(engine) == "requests":
        return req if bool((req >= 1).all()) else np.where(req >= 1, req, 0)  # (all sized: no copy)
    tok = np.asarray(traffic.col("tokens", -1), dtype=np.int64)  # (int64 already: no copy)
    if bool((tok >= 1).all()):  # every step shows its tokens (vLLM DEBUG lines): no copy
        return tok
    return np.where(tok >= 1, tok, np.where(req >= 1, req * (1 + spec_tokens), 0))


def _unit(engine: Engine) -> str:
    """What the engine's capture sizes count (its spec in diag.engines)."""
    spec = spec_for(engine)
    if spec is None or spec.advice_rules is None:
        raise ValueError(f"no advice rules for engine {engine!r}")
    return spec.advice_rules.unit


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
    capture = cap_t / float(params.lifetime_h.value or DEFAULT_LIFETIME_H)
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
