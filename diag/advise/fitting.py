"""The cost model's parameters, fitted from the run's own numbers where it has them.

Step time against size from the graph-replayed lines (a slope only where it stands above its error), the eager penalty only
where eager and graph steps share a size, capture per graph from the capture line, KV tokens
per GiB from the KV sizing line; documented defaults elsewhere, each saying why."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from diag.advise.cost_model import (
    DEFAULT_CAPTURE_GIB_PER_GRAPH,
    DEFAULT_CAPTURE_S_PER_GRAPH,
    DEFAULT_EAGER_PENALTY_S,
    DEFAULT_SLOT_STEP_S,
    DEFAULT_STARTS_PER_DAY,
    SATURATED_USAGE,
    CostParameters,
    Param,
)
from diag.advise.grouping import (
    RunColumns,
    every_row,
    group_medians,
    masked_sum,
    unique_inverse,
)
from diag.advise.traffic import (
    CaptureMeasurement,
    Engine,
    RunEvidence,
    Traffic,
    capture_unit,
    engine_size,
)
from diag.facts.steps import DEFAULT_BASE_STEP_S

__all__ = ["LineFit", "fit_parameters", "starts_param"]


MIN_FIT_SIZES = 4  # a slope through fewer distinct step sizes is not a measurement
MIN_SLOPE_T = 2.0  # a slope within two standard errors of zero cannot be told from zero
# A decode step reads every weight once whatever its batch and spends ~2 FLOPs per weight per
# token, so its time doubles only near the GPU's FLOP-to-byte ratio in tokens (bf16: A100
# 312 TFLOP/s / 2.0 TB/s = 156, H100 SXM 989 / 3.35 = 295, L4 121 / 0.3 = 403): a fitted line
# on which the step doubles within 16 tokens is not what a padded slot costs (step times that
# grow with the running count: intervals the steps did not fill, prefill riding along)
MIN_DOUBLING_TOKENS = 16.0


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


def _doubling(fit: LineFit, per_slot: int) -> str | None:
    """'6.2 tokens' where the fitted step time doubles within fewer than
    :data:`MIN_DOUBLING_TOKENS` tokens (an implausible padding cost), else None."""
    if fit.b <= 0:
        return None
    tokens = fit.a / fit.b * per_slot
    return f"{tokens:.3g} tokens" if tokens < MIN_DOUBLING_TOKENS else None


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
    starts_per_day: float | None = None,
) -> CostParameters:
    """Parameters from the runs' own numbers where they have them, documented defaults elsewhere.

    Step time from graph-replayed lines (``graph`` 1, or -1 when the line does not say),
    eager penalty where eager and graph steps share a size (:func:`_eager_penalty`); capture
    per graph from the main run's (most steps) measurement; KV tokens per GiB from its KV line."""
    cols = _columns([ev.traffic for ev in evidence], engine, spec_tokens)
    unit = capture_unit(engine).rstrip("s")
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
    implausible = fit is not None and fit.slope_known() and _doubling(fit, per_slot) is not None
    if fit is not None and fit.slope_known() and not implausible:
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
        elif implausible:
            why_not = (
                f"the fitted slope {fit.b * 1e3:.3g} ms per {unit} over {fit.sizes} sizes is not a "
                f"padding cost: on it the step time ({fit.a * 1e3:.3g} ms at no batch) would "
                f"double within {_doubling(fit, per_slot)}, where a decode step doubles only near "
                f"the GPU's FLOP-to-byte ratio (hundreds of tokens)"
            )
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

    eager_size, eager_t = cols.timed(graph=False)
    eager = _eager_penalty(fit_size, fit_t, eager_size, eager_t, unit)
    del fit_size, fit_t
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
    starts = starts_param(starts_per_day)
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
        starts,
        sph,
        measured_sizes=tuple(sorted(set(cap.sizes))),
        measured_time_s=cap.time_s,
        measured_mem_gib=cap.mem_gib if cap.mem_gib is not None and cap.mem_gib > 0 else None,
    )


def starts_param(starts_per_day: float | None) -> Param:
    """The start rate: capture is paid on every start, and no log says how often the server
    starts (restarts, autoscaling, rolling deploys), so it is the user's input."""
    if starts_per_day is None:
        return Param(
            DEFAULT_STARTS_PER_DAY,
            "starts/day",
            "default",
            "capture is paid on every server start; one start a day assumed "
            "(--starts-per-day gives yours: autoscaling, rolling deploys, restarts)",
        )
    return Param(float(starts_per_day), "starts/day", "given", "given with --starts-per-day")


EAGER_PRIOR_WHY = (
    "5 ms, the gap in the SGLang formats example of PR 13023 (46 requests eager 31.8 ms/step vs "
    "28 requests graph 25.8 ms/step, +0.7 ms for size); it is per-kernel launch cost times "
    "kernels per step, so it grows with model depth"
)


def _eager_penalty(
    g_size: np.ndarray, g_t: np.ndarray, e_size: np.ndarray, e_t: np.ndarray, unit: str
) -> Param:
    """Eager minus graph step time, measured only at sizes where both were logged: per shared
    size the median eager step time minus the median graph step time, then their median
    weighted by the lines behind the smaller side. A line fitted on the graph sizes is never
    carried to eager sizes outside them (issue 24: sizes 1-8 fitted, 22-72 eager, penalty 0);
    without a shared size the penalty is a documented prior, and says so."""
    if len(e_t) == 0:
        return Param(
            DEFAULT_EAGER_PENALTY_S,
            "s/step",
            "default",
            f"no eager line with a step time: prior {EAGER_PRIOR_WHY}",
        )
    g_u, g_inv = unique_inverse(g_size) if len(g_t) else (np.zeros(0, np.int64), None)
    e_u, e_inv = unique_inverse(e_size)
    shared = np.intersect1d(g_u, e_u)
    if len(shared) == 0 or g_inv is None:
        g_range = f"{int(g_u.min())}-{int(g_u.max())}" if len(g_u) else "none"
        return Param(
            DEFAULT_EAGER_PENALTY_S,
            "s/step",
            "default",
            f"no {unit} count with both graph and eager step times (graph at {g_range}, eager at "
            f"{int(e_u.min())}-{int(e_u.max())}): nothing measured is extrapolated; prior "
            f"{EAGER_PRIOR_WHY}",
        )
    g_med = group_medians(g_inv, g_t, len(g_u))
    e_med = group_medians(e_inv, e_t, len(e_u))
    g_n = np.bincount(g_inv, minlength=len(g_u))
    e_n = np.bincount(e_inv, minlength=len(e_u))
    gi = np.searchsorted(g_u, shared)
    ei = np.searchsorted(e_u, shared)
    diff = e_med[ei] - g_med[gi]
    w = np.minimum(g_n[gi], e_n[ei]).astype(float)
    order = np.argsort(diff, kind="stable")
    cum = np.cumsum(w[order])
    med = float(diff[order][int(np.searchsorted(cum, cum[-1] / 2))])
    return Param(
        max(0.0, med),
        "s/step",
        "run",
        f"median of eager minus graph median step time at the {len(shared)} {unit} count(s) "
        f"logged both ways ({int(w.sum())} line pairs)",
    )
