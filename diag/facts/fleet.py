"""Runs of a fleet grouped by what decides capture, and the runs whose verdict stands out.

A fleet incident brings hundreds of runs of a few configurations; the operator needs them
grouped by engine, version, model and the configuration that matters for CUDA-graph capture
(graph mode and kind, capture sizes and ceiling, TP/PP/DP, attention backend, the engine's own
graph switches), with verdict counts per group and the runs whose verdict differs from their
group's majority. Everything here is a pure function of per-run values: :func:`capture_config`
reads them from a run's facts once, when the run is built.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from diag.engines import spec_for
from diag.facts.record import RunFacts
from diag.facts.verdict import VERDICTS, Verdict

__all__ = [
    "CaptureConfig",
    "FleetGroup",
    "FleetMember",
    "Outlier",
    "capture_config",
    "group_fleet",
]


@dataclass(frozen=True)
class CaptureConfig:
    """What a run was configured to capture, as its record and config echo show it."""

    graph_mode: str  # the record's enabled | disabled | unknown
    cudagraph_mode: str | None  # vLLM's mode name, SGLang's graph kind (the record's)
    capture_sizes: tuple[int, ...] | None
    ceiling: int | None  # the record's cuda_graph_max_bs
    tp: int | None
    pp: int | None
    dp: int | None
    attention: str | None
    prefill_node: bool | None
    # did the log echo the engine's config (server_args, non-default args)? Without one, runs
    # that agree on the rest are not known to share a configuration
    echoed: bool = True
    # the engine's own graph switches (graphs off, padding off) that the config echo sets on,
    # as the echo spells them: ("disable_cuda_graph_padding", ...)
    switches: tuple[str, ...] = ()


@dataclass(frozen=True)
class FleetMember:
    """One run as the fleet summary sees it."""

    run_id: str
    backend: str
    engine_version: str | None
    model: str | None
    config: CaptureConfig
    verdict: Verdict
    verdict_reason: str


@dataclass(frozen=True)
class Outlier:
    """A run whose verdict differs from its group's majority, and why it got its own."""

    run_id: str
    verdict: Verdict
    verdict_reason: str


@dataclass(frozen=True)
class FleetGroup:
    """Runs of one engine, version, model and capture configuration."""

    backend: str
    engine_version: str | None
    model: str | None
    config: CaptureConfig
    run_ids: tuple[str, ...]
    verdicts: tuple[tuple[Verdict, int], ...]  # in VERDICTS order, counts > 0 only
    majority: Verdict | None  # None: no verdict holds more runs than every other
    outliers: tuple[Outlier, ...]


def capture_config(f: RunFacts) -> tuple[str | None, CaptureConfig]:
    """The run's model and capture configuration: the one place the summary reads a run's
    record and config echo (so a typed record changes this function only)."""
    rec, cfg = f.record, f.config
    spec = spec_for(f.backend)
    switches = (
        ()
        if spec is None
        else ((spec.graphs_off_key, cfg.graphs_off), (spec.padding_off_key, not cfg.padding))
    )
    return (
        cfg.model,
        CaptureConfig(
            graph_mode=rec.graph_mode,
            cudagraph_mode=rec.cudagraph_mode,
            capture_sizes=rec.graph_capture_sizes or None,
            ceiling=rec.cuda_graph_max_bs,
            tp=cfg.tp_size,
            pp=cfg.pp_size,
            dp=cfg.dp_size,
            attention=rec.resolved_backend,  # the backend the run used (the config's reading)
            prefill_node=rec.prefill_node,
            echoed=cfg.echoed,
            switches=tuple(k for k, on in switches if k and on),
        ),
    )


def group_fleet(members: Sequence[FleetMember]) -> list[FleetGroup]:
    """Groups of runs sharing engine, version, model and capture configuration, largest
    first (ties in input order); runs keep their input order within a group."""
    by_key: dict[tuple[object, ...], list[FleetMember]] = {}
    for m in members:
        by_key.setdefault((m.backend, m.engine_version, m.model, m.config), []).append(m)
    groups = sorted(by_key.values(), key=lambda g: -len(g))  # (stable: input order on ties)
    return [_group(g) for g in groups]


def _group(runs: list[FleetMember]) -> FleetGroup:
    counts = Counter(m.verdict for m in runs)
    ranked = counts.most_common()
    majority = ranked[0][0] if len(ranked) == 1 or ranked[0][1] > ranked[1][1] else None
    first = runs[0]
    return FleetGroup(
        backend=first.backend,
        engine_version=first.engine_version,
        model=first.model,
        config=first.config,
        run_ids=tuple(m.run_id for m in runs),
        verdicts=tuple((v, counts[v]) for v in VERDICTS if counts[v]),
        majority=majority,
        outliers=tuple(
            Outlier(m.run_id, m.verdict, m.verdict_reason)
            for m in runs
            if majority is not None and m.verdict != majority
        ),
    )
