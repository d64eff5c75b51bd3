"""The names a batch's classification uses (diag.facts.classify makes them): its verdict and
the reason for it. A leaf: the rules, the report and the renderers read the same names."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

# Why a batch got its verdict: the ``reason`` column. One name per cause, used as is by the
# rules (``eager_cause``, the rule pack's remedy keys) and the HTML labels.
Reason = Literal[
    "in_window",  # graph: a captured size (or padded up to one) served it
    "above_ceiling",  # eager: larger than the largest captured size
    "unpadded_gap",  # eager: between captured sizes with padding off
    "engine_reported_eager",  # eager: inside the window, but the engine says it ran eager
    "logged_eager",  # eager: the engine says so and the window is not in the logs
    "graphs_disabled",  # eager: graphs off for the run
    "window_unknown",  # unknown: no window to judge by
    "idle",  # unknown: an empty batch
]
EAGER_REASONS: tuple[Reason, ...] = (
    "above_ceiling",
    "unpadded_gap",
    "engine_reported_eager",
    "logged_eager",
)

# verdicts, reasons and origins are computed as small integer codes and kept as categoricals
# of these fixed names: 1 byte a row instead of a string (object arrays of 1M+ Python
# strings cost ~0.7 s a column to build, Arrow strings 13-20 bytes a row), the same
# categories in every run and part so concatenations stay categorical
VERDICTS = ("graph", "eager", "unknown")
REASONS = (
    "in_window",
    "above_ceiling",
    "unpadded_gap",
    "engine_reported_eager",
    "logged_eager",
    "graphs_disabled",
    "window_unknown",
    "idle",
    "logged_graph",
)
OTHER_VERDICT = len(VERDICTS)  # a verdict column holding anything else (never made here)


def verdict_codes(batches: pd.DataFrame, column: str = "verdict") -> np.ndarray:
    """The verdict column as int8 codes into VERDICTS (3: anything else): the categorical's
    own codes, or one comparison per name for a frame built elsewhere."""
    col = batches[column]
    if isinstance(col.dtype, pd.CategoricalDtype) and tuple(col.cat.categories) == VERDICTS:
        return np.asarray(col.array.codes)  # (the Categorical's codes, without a Series)
    codes = np.full(len(col), OTHER_VERDICT, dtype=np.int8)
    for code, name in enumerate(VERDICTS):
        codes[(col == name).to_numpy(dtype=bool, na_value=False)] = code
    return codes


@dataclass(frozen=True)
class EagerReason:
    """Eager decode batches of one reason: their weighted count and batch-size range (None
    where no size was logged)."""

    reason: str  # a :data:`Reason`, or "unknown" where the row has none
    batches: float
    min_size: float | None
    max_size: float | None


def eager_reasons(batches: pd.DataFrame) -> tuple[EagerReason, ...]:
    """The eager batches of a classification by reason, most batches first (a run's report
    keeps them beside its facts: its section reads them without its rows)."""
    if batches is None or batches.empty or "verdict" not in batches:
        return ()
    mask = verdict_codes(batches) == 1
    if not mask.any():
        return ()
    col = batches["reason"]
    if isinstance(col.dtype, pd.CategoricalDtype):  # (its codes: no filtered copy, no hashing)
        codes = np.asarray(col.array.codes)[mask]  # -1: no reason
        names = col.array.categories
    else:
        codes, names = pd.factorize(col[mask], use_na_sentinel=True)
    sizes = pd.to_numeric(batches["batch_size"][mask], errors="coerce").to_numpy(
        dtype="float64", na_value=np.nan
    )
    weights = pd.to_numeric(batches["weight"][mask], errors="coerce").to_numpy(
        dtype="float64", na_value=1.0
    )
    seen, first = np.unique(codes, return_index=True)
    rows = []
    for code in seen[np.argsort(first)]:  # in order of first appearance
        rows_of = codes == code
        size = sizes[rows_of]
        size = size[~np.isnan(size)]
        lo, hi = (float(size.min()), float(size.max())) if len(size) else (None, None)
        name = "unknown" if code < 0 else _reason_name(names[code])
        rows.append(EagerReason(name, float(weights[rows_of].sum()), lo, hi))
    # most batches first; equal counts in the order of their first row (a stable sort)
    return tuple(sorted(rows, key=lambda r: -r.batches))


def _reason_name(value: object) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "unknown"
    return str(value)
