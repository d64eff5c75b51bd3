"""The names rule conditions can use: one flat namespace of numbers, flags and words per run.

Derived from :class:`RunFacts` only (the record, the classified batches, the event
tables, attached snapshots). ``None`` means "the logs do not show it"; conditions treat
comparisons with ``None`` as false.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from diag.advise.bucket_sets import Advice
from diag.engines import SGLANG, VLLM, sglang, spec_for, vllm
from diag.facts.record import RunFacts, as_bool, captured_size_count, sizing
from diag.model import Snapshot

# graph_disabled reasons that mean "the model/backend cannot run graphs", not "user turned them off"
MODEL_LIMIT_REASONS = {
    "torch_native_attention",
    "flex_attention",
    "deepep",
    "deepep_normal",
    "double_sparsity",
    "bitsandbytes",
    "rocm_unsupported",
    "dispatch_keys_uninitialized",
    "dp_attention",
}
USER_OFF_REASONS = {"enforce_eager", "mode_none", "skipping_capture", "tensor_dump"}


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 4)


def run_metrics(
    facts: RunFacts, snapshots: Sequence[Snapshot] | None = None, advice: Advice | None = None
) -> dict[str, Any]:
    rec = facts.record
    t = facts.tables
    cfg = facts.config
    batches = facts.batches
    counts = rec["batches"]
    decided = counts["graph"] + counts["eager"]
    shape = rec["decode_batch_shape"] or {}
    eager = batches[batches["verdict"] == "eager"] if not batches.empty else batches

    def eager_reason(*reasons: str) -> int:
        if eager.empty:
            return 0
        return int(round(eager[eager["reason"].isin(reasons)]["weight"].sum()))

    sizes = rec["graph_capture_sizes"] or list(facts.window.sizes or [])
    kv_gib = rec["kv_cache_gib"]
    est = sizing(t, "graph_mem_est_gib")
    actual = sizing(t, "graph_pool_actual_gib") or sizing(t, "graph_mem_actual_gib")
    advisories = t["advisory"]
    graph_mem_advisory = bool(
        not advisories.empty
        and advisories["topic"]
        .isin(["graph_memory_profiling", "graph_memory_warning", "capping_capture_sizes"])
        .any()
    )
    retract = t["retract"]
    stats = t["stats"]
    decode = t["decode_batch"]
    kv_peak = None
    if not decode.empty and decode["token_usage"].notna().any():
        kv_peak = float(decode["token_usage"].max())
    if not stats.empty and stats["kv_usage"].notna().any():
        kv_peak = max(kv_peak or 0.0, float(stats["kv_usage"].max()) / 100.0)
    disabled = t["graph_disabled"]
    modes = t["graph_mode"]
    snap_gib = facts.snapshot_graph_pool_gib  # one fact, set where snapshots join runs
    speed = _per_request_speed(batches)
    ceiling = rec["cuda_graph_max_bs"] or (max(sizes) if sizes else None)
    torch_compile = as_bool(cfg.get("enable_torch_compile"))
    return {
        "backend": facts.backend,
        "engine_version": facts.engine_version,
        "graph_mode": rec["graph_mode"],
        "graph_on": rec["graph_mode"] == "enabled",
        "cudagraph_mode": rec["cudagraph_mode"],
        "prefill_node": rec["prefill_node"],
        "capture_failed": rec["capture_error"] is not None,
        "capture_error_class": (rec["capture_error"] or {}).get("class"),
        "capture_error_message": (rec["capture_error"] or {}).get("message"),
        "capture_time_s": rec["capture_time_s"],
        "capture_mem_gib": rec["capture_mem_gib"],
        "n_buckets": len(rec["graph_capture_sizes"] or [])
        or captured_size_count(t)
        or len(sizes)
        or None,
        "ceiling": ceiling,
        "max_running_requests": rec["max_running_requests"],
        "batches_graph": counts["graph"],
        "batches_eager": counts["eager"],
        "batches_unknown": counts["unknown"],
        "batches_decided": decided,
        "batches_source": counts["source"],
        "captured_share": rec["captured_share"],
        "eager_share": _ratio(counts["eager"], decided),
        "eager_above_ceiling": eager_reason("above_ceiling"),
        "eager_unpadded": eager_reason("unpadded_gap"),
        "eager_engine_reported": eager_reason("engine_reported_eager", "logged_eager"),
        "eager_cause": max(
            (
                ("above_ceiling", eager_reason("above_ceiling")),
                ("unpadded_gap", eager_reason("unpadded_gap")),
                ("engine_reported_eager", eager_reason("engine_reported_eager")),
                ("logged_eager", eager_reason("logged_eager")),
            ),
            key=lambda kv: kv[1],
        )[0]
        if not eager.empty
        else None,
        "eager_breakdown": ", ".join(
            f"{n} {label}"
            for n, label in (
                (eager_reason("above_ceiling"), "above the ceiling"),
                (eager_reason("unpadded_gap"), "between captured sizes with padding off"),
                (
                    eager_reason("engine_reported_eager"),
                    "flagged eager by the engine inside the window",
                ),
                (
                    eager_reason("logged_eager"),
                    "flagged eager by the engine, window not in the log",
                ),
            )
            if n
        )
        or "no reason recorded",
        "eager_graphs_disabled": eager_reason("graphs_disabled"),
        "padding_waste": rec["padding_waste"],
        "observed_p50": shape.get("p50"),
        "observed_p99": shape.get("p99"),
        "observed_max": shape.get("max"),
        "observed_count": shape.get("count", 0),
        "oversize_ratio": _ratio(ceiling, shape.get("p99")) if shape else None,
        "kv_cache_gib": kv_gib,
        "kv_tokens": rec["kv_tokens"],
        "capture_mem_share": _ratio(rec["capture_mem_gib"], kv_gib),
        "graph_mem_est_gib": est,
        "graph_mem_actual_gib": actual,
        "graph_mem_est_share": _ratio(est, (kv_gib or 0) + (est or 0))
        if est is not None and kv_gib
        else None,
        "graph_mem_advisory": graph_mem_advisory,
        "snapshot_graph_gib": snap_gib,
        "snapshot_vs_log_gib": (
            round(snap_gib - rec["capture_mem_gib"], 3)
            if snap_gib is not None and rec["capture_mem_gib"] is not None
            else None
        ),
        "retractions": int(retract["count"].fillna(1).sum()) if not retract.empty else 0,
        "preemptions": int(stats["preemptions"].fillna(0).sum()) if not stats.empty else 0,
        "kv_peak_usage": kv_peak,
        "queue_max": _max(decode, "queue") if not decode.empty else _max(stats, "waiting"),
        "torch_compile": torch_compile,
        "torch_compile_max_bs": cfg.get("torch_compile_max_bs"),
        "downgrades": int((modes["downgraded"] == True).sum()) if not modes.empty else 0,  # noqa: E712
        "model_disables": int(disabled["reason"].isin(MODEL_LIMIT_REASONS).sum())
        if not disabled.empty
        else 0,
        "user_disables": int(disabled["reason"].isin(USER_OFF_REASONS).sum())
        if not disabled.empty
        else 0,
        "speed_in": speed[0],
        "speed_out": speed[1],
        "speed_samples_in": speed[2],
        "speed_samples_out": speed[3],
        "slowdown": (
            round(1 - speed[1] / speed[0], 4) if speed[0] and speed[1] is not None else None
        ),
        "window_note": (
            "; capture is not in this log, so graphs may also be off entirely "
            "(check --disable-cuda-graph / --enforce-eager)"
            if rec["graph_mode"] == "unknown"
            else ""
        ),
        **_flags(facts, shape, advice),
    }


def _vllm_raise_remedy(
    facts: RunFacts, advice: Advice | None, flags: str, peak: float | None
) -> str:
    """The vLLM remedy for steps above the ceiling, in the version's own keys: the advice's
    set as the flags to paste (before 0.11.1 the ceiling is not a user field, the list is)."""
    if advice is not None and flags:
        return (
            f"Capture the advised set up to {advice.ceiling} {advice.unit}: {flags} "
            "(`graphdiag recommend` shows the frontier)."
        )
    return "Raise the capture ceiling to cover the observed decode steps (cudagraph_capture_sizes)."


def _round_up(n: float | None, step: int) -> int | None:
    if n is None:
        return None
    return int(-(-int(n) // step) * step)


def _flags(facts: RunFacts, shape: dict[str, Any], advice: Advice | None) -> dict[str, Any]:
    """The engine's own flag spellings for this run's version, and suggested values: the
    ceiling and set of the run's advice (the one source ``recommend`` prints too), the
    largest batch rounded up only where there is no advice."""
    cfg = facts.config
    vllm_version = facts.engine_version if spec_for(facts.backend) is VLLM else None
    p99 = shape.get("p99") if shape else None
    ceiling = facts.record["cuda_graph_max_bs"]
    peak = shape.get("max") if shape else None
    small = min(_round_up(p99, 8) or 0, ceiling) if p99 and ceiling else _round_up(p99, 8)
    spec = spec_for(facts.backend)
    flags = ""
    if advice is not None and spec is not None:
        flags = spec.bucket_flags(facts.engine_version, cfg, advice.recommended.sizes, [])
    return {
        "max_bs_flag": sglang.max_bs_flag(cfg),
        "disable_flag": SGLANG.graphs_off_flag(None, cfg),
        "vllm_ceiling_key": vllm.CEILING_KEY.at(vllm_version),
        "suggest_ceiling": advice.ceiling if advice is not None else _round_up(peak, 8),
        # never suggest "lowering" the ceiling to a value above it
        "suggest_small_ceiling": (
            min(advice.ceiling, ceiling) if advice is not None and ceiling else small
        ),
        "advice_ceiling": advice.ceiling if advice is not None else None,
        "advice_unit": advice.unit if advice is not None else None,
        "advice_sizes": list(advice.recommended.sizes) if advice is not None else None,
        "advice_flags": flags,
        "vllm_raise_remedy": _vllm_raise_remedy(facts, advice, flags, peak),
        "advice_note": (
            f"; recommended ceiling {advice.ceiling} {advice.unit} (`graphdiag recommend`)"
            if advice is not None
            else ""
        ),
    }


def _max(frame: pd.DataFrame, col: str) -> float | None:
    if frame.empty or col not in frame or frame[col].dropna().empty:
        return None
    return float(frame[col].max())


def _per_request_speed(batches: pd.DataFrame) -> tuple[float | None, float | None, int, int]:
    """Decode tokens/s per running request, in the window (graph) vs out of it (eager)."""
    if batches.empty:
        return None, None, 0, 0
    b = batches[batches["gen_throughput"].notna() & (batches["batch_size"].fillna(0) > 0)]
    b = b[b["gen_throughput"].astype(float) > 0]
    if b.empty:
        return None, None, 0, 0
    per = b["gen_throughput"].astype(float) / b["batch_size"].astype(float)
    g = per[b["verdict"] == "graph"]
    e = per[b["verdict"] == "eager"]
    med = lambda s: round(float(s.median()), 3) if len(s) else None  # noqa: E731
    return med(g), med(e), int(len(g)), int(len(e))
