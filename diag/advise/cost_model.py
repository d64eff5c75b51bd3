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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np

from diag.advise.buckets import estimate_capture_memory, estimate_capture_time
from diag.advise.grouping import (
    RunColumns,
    every_row,
    group_medians,
    masked_sum,
    unique_inverse,
)
from diag.engines import spec_for

__all__ = [
    "CaptureMeasurement",
    "CostParameters",
    "Param",
    "RunEvidence",
    "SetCost",
    "Traffic",
    "engine_size",
    "fit_parameters",
    "set_cost",
    "step_time_from_throughput",
]

Engine = Literal["vllm", "sglang"]
Source = Literal["run", "snapshot", "default"]
StepKind = Literal["decode", "mixed"]

# Defaults, each with the evidence it rests on (formats examples are real log lines).
DEFAULT_BASE_STEP_S = 0.025
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


def step_time_from_throughput(
    requests: np.ndarray, gen_tokens_per_s: np.ndarray, accept_len: np.ndarray | None = None
) -> np.ndarray:
    """Seconds per decode step from a throughput line: each request yields ``accept_len`` tokens
    per step (1 without speculative decoding), so ``t = requests * accept / throughput``."""
    req = np.asarray(requests, dtype=float)
    thr = np.asarray(gen_tokens_per_s, dtype=float)
    acc = np.ones_like(req) if accept_len is None else np.nan_to_num(accept_len, nan=1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = req * acc / thr
    t[~np.isfinite(t) | (thr <= 0) | (req < 1)] = np.nan
    return t


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


# ------------------------------------------------------------------ fitting
MIN_FIT_SIZES = 4  # a slope through fewer distinct step sizes is not a measurement
MIN_SLOPE_T = 2.0  # a slope within two standard errors of zero cannot be told from zero


@dataclass(frozen=True)
class LineFit:
    """``t = a + b * size`` over the median step time per size; ``b_se`` its standard error."""

    a: float
    b: float
    b_se: float
    sizes: int  # distinct sizes the fit covers

    def slope_known(self) -> bool:
        """Is the slope a measurement? Enough sizes, and distinguishable from zero."""
        return (
            self.sizes >= MIN_FIT_SIZES
            and math.isfinite(self.b_se)
            and self.b > MIN_SLOPE_T * self.b_se
        )


def _fit_line(size: np.ndarray, t: np.ndarray) -> LineFit | None:
    """Robust ``t = a + b * size``: median step time per size (idle gaps inflate single lines),
    then least squares over those medians weighted by sqrt(samples); ``a, b >= 0``."""
    ok = np.isfinite(t) & (t > 0) & (size >= 1)
    if ok.sum() < 3:
        return None
    s, tt = (size, t) if ok.all() else (size[ok], t[ok])
    uniq, inv = unique_inverse(s)
    med = group_medians(inv, tt, len(uniq))
    cnt = np.bincount(inv).astype(float)
    if len(uniq) == 1:
        return LineFit(float(med[0]), math.nan, math.nan, 1)
    w = np.sqrt(cnt)
    x = uniq.astype(float)
    a_mat = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    coef, *_ = np.linalg.lstsq(a_mat, med * w, rcond=None)
    a, b = float(coef[0]), float(coef[1])
    se = math.inf
    if len(uniq) > 2:
        resid = med * w - a_mat @ coef
        sigma2 = float(resid @ resid) / (len(uniq) - 2)
        cov = sigma2 * np.linalg.pinv(a_mat.T @ a_mat)
        se = math.sqrt(max(float(cov[1, 1]), 0.0))
    if b < 0:  # noise: flat in size
        a, b = float(np.average(med, weights=cnt)), 0.0
    if a < 0:  # through the origin
        b = float(np.sum(w**2 * x * med) / np.sum(w**2 * x**2))
        a = 0.0
    return LineFit(a, b, se, len(uniq))


def _intercept_for(size: np.ndarray, t: np.ndarray, slope: float) -> float | None:
    """The intercept that goes with a given slope: median of ``t - slope * size``."""
    ok = np.isfinite(t) & (t > 0) & (size >= 1)
    if ok.sum() < 3:
        return None
    s, tt = (size, t) if ok.all() else (size[ok], t[ok])
    d = np.multiply(s, slope)  # t - slope * size in one buffer, partitioned in place below
    np.subtract(tt, d, out=d)
    return max(0.0, float(np.median(d, overwrite_input=True)))


def _columns(trs: Sequence[Traffic], engine: Engine, spec_tokens: int) -> RunColumns:
    return RunColumns(
        [engine_size(tr, engine, spec_tokens) for tr in trs],
        [tr.col("step_time_s", math.nan).astype(float, copy=False) for tr in trs],
        [tr.col("graph", -1).astype(np.int8, copy=False) for tr in trs],  # -1 / 0 / 1
        [tr.col("token_usage", math.nan).astype(float, copy=False) for tr in trs],
        [np.asarray(tr.steps, dtype=float) for tr in trs],
    )


def fit_parameters(
    evidence: Sequence[RunEvidence],
    engine: Engine,
    *,
    spec_tokens: int = 0,
    lifetime_h: float | None = None,
) -> CostParameters:
    """Parameters from the runs' own numbers where they have them, documented defaults elsewhere.

    Step time from graph-replayed lines (``graph`` 1, or -1 when the line does not say),
    eager penalty = median over eager lines of measured minus fitted graph step time; capture
    per graph from the main run's (most steps) measurement; KV tokens per GiB from its KV line."""
    cols = _columns([ev.traffic for ev in evidence], engine, spec_tokens)
    unit = _unit(engine).rstrip("s")
    # a request-counted slot of a speculative verify graph runs its draft tokens
    per_slot = 1 + spec_tokens if unit == "request" else 1
    n_graph = sum(int(np.count_nonzero(g != 0)) for g in cols.graph)
    fit_size, fit_t = cols.timed(graph=True)
    fit = _fit_line(fit_size, fit_t)
    fit_why = f"median step time per {unit} count over {n_graph} graph-replayed lines"
    default_slot = DEFAULT_SLOT_STEP_S * per_slot
    default_slot_why = (
        "0.04 ms per request, the slope between SGLang formats examples (8 requests 44 ms/step, "
        "509 requests 64 ms/step; memory-bound decode)"
        + (f", x{per_slot} draft tokens per request" if per_slot > 1 else "")
    )
    if fit is not None and fit.slope_known():
        base = Param(fit.a, "s/step", "run", f"intercept of a line fitted to the {fit_why}")
        slot = Param(
            fit.b,
            f"s/step per {unit}",
            "run",
            f"slope of a line fitted to the {fit_why} ({fit.sizes} sizes, "
            f"standard error {fit.b_se:.2g})",
        )
    else:
        if fit is None:
            why_not = "fewer than 3 lines with a step time"
        elif fit.sizes < MIN_FIT_SIZES:
            why_not = (
                f"the step times cover {fit.sizes} size(s) only (fewer than {MIN_FIT_SIZES}): "
                "no slope can be measured"
            )
        else:
            why_not = (
                f"the fitted slope {fit.b:.3g} s per {unit} over {fit.sizes} sizes cannot be told "
                f"from zero (standard error {fit.b_se:.2g}; a flat step time would make padding "
                "free, which it never is)"
            )
        slot = Param(
            default_slot, f"s/step per {unit}", "default", f"{why_not}: {default_slot_why}"
        )
        a = _intercept_for(fit_size, fit_t, default_slot)
        if a is not None:
            base = Param(
                a,
                "s/step",
                "run",
                f"median of step time minus the default slope x size over {n_graph} "
                "graph-replayed lines",
            )
        else:
            base = Param(
                DEFAULT_BASE_STEP_S,
                "s/step",
                "default",
                "fewer than 3 lines with a step time: 25 ms, the order of the examples in the "
                "SGLang formats (8 requests at 183.5 tok/s = 44 ms; 28 requests at 1086.6 tok/s "
                "= 26 ms)",
            )

    def graph_step_s(size: np.ndarray) -> np.ndarray:
        return float(base.value or 0.0) + float(slot.value or 0.0) * size

    del fit_size, fit_t
    eager_size, eager_t = cols.timed(graph=False)
    if fit is not None and len(eager_t) >= 1:
        extra = eager_t - graph_step_s(eager_size.astype(float))
        eager = Param(
            max(0.0, float(np.median(extra))),
            "s/step",
            "run",
            f"median of eager step time minus fitted graph step time over {len(eager_t)} "
            "eager lines",
        )
    else:
        eager = Param(
            DEFAULT_EAGER_PENALTY_S,
            "s/step",
            "default",
            "no eager line with a step time: 5 ms, the gap in the SGLang formats example of PR 13023 "
            "(46 requests eager 31.8 ms/step vs 28 requests graph 25.8 ms/step, +0.7 ms for size); "
            "it is per-kernel launch cost times kernels per step, so it grows with model depth",
        )
    main = max(evidence, key=lambda e: float(np.sum(e.traffic.steps))) if evidence else None
    cap = main.capture if main is not None else CaptureMeasurement()
    n_graphs = len(set(cap.sizes))
    if cap.time_s is not None and n_graphs:
        cap_s = Param(
            cap.time_s / n_graphs,
            "s/graph",
            "run",
            f"capture end line: {cap.time_s:g} s over {n_graphs} graphs (scaled by size)",
        )
    else:
        cap_s = Param(
            DEFAULT_CAPTURE_S_PER_GRAPH,
            "s/graph",
            "default",
            "no capture time with its sizes: 0.2 s/graph (SGLang 12.1 s for 52 sizes, "
            "vLLM 12 s for 51+35 graphs in the formats examples)",
        )
    if cap.mem_gib is not None and cap.mem_gib > 0 and n_graphs:
        what = (
            "allocator snapshot graph pools" if cap.mem_source == "snapshot" else "capture end line"
        )
        cap_m = Param(
            cap.mem_gib / n_graphs,
            "GiB/graph",
            cap.mem_source,
            f"{what}: {cap.mem_gib:g} GiB over {n_graphs} graphs (scaled by size)",
        )
    else:
        cap_m = Param(
            DEFAULT_CAPTURE_GIB_PER_GRAPH,
            "GiB/graph",
            "default",
            "no capture memory with its sizes: 0.02 GiB/graph (SGLang examples 1.04 GB "
            "and 0.54 GB for 52 sizes, 0.15 GB for 8)",
        )
    kv_tok, kv_gib = (main.kv_pool_tokens, main.kv_pool_gib) if main is not None else (None, None)
    if kv_tok and kv_gib:
        per_gib = Param(
            kv_tok / kv_gib,
            "tokens/GiB",
            "run",
            f"KV sizing line: {kv_tok:,} tokens in {kv_gib:g} GiB",
        )
        pool = Param(float(kv_tok), "tokens", "run", "KV sizing line")
    else:
        per_gib = Param(
            None,
            "tokens/GiB",
            "default",
            "no KV sizing line with both tokens and GiB: graph memory is not priced",
        )
        pool = Param(
            float(kv_tok) if kv_tok else None,
            "tokens",
            "run" if kv_tok else "default",
            "KV sizing line" if kv_tok else "no KV sizing line",
        )
    del eager_size, eager_t
    share = cols.usage_share(SATURATED_USAGE)
    if share is not None:
        sat = Param(
            share, "share of steps", "run", f"steps logged with KV usage >= {SATURATED_USAGE:.0%}"
        )
    else:
        sat = Param(
            0.0, "share of steps", "default", "no KV usage in the lines: pool assumed not full"
        )
    life = Param(
        lifetime_h or DEFAULT_LIFETIME_H,
        "h",
        "default",
        "capture is paid once per server start; one restart a day assumed"
        if lifetime_h is None
        else "given by the caller",
    )
    hours = sum(e.traffic.span_h() for e in evidence)
    sized = [every_row(s >= 1) for s in cols.size]
    steps = masked_sum(cols.steps, sized)
    busy_h = cols.busy_s(sized, float(base.value or 0.0), float(slot.value or 0.0)) / 3600
    if hours >= busy_h > 0:
        sph = Param(
            steps / hours, "steps/h", "run", f"{steps:,.0f} steps over {hours:.3g} h of logs"
        )
    else:  # no span, or shorter than the steps themselves take (clock gaps, excerpts)
        sph = Param(
            steps / busy_h if busy_h > 0 else 0.0,
            "steps/h",
            "default",
            f"the logs span {hours * 3600:.3g} s, less than the {busy_h * 3600:.3g} s the steps "
            "take: back-to-back steps assumed (fully busy)",
        )
    return CostParameters(
        base,
        slot,
        eager,
        cap_s,
        cap_m,
        per_gib,
        pool,
        sat,
        life,
        sph,
        measured_sizes=tuple(sorted(set(cap.sizes))),
        measured_time_s=cap.time_s,
        measured_mem_gib=cap.mem_gib if cap.mem_gib is not None and cap.mem_gib > 0 else None,
    )


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
    if len(ss) and len(xs):
        idx = np.searchsorted(ss, xs, side="left")
        served = idx < len(ss)
        bucket = np.where(served, ss[np.minimum(idx, len(ss) - 1)], 0)
        if not padding:
            served &= bucket == xs
    else:
        served = np.zeros(len(xs), dtype=bool)
        bucket = np.zeros(len(xs), dtype=np.int64)
    pad_slots = float(np.sum((bucket - xs)[served] * ws[served]))
    slots = float(np.sum(bucket[served] * ws[served]))
    cov = float(ws[served].sum() / total_w) if total_w > 0 else 0.0
    slot_s = float(params.slot_step_s.value or 0.0)
    padded = pad_slots * slot_s * per_h
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
        coverage=cov,
        padding_waste=pad_slots / slots if slots else None,
        capture_gib=cap_gib,
        capture_time_s=cap_t,
        kv_tokens_lost=lost,
        padded_s_h=padded,
        eager_s_h=eager,
        capture_s_h=capture,
        memory_s_h=memory,
    )
