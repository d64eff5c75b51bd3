"""`graphdiag recommend`: from the observed decode batches to the next capture bucket set.

The set is the exact minimum-padding set of :func:`diag.advise.buckets.optimal_buckets` over the
pooled decode batch-size histogram, under the engine's own constraints:

* Budget ``K`` (``max_buckets``) defaults to what the run already pays for: the number of sizes it
  captured (logged list, else the tqdm total, else the inferred default window), else the length
  of the engine's default list for its version. So the default answer costs no more graphs.
* Size 1 is always captured. Every default list of both engines starts with 1 (SGLang §7,
  vLLM §11) and single-request decode is the latency-critical tail; forcing 2 and 4 as the vLLM
  defaults do would only spend budget on sizes the histogram may never show, so they are not
  forced. SGLang two-batch-overlap / DP-attention keep only multiples of ``2*attn_tp`` /
  ``attn_tp`` (§7): then sizes are restricted to those multiples and the smallest one is forced.
  vLLM filters capture sizes above ``max_num_batched_tokens`` (§11): those are not allowed.
* Memory and time are the linear per-graph models of ``buckets.estimate_capture_*`` fitted on
  the run's own measurement: the graph pools of an attached allocator snapshot when present
  (measured, not a free-memory delta), else the capture ``mem usage`` the engine logged.
  KV tokens regained = memory saved / (kv_cache_gib / kv_tokens); negative means tokens lost.

Flags are spelled for the engine and version at hand (see :func:`bucket_flags`). A prefill node
of a disaggregated deployment gets "graphs off" instead of a bucket set (DOMAIN.md remedies).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from diag.advise.buckets import (
    BucketPlan,
    estimate_capture_memory,
    estimate_capture_time,
    optimal_buckets,
)
from diag.engines import ENGINES
from diag.engines.spec import truthy as _truthy
from diag.facts.record import RunFacts, captured_size_count, snapshot_graph_pool_gib
from diag.model import Snapshot

__all__ = [
    "NoDecodeBatches",
    "RecommendError",
    "attach_recommendations",
    "bucket_flags",
    "decode_histogram",
    "recommend",
    "recommend_run",
    "render_text",
]

DEFAULT_COVERAGE = 0.99


class RunReport(Protocol):
    """What advice needs of a run's report (diag.report.RunReport, which sits above advice)."""

    facts: RunFacts
    recommendation: dict[str, Any] | None


class RecommendError(ValueError):
    """A recommendation cannot be made from these inputs (the CLI exits 2 with the message)."""


class NoDecodeBatches(RecommendError):
    """No observed decode batch to size buckets for."""


# ------------------------------------------------------------------ inputs
def decode_histogram(facts: Iterable[RunFacts]) -> dict[int, int]:
    """Pooled ``{batch size: batches}`` from the runs' classified decode batches.

    Rows without a known size (and idle size 0) cannot be placed in a bucket and are skipped;
    fractional weights (aggregated metrics rows) are rounded only after summing.
    """
    acc: dict[int, float] = {}
    for f in facts:
        b = f.batches
        if b.empty:
            continue
        sizes = b["batch_size"].to_numpy(dtype="float64", na_value=np.nan)
        weights = b["weight"].to_numpy(dtype="float64", na_value=1.0)
        keep = ~np.isnan(sizes) & (sizes >= 1) & (weights > 0)
        keys = np.rint(sizes[keep]).astype(np.int64)
        uniq, inverse = np.unique(keys, return_inverse=True)
        sums = np.bincount(inverse, weights=weights[keep], minlength=len(uniq))
        for s, w in zip(uniq.tolist(), sums.tolist(), strict=True):
            acc[s] = acc.get(s, 0.0) + w
    return {s: int(round(w)) for s, w in sorted(acc.items()) if round(w) > 0}


def _n_batches(f: RunFacts) -> float:
    b = f.batches
    if b.empty:
        return 0.0
    ok = b["batch_size"].astype("float64").fillna(0) >= 1
    return float(b.loc[ok, "weight"].astype("float64").fillna(1.0).sum())


def _default_sizes(engine: str, version: str | None, config: dict[str, Any]) -> list[int]:
    return ENGINES[engine].default_sizes(version, config, None)


def current_sizes(f: RunFacts, engine: str) -> tuple[list[int], str]:
    """The set the run captured and where it comes from: ``logged``, ``inferred`` or ``default``.

    ``default`` (graphs off, or no window at all) is the engine's default list for the version:
    what "just turn graphs back on" would capture, the natural baseline to beat.
    """
    if f.record.get("graph_capture_sizes"):
        return sorted(int(s) for s in f.record["graph_capture_sizes"]), "logged"
    if f.window.sizes:
        return sorted(f.window.sizes), "inferred" if f.window.sizes_inferred else "logged"
    version = f.engine_version if f.backend == engine else None
    return _default_sizes(engine, version, f.config if f.backend == engine else {}), "default"


def default_bucket_count(f: RunFacts, engine: str) -> int:
    """K: the sizes the run captured, else the engine's default list length for its version."""
    if f.record.get("graph_capture_sizes"):
        return len(f.record["graph_capture_sizes"])
    counted = captured_size_count(f.tables)
    if counted:
        return counted
    return len(current_sizes(f, engine)[0])


def graph_pool_gib(f: RunFacts, snapshots: Sequence[Snapshot] | None) -> float | None:
    """The run's snapshot graph-pool total from its facts (``RunFacts.snapshot_graph_pool_gib``);
    snapshots handed in but not joined by ``analyze`` go through the same definition. Pools
    of 0 GiB give nothing to scale capture memory from."""
    gib = f.snapshot_graph_pool_gib
    if gib is None and snapshots:
        gib = snapshot_graph_pool_gib(f.run.id, snapshots)
    return gib if gib else None


@dataclass(frozen=True)
class Constraints:
    """What the engine accepts as a bucket set, and why (the why goes to the notes)."""

    always_include: tuple[int, ...] = (1,)
    allowed: Callable[[int], bool] | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def _multiple_of(m: int) -> Callable[[int], bool]:
    return lambda s: s % m == 0


def _at_most(b: int) -> Callable[[int], bool]:
    return lambda s: s <= b


def engine_constraints(engine: str, version: str | None, config: dict[str, Any]) -> Constraints:
    """Sizes the engine keeps (the spec's bucket rule: SGLang §7 TBO / DP-attention multiples,
    vLLM §11 token budget)."""
    rule = ENGINES[engine].bucket_rule(version, config)
    notes = (rule.note,) if rule.note else ()
    if rule.multiple_of > 1:
        return Constraints((rule.multiple_of,), _multiple_of(rule.multiple_of), notes)
    if rule.at_most:
        return Constraints((1,), _at_most(rule.at_most), notes)
    return Constraints((1,))


# ------------------------------------------------------------------ flags
def bucket_flags(
    engine: str,
    version: str | None,
    config: dict[str, Any],
    sizes: Sequence[int],
    notes: list[str] | None = None,
) -> str:
    """The command-line fragment that captures exactly ``sizes`` on this engine and version
    (the engine spec's ``bucket_flags``; its docstring says which flag from which version)."""
    return ENGINES[engine].bucket_flags(version, config, sizes, notes if notes is not None else [])


def graphs_off_flags(engine: str, version: str | None, config: dict[str, Any]) -> str:
    """Graphs off on a prefill node, keeping what else the engine compiles."""
    return ENGINES[engine].graphs_off_flag(version, config)


def _kv_note(engine: str, version: str | None, saved_gib: float) -> str:
    """Where capture memory saved (or added) lands: KV tokens only where the engine sizes KV after it."""
    return ENGINES[engine].kv_note(version, saved_gib)


# ------------------------------------------------------------------ the recommendation
def _r(v: float | None, nd: int) -> float | None:
    return None if v is None else round(float(v), nd)


def _plan_dict(plan: BucketPlan) -> dict[str, Any]:
    return {
        "sizes": list(plan.sizes),
        "coverage": _r(plan.coverage, 4),
        "padding_waste": _r(plan.padding_waste, 4),
    }


def _pick_engine(
    facts: Sequence[RunFacts], engine: str | None
) -> tuple[str, list[RunFacts], list[str]]:
    notes: list[str] = []
    known = [f for f in facts if f.backend in ENGINES]
    if engine is None:
        if not known:
            raise RecommendError(
                "cannot tell the engine from the inputs; pass --engine vllm|sglang"
            )
        engine = max(known, key=_n_batches).backend
    chosen = [f for f in facts if f.backend == engine]
    others = sorted({f.backend for f in facts if f.backend != engine})
    if chosen and others:
        notes.append(f"runs of {', '.join(others)} left out: flags are for {engine}")
    if (
        not chosen
    ):  # the logs come from another engine: keep their traffic, speak the target's flags
        chosen = list(facts)
        if facts:
            notes.append(
                f"no {engine} run in the inputs: sizes from the other engine's traffic, "
                f"{engine} version unknown (newest spelling)"
            )
    return engine, chosen, notes


def recommend(
    runs: Sequence[RunReport],
    snapshots: Sequence[Snapshot] | None = None,
    *,
    engine: str | None = None,
    max_buckets: int | None = None,
    min_coverage: float = DEFAULT_COVERAGE,
) -> dict[str, Any]:
    """The INTERFACE ``recommend`` document for the pooled decode batches of ``runs``.

    The main run (most decode batches) supplies the current set, version, config, capture
    cost and KV figures. Prefill nodes are not pooled: they get "graphs off" in the notes, or
    as the whole answer when only prefill nodes are given. Raises :class:`NoDecodeBatches`
    when nothing is left to size buckets for, :class:`RecommendError` on infeasible requests.
    """
    if engine is not None and engine not in ENGINES:
        raise RecommendError(f"unknown engine {engine!r} (vllm or sglang)")
    facts = [r.facts for r in runs]
    engine, chosen, notes = _pick_engine(facts, engine)
    prefill = [f for f in chosen if f.record.get("prefill_node") is True]
    decode = [f for f in chosen if f.record.get("prefill_node") is not True]
    hist = decode_histogram(decode)
    if not hist:
        if prefill:
            return _prefill_advice(prefill[0], engine, snapshots)
        raise NoDecodeBatches(
            "no decode batches with a known batch size in the inputs: nothing to size buckets for"
        )
    main = max(decode, key=_n_batches)  # ties: the first (earliest) run
    same = main.backend == engine
    version = main.engine_version if same else None
    config = main.config if same else {}
    cur_sizes, cur_source = current_sizes(main, engine)
    k = max_buckets if max_buckets is not None else default_bucket_count(main, engine)
    if k < 1:
        raise RecommendError(f"--max-buckets must be >= 1, got {k}")
    cons = engine_constraints(engine, version, config)
    notes.extend(cons.notes)
    forced: tuple[int, ...] = cons.always_include
    if k < 2 and forced:
        notes.append(
            f"a budget of {k} bucket leaves no room for size {forced[0]} besides the ceiling: not forced"
        )
        forced = ()
    try:
        plan = optimal_buckets(hist, k, min_coverage, always_include=forced, allowed=cons.allowed)
    except ValueError as exc:
        raise RecommendError(f"no bucket set fits: {exc}") from exc
    current = BucketPlan.evaluate(cur_sizes, hist)

    snap_gib = graph_pool_gib(main, snapshots)
    cur_mem = snap_gib if snap_gib is not None else main.record.get("capture_mem_gib")
    mem_source = "snapshot graph pools" if snap_gib is not None else "logged capture mem usage"
    cur_time = main.record.get("capture_time_s")
    if cur_source == "default":
        cur_mem = cur_time = None  # nothing was captured: no cost to scale from
        notes.append(
            "graphs were off in the main run: 'current' is the engine's default list for this version, "
            "and capture memory/time cannot be estimated without a measured capture"
        )
    new_mem = estimate_capture_memory(cur_sizes, cur_mem, plan.sizes)
    new_time = estimate_capture_time(cur_sizes, cur_time, plan.sizes)
    saved = None if new_mem is None or cur_mem is None else cur_mem - new_mem
    kv_tokens, kv_gib = main.record.get("kv_tokens"), main.record.get("kv_cache_gib")
    regained = None
    if saved is not None and kv_tokens and kv_gib:
        regained = int(round(saved / (kv_gib / kv_tokens)))
    flags = bucket_flags(engine, version, config, plan.sizes, notes)

    if plan.sizes == current.sizes:
        notes.append("the current set is already the optimum for this budget and coverage")
    spec = ENGINES[engine]
    if spec.padding_off_key and spec.padding_off_note and _truthy(config.get(spec.padding_off_key)):
        notes.append(spec.padding_off_note)
    measured = main.record.get("captured_share")
    if measured is not None and cur_source != "default" and measured + 0.01 < current.coverage:
        notes.append(
            f"the engine ran {current.coverage - measured:.1%} of in-window batches eagerly for other "
            "reasons (DP prefill, penalties, hidden states...): buckets cannot recover those"
        )
    if len(decode) > 1:
        notes.append(
            f"{len(decode)} runs pooled ({sum(hist.values())} batches); current set, capture cost "
            f"and KV figures from the main run {main.run.id} (most decode batches)"
        )
    for p in prefill:
        notes.append(
            f"{p.run.id} is a prefill node: turn graphs off there ({graphs_off_flags(engine, version, config)})"
            ", size buckets on decode nodes only"
        )
    if new_mem is not None:
        notes.append(
            f"capture memory/time: linear per-graph model fitted on the main run's {mem_source} "
            f"and capture time; an order of magnitude, not a budget"
        )
    if regained is not None and saved is not None:
        notes.append(_kv_note(engine, version, saved))
    if any(k_.startswith("speculative") and main.config.get(k_) for k_ in main.config):
        notes.append(
            "speculative decoding is on: vLLM capture sizes count tokens (requests x (1+k)); "
            "scale the list if the batches above are request counts"
        )

    return {
        "engine": engine,
        "version": version,
        "main_run": main.run.id,
        "runs": [f.run.id for f in decode],
        "decode_batches": sum(hist.values()),
        "current": {
            **_plan_dict(current),
            "source": cur_source,
            "capture_mem_gib": cur_mem,
            "capture_time_s": cur_time,
            "measured_captured_share": measured,
        },
        "recommended": {
            **_plan_dict(plan),
            "capture_mem_gib_est": _r(new_mem, 3),
            "kv_tokens_regained_est": regained,
            "capture_mem_saved_gib_est": _r(saved, 3),
            "capture_time_s_est": _r(new_time, 2),
            "capture_time_saved_s_est": (
                None if new_time is None or cur_time is None else round(cur_time - new_time, 2)
            ),
        },
        "constraints": {
            "max_buckets": k,
            "min_coverage": min_coverage,
            "always_include": list(forced),
        },
        "flags": flags,
        "notes": notes,
    }


def _prefill_advice(
    f: RunFacts, engine: str, snapshots: Sequence[Snapshot] | None
) -> dict[str, Any]:
    """Prefill node: no buckets, graphs off; all capture memory can go back to KV."""
    same = f.backend == engine
    version = f.engine_version if same else None
    config = f.config if same else {}
    sizes = sorted(f.window.sizes) if f.window.sizes else []
    snap = graph_pool_gib(f, snapshots)
    mem = snap if snap is not None else f.record.get("capture_mem_gib")
    kv_tokens, kv_gib = f.record.get("kv_tokens"), f.record.get("kv_cache_gib")
    regained = (
        int(round(mem / (kv_gib / kv_tokens))) if mem is not None and kv_tokens and kv_gib else None
    )
    on = f.record.get("graph_mode") == "enabled"
    notes = [
        f"{f.run.id} is a disaggregated prefill node: long, shape-varying prefill batches gain little from "
        "graphs; keep graphs on the decode nodes and size buckets there"
    ]
    if not on:
        notes.append("graphs are already off on this node: nothing to change")
    elif regained is not None:
        notes.append(_kv_note(engine, version, 1.0))
    return {
        "engine": engine,
        "version": version,
        "main_run": f.run.id,
        "runs": [f.run.id],
        "decode_batches": 0,
        "node": "prefill",
        "current": {
            "sizes": sizes if on else [],
            "coverage": None,
            "padding_waste": None,
            "source": "logged" if on and sizes else "none",
            "capture_mem_gib": mem if on else None,
            "capture_time_s": f.record.get("capture_time_s") if on else None,
        },
        "recommended": {
            "sizes": [],
            "coverage": 0.0,
            "padding_waste": None,
            "capture_mem_gib_est": 0.0 if on else None,
            "kv_tokens_regained_est": regained if on else None,
            "capture_time_s_est": 0.0 if on else None,
        },
        "flags": graphs_off_flags(engine, version, config) if on else "",
        "notes": notes,
    }


def recommend_run(
    run: RunReport, snapshots: Sequence[Snapshot] | None = None
) -> dict[str, Any] | None:
    """The recommendation for one run with default budget and coverage; None where there is
    nothing to base one on (no decode batches and not a prefill node, unknown engine, infeasible)."""
    if run.facts.backend not in ENGINES:
        return None
    try:
        return recommend([run], snapshots)
    except ValueError:  # RecommendError, or a degenerate input: analyze must not fail over advice
        return None


def attach_recommendations(
    runs: Sequence[RunReport], snapshots: Sequence[Snapshot] | None = None
) -> None:
    """Fill ``RunReport.recommendation`` for every run (called by ``diag.api.analyze``)."""
    for run in runs:
        run.recommendation = recommend_run(run, snapshots)


# ------------------------------------------------------------------ text
def _fmt_sizes(sizes: Sequence[int]) -> str:
    if not sizes:
        return "[] (graphs off)"
    if len(sizes) <= 16:
        return "[" + ", ".join(map(str, sizes)) + "]"
    return f"[{', '.join(map(str, sizes[:8]))}, ..., {sizes[-1]}] ({len(sizes)} sizes)"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _num(v: float | int | None, unit: str, signed: bool = False) -> str:
    if v is None:
        return "n/a"
    return (f"{v:+,g}" if signed else f"{v:,g}") + unit


def _neg(v: float | None) -> float | None:
    return None if v is None else round(-v, 3) + 0.0  # + 0.0: no "-0"


def render_text(rec: dict[str, Any]) -> str:
    """Terminal summary: the two sets side by side, the cost deltas, the flags to paste, notes."""
    cur, new = rec["current"], rec["recommended"]
    head = f"{rec['engine']} {rec['version'] or '(version unknown)'}"
    if rec.get("node") == "prefill":
        lines = [
            f"Recommendation for {head}, prefill node {rec['main_run']}: CUDA graphs off",
            f"  current:     {_fmt_sizes(cur['sizes'])}, capture {_num(cur['capture_mem_gib'], ' GiB')}",
            f"  KV tokens regained (est.): {_num(new['kv_tokens_regained_est'], '')}",
        ]
    else:
        c = rec.get("constraints", {})
        lines = [
            f"Recommendation for {head} from {rec['decode_batches']} decode batches "
            f"(main run {rec['main_run']}; at most {c.get('max_buckets')} buckets, "
            f"coverage >= {c.get('min_coverage')}):",
            f"  current ({cur['source']}): {_fmt_sizes(cur['sizes'])}",
            f"      coverage {_pct(cur['coverage'])}, padding waste {_pct(cur['padding_waste'])}, "
            f"capture {_num(cur['capture_mem_gib'], ' GiB')} / {_num(cur['capture_time_s'], ' s')}",
            f"  recommended: {_fmt_sizes(new['sizes'])}",
            f"      coverage {_pct(new['coverage'])}, padding waste {_pct(new['padding_waste'])}, "
            f"capture {_num(new['capture_mem_gib_est'], ' GiB')} / {_num(new['capture_time_s_est'], ' s')} (est.)",
            f"  change (est.): capture memory {_num(_neg(new['capture_mem_saved_gib_est']), ' GiB', True)}, "
            f"capture time {_num(_neg(new['capture_time_saved_s_est']), ' s', True)}, "
            f"KV tokens {_num(new['kv_tokens_regained_est'], '', True)}",
        ]
    lines.append("  flags:")
    lines.append(
        f"    {rec['flags']}" if rec["flags"] else "    (none for this version, see notes)"
    )
    if rec["notes"]:
        lines.append("  notes:")
        lines.extend(f"  - {n}" for n in rec["notes"])
    return "\n".join(lines) + "\n"
