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
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import Literal, TypeVar, cast

import numpy as np

from diag.advise.bucket_sets import (
    DEFAULT_HEADROOM,
    Advice,
    EngineLimits,
    advise,
    traffic_histogram,
)
from diag.advise.cost_model import SetCost
from diag.advise.traffic import CaptureMeasurement, Engine, RunEvidence, Traffic
from diag.engines import ConfigEcho, EngineConfig, read_config, spec_for
from diag.facts.record import RunFacts, snapshot_graph_pool_gib
from diag.facts.steps import clock_elapsed
from diag.model import Snapshot

__all__ = [
    "advise_group",
    "advise_runs",
    "current_sizes",
    "engine_limits",
    "graph_pool_gib",
    "run_evidence",
    "server_groups",
]

SizesSource = Literal["logged", "inferred", "default"]
T = TypeVar("T")


# ------------------------------------------------------------------ per-run inputs
def current_sizes(f: RunFacts, engine: str) -> tuple[list[int], SizesSource]:
    """The set the run captured and where it comes from: ``logged``, ``inferred`` or ``default``.

    ``default`` (graphs off, or no window at all) is the engine's default list for the version:
    what "just turn graphs back on" would capture, the natural baseline to beat.
    """
    if f.record.graph_capture_sizes:
        return sorted(f.record.graph_capture_sizes), "logged"
    if f.window.sizes:
        return sorted(f.window.sizes), "inferred" if f.window.sizes_inferred else "logged"
    spec = spec_for(engine)
    if spec is None:
        return [], "default"
    same = f.backend == engine
    return (
        spec.default_sizes(f.engine_version if same else None, f.config.raw if same else {}, None),
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


def engine_limits(f: RunFacts, engine: str | None = None) -> EngineLimits:
    """What the engine accepts for this run's server: limits from the run's own config when it
    is of that engine, the engine's defaults otherwise."""
    engine = engine or f.backend
    same = f.backend == engine
    # another engine's limits: its defaults (no config of its own seen)
    config = f.config if same else read_config(engine, ConfigEcho(), None)
    sizes, source = current_sizes(f, engine)
    read = {k.name: getattr(config, k.name) for k in fields(config)}
    return EngineLimits(
        **read
        | {
            "engine": cast(Engine, engine),
            # the mode the run ran in (the record: downgrades included), not only the echo's
            "cudagraph_mode": f.record.cudagraph_mode if same else None,
            "current_sizes": tuple(sizes) if source != "default" else (),
            "current_source": source,
            "default_sizes": tuple(sizes) if source == "default" else (),
        }
    )


def run_traffic(f: RunFacts, inp: EngineConfig | None = None) -> Traffic | None:
    """The run's decode steps (its :class:`~diag.facts.steps.DecodeSteps` fact) as advice
    traffic, or None when it logged none with a known size.

    Every step line counts, mixed prefill+decode steps included (piecewise graphs serve them
    too); lines are read from rank 0 only unless DP attention makes every DP rank's batch
    line its own batch. A graph-replayed DEBUG line that shows only its padded descriptor is
    sized at that bucket, an upper bound, so no size a step used is ever dropped.
    """
    inp = inp or f.config
    steps = f.steps
    if steps.empty:
        return None
    rows = steps.rank_rows(("decode_line",) if inp.dp_attention else ())

    def col(name: str) -> np.ndarray:
        return _take(steps.column(name), rows)

    def count(name: str) -> np.ndarray:  # (a step count column may be int32: the advice's int64)
        return col(name).astype(np.int64, copy=False)

    req = count("requests")
    shown, padded = count("tokens"), count("padded")
    missing = shown < 0
    tok = np.where(missing, padded, shown) if bool(missing.any()) else shown
    del shown, padded, missing
    known = (req >= 1) | (tok >= 1)
    if not known.any():
        return None
    every = bool(known.all())

    def kept(a: np.ndarray) -> np.ndarray:  # (no copy when every step has a size)
        return a if every else _take(a, known)

    ts = _take(steps.floats("ts"), rows)
    if np.isfinite(ts).any():  # (a clock jump adds no time: monotone stretches only)
        t_s = clock_elapsed(ts)[0]
    else:  # no clock: order only (time blocks still follow the log)
        t_s = np.arange(len(ts), dtype=float)
    has_tok = (tok >= 1).any()
    return Traffic(
        t_s=kept(t_s),
        requests=kept(req),
        steps=kept(col("steps")),
        tokens=kept(tok) if has_tok else None,
        step_time_s=kept(col("step_time_s")),
        graph=kept(col("graph")),
        mixed=kept(col("mixed")),
        token_usage=kept(col("usage")),
        observed_s=None if np.isfinite(ts).any() else 0.0,
        run_id=f.run.id,
    )


def _take(a: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    """``a[rows]``; a column of one value (zero stride) stays one zero-byte view."""
    if rows is None:
        return a
    if a.ndim == 1 and a.strides[0] == 0 and len(a):
        return np.broadcast_to(a[:1], (int(np.count_nonzero(rows)),))
    return a[rows]


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
    measured = source != "default" and rec.graph_mode != "disabled"
    capture = CaptureMeasurement(
        tuple(sizes) if measured else (),
        rec.capture_time_s if measured else None,
        (snap if snap is not None else rec.capture_mem_gib) if measured else None,
        "snapshot" if snap is not None and measured else "run",
    )
    return RunEvidence(traffic, capture, rec.kv_tokens or None, rec.kv_cache_gib)


def _evidence(
    f: RunFacts,
    snapshots: Sequence[Snapshot] | None,
    engine: str | None,
    known: dict[str, RunEvidence | None] | None,
) -> RunEvidence | None:
    """:func:`run_evidence`, read from ``known`` (by run id) for the run's own engine when
    built before."""
    if known is None or (engine is not None and engine != f.backend):
        return run_evidence(f, snapshots, engine)
    if f.run.id not in known:
        known[f.run.id] = run_evidence(f, snapshots)
    return known[f.run.id]


# ------------------------------------------------------------------ servers
def _config_key(f: RunFacts) -> str | None:
    if not f.config.raw:
        return None
    return f.backend + json.dumps(f.config.raw, sort_keys=True, default=str)


def server_groups(facts: Sequence[RunFacts]) -> list[list[RunFacts]]:
    """Runs of the same server, in input order: same stream (rotated set / instance) or the
    same config echo. Prefill nodes of a disaggregated deployment are left out (no buckets)."""
    return [[facts[i] for i in group] for group in server_indices(facts)]


def server_indices(facts: Sequence[RunFacts]) -> list[list[int]]:
    """:func:`server_groups` as positions in ``facts``, each run read once (a fleet's runs
    are read back one at a time)."""
    return _servers(facts)[0]


def _servers(
    facts: Sequence[RunFacts], visit: Callable[[int, RunFacts], T | None] | None = None
) -> tuple[list[list[int]], dict[int, T]]:
    """:func:`server_indices`, and ``visit(i, run)`` called on each run during its one read:
    per group (keyed by its first position) the last run's value that was not None. Only
    the latest value of each group is kept: a fleet of one server holds one, not one a pod."""
    parent: dict[int, int] = {}
    latest: dict[int, tuple[int, T]] = {}  # root -> (position, value) of its last visited

    def find(i: int) -> int:
        while parent.setdefault(i, i) != i:
            i = parent[i]
        return i

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra == rb:
            return
        parent[ra] = rb
        got = latest.pop(ra, None)
        if got is not None and (rb not in latest or latest[rb][0] < got[0]):
            latest[rb] = got

    first: dict[str, int] = {}
    for i in range(len(facts)):
        f = facts[i]
        find(i)
        if visit is not None and (value := visit(i, f)) is not None:
            latest[i] = (i, value)  # (i is its own root still: no key joined it yet)
        for key in (f"stream:{f.backend}:{f.run.stream}", _config_key(f)):
            if key is None:
                continue
            if key in first:
                union(i, first[key])
            else:
                first[key] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(facts)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values()), {
        g[0]: latest[root][1] for root, g in groups.items() if root in latest
    }


def advise_group(
    group: Sequence[RunFacts],
    snapshots: Sequence[Snapshot] | None = None,
    *,
    engine: str | None = None,
    headroom: float = DEFAULT_HEADROOM,
    max_ceiling: int | None = None,
    min_coverage: float | None = None,
    max_k: int | None = None,
    known: dict[str, RunEvidence | None] | None = None,
    starts_per_day: float | None = None,
) -> tuple[Advice, list[RunFacts]] | None:
    """One frontier for runs pooled as one server: limits from the latest run (the config the
    next start uses), ``engine`` the one to speak for (default: the latest run's),
    ``max_ceiling`` / ``min_coverage`` what the ceiling policy may lower it to. Returns the
    advice and the runs it used; None when none has decode traffic or advice is impossible.
    ``known``: run id -> :func:`run_evidence` (same snapshots, default engine) already built,
    filled with the ones built here (the evidence of millions of steps is built once)."""
    got = _advise_positions(
        group, snapshots, engine, headroom, max_ceiling, min_coverage, max_k, known, starts_per_day
    )
    return None if got is None else (got[0], [group[i] for i in got[1]])


def _advise_positions(
    group: Sequence[RunFacts],
    snapshots: Sequence[Snapshot] | None,
    engine: str | None,
    headroom: float = DEFAULT_HEADROOM,
    max_ceiling: int | None = None,
    min_coverage: float | None = None,
    max_k: int | None = None,
    known: dict[str, RunEvidence | None] | None = None,
    starts_per_day: float | None = None,
) -> tuple[Advice, list[int]] | None:
    """:func:`advise_group`, the runs used given as positions in ``group``: each run is read
    once for its evidence and let go (a fleet's server can pool thousands of pods)."""
    evidence: list[tuple[int, str, RunEvidence]] = []
    for i in range(len(group)):
        f = group[i]
        if spec_for(engine or f.backend) is None or f.record.prefill_node is True:
            continue
        if (ev := _evidence(f, snapshots, engine, known)) is not None:
            evidence.append((i, f.run.id, ev))
    if not evidence:
        return None
    limits = engine_limits(group[evidence[-1][0]], engine)
    adv = _server_advice(
        [(rid, ev) for _, rid, ev in evidence],
        limits,
        headroom=headroom,
        max_ceiling=max_ceiling,
        min_coverage=min_coverage,
        max_k=max_k,
        starts_per_day=starts_per_day,
    )
    return None if adv is None else (adv, [i for i, _, _ in evidence])


def _server_advice(
    runs: Sequence[tuple[str, RunEvidence]],
    limits: EngineLimits,
    *,
    headroom: float = DEFAULT_HEADROOM,
    max_ceiling: int | None = None,
    min_coverage: float | None = None,
    max_k: int | None = None,
    starts_per_day: float | None = None,
) -> Advice | None:
    """One frontier for a server's runs (id, evidence), the pooled runs named in its notes;
    None on degenerate input (analyze and recommend must not fail over advice)."""
    try:
        adv = advise(
            [ev for _, ev in runs],
            limits,
            headroom=headroom,
            max_ceiling=max_ceiling,
            min_coverage=min_coverage,
            max_k=max_k,
            starts_per_day=starts_per_day,
        )
    except ValueError:
        return None
    ids = [rid for rid, _ in runs]
    if len(ids) > 1:
        note = f"{len(ids)} runs pooled ({_named(ids)}); limits from the latest, {ids[-1]}"
        adv = replace(adv, notes=adv.notes + (note,))
    return adv


NAMED_RUNS = 6  # runs a pooled server's note names; beyond, the first and last few


def _named(ids: Sequence[str]) -> str:
    """The pooled runs for a note that every run of the server carries: all of them up to
    :data:`NAMED_RUNS`, else the first and last three (a fleet of 10,000 pods pooled as one
    server made each run's note list 10,000 ids: a 3.4 GB report)."""
    if len(ids) <= NAMED_RUNS:
        return ", ".join(ids)
    return f"{', '.join(ids[:3])}, ... {len(ids) - 6:,} more ..., {', '.join(ids[-3:])}"


def advise_runs(
    facts: Sequence[RunFacts],
    snapshots: Sequence[Snapshot] | None = None,
    known: dict[str, RunEvidence | None] | None = None,
    starts_per_day: float | None = None,
    each: Callable[[RunFacts], object] | None = None,
) -> dict[str, Advice]:
    """The advice per run id, for every run of a known engine with decode traffic.

    One frontier per server (see :func:`server_groups`), validated across its runs; each
    run's ``current`` is its own set priced on its own traffic. ``known``: filled with each
    run's :func:`run_evidence` by run id, for a later step that reads the same evidence
    (the fleet summary's binned traffic) instead of building it again. ``starts_per_day``:
    how often the server starts (each start pays the capture), None the stated default.
    ``each(run)``: called on every run while it is read, after its evidence is in ``known``.

    Each run is read once (a fleet's runs are read back from disk one at a time): what the
    advice needs of it (evidence, own set, the server's limits from its latest run) is
    taken on that read, as :func:`advise_group` would take it on its own reads.
    """
    out: dict[str, Advice] = {}
    known = {} if known is None else known
    used: dict[int, tuple[str, RunEvidence, tuple[list[int], SizesSource]]] = {}

    def visit(i: int, f: RunFacts) -> EngineLimits | None:
        limits = None
        if spec_for(f.backend) is not None and f.record.prefill_node is not True:
            ev = _evidence(f, snapshots, None, known)
            if ev is not None:
                # the server's engine is the run's own: its keys carry the backend
                used[i] = (f.run.id, ev, current_sizes(f, f.backend))
                limits = engine_limits(f)
        if each is not None:
            each(f)
        return limits

    groups, limits_of = _servers(facts, visit)
    for positions in groups:
        mine = [used[i] for i in positions if i in used]
        if not mine:
            continue
        limits = limits_of[positions[0]]
        adv = _server_advice(
            [(rid, ev) for rid, ev, _ in mine], limits, starts_per_day=starts_per_day
        )
        if adv is None:
            continue
        for rid, ev, (sizes, source) in mine:
            out[rid] = replace(adv, current=_own_current(sizes, source, ev, adv, limits))
    return out


def _own_current(
    sizes: list[int], source: SizesSource, ev: RunEvidence, adv: Advice, limits: EngineLimits
) -> SetCost | None:
    """A run's own set (its :func:`current_sizes`) priced on its own traffic (the server's
    parameters)."""
    if source == "default" or not sizes:
        return None
    hist = traffic_histogram(ev.traffic, limits)
    if not hist:
        return None
    return adv.price(sizes, hist)
