"""The run's load over time: KV-pool usage, running and waiting requests, evictions.

One row per logged sample, from whichever periodic tables the engine writes (no engine
branch: each engine fills its own tables, see :mod:`diag.events`):

- ``stats`` (vLLM LoggingStatLogger): ``kv_usage`` as printed in percent, ``running``,
  ``waiting`` (V0 "Pending"), ``preemptions`` in the interval (printed when > 0);
- ``decode_batch`` (SGLang): ``token_usage`` (fraction), ``batch_size`` = #running-req,
  ``queue`` = #queue-req; ``prefill_batch``: ``running``, ``queue`` (no usage);
- ``retract``: SGLang "KV cache pool is full. Retract requests" (#retracted_reqs) and vLLM
  V0 "Sequence group ... is preempted" (one request each).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

LOAD_COLUMNS = ["ts", "rank", "kv_usage", "running", "waiting", "evicted", "source", "line"]


def _num(frame: pd.DataFrame, col: str) -> np.ndarray:
    if col not in frame:
        return np.full(len(frame), np.nan)
    return np.asarray(
        pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    )


Column = Callable[[pd.DataFrame], np.ndarray] | float  # a column of the load, or a constant


def _col(name: str, scale: float = 1.0, fill: float | None = None) -> Column:
    def read(frame: pd.DataFrame) -> np.ndarray:
        v = _num(frame, name) * scale if scale != 1.0 else _num(frame, name)
        return v if fill is None else np.nan_to_num(v, nan=fill)

    return read


# table -> the load columns it fills (the rest stay NaN), see the module doc
_SOURCES: dict[str, dict[str, Column]] = {
    "stats": {
        "kv_usage": _col("kv_usage", 0.01),
        "running": _col("running"),
        "waiting": _col("waiting"),
        "evicted": _col("preemptions", fill=0.0),
    },
    "decode_batch": {
        "kv_usage": _col("token_usage"),
        "running": _col("batch_size"),
        "waiting": _col("queue"),
        "evicted": 0.0,
    },
    "prefill_batch": {"running": _col("running"), "waiting": _col("queue"), "evicted": 0.0},
    "retract": {"evicted": _col("count", fill=1.0)},
}
_VALUES = ("kv_usage", "running", "waiting", "evicted")


def _ranks(frame: pd.DataFrame) -> pd.Series:
    """Who printed each sample: the rank, or for vLLM data-parallel stats the engine index."""
    rank = frame["rank"] if "rank" in frame else pd.Series([""] * len(frame), index=frame.index)
    if "engine_index" in frame and frame["engine_index"].notna().any():
        idx = pd.to_numeric(frame["engine_index"], errors="coerce")
        named = "engine " + idx.astype("Int64").astype(str)
        rank = pd.Series(
            np.where(idx.notna(), named, rank.astype("object").fillna("")), index=frame.index
        )
    return rank


def _value(cols: Mapping[str, Column], name: str, frame: pd.DataFrame) -> np.ndarray:
    v = cols.get(name, np.nan)
    return np.full(len(frame), v) if isinstance(v, float) else v(frame)


def _present(tables: Mapping[str, pd.DataFrame]) -> list[tuple[pd.DataFrame, dict[str, Column]]]:
    out = []
    for kind, cols in _SOURCES.items():
        frame = tables.get(kind)
        if frame is not None and len(frame) > 0:
            out.append((frame, cols))
    return out


def _part(frame: pd.DataFrame, cols: Mapping[str, Column]) -> pd.DataFrame:
    data: dict[str, object] = {
        "ts": _num(frame, "ts"),
        "rank": _ranks(frame).astype("object").fillna("").to_numpy(),
        "source": (
            frame["source"].astype("object").to_numpy() if "source" in frame else [""] * len(frame)
        ),
        "line": _num(frame, "line"),
    }
    for name in _VALUES:
        data[name] = _value(cols, name, frame)
    return pd.DataFrame(data)[LOAD_COLUMNS]


def load_frame(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """KV usage (fraction 0-1), running / waiting requests and evicted requests per sample,
    sorted by time; empty (with the columns) when the logs hold none of it."""
    parts = [_part(frame, cols) for frame, cols in _present(tables)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in LOAD_COLUMNS})
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["ts", "line"], kind="stable", na_position="last").reset_index(drop=True)


def has_load(frame: pd.DataFrame) -> bool:
    """Any KV usage or request count logged (evictions alone do not make a timeline)."""
    return bool(frame["kv_usage"].notna().any() or frame["running"].notna().any())


def first_rank(frame: pd.DataFrame) -> pd.DataFrame:
    """The samples of the first rank / engine when several print them (data-parallel
    engines each log their own stats: interleaved, one line would zigzag between them)."""
    ranks = [r for r in pd.unique(frame["rank"]) if r not in ("", None)]
    if len(ranks) <= 1:
        return frame
    first = sorted(ranks, key=str)[0]
    keep = frame["rank"].isin([first, "", None])
    return frame[keep].reset_index(drop=True)


def load_timeline(
    tables: Mapping[str, pd.DataFrame], max_points: int
) -> tuple[pd.DataFrame, float | None, np.ndarray]:
    """The first rank's load for drawing (see :func:`first_rank`), the bin width in seconds
    (None: one row per sample) and the time stamps of its samples (the run's time axis
    spans them).

    Up to ``max_points`` samples this is ``first_rank(load_frame(tables))``. A busy server
    logs millions of samples, and a timeline of each is a report of hundreds of MB that no
    browser draws; beyond ``max_points`` timed samples, time is cut into ``max_points``
    equal bins, each keeping what an incident is read from: the highest KV usage and the
    most running and waiting requests in it (pressure is a maximum, not a mean) and the sum
    of evictions. The bins are filled table by table, one column at a time, so the
    per-sample frame is never built. Samples without a time stamp are left out of bins."""
    present = _present(tables)
    if sum(len(frame) for frame, _ in present) <= max_points:
        return _every_sample(tables)
    ranks = [_ranks(frame) for frame, _ in present]
    named = {r for rank in ranks for r in pd.unique(rank) if isinstance(r, str) and r}
    first = sorted(named)[0] if len(named) > 1 else None
    keeps = [
        slice(None)
        if first is None
        else ((rank == first) | rank.isna() | (rank == "")).to_numpy(dtype=bool)
        for rank in ranks
    ]
    stamps = [_num(frame, "ts")[keep] for (frame, _), keep in zip(present, keeps, strict=True)]
    every = np.concatenate(stamps)
    finite = every[np.isfinite(every)]
    if len(finite) <= max_points:
        return _every_sample(tables)
    lo, hi = float(finite.min()), float(finite.max())
    width = (hi - lo) / max_points or 1.0
    count = np.zeros(max_points, dtype=np.int64)
    top = {name: np.full(max_points, -np.inf) for name in _VALUES[:3]}
    evicted = np.zeros(max_points)
    for (frame, cols), keep, ts in zip(present, keeps, stamps, strict=True):
        timed = np.isfinite(ts)
        ok: slice | np.ndarray = slice(None) if timed.all() else timed  # (no copy: all timed)
        idx = np.minimum(((ts[ok] - lo) / width).astype(np.int64), max_points - 1)
        count += np.bincount(idx, minlength=max_points)
        for name, highest in top.items():
            if name in cols:  # fmax ignores NaN: a bin where a column says nothing stays -inf
                np.fmax.at(highest, idx, _value(cols, name, frame)[keep][ok])
        ev = cols.get("evicted", np.nan)
        if not isinstance(ev, float):
            ev_rows = np.nan_to_num(ev(frame)[keep][ok], nan=0.0)
            evicted += np.bincount(idx, weights=ev_rows, minlength=max_points)
        elif ev == ev and ev != 0.0:  # (a constant count per sample; NaN and 0 add nothing)
            evicted += ev * np.bincount(idx, minlength=max_points)
    hit = np.flatnonzero(count)
    out: dict[str, object] = {
        "ts": lo + (hit + 0.5) * width,
        "rank": first or "",
        "source": "",  # a bin spans many lines
        "line": np.nan,
        "evicted": evicted[hit],
    }
    for name, highest in top.items():
        out[name] = np.where(np.isneginf(highest), np.nan, highest)[hit]
    return pd.DataFrame(out)[LOAD_COLUMNS], width, every


def _every_sample(
    tables: Mapping[str, pd.DataFrame],
) -> tuple[pd.DataFrame, None, np.ndarray]:
    frame = first_rank(load_frame(tables))
    return frame, None, frame["ts"].to_numpy(dtype="float64")
