"""`graphdiag recommend`: the run's :class:`~diag.advise.bucket_sets.Advice` as a document.

Nothing is chosen here. The set, the ceiling, the frontier and every cost come from
:mod:`diag.advise.run_advice` (the same advice the rules quote, computed once from facts);
this module only picks the runs (engine, prefill nodes), turns the CLI options into the
advice's options, spells the flags in the engine version's own terms (the engine spec's
``bucket_flags``) and writes the document (its text is :mod:`diag.render.recommend_text`). With default options and the runs of one server, the advice
is the one ``analyze`` attached to the run, so GD110 and ``recommend`` name the same ceiling.

* ``--max-buckets K`` limits the frontier to K sizes (the pick is then the best K' <= K).
* ``--coverage Q`` lets the ceiling drop to the size that covers a Q share of the steps
  (the default keeps the observed peak plus headroom: coverage is a promise measured out of
  sample, not a constraint fitted to the day); the one ceiling policy,
  :func:`diag.advise.limits.ceiling_policy`, applies it on every fold.

A prefill node of a disaggregated deployment gets "graphs off" instead of a bucket set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypedDict

import numpy as np

from diag.advise.bucket_sets import Advice
from diag.advise.cost_model import SetCost
from diag.advise.run_advice import advise_group, current_sizes, graph_pool_gib, server_groups
from diag.engines import ENGINES
from diag.facts.record import RunFacts
from diag.model import Snapshot

__all__ = [
    "NoDecodeBatches",
    "RecommendError",
    "attach_recommendations",
    "bucket_flags",
    "recommend",
    "recommend_run",
]

# what the figures of a set are, said beside them (the text renderer quotes these)
MEASURED = "measured: the run's own record (padding waste, capture memory and time)"
ESTIMATED = "estimated: the set priced on the observed traffic by the cost model"


class RunReport(Protocol):
    """What advice needs of a run's report (diag.report.RunReport, which sits above advice)."""

    facts: RunFacts
    recommendation: Recommendation | None

    @property
    def advice(self) -> Advice | None: ...


class RecommendError(ValueError):
    """A recommendation cannot be made from these inputs (the CLI exits 2 with the message)."""


class NoDecodeBatches(RecommendError):
    """No observed decode batch to size buckets for."""


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
    """Where capture memory saved (or added) lands: the engine spec says (SGLang sizes its KV
    pool before capture; vLLM >= 0.20 subtracts the graph estimate)."""
    return ENGINES[engine].kv_note(version, saved_gib)


# ------------------------------------------------------------------ picking runs
def _steps(f: RunFacts) -> float:
    """The run's decode steps with a known size (a batch's weight, 1 where not said): the
    same sum as pandas' on the same rows, from the columns' arrays (~1 ms less a run)."""
    b = f.batches
    if b.empty:
        return 0.0
    ok = b["batch_size"].to_numpy(dtype="float64", na_value=np.nan) >= 1  # (NaN: not known)
    weight = b["weight"].to_numpy(dtype="float64", na_value=np.nan)[ok]
    return float(np.where(np.isnan(weight), 1.0, weight).sum())


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
        engine = max(known, key=_steps).backend
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


def _advice_for(
    runs: Sequence[RunReport],
    decode: list[RunFacts],
    snapshots: Sequence[Snapshot] | None,
    engine: str,
    max_buckets: int | None,
    min_coverage: float | None,
    starts_per_day: float | None = None,
) -> tuple[Advice, list[RunFacts]]:
    """The advice analyze attached where it is the same question, else the same function
    with the user's options."""
    by_id = {r.facts.run.id: r for r in runs}
    attached = [by_id[f.run.id].advice for f in decode if f.run.id in by_id]
    one_server = (
        len(server_groups(decode)) == 1
        and bool(attached)
        and all(f.backend == engine for f in decode)
    )
    with_advice = [f for f in decode if f.run.id in by_id and by_id[f.run.id].advice is not None]
    got: tuple[Advice, list[RunFacts]] | None
    main_advice = by_id[with_advice[-1].run.id].advice if with_advice else None
    # a snapshot given here that analyze did not join would change the memory parameters
    new_snapshot = (
        main_advice is not None
        and graph_pool_gib(with_advice[-1], snapshots) is not None
        and main_advice.parameters.capture_gib_per_graph.source != "snapshot"
    )
    same_options = max_buckets is None and min_coverage is None
    if main_advice is not None and starts_per_day is not None:
        same_options &= main_advice.parameters.starts_per_day.value == starts_per_day
    if one_server and same_options and main_advice is not None and not new_snapshot:
        # the very advice analyze computed for this server (rules quote the same object)
        got = main_advice, with_advice
    else:
        got = advise_group(
            decode,
            snapshots,
            engine=engine,
            max_k=max_buckets,
            min_coverage=min_coverage,
            starts_per_day=starts_per_day,
        )
    if got is None:
        raise NoDecodeBatches(
            "no decode batches with a known batch size in the inputs: nothing to size buckets for"
        )
    return got


# ------------------------------------------------------------------ the document
class _RecommendationKeys(TypedDict):
    engine: str
    version: str | None
    main_run: str
    runs: list[str]
    decode_batches: int
    current: dict[str, Any]  # the set the run captured, priced: sizes, coverage, waste...
    recommended: dict[str, Any]  # the set to capture, priced, its estimates
    flags: str  # the version's own flags that set it ("" where nothing changes)
    notes: list[str]


class Recommendation(_RecommendationKeys, total=False):
    """INTERFACE's ``recommend`` document (``runs[].recommendation``): the keys every one has
    (above), then a decode node's pricing and validation, or ``node: "prefill"``."""

    node: str
    unit: str
    decode_steps: int
    ceiling: int | None
    constraints: dict[str, Any]
    frontier: list[dict[str, Any]]
    parameters: dict[str, Any]
    validation: dict[str, Any]
    decision: dict[str, Any] | None
    evidence: dict[str, Any] | None
    cost_unit: str
    starts_per_day: dict[str, Any]


# ------------------------------------------------------------------ the recommendation
def _r(v: float | None, nd: int) -> float | None:
    return None if v is None else round(float(v), nd)


def _cost_dict(c: SetCost) -> dict[str, Any]:
    return {
        "sizes": list(c.sizes),
        "coverage": _r(c.coverage, 4),
        "padding_waste": _r(c.padding_waste, 4),
        "cost_s_h": _r(c.total_s_h, 3),
    }


def recommend(
    runs: Sequence[RunReport],
    snapshots: Sequence[Snapshot] | None = None,
    *,
    engine: str | None = None,
    max_buckets: int | None = None,
    min_coverage: float | None = None,
    starts_per_day: float | None = None,
) -> Recommendation:
    """The INTERFACE ``recommend`` document for the decode runs of ``runs`` (pooled, validated
    across each other), from their :class:`Advice`. Raises :class:`NoDecodeBatches` when there
    is nothing to size buckets for, :class:`RecommendError` on infeasible requests."""
    if engine is not None and engine not in ENGINES:
        raise RecommendError(f"unknown engine {engine!r} (vllm or sglang)")
    if max_buckets is not None and max_buckets < 1:
        raise RecommendError(f"--max-buckets must be >= 1, got {max_buckets}")
    facts = [r.facts for r in runs]
    engine, chosen, notes = _pick_engine(facts, engine)
    prefill = [f for f in chosen if f.record.prefill_node is True]
    decode = [f for f in chosen if f.record.prefill_node is not True]
    if not decode or all(f.batches.empty for f in decode):
        if prefill:
            return _prefill_advice(prefill[0], engine, snapshots)
    adv, used = _advice_for(
        runs, decode, snapshots, engine, max_buckets, min_coverage, starts_per_day
    )
    main = used[-1]
    same = main.backend == engine
    version = main.engine_version if same else None
    config = dict(main.config.raw) if same else {}
    cur_sizes, cur_source = current_sizes(main, engine)
    current = adv.current if adv.current is not None and cur_source != "default" else None
    if current is None and cur_sizes:
        current = adv.price(cur_sizes)
    if current is None:
        raise RecommendError("no current bucket set to compare with")
    rec = adv.recommended
    p = adv.parameters
    measured = p.capture_gib_per_graph.source != "default"
    cur_mem = current.capture_gib if measured and cur_source != "default" else None
    cur_time = (
        current.capture_time_s
        if p.capture_s_per_graph.source != "default" and cur_source != "default"
        else None
    )
    saved = None if cur_mem is None else cur_mem - rec.cost.capture_gib
    per_gib = p.kv_tokens_per_gib.value
    regained = int(round(saved * per_gib)) if saved is not None and per_gib else None
    decision = adv.decision
    change = decision is None or decision.kind == "change"
    if decision is not None:
        notes.insert(0, decision.headline)
    flags = bucket_flags(engine, version, config, rec.sizes, notes) if change else ""
    if version is None and flags:
        notes.append(
            f"the {engine} version is not in the logs: the flags use the newest spelling; "
            "check them against your version's --help"
        )

    if change and rec.sizes == current.sizes:
        notes.append("the current set is already the cheapest on the frontier")
    if cur_source == "default":
        notes.append(
            "graphs were off in the main run: 'current' is the engine's default list for this "
            "version; capture memory and time of the sets are per-graph defaults (see parameters)"
        )
    captured = main.record.captured_share
    if captured is not None and cur_source != "default" and captured + 0.01 < current.coverage:
        notes.append(
            f"the engine ran {current.coverage - captured:.1%} of in-window batches eagerly for other "
            "reasons (DP prefill, penalties, hidden states...): buckets cannot recover those"
        )
    for pf in prefill:
        notes.append(
            f"{pf.run.id} is a prefill node: turn graphs off there "
            f"({graphs_off_flags(engine, version, config)}), size buckets on decode nodes only"
        )
    if measured:
        src = (
            "snapshot graph pools"
            if p.capture_gib_per_graph.source == "snapshot"
            else "capture line"
        )
        notes.append(
            f"capture memory/time: linear per-graph model fitted on the main run's {src} "
            "and capture time; an order of magnitude, not a budget"
        )
    if change and regained is not None and saved is not None:
        notes.append(_kv_note(engine, version, saved))
    notes.extend(adv.notes)
    hist = adv.hist()
    current_doc = {
        **_cost_dict(current),
        **_measured_current(main, snapshots, cur_source),
        "source": cur_source,
        "measured_captured_share": captured,
    }
    recommended_doc = {
        **_cost_dict(rec.cost),
        "promised_coverage": _r(adv.promised_coverage, 4),
        "heldout_waste": _r(rec.heldout_waste, 4),
        "capture_mem_gib_est": _r(rec.cost.capture_gib, 3),
        "kv_tokens_regained_est": regained,
        "capture_mem_saved_gib_est": _r(saved, 3),
        "capture_time_s_est": _r(rec.cost.capture_time_s, 2),
        "capture_time_saved_s_est": (
            None if cur_time is None else round(cur_time - rec.cost.capture_time_s, 2)
        ),
        "figures": ESTIMATED,
    }
    if not change:  # the kept set is the current one: its figures are the current ones
        recommended_doc = _kept(recommended_doc, current_doc)
    return {
        "engine": engine,
        "version": version,
        "unit": adv.unit,
        "main_run": main.run.id,
        "runs": [f.run.id for f in used],
        "decode_batches": int(round(sum(_steps(f) for f in used))),
        "decode_steps": int(round(sum(hist.values()))),
        "ceiling": adv.ceiling,
        "current": current_doc,
        "recommended": recommended_doc,
        "constraints": {
            "max_buckets": max_buckets,
            "min_coverage": min_coverage,
            "headroom": adv.headroom,
            "max_ceiling": adv.max_ceiling,
        },
        "frontier": [r.to_dict() for r in adv.frontier],
        "parameters": {
            name: {**prm.to_dict(), "source_of": _source_of(prm.source, main, snapshots)}
            for name, prm in p.table().items()
        },
        "validation": {
            "how": adv.folds,
            "promised_coverage": _r(adv.promised_coverage, 4),
            "heldout_waste": _r(rec.heldout_waste, 4),
            "heldout_cost_s_h": _r(rec.heldout_total_s_h, 3)
            if np.isfinite(rec.heldout_total_s_h)
            else None,
            "decode_gpu_s_h": _r(adv.busy_s_h, 3),
        },
        "decision": None if decision is None else decision.to_dict(),
        "evidence": None if adv.evidence is None else adv.evidence.to_dict(),
        "cost_unit": "GPU-seconds per hour of the observed traffic, per rank",
        "starts_per_day": p.starts_per_day.to_dict(),
        "flags": flags,
        "notes": notes,
    }


DEFAULT_ESTIMATED = "estimated: the engine's default list priced on the observed traffic"


def _measured_current(
    f: RunFacts, snapshots: Sequence[Snapshot] | None, source: str
) -> dict[str, Any]:
    """The current set's figures the run measured, read from its record (the one number
    analyze prints for each), not priced again: padding waste where the run served graph
    batches, capture memory as the engine printed it, the snapshot's graph pools beside it
    under their own name. With graphs off (``default``) every figure is the model's."""
    if source == "default":
        return {"capture_mem_gib": None, "capture_time_s": None, "figures": DEFAULT_ESTIMATED}
    rec = f.record
    out: dict[str, Any] = {
        "capture_mem_gib": rec.capture_mem_gib,
        "capture_time_s": rec.capture_time_s,
        "snapshot_graph_pool_gib": graph_pool_gib(f, snapshots),
        "figures": MEASURED,
    }
    if rec.padding_waste is not None:
        out["padding_waste"] = rec.padding_waste
    return out


def _kept(new: dict[str, Any], cur: dict[str, Any]) -> dict[str, Any]:
    """The recommended figures where the advice keeps the current set: the current set's own
    (one set, one number each), nothing saved or regained."""
    measured = cur.get("figures") == MEASURED
    return {
        **new,
        "padding_waste": cur["padding_waste"],
        "coverage": cur["coverage"],
        "cost_s_h": cur["cost_s_h"],
        "capture_mem_gib_est": cur["capture_mem_gib"] if measured else new["capture_mem_gib_est"],
        "capture_time_s_est": cur["capture_time_s"] if measured else new["capture_time_s_est"],
        # nothing saved where the figures are measured; unknown (as priced) where they are not
        "kv_tokens_regained_est": 0 if measured else new["kv_tokens_regained_est"],
        "capture_mem_saved_gib_est": 0.0 if measured else new["capture_mem_saved_gib_est"],
        "capture_time_saved_s_est": 0.0 if measured else new["capture_time_saved_s_est"],
        "figures": "the current set, kept: " + cur["figures"],
    }


def main_capture_mem(f: RunFacts, snapshots: Sequence[Snapshot] | None) -> float | None:
    snap = graph_pool_gib(f, snapshots)
    return snap if snap is not None else f.record.capture_mem_gib


def _source_of(source: str, main: RunFacts, snapshots: Sequence[Snapshot] | None) -> str | None:
    """Which input a parameter came from: the run id, the snapshot path, or None (default)."""
    if source == "run":
        return main.run.id
    if source == "snapshot":
        paths = [s.path for s in snapshots or [] if s.run == main.run.id]
        return ", ".join(paths) or main.run.id
    return None


def _prefill_advice(
    f: RunFacts, engine: str, snapshots: Sequence[Snapshot] | None
) -> Recommendation:
    """Prefill node: no buckets, graphs off; all capture memory can go back to KV."""
    same = f.backend == engine
    version = f.engine_version if same else None
    config = dict(f.config.raw) if same else {}
    sizes = sorted(f.window.sizes) if f.window.sizes else []
    mem = main_capture_mem(f, snapshots)
    kv_tokens, kv_gib = f.record.kv_tokens, f.record.kv_cache_gib
    regained = (
        int(round(mem / (kv_gib / kv_tokens))) if mem is not None and kv_tokens and kv_gib else None
    )
    on = f.record.graph_mode == "enabled"
    notes = [
        f"{f.run.id} is a disaggregated prefill node: long, shape-varying prefill batches gain "
        "little from graphs; keep graphs on the decode nodes and size buckets there"
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
            "capture_time_s": f.record.capture_time_s if on else None,
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
    run: RunReport,
    snapshots: Sequence[Snapshot] | None = None,
    starts_per_day: float | None = None,
) -> Recommendation | None:
    """The run's recommendation from its own advice (None where there is none and it is not
    a prefill node); never raises: analyze must not fail over advice."""
    if run.facts.backend not in ENGINES:
        return None
    if run.advice is None and run.facts.record.prefill_node is not True:
        return None
    try:
        return recommend([run], snapshots, starts_per_day=starts_per_day)
    except ValueError:
        return None


def attach_recommendations(
    runs: Sequence[RunReport],
    snapshots: Sequence[Snapshot] | None = None,
    starts_per_day: float | None = None,
) -> None:
    """Fill ``RunReport.recommendation`` for every run (called by ``diag.api.analyze``)."""
    for run in runs:
        run.recommendation = recommend_run(run, snapshots, starts_per_day)
