"""What the engine accepts and how high a set may reach: limits, size grid, the ceiling policy.

The limits are typed, from the run's config through the engine spec; the ceiling policy is
step 1 of :mod:`diag.advise.bucket_sets`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from diag.advise.grouping import weighted_quantile
from diag.advise.traffic import Engine
from diag.engines import spec_for
from diag.engines.config import EngineConfig
from diag.engines.flags import accepts

__all__ = ["DEFAULT_HEADROOM", "EngineLimits", "ceiling_policy", "conventional_grid"]

DEFAULT_HEADROOM = 0.10
_GRID_LIMIT = 16384


@dataclass(frozen=True)
class EngineLimits(EngineConfig):
    """The run's config as its engine's spec read it (limits, how the engine counts and
    keeps sizes), and the set the run captured: what a recommendation starts from."""

    engine: Engine = "vllm"
    current_sizes: tuple[int, ...] = ()
    current_source: Literal["logged", "inferred", "default"] = "default"
    # the engine's default list for the version where the run shows no set of its own (graphs
    # off): the baseline a recommendation must beat ("just turn graphs back on")
    default_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.advice_rules is None:  # limits written out by hand: the engine's own rules
            spec = spec_for(self.engine)
            object.__setattr__(self, "advice_rules", spec.advice_rules if spec else None)


def conventional_grid(limits: EngineLimits, upto: int) -> list[int]:
    """The engine's own step pattern up to ``upto``: its default list for the version, extended
    past the default top with the list's last step; then the TBO/DP-attention multiple."""
    base = sorted(
        set(limits.rules.step_pattern(limits.version, bool(limits.speculative_algorithm)))
    )
    step = base[-1] - base[-2] if len(base) > 1 else 8
    grid = [*base]
    while grid[-1] < upto:
        grid.append(grid[-1] + step)
    m = limits.multiple()
    grid = [g for g in grid if g <= upto]
    if m > 1:
        grid = sorted({g for g in grid if g % m == 0} | {m})
    return grid


@dataclass(frozen=True)
class CeilingPolicy:
    """How the ceiling is chosen: ``headroom`` above the peak, ``max_ceiling`` caps it,
    ``min_coverage`` (``recommend --coverage``) lets it drop to the size that covers that
    share of the steps (larger steps then run eager); ``has_token_counts``: the steps' token
    counts are logged (vLLM's mixed steps need no floor then)."""

    headroom: float = DEFAULT_HEADROOM
    max_ceiling: int | None = None
    min_coverage: float | None = None
    has_token_counts: bool = False


def ceiling_policy(
    sizes: np.ndarray,
    weights: np.ndarray,
    limits: EngineLimits,
    policy: CeilingPolicy = CeilingPolicy(),
) -> tuple[int, list[str]]:
    """The ceiling and why (see :mod:`diag.advise.bucket_sets`, step 1): the one ceiling
    policy, as ``policy`` sets it."""
    headroom, max_ceiling = policy.headroom, policy.max_ceiling
    min_coverage, has_token_counts = policy.min_coverage, policy.has_token_counts
    notes: list[str] = []
    ok = sizes >= 1
    known, known_w = (sizes, weights) if ok.all() else (sizes[ok], weights[ok])
    peak = int(known.max())
    p999 = weighted_quantile(known, known_w, 0.999)
    want = math.ceil(max(peak, p999) * (1 + headroom))
    if min_coverage is not None:
        covering = weighted_quantile(known, known_w, min_coverage)
        if covering < want:
            notes.append(
                f"--coverage {min_coverage:g}: ceiling allowed down to {covering} {limits.unit} "
                f"(the size covering {min_coverage:.1%} of the steps); larger steps run eager"
            )
            max_ceiling = covering if max_ceiling is None else min(max_ceiling, covering)
        else:
            notes.append(
                f"--coverage {min_coverage:g}: the default ceiling (peak plus headroom) already "
                "covers that share"
            )
    floor_ = 0
    if limits.mixed_served() and not has_token_counts:
        default_top = max(
            limits.rules.default_window(
                limits.version, limits.max_running, limits.max_num_batched_tokens
            )
        )
        floor_ = max([default_top, *limits.current_sizes])
        if limits.max_num_batched_tokens:
            floor_ = min(floor_, limits.max_num_batched_tokens)
        if floor_ > want:
            notes.append(
                f"ceiling kept at {floor_} tokens: the logs show running requests only (stats lines), "
                "and vLLM's piecewise graphs also serve mixed prefill+decode steps whose scheduled "
                f"tokens they do not show; turn on {_step_size_source(limits)} to size it"
            )
    cap = limits.cap()
    grid = conventional_grid(limits, _GRID_LIMIT)
    target = max(want, floor_)
    if max_ceiling is not None:
        target = min(target, max_ceiling)
    ceiling = next((g for g in grid if g >= target), grid[-1])
    if cap is not None and ceiling > cap:
        below = [g for g in grid if g <= cap]
        ceiling = cap if limits.multiple() == 1 or cap % limits.multiple() == 0 else below[-1]
        notes.append(
            f"ceiling {ceiling}: the engine never runs more than {cap} {limits.unit} per step"
        )
    if max_ceiling is not None and ceiling < peak:
        notes.append(
            f"ceiling {ceiling} below the observed peak {peak} as asked: larger steps run eager"
        )
    return ceiling, notes


def _step_size_source(limits: EngineLimits) -> str:
    """Where this version logs each step's tokens: the metrics table where it has the flag."""
    debug = "DEBUG step lines (VLLM_LOGGING_LEVEL=DEBUG)"
    if accepts(limits.engine, "--cudagraph-metrics", limits.version):
        return "--cudagraph-metrics or " + debug
    return debug
