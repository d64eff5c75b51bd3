"""The typed numbers rules read: one :class:`RunMetrics` per run, computed once from facts.

Derived from :class:`RunFacts` only (the record, the classified batches, the event tables,
attached snapshots) and the run's bucket :class:`Advice` (computed from facts before the
rules run; no rule computes a ceiling of its own). ``None`` means "the logs do not show
it": a rule tests for it in plain Python and either stays silent or says what is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from diag.engines import spec_for
from diag.engines.spec import EngineConfig, EngineSpec
from diag.facts import classify as cls
from diag.facts.advisories import Advisory
from diag.facts.config_eager import ConfigEager
from diag.facts.graphs import total
from diag.facts.record import RunFacts
from diag.facts.request_errors import RequestErrors
from diag.facts.signals import line_signals
from diag.facts.verdict import EngineError
from diag.model import Snapshot

if TYPE_CHECKING:
    from diag.advise.bucket_sets import Advice

EagerCause = Literal[
    "above_ceiling", "unpadded_gap", "engine_reported_eager", "logged_eager", "counted_eager"
]
EAGER_LABELS: dict[str, str] = {
    "above_ceiling": "above the ceiling",
    "unpadded_gap": "between captured sizes with padding off",
    "engine_reported_eager": "flagged eager by the engine inside the window",
    "logged_eager": "flagged eager by the engine, window not in the log",
    "counted_eager": "counted eager by the engine's /metrics counters, batch sizes not known",
}


@dataclass(frozen=True)
class CaptureFigures:
    """The run's capture: the error and how it was placed, each runner's time and memory,
    the sizes, the ranks stalled."""

    capture_error_class: str | None
    capture_error_message: str | None
    capture_time_s: float | None  # decode graphs only
    capture_mem_gib: float | None  # decode graphs only
    piecewise_capture_time_s: float | None
    piecewise_capture_mem_gib: float | None
    n_buckets: int | None
    # the engine's own default set for this version and config: a failure with the default
    # set is not the user's set's fault
    default_bucket_count: int | None
    # the cause the capture error's innermost frames name (engines/frame_causes.py)
    capture_error_frame_cause: str | None = None
    # how the capture error was attributed: (confidence, deciding evidence, overruled evidence)
    capture_error_evidence: tuple[str, str, str | None] | None = None
    engine_solutions: tuple[str, ...] = ()  # the engine's own printed "Possible solutions"
    draft_capture_time_s: float | None = None
    capture_sizes: tuple[int, ...] = ()  # the run's window (logged, configured or default)
    # ranks stuck in capture, each in one sentence (diag.facts.stalls)
    capture_stalls: tuple[str, ...] = ()
    # (capture seconds, start-up seconds to the first request) from the timeline
    startup_capture: tuple[float, float] | None = None


@dataclass(frozen=True)
class WindowFigures:
    """The decode window and its batches: the ceiling, graph / eager counts and causes, padding,
    sizes seen, speed in and out of the window."""

    ceiling: int | None  # the current capture ceiling (engine unit)
    max_running_requests: int | None
    batches_graph: int
    batches_eager: int
    batches_decided: int
    batches_source: str
    eager_by_cause: dict[str, int]
    padding_waste: float | None
    mean_padded_per_step: float | None  # padded slots per graph-replayed step
    observed_p99: float | None
    observed_max: float | None
    observed_count: int
    token_window: bool  # capture sizes count tokens and serve mixed steps too (vLLM)
    speed_in: float | None
    speed_out: float | None
    speed_samples_in: int
    speed_samples_out: int
    # logged vs inferred graph/eager, with counts (facts/agreement.py; GD182)
    agreement: dict[str, Any] | None = None

    @property
    def eager_share(self) -> float | None:
        return self.batches_eager / self.batches_decided if self.batches_decided else None

    @property
    def eager_in_window_causes(self) -> int:
        return sum(self.eager_by_cause.values())

    @property
    def eager_cause(self) -> str | None:
        counted = [(n, c) for c, n in self.eager_by_cause.items() if n]
        return max(counted)[1] if counted else None

    @property
    def eager_breakdown(self) -> str:
        return ", ".join(f"{n} {EAGER_LABELS[c]}" for c, n in self.eager_by_cause.items() if n) or (
            "no reason recorded"
        )

    @property
    def slowdown(self) -> float | None:
        if not self.speed_in or self.speed_out is None:
            return None
        return 1 - self.speed_out / self.speed_in


@dataclass(frozen=True)
class MemoryFigures:
    """The KV pool against graph memory: sizes, estimates, the engine's advisories, pressure."""

    kv_cache_gib: float | None
    capture_mem_share: float | None  # capture memory over the KV pool (the record's figure)
    kv_tokens: int | None
    kv_tokens_source: str | None
    graph_mem_est_gib: float | None
    memory_advisories: tuple[Advisory, ...]
    snapshot_graph_gib: float | None
    retractions: int
    preemptions: int
    kv_peak_usage: float | None
    memory_pressure: bool = False  # an OOM anywhere in the run, retractions or preemptions

    @property
    def graph_mem_est_share(self) -> float | None:
        if self.graph_mem_est_gib is None or not self.kv_cache_gib:
            return None
        return self.graph_mem_est_gib / (self.kv_cache_gib + self.graph_mem_est_gib)


@dataclass(frozen=True)
class Settings:
    """What is set and already in effect: compile, parallelism, memory knobs, eager choices and
    downgrades."""

    torch_compile: bool
    torch_compile_max_bs: int | None
    tp_size: int | None
    mem_fraction_static: float | None
    custom_all_reduce_off: str | None  # why the log says it is off, None if not
    padding_disabled: bool
    dp_attention: bool
    kv_cache_memory_bytes_set: bool
    nccl_load_failure: str | None  # the log line naming the NCCL library that failed to load
    user_eager: str | None  # the user's own eager setting, spelled as the user set it
    engine_downgrades: tuple[str, ...]  # engine-chosen mode changes / disables (not the user's)
    refused_by: str  # the attention backend that refused the mode ('' when none said so)
    # settings that sent batches eager (diag.facts.config_eager)
    config_eager: tuple[ConfigEager, ...] = ()
    profile_cuda_graph: bool = False
    attention_backend: str | None = None


@dataclass(frozen=True)
class EngineFlags:
    """The engine's own spellings for this version, and the run's bucket advice with the flags that
    capture it."""

    # the engine's own spellings for this version (diag/engines specs)
    ceiling_flag: str = ""  # sets the ceiling, no value
    graphs_off_flag: str = ""
    concurrency_flag: str = ""
    # the run's bucket advice (issue 14), None when the run has no decode traffic, and the
    # flags that capture exactly its recommended set / ceiling
    advice: Advice | None = None
    advised_flags: str = ""
    advised_ceiling_flag: str = ""


@dataclass(frozen=True)
class ServingErrors:
    """Errors outside capture: an engine error (GD105) and single requests' errors (GD106)."""

    # an engine error outside capture (GD105) and what the log shows around failures
    engine_error: EngineError | None = None
    request_errors: RequestErrors | None = None  # single requests' errors while serving (GD106)


@dataclass(frozen=True)
class TraceFigures:
    """Profiler traces joined to the run (diag.facts.trace_join): batches matched, disagreements
    each way, where the log's verdicts came from, graph launches no GPU op carries."""

    # profiler traces joined to the run (diag.facts.trace_join): decode batches matched to a
    # profiled step, those where the log says graph and the trace eager and the reverse,
    # where the log's verdicts came from, and graph launches no GPU op carries
    trace_matched: int = 0
    trace_log_graph_trace_eager: int = 0
    trace_log_eager_trace_graph: int = 0
    trace_batches_source: str = "none"
    trace_graph_launches: int = 0
    trace_launches_without_ops: int = 0
    trace_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunMetrics:
    """Everything a rule condition, message or remedy reads about one run, by concern:
    the run's engine and graph mode here, then one typed group per concern (each rule
    declares the fields it reads: ``Rule.reads``)."""

    backend: str
    engine_version: str | None
    graph_mode: str  # enabled / disabled / unknown
    cudagraph_mode: str | None
    prefill_node: bool | None
    capture: CaptureFigures
    window: WindowFigures
    memory: MemoryFigures
    settings: Settings
    flags: EngineFlags
    errors: ServingErrors
    trace: TraceFigures

    @property
    def sizing(self) -> Advice | None:
        """The advice where it changes the bucket set; None where it keeps the current set or
        withholds sizing (too little evidence): then no rule quotes a set or a ceiling."""
        a = self.flags.advice
        return a if a is not None and a.changes else None

    @property
    def graph_on(self) -> bool:
        return self.graph_mode == "enabled"

    @property
    def capture_failed(self) -> bool:
        return self.capture.capture_error_class is not None

    @property
    def largest_graph_gib(self) -> float | None:
        got = self.largest_graph
        return got[0] if got is not None else None

    @property
    def largest_graph(self) -> tuple[float, str] | None:
        """The largest graph-memory figure the log shows and what it is (measured at capture,
        the engine's estimate, or the snapshot's graph pools), so that two figures of one
        fact are never printed unnamed."""
        known = [
            (v, what)
            for v, what in (
                (self.capture.capture_mem_gib, "measured at capture"),
                (self.memory.graph_mem_est_gib, "the engine's estimate"),
                (self.memory.snapshot_graph_gib, "the snapshot's graph pools"),
            )
            if v is not None
        ]
        return max(known, key=lambda x: x[0]) if known else None


def _count(frame: pd.DataFrame, col: str, values: frozenset[str]) -> int:
    return int(frame[col].isin(values).sum()) if not frame.empty else 0


def _max(frame: pd.DataFrame, col: str) -> float | None:
    if frame.empty or col not in frame or frame[col].dropna().empty:
        return None
    return float(frame[col].max())


def _default_count(
    spec: EngineSpec | None, version: str | None, cfg: EngineConfig, ceiling: int | None
) -> int | None:
    """How many sizes the engine captures by default for this version and config."""
    if spec is None:
        return None
    try:
        return len(spec.default_sizes(version, cfg.raw, ceiling)) or None
    except (TypeError, ValueError):
        return None


def run_metrics(
    facts: RunFacts,
    snapshots: Sequence[Snapshot] | None = None,
    advice: Advice | None = None,
) -> RunMetrics:
    rec = facts.record
    cfg = facts.config
    batches = facts.batches
    counts = rec.batches
    shape = rec.decode_batch_shape
    eager_by_reason = _eager_by_reason(batches)
    if counts.source == "metrics":  # no batch lines: the counters say how many, not why
        eager_by_reason = {"counted_eager": float(counts.eager)}

    sizes = rec.graph_capture_sizes or facts.window.sizes or ()
    lines = facts.signals or line_signals(facts)  # (read at build time, else now)
    snap_gib = facts.snapshot_graph_pool_gib  # one fact, set where snapshots join runs
    speed = _per_request_speed(batches)
    tp = cfg.tp_size
    spec = spec_for(facts.backend)
    prefill_time, prefill_mem = total(rec.graphs, model="target", runner="prefill")
    return RunMetrics(
        backend=facts.backend,
        engine_version=facts.engine_version,
        graph_mode=rec.graph_mode,
        cudagraph_mode=rec.cudagraph_mode,
        prefill_node=rec.prefill_node,
        capture=CaptureFigures(
            capture_error_class=rec.capture_error.error_class if rec.capture_error else None,
            capture_error_message=rec.capture_error.message if rec.capture_error else None,
            capture_error_frame_cause=lines.capture_error_frame_cause,
            capture_error_evidence=(
                rec.capture_error.confidence,
                rec.capture_error.evidence,
                rec.capture_error.conflict,
            )
            if rec.capture_error
            else None,
            engine_solutions=lines.engine_solutions,
            capture_time_s=rec.capture_time_s,
            capture_mem_gib=rec.capture_mem_gib,
            piecewise_capture_time_s=prefill_time,
            piecewise_capture_mem_gib=prefill_mem,
            draft_capture_time_s=total(rec.graphs, model="draft")[0],
            n_buckets=len(rec.graph_capture_sizes or ())
            or lines.captured_size_count
            or len(sizes)
            or None,
            default_bucket_count=_default_count(
                spec, facts.engine_version, cfg, rec.cuda_graph_max_bs
            ),
            capture_sizes=tuple(sizes),
            capture_stalls=tuple(s.sentence() for s in facts.stalls),
            startup_capture=facts.startup_capture,
        ),
        window=WindowFigures(
            ceiling=facts.ceiling,
            max_running_requests=rec.max_running_requests,
            batches_graph=counts.graph,
            batches_eager=counts.eager,
            batches_decided=counts.decided,
            batches_source=counts.source,
            eager_by_cause={c: int(round(eager_by_reason.get(c, 0.0))) for c in EAGER_LABELS},
            padding_waste=rec.padding_waste,
            mean_padded_per_step=_mean_padded(batches),
            observed_p99=shape.p99 if shape else None,
            observed_max=shape.max if shape else None,
            observed_count=shape.count if shape else 0,
            token_window=spec is not None and spec.size_unit == "tokens",
            agreement=facts.agreement,
            speed_in=speed[0],
            speed_out=speed[1],
            speed_samples_in=speed[2],
            speed_samples_out=speed[3],
        ),
        memory=MemoryFigures(
            kv_cache_gib=rec.kv_cache_gib,
            capture_mem_share=rec.capture_mem_share,
            kv_tokens=rec.kv_tokens,
            kv_tokens_source=facts.kv_tokens_source,
            graph_mem_est_gib=lines.graph_mem_est_gib,
            memory_advisories=lines.memory_advisories,
            snapshot_graph_gib=snap_gib,
            retractions=lines.retractions,
            preemptions=lines.preemptions,
            kv_peak_usage=lines.kv_peak_usage,
            memory_pressure=lines.memory_pressure,
        ),
        settings=Settings(
            torch_compile=cfg.torch_compile,
            torch_compile_max_bs=cfg.torch_compile_max_bs,
            tp_size=tp,
            mem_fraction_static=cfg.mem_fraction_static,
            custom_all_reduce_off="disable_custom_all_reduce=True in the config echo"
            if cfg.custom_all_reduce_off
            else "the log says custom all-reduce is disabled"
            if "custom_all_reduce_disabled" in lines.advisory_topics
            else "tensor parallel size 1 never uses custom all-reduce"
            if tp == 1
            else None,
            padding_disabled=not cfg.padding,
            dp_attention=cfg.dp_attention,
            kv_cache_memory_bytes_set=cfg.kv_cache_memory_bytes_set,
            nccl_load_failure=lines.nccl_load_failure,
            user_eager=lines.user_eager,
            engine_downgrades=lines.engine_downgrades,
            refused_by=lines.refused_by,
            config_eager=facts.config_eager,
            profile_cuda_graph=cfg.profile_cuda_graph,
            attention_backend=rec.resolved_backend,
        ),
        flags=EngineFlags(
            ceiling_flag=spec.ceiling_flag(facts.engine_version, cfg.raw, None) if spec else "",
            graphs_off_flag=spec.graphs_off_flag(facts.engine_version, cfg.raw) if spec else "",
            concurrency_flag=spec.concurrency_flag if spec else "",
            advice=advice,
            advised_flags=spec.bucket_flags(
                facts.engine_version, cfg.raw, advice.recommended.sizes, []
            )
            if spec and advice and advice.changes
            else "",
            advised_ceiling_flag=spec.ceiling_flag(facts.engine_version, cfg.raw, advice.ceiling)
            if spec and advice and advice.changes
            else "",
        ),
        errors=ServingErrors(
            engine_error=facts.state.engine_error,
            request_errors=facts.state.request_errors,
        ),
        trace=_trace_figures(facts),
    )


def _trace_figures(facts: RunFacts) -> TraceFigures:
    check = facts.trace_check
    if check is None:
        return TraceFigures()
    m = check.matches
    bad = check.disagree
    logged = set(bad["logged"]) if not bad.empty else set(m["logged"]) if not m.empty else set()
    return TraceFigures(
        trace_matched=len(m),
        trace_log_graph_trace_eager=int((bad["log_verdict"] == "graph").sum())
        if not bad.empty
        else 0,
        trace_log_eager_trace_graph=int((bad["log_verdict"] == "eager").sum())
        if not bad.empty
        else 0,
        trace_batches_source="mixed"
        if len(logged) > 1
        else ("logged" if True in logged else "inferred" if logged else "none"),
        trace_graph_launches=check.graph_launches,
        trace_launches_without_ops=check.graph_launches_without_ops,
        trace_paths=tuple(check.traces),
    )


def _eager_by_reason(batches: pd.DataFrame) -> dict[str, float]:
    """Eager steps (weights) per reason, from the code columns (weights are whole step
    counts, so the sums are exact in any order)."""
    if batches.empty:
        return {}
    eager = cls.verdict_codes(batches) == cls.VERDICTS.index("eager")
    weight = batches["weight"].to_numpy(dtype=float)[eager]
    col = batches["reason"]
    if isinstance(col.dtype, pd.CategoricalDtype):  # (its codes: no filtered copy, no hashing)
        cat = col.array
        codes = np.asarray(cat.codes)[eager]
        known = codes >= 0
        seen, first = np.unique(codes[known], return_index=True)
        sums = np.bincount(codes[known], weights=weight[known], minlength=len(cat.categories))
        # in order of first appearance, as pd.factorize gives them
        return {str(cat.categories[c]): float(sums[c]) for c in seen[np.argsort(first)]}
    codes, names = pd.factorize(col[eager], use_na_sentinel=True)
    sums = np.bincount(codes[codes >= 0], weights=weight[codes >= 0], minlength=len(names))
    return {str(n): float(w) for n, w in zip(names, sums, strict=True)}


def _mean_padded(batches: pd.DataFrame) -> float | None:
    """Padded slots per graph-replayed step (step-weighted)."""
    if batches.empty or "padded" not in batches:
        return None
    padded = batches["padded"].to_numpy(dtype=float, na_value=np.nan)
    g = (cls.verdict_codes(batches) == cls.VERDICTS.index("graph")) & ~np.isnan(padded)
    if not g.any():
        return None
    w = batches["weight"].to_numpy(dtype=float)[g]
    return float(np.nansum(padded[g] * w) / max(np.nansum(w), 1e-9))  # (as pandas' sums)


def _per_request_speed(batches: pd.DataFrame) -> tuple[float | None, float | None, int, int]:
    """Decode tokens/s per running request, in the window (graph) vs out of it (eager)."""
    if batches.empty:
        return None, None, 0, 0
    gen = batches["gen_throughput"].to_numpy(dtype=float, na_value=np.nan)
    size = batches["batch_size"].to_numpy(dtype=float, na_value=np.nan)
    keep = (gen > 0) & (size > 0)  # (NaN compares False)
    if not keep.any():
        return None, None, 0, 0
    per = gen[keep] / size[keep]
    verdict = cls.verdict_codes(batches)[keep]
    g = per[verdict == cls.VERDICTS.index("graph")]
    e = per[verdict == cls.VERDICTS.index("eager")]

    def med(s: np.ndarray) -> float | None:
        return round(float(np.median(s)), 3) if len(s) else None

    return med(g), med(e), int(len(g)), int(len(e))
