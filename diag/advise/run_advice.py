"""Facts -> advice, once per server and before the rules run (issue 14: one source of truth).

:func:`advise_runs` turns each run's typed facts into the inputs of
:func:`diag.advise.bucket_sets.advise` (its sampled steps as :class:`Traffic`, its capture and
KV sizing figures, the engine's limits from the engine spec) and prices one frontier per
server. Runs of the same server are pooled and validated across each other: the runs of one
stream (a rotated set, or one instance's restarts) and runs whose config echoes are
identical. So a three-run rotated log gets a set that covers the last run's peak, even
where the set fitted to the earlier runs would not. Each run's :class:`Advice` then carries
its own ``current`` cost (its own set on its own traffic); the frontier, ceiling and
recommended set are the server's.

Rules (GD110/111/112/120), ``recommend``, ``compare`` and the HTML run section quote this
advice; none of them computes a ceiling or a set of its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal, cast

import numpy as np
import pandas as pd

from diag.advise.bucket_sets import (
    DEFAULT_HEADROOM,
    Advice,
    EngineLimits,
    advise,
    traffic_histogram,
)
from diag.advise.cost_model import (
    DEFAULT_BASE_STEP_S,
    CaptureMeasurement,
    Engine,
    RunEvidence,
    SetCost,
    Traffic,
    step_time_from_throughput,
)
from diag.engines import spec_for
from diag.engines.spec import AdviceInputs
from diag.facts.record import RunFacts, is_rank0, snapshot_graph_pool_gib
from diag.model import Snapshot

__all__ = [
    "advise_group",
    "advise_runs",
    "advice_inputs",
    "current_sizes",
    "engine_limits",
    "graph_pool_gib",
    "run_evidence",
    "server_groups",
]

SizesSource = Literal["logged", "inferred", "default"]


# ------------------------------------------------------------------ per-run inputs
def current_sizes(f: RunFacts, engine: str) -> tuple[list[int], SizesSource]:
    """The set the run captured and where it comes from: ``logged``, ``inferred`` or ``default``.

    ``default`` (graphs off, or no window at all) is the engine's default list for the version:
    what "just turn graphs back on" would capture, the natural baseline to beat.
    """
    if f.record.get("graph_capture_sizes"):
        return sorted(int(s) for s in f.record["graph_capture_sizes"]), "logged"
    if f.window.sizes:
        return sorted(f.window.sizes), "inferred" if f.window.sizes_inferred else "logged"
    spec = spec_for(engine)
    if spec is None:
        return [], "default"
    same = f.backend == engine
    return (
        spec.default_sizes(f.engine_version if same else None, f.config if same else {}, None),
        "default",
    )


def graph_pool_gib(f: RunFacts, snapshots: Sequence[Snapshot] | None) -> float | None:
    """The run's snapshot graph-pool total from its facts (``RunFacts.snapshot_graph_pool_gib``);
    snapshots handed in but not joined by ``analyze`` go through the same definition. Pools
    of 0 GiB give nothing to scale capture memory from."""
    gib = f.snapshot_graph_pool_gib
    if gib is None and snapshots:
        gib = snapshot_graph_pool_gib(f.run.id, snapshots)
    return gib if gib else None


def advice_inputs(f: RunFacts) -> AdviceInputs:
    """The config values advice reads, through the engine spec (no engine names here)."""
    spec = spec_for(f.backend)
    max_running = f.record.get("max_running_requests")
    if spec is None:
        return AdviceInputs(max_running=max_running)
    return spec.advice_inputs(f.config, max_running)


def engine_limits(f: RunFacts, engine: str | None = None) -> EngineLimits:
    """What the engine accepts for this run's server: limits from the run's own config when it
    is of that engine, the engine's defaults otherwise."""
    engine = engine or f.backend
    same = f.backend == engine
    inp = advice_inputs(f) if same else AdviceInputs()
    sizes, source = current_sizes(f, engine)
    return EngineLimits(
        engine=cast(Engine, engine),
        version=f.engine_version if same else None,
        current_sizes=tuple(sizes) if source != "default" else (),
        current_source=source,
        default_sizes=tuple(sizes) if source == "default" else (),
        max_running=inp.max_running,
        max_num_batched_tokens=inp.max_num_batched_tokens,
        spec_tokens=inp.spec_tokens,
        speculative_algorithm=inp.speculative_algorithm,
        cudagraph_mode=f.record.get("cudagraph_mode") if same else None,
        dp_attention=inp.dp_attention,
        attn_tp=inp.attn_tp,
        two_batch_overlap=inp.two_batch_overlap,
        padding=inp.padding,
    )


def _num(frame: pd.DataFrame, col: str) -> np.ndarray:
    if col not in frame:
        return np.full(len(frame), np.nan)
    return frame[col].to_numpy(dtype="float64", na_value=np.nan)


def _count(frame: pd.DataFrame, col: str) -> np.ndarray:
    """An integer column as int64, -1 where missing: the frame's own buffer when none is."""
    if col in frame and pd.api.types.is_integer_dtype(frame[col].dtype) and not frame[col].hasnans:
        return frame[col].to_numpy(dtype=np.int64, copy=False)
    return np.nan_to_num(_num(frame, col), nan=-1).astype(np.int64)


def _same(value: object, n: int) -> np.ndarray:
    """One value on every row: a read-only view of zero bytes (SGLang's batch lines hold three
    such columns; a copy would be a row-long array each, held for the whole advice)."""
    return np.broadcast_to(np.asarray(value), (n,))


def _flag(frame: pd.DataFrame, col: str) -> np.ndarray:
    """1 the line says graph, 0 it says eager, -1 it says nothing."""
    return np.where(np.isnan(v := _num(frame, col)), -1, v > 0).astype(np.int8)


def _rank_rows(frame: pd.DataFrame, all_ranks: bool) -> pd.DataFrame:
    if frame.empty or all_ranks:
        return frame
    mask = frame["rank"].map(is_rank0).to_numpy(dtype=bool)
    return frame[mask] if mask.any() and not mask.all() else frame  # (all rank 0: no copy)


def _batch_line_traffic(frame: pd.DataFrame, inp: AdviceInputs) -> dict[str, np.ndarray]:
    """Periodic decode batch lines (SGLang ``Decode batch``): one line per log interval."""
    req = _count(frame, "batch_size")
    acc = _num(frame, "accept_len")
    return {
        "ts": _num(frame, "ts"),
        "requests": req,
        "tokens": _same(-1, len(frame)),
        "steps": _same(float(inp.steps_per_batch_line or 1), len(frame)),
        "step_time_s": step_time_from_throughput(req, _num(frame, "gen_throughput"), acc),
        "graph": _flag(frame, "cuda_graph"),
        "mixed": _same(False, len(frame)),
        "usage": _num(frame, "token_usage"),
    }


def _step_traffic(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per-step dispatch lines (vLLM DEBUG step lines, cudagraph-metrics rows): tokens per step,
    mixed prefill+decode steps included (piecewise graphs serve them too). A graph-replayed
    DEBUG line shows the padded descriptor only: its size is taken as that bucket, an upper
    bound, so no size a step used is ever dropped. Requests and tokens are read as int64 (-1
    missing) straight away, the frame's own buffers where nothing is missing, and columns of
    one value (no step time nor KV usage on these lines, one step a line) are zero-byte views:
    the traffic of 1.5 M steps is held through the whole advice."""
    # -1 no mode (missing or empty), 0 NONE, 1 any other: per distinct value, not per row
    codes, modes = pd.factorize(frame["mode"], use_na_sentinel=True)
    per_mode = [str(m).upper() for m in modes]
    graph = np.array([-1 if m == "" else int(m != "NONE") for m in per_mode] + [-1], np.int8)[codes]
    count = _num(frame, "count")
    steps = np.where(np.isnan(count) | (count <= 0), 1.0, count)
    del count
    n = len(frame)
    # uniform False: a mixed prefill+decode step (NaN: the row does not say, e.g. metrics rows)
    mixed = _num(frame, "uniform") == 0.0
    return {
        "ts": _num(frame, "ts"),
        "requests": _count(frame, "num_reqs"),
        "tokens": _tokens(frame),
        "steps": _same(1.0, n) if bool((steps == 1.0).all()) else steps,
        "step_time_s": _same(np.nan, n),
        "graph": graph,
        "mixed": mixed,
        "usage": _same(np.nan, n),
    }


def _tokens(frame: pd.DataFrame) -> np.ndarray:
    """Scheduled tokens of a step line as int64 (-1 missing), the padded size where the line
    shows no unpadded count: the truncation ``run_traffic`` applies to float counts."""
    padded = _count(frame, "padded_tokens")
    if "num_tokens" not in frame:
        return padded
    missing = frame["num_tokens"].isna().to_numpy(dtype=bool)
    if missing.all():
        return padded
    tokens = _count(frame, "num_tokens")
    return np.where(missing, padded, tokens) if missing.any() else tokens


def _stats_traffic(frame: pd.DataFrame, inp: AdviceInputs) -> dict[str, np.ndarray]:
    """Periodic stats lines (vLLM): running requests and generation throughput over an interval.
    Steps per line = interval / step time; with speculative decoding the tokens per step are
    not known, so the step time is not measured."""
    active = frame[(frame["running"].fillna(0) > 0) & (frame["gen_throughput"].fillna(0) > 0)]
    req = _num(active, "running")
    t = step_time_from_throughput(req, _num(active, "gen_throughput"))
    if inp.spec_tokens > 0:
        t = np.full(len(active), np.nan)
    interval = inp.stats_interval_s or 1.0
    steps = interval / np.where(np.isfinite(t), t, DEFAULT_BASE_STEP_S)
    return {
        "ts": _num(active, "ts"),
        "requests": req,
        "tokens": np.full(len(active), np.nan),
        "steps": steps,
        "step_time_s": t,
        "graph": np.full(len(active), -1, dtype=np.int8),
        "mixed": np.zeros(len(active), dtype=bool),
        "usage": _num(active, "kv_usage") / 100.0,
    }


def run_traffic(f: RunFacts, inp: AdviceInputs | None = None) -> Traffic | None:
    """The run's sampled decode steps, or None when it logged none with a known size.

    Per-step lines win over stats intervals (as in the batch classification); batch lines
    are read from rank 0 only unless DP attention makes every DP rank's line its own batch.
    """
    inp = inp or advice_inputs(f)
    parts: list[dict[str, np.ndarray]] = []
    batch_lines = _rank_rows(f.tables["decode_batch"], inp.dp_attention)
    if not batch_lines.empty:
        parts.append(_batch_line_traffic(batch_lines, inp))
    steps = _rank_rows(f.tables["graph_step"], False)
    if not steps.empty:
        parts.append(_step_traffic(steps))
    elif not f.tables["stats"].empty:
        stats = _rank_rows(f.tables["stats"], False)
        if not stats.empty:
            parts.append(_stats_traffic(stats, inp))
    if not parts:
        return None
    col = (
        parts[0]
        if len(parts) == 1
        else {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    )
    req, tok = (
        v if v.dtype == np.int64 else np.nan_to_num(v, nan=-1).astype(np.int64)
        for v in (col["requests"], col["tokens"])
    )
    known = (req >= 1) | (tok >= 1)
    if not known.any():
        return None
    every = bool(known.all())

    def kept(a: np.ndarray) -> np.ndarray:  # (no copy when every step has a size)
        return a if every else a[known]

    ts = col["ts"]
    if np.isfinite(ts).any():
        t_s = np.where(np.isfinite(ts), ts - np.nanmin(ts), 0.0)
    else:  # no clock: order only (time blocks still follow the log)
        t_s = np.arange(len(ts), dtype=float)
    has_tok = (tok >= 1).any()
    return Traffic(
        t_s=kept(t_s),
        requests=kept(req),
        steps=kept(col["steps"]),
        tokens=kept(tok) if has_tok else None,
        step_time_s=kept(col["step_time_s"]),
        graph=kept(col["graph"]),
        mixed=kept(col["mixed"]),
        token_usage=kept(col["usage"]),
        observed_s=None if np.isfinite(ts).any() else 0.0,
        run_id=f.run.id,
    )


def run_evidence(
    f: RunFacts, snapshots: Sequence[Snapshot] | None = None, engine: str | None = None
) -> RunEvidence | None:
    """Traffic, capture measurement and KV sizing of one run (None: no decode traffic)."""
    traffic = run_traffic(f)
    if traffic is None:
        return None
    sizes, source = current_sizes(f, engine or f.backend)
    rec = f.record
    snap = graph_pool_gib(f, snapshots)
    measured = source != "default" and f.record.get("graph_mode") != "disabled"
    capture = CaptureMeasurement(
        tuple(sizes) if measured else (),
        rec.get("capture_time_s") if measured else None,
        (snap if snap is not None else rec.get("capture_mem_gib")) if measured else None,
        "snapshot" if snap is not None and measured else "run",
    )
    kv_tokens = rec.get("kv_tokens")
    return RunEvidence(
        traffic,
        capture,
        int(kv_tokens) if kv_tokens else None,
        rec.get("kv_cache_gib"),
    )


def _evidence(
    f: RunFacts,
    snapshots: Sequence[Snapshot] | None,
    engine: str | None,
    known: dict[int, RunEvidence | None] | None,
) -> RunEvidence | None:
    """:func:`run_evidence`, read from ``known`` for the run's own engine when built before."""
    if known is None or (engine is not None and engine != f.backend):
        return run_evidence(f, snapshots, engine)
    if id(f) not in known:
        known[id(f)] = run_evidence(f, snapshots)
    return known[id(f)]


# ------------------------------------------------------------------ servers
def _config_key(f: RunFacts) -> str | None:
    if not f.config:
        return None
    return f.backend + json.dumps(f.config, sort_keys=True, default=str)


def server_groups(facts: Sequence[RunFacts]) -> list[list[RunFacts]]:
    """Runs of the same server, in input order: same stream (rotated set / instance) or the
    same config echo. Prefill nodes of a disaggregated deployment are left out (no buckets)."""
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        while parent.setdefault(i, i) != i:
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, f in enumerate(facts):
        find(i)
        for key in (f"stream:{f.backend}:{f.run.stream}", _config_key(f)):
            if key is None:
                continue
            if key in first:
                parent[find(i)] = find(first[key])
            else:
                first[key] = i
    groups: dict[int, list[RunFacts]] = {}
    for i, f in enumerate(facts):
        groups.setdefault(find(i), []).append(f)
    return list(groups.values())


def advise_group(
    group: Sequence[RunFacts],
    snapshots: Sequence[Snapshot] | None = None,
    *,
    engine: str | None = None,
    headroom: float = DEFAULT_HEADROOM,
    max_ceiling: int | None = None,
    max_k: int | None = None,
    known: dict[int, RunEvidence | None] | None = None,
) -> tuple[Advice, list[RunFacts]] | None:
    """One frontier for runs pooled as one server: limits from the latest run (the config the
    next start uses), ``engine`` the one to speak for (default: the latest run's). Returns the
    advice and the runs it used; None when none has decode traffic or advice is impossible.
    ``known``: ``id(facts)`` -> :func:`run_evidence` (same snapshots, default engine) already built,
    filled with the ones built here (the evidence of millions of steps is built once)."""
    usable = [
        f
        for f in group
        if spec_for(engine or f.backend) is not None and f.record.get("prefill_node") is not True
    ]
    evidence = [
        (f, ev) for f in usable if (ev := _evidence(f, snapshots, engine, known)) is not None
    ]
    if not evidence:
        return None
    limits = engine_limits(evidence[-1][0], engine)
    try:
        adv = advise(
            [ev for _, ev in evidence],
            limits,
            headroom=headroom,
            max_ceiling=max_ceiling,
            max_k=max_k,
        )
    except ValueError:  # degenerate input: analyze and recommend must not fail over advice
        return None
    ids = [f.run.id for f, _ in evidence]
    if len(ids) > 1:
        adv = replace(
            adv,
            notes=adv.notes
            + (f"{len(ids)} runs pooled ({_named(ids)}); limits from the latest, {ids[-1]}",),
        )
    return adv, [f for f, _ in evidence]


NAMED_RUNS = 6  # runs a pooled server's note names; beyond, the first and last few


def _named(ids: Sequence[str]) -> str:
    """The pooled runs for a note that every run of the server carries: all of them up to
    :data:`NAMED_RUNS`, else the first and last three (a fleet of 10,000 pods pooled as one
    server made each run's note list 10,000 ids: a 3.4 GB report)."""
    if len(ids) <= NAMED_RUNS:
        return ", ".join(ids)
    return f"{', '.join(ids[:3])}, ... {len(ids) - 6:,} more ..., {', '.join(ids[-3:])}"


def advise_runs(
    facts: Sequence[RunFacts], snapshots: Sequence[Snapshot] | None = None
) -> dict[str, Advice]:
    """The advice per run id, for every run of a known engine with decode traffic.

    One frontier per server (see :func:`server_groups`), validated across its runs; each
    run's ``current`` is its own set priced on its own traffic.
    """
    out: dict[str, Advice] = {}
    known: dict[int, RunEvidence | None] = {}
    for group in server_groups(facts):
        got = advise_group(group, snapshots, known=known)
        if got is None:
            continue
        adv, used = got
        limits = engine_limits(used[-1])
        for f in used:
            ev = _evidence(f, snapshots, None, known)
            own = _own_current(f, ev, adv, limits) if ev is not None else None
            out[f.run.id] = replace(adv, current=own)
    return out


def _own_current(f: RunFacts, ev: RunEvidence, adv: Advice, limits: EngineLimits) -> SetCost | None:
    """This run's own set priced on this run's own traffic (the server's parameters)."""
    sizes, source = current_sizes(f, limits.engine)
    if source == "default" or not sizes:
        return None
    hist = traffic_histogram(ev.traffic, limits)
    if not hist:
        return None
    return adv.price(sizes, hist)
