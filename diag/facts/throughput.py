"""A run's decode speed in and out of the capture window: per verdict (graph-served,
eager), the quartiles of the engine's generation throughput and of that throughput per
request, over the decode batch lines that logged one.

Per request first (what a user feels); the engine total grows with batch size, so big eager
batches look faster there. Computed once with the facts' batches (every surface quotes it:
the text summary's speed line, the HTML page's table)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from diag.batch_labels import VERDICTS, verdict_codes

QUARTILES = (0.25, 0.5, 0.75)


@dataclass(frozen=True)
class DecodeSpeed:
    """One verdict's batches with a throughput figure (tok/s quartiles)."""

    verdict: str  # graph | eager
    n: int
    gen_throughput: tuple[float, float, float]  # p25, p50, p75 of the engine total
    per_req: tuple[float, float, float]  # the same, divided by the batch's requests


def decode_speeds(batches: pd.DataFrame) -> tuple[DecodeSpeed, ...]:
    """Graph-served first, then eager; none where no batch line logged a throughput."""
    if batches is None or len(batches) == 0 or "batch_size" not in batches:
        return ()
    if "gen_throughput" not in batches:
        return ()
    size = _floats(batches["batch_size"])
    gen = _floats(batches["gen_throughput"])
    v = (
        np.minimum(verdict_codes(batches), 2)
        if "verdict" in batches
        else np.full(len(batches), 2, np.int8)
    )
    with np.errstate(invalid="ignore"):
        usable = np.isfinite(size) & (size > 0) & (gen > 0) & (v < 2)
    out = []
    for code in np.unique(v[usable]).tolist():
        mine = usable & (v == code)
        g = gen[mine]
        per_req = g / size[mine]
        out.append(
            DecodeSpeed(
                VERDICTS[int(code)],
                len(g),
                _quartiles(g),
                _quartiles(per_req),
            )
        )
    return tuple(out)


def eager_change(speeds: Sequence[DecodeSpeed]) -> float | None:
    """Eager decode's speed per request against graph-served (medians): +0.2 is 20 % faster,
    -0.2 20 % slower; None without both (or with a zero graph-served median)."""
    by = {s.verdict: s for s in speeds}
    g, x = by.get("graph"), by.get("eager")
    if g is None or x is None or g.per_req[1] <= 0:
        return None
    return (x.per_req[1] - g.per_req[1]) / g.per_req[1]


def _quartiles(a: np.ndarray) -> tuple[float, float, float]:
    q = np.quantile(a, QUARTILES, overwrite_input=True)  # (our own copies)
    return float(q[0]), float(q[1]), float(q[2])


def _floats(series: pd.Series) -> np.ndarray:
    if series.dtype == np.float64:
        return np.asarray(series.to_numpy())
    return np.asarray(
        pd.to_numeric(series, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    )
