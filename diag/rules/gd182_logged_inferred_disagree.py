"""GD182 logged-inferred-disagree."""

from __future__ import annotations

import numpy as np

from diag.facts import classify as cls
from diag.facts.record import RunFacts
from diag.model import Evidence
from diag.rules.base import Remedy, Rule, Threshold
from diag.rules.metrics import RunMetrics
from diag.rules.selectors import _dedupe, _ev, _top, _window_lines, selector


@selector("disagreeing_batches")
def _disagreeing(f: RunFacts) -> list[Evidence]:
    """The capture-size line, then the largest batches the engine flagged one way and the
    window puts the other."""
    b = f.batches
    if b.empty:
        return _window_lines(f)
    final = cls.verdict_codes(b)
    inferred = cls.verdict_codes(b, "inferred")
    logged = b["logged"].to_numpy(dtype=bool)
    differ = logged & (final != inferred) & (inferred != cls.VERDICTS.index("unknown"))
    size = b["batch_size"].to_numpy(dtype=float, na_value=np.nan)
    return _dedupe(_window_lines(f) + _ev(_top(b, differ, size, 3), 3))


def _counts(m: RunMetrics) -> tuple[int, int, int, int]:
    a = m.window.agreement or {}
    return (
        int(a.get("steps_compared") or 0),
        int(a.get("logged_graph_inferred_eager") or 0),
        int(a.get("logged_eager_inferred_graph") or 0),
        int(a.get("logged_graph_above_ceiling") or 0),
    )


class GD182(Rule):
    """The engine's own per-batch graph flag and the capture window disagree beyond noise:
    batches the engine logged as graph-served that the window puts eager (above the ceiling
    graphdiag read, or at a size it does not hold). A graph cannot replay a size that was
    not captured, so the window or the batch size read is not the engine's. (Batches logged
    eager inside the window are the engine knowing more, e.g. a DP rank prefilling: GD110's
    causes, counted here only beside.) The captured share counts the engine's flag
    (it is the engine's own check); the disagreement says the window graphdiag read (its
    capture sizes or ceiling) or the batch size it reads is not the one the engine used, so
    the out-of-window and padding figures built on the window are in doubt.

    Judgement: both ways are counted in decode steps (a SGLang decode line stands for the
    steps since the last one); the largest batch logged as graph is named with the ceiling.
    A handful of disagreeing steps is noise (a batch size read from a line that rounds, a
    step at the edge): min_steps and min_share set the floor.

    Condition: at least min_compared decode steps carry both a logged flag and an inferred
    verdict, and the steps logged graph but eager by the window are at least min_steps and
    min_share of them.

    Fires::

        incident: vllm-logged-graph-above-ceiling

    Near miss (in-window batches the engine ran eagerly: the engine knows more)::

        incident: sglang-dp-prefill-eager
    """

    code = "GD182"
    name = "logged-inferred-disagree"
    severity = "info"
    trigger = "the engine's per-batch graph flag and the capture window disagree beyond noise"
    impact = 10
    evidence = "disagreeing_batches"
    reads = ("window.agreement",)
    thresholds = {
        "min_compared": Threshold(
            20, "Fewer steps with both a logged flag and a window verdict are too few to judge."
        ),
        "min_steps": Threshold(
            5, "A few disagreeing steps are edge cases (a rounded batch size), not a window error."
        ),
        "min_share": Threshold(
            0.02, "Below 2 % of the compared steps the disagreement cannot move any figure."
        ),
    }
    remedies = (
        Remedy(
            "Check the cited capture-size line against the largest batches the engine flagged "
            "as graph: the out-of-window and padding figures rest on that window, the captured "
            "share on the engine's flag; if they differ, trust the flag for coverage.",
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        compared, g_e, _, _ = _counts(m)
        return (
            compared >= self.t("min_compared")
            and g_e >= self.t("min_steps")
            and g_e >= self.t("min_share") * compared
        )

    def message(self, m: RunMetrics) -> str:
        compared, g_e, e_g, above = _counts(m)
        a = m.window.agreement or {}
        differ = g_e + e_g
        parts = []
        if g_e:
            where = ""
            if above and a.get("ceiling"):
                where = (
                    f", {above:,} of them above the ceiling of {a['ceiling']}"
                    f" (largest {a.get('largest_logged_graph')})"
                )
            parts.append(f"{g_e:,} logged as graph but eager by the window{where}")
        if e_g:
            parts.append(f"{e_g:,} logged as eager but inside the window")
        return (
            f"The engine's per-batch graph flag and the capture window disagree on {differ:,} "
            f"of {compared:,} decode steps ({differ / compared:.0%}): {'; '.join(parts)}. "
            "The captured share counts the engine's flag"
        )
