"""What advice reads of a run: its sampled steps, its capture measurement and KV sizing.

:class:`Traffic` is the advice's selection of the run's :class:`~diag.facts.steps.DecodeSteps`
(made by :func:`diag.advise.run_advice.run_traffic`); :func:`engine_size` gives each step's
size in the engine's capture unit (SGLang: requests per step; vLLM: tokens per step).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np

from diag.engines import spec_for

__all__ = [
    "CaptureMeasurement",
    "Engine",
    "RunEvidence",
    "Source",
    "Traffic",
    "capture_unit",
    "engine_size",
]

Engine = Literal["vllm", "sglang"]
Source = Literal[
    "run", "snapshot", "default", "given"
]  # where a figure came from ("given": the user)


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
    if capture_unit(engine) == "requests":
        return req if bool((req >= 1).all()) else np.where(req >= 1, req, 0)  # (all sized: no copy)
    tok = np.asarray(traffic.col("tokens", -1), dtype=np.int64)  # (int64 already: no copy)
    if bool((tok >= 1).all()):  # every step shows its tokens (vLLM DEBUG lines): no copy
        return tok
    return np.where(tok >= 1, tok, np.where(req >= 1, req * (1 + spec_tokens), 0))


def capture_unit(engine: Engine) -> str:
    """What the engine's capture sizes count (its spec in diag.engines)."""
    spec = spec_for(engine)
    if spec is None or spec.advice_rules is None:
        raise ValueError(f"no advice rules for engine {engine!r}")
    return spec.advice_rules.unit
