"""Where the engine's logged graph/eager flag and the capture window disagree (issue 34
point 8), with the counts, so that a run whose every batch the engine flagged as graph while
the window puts some above its ceiling says so (GD182), not only a ratio in the JSON."""

from __future__ import annotations

import numpy as np
import pandas as pd

from diag.facts import classify as cls

_GRAPH = cls.VERDICTS.index("graph")
_EAGER = cls.VERDICTS.index("eager")


def agreement(batches: pd.DataFrame, ceiling: int | None) -> dict[str, object] | None:
    """``classify.inference_agreement`` (rows compared, share agreeing) and, weighted by
    the decode steps each row stands for: steps compared, logged graph but eager by the
    window, logged eager but graph by the window, logged graph above the ceiling and the
    largest such batch."""
    base = cls.inference_agreement(batches)
    if base is None:
        return None
    inferred = cls.verdict_codes(batches, "inferred")
    final = cls.verdict_codes(batches)
    logged = batches["logged"].to_numpy(dtype=bool)
    w = batches["weight"].to_numpy(dtype=float, na_value=1.0)
    size = batches["batch_size"].to_numpy(dtype=float, na_value=np.nan)
    decided = (  # (two comparisons each: np.isin costs ~30 us a call on a few rows)
        logged
        & ((inferred == _GRAPH) | (inferred == _EAGER))
        & ((final == _GRAPH) | (final == _EAGER))
    )
    g_e = decided & (final == _GRAPH) & (inferred == _EAGER)
    e_g = decided & (final == _EAGER) & (inferred == _GRAPH)
    above = logged & (final == _GRAPH) & (size > ceiling) if ceiling else np.zeros(len(w), bool)
    return {
        **base,
        "steps_compared": int(round(w[decided].sum())),
        "logged_graph_inferred_eager": int(round(w[g_e].sum())),
        "logged_eager_inferred_graph": int(round(w[e_g].sum())),
        "logged_graph_above_ceiling": int(round(w[above].sum())),
        "largest_logged_graph": int(np.nanmax(size[logged & (final == _GRAPH)]))
        if (logged & (final == _GRAPH) & ~np.isnan(size)).any()
        else None,
        "ceiling": ceiling,
    }
