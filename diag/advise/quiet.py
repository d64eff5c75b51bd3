"""Small sizes for the quiet hour no log showed: a set fitted to a busy window must not pad
every batch of a quiet hour up to its lowest busy size (issue 34 item 5).

A set fitted to traffic of 40-80 requests is ``1 40 48 ...``: the first quiet hour pads every
batch of 2-39 to 40. Small graphs cost almost nothing to capture, so each size of the engine's
conventional grid below the set's lowest fitted size ``L`` is put back wherever its capture
cost (seconds per start x the start rate, and the graph memory where the pool is full) is
below the padding it saves on a quiet hour: the run's own steps per hour, spread evenly over
batch sizes 1..L. Adding ``s`` between buckets ``p < s < n`` saves ``n - s`` slots on each
batch size in ``(p, s]``, at the fitted (or default) step-time slope per slot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from diag.advise.cost_model import CostParameters, set_cost

__all__ = ["keep_quiet_sizes", "quiet_floor"]


def quiet_floor(sizes: Sequence[int], forced_min: int) -> int | None:
    """The set's lowest size above the forced minimum: the top of the quiet hour (None: the
    set has nothing above its minimum)."""
    above = [s for s in sizes if s > forced_min]
    return min(above) if above else None


def _saving_s_h(ordered: Sequence[int], s: int, per_size_h: float, slot_s: float) -> float:
    """GPU-s per hour of quiet-hour padding that adding ``s`` saves (``ordered``: the set)."""
    below = [x for x in ordered if x < s]
    above = [x for x in ordered if x > s]
    if not above:
        return 0.0
    p = below[-1] if below else 0
    n = above[0]
    return (s - p) * (n - s) * slot_s * per_size_h


def keep_quiet_sizes(
    sizes: tuple[int, ...],
    hist: Mapping[int, float],
    grid: Sequence[int],
    forced_min: int,
    params: CostParameters,
    padding: bool,
    max_k: int | None = None,
) -> tuple[int, ...]:
    """``sizes`` with the grid's sizes below the quiet floor added, best saving first, while
    each saves more quiet-hour padding than its graph costs (within ``max_k``). Without
    padding (only exact sizes replay) nothing is added: the quiet hour would run eager anyway
    at the sizes not captured, which the eager prior prices elsewhere."""
    floor = quiet_floor(sizes, forced_min)
    if not padding or floor is None or floor <= forced_min + 1:
        return sizes
    steps_h = float(params.steps_per_hour.value or 0.0)
    slot_s = float(params.slot_step_s.value or 0.0)
    per_size_h = steps_h / floor  # the quiet hour's steps, evenly over batch sizes 1..floor
    out = tuple(sorted(set(sizes)))
    base = set_cost(out, hist, params, padding=padding)
    # the graph memory term is linear in the set's graph memory (the traffic's busy time
    # does not change with sizes below it), so each trial is priced without the histogram
    per_gib = base.memory_s_h / base.capture_gib if base.capture_gib > 0 else 0.0
    per_start = params.starts_per_hour()

    def spent(trial: Sequence[int]) -> float:
        return params.capture_time_s(trial) * per_start + params.capture_gib(trial) * per_gib

    fixed = spent(out)
    while max_k is None or len(out) < max_k:
        best: tuple[float, tuple[int, ...], float] | None = None
        for s in grid:
            if s >= floor or s <= forced_min or s in out:
                continue
            trial = tuple(sorted({*out, s}))
            cost = spent(trial)
            net = _saving_s_h(out, s, per_size_h, slot_s) - (cost - fixed)
            if net > 0 and (best is None or net > best[0]):
                best = (net, trial, cost)
        if best is None:
            break
        out, fixed = best[1], best[2]
    return out
