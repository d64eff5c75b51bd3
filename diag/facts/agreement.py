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
    steps = np.zeros(4)  # compared, graph/eager, eager/graph, above the ceiling
    largest: float | None = None
    for rows in cls.row_chunks(batches):  # (whole-number step sums: exact in any order)
        w = batches["weight"].iloc[rows].to_numpy(dtype=float, na_value=1.0)
        size = cls.floats(batches, "batch_size", rows)
        inf, fin, said = inferred[rows], final[rows], logged[rows]
        decided = (  # (two comparisons each: np.isin costs ~30 us a call on a few rows)
            said & ((inf == _GRAPH) | (inf == _EAGER)) & ((fin == _GRAPH) | (fin == _EAGER))
        )
        g_e = decided & (fin == _GRAPH) & (inf == _EAGER)
        e_g = decided & (fin == _EAGER) & (inf == _GRAPH)
        above = said & (fin == _GRAPH) & (size > ceiling) if ceiling else np.zeros(len(w), bool)
        steps += [w[decided].sum(), w[g_e].sum(), w[e_g].sum(), w[above].sum()]
        graph = size[said & (fin == _GRAPH)]
        graph = graph[~np.isnan(graph)]
        if len(graph):
            largest = float(graph.max()) if largest is None else max(largest, graph.max())
    return {
        **base,
        "steps_compared": int(round(steps[0])),
        "logged_graph_inferred_eager": int(round(steps[1])),
        "logged_eager_inferred_graph": int(round(steps[2])),
        "logged_graph_above_ceiling": int(round(steps[3])),
        "largest_logged_graph": None if largest is None else int(largest),
        "ceiling": ceiling,
    }
