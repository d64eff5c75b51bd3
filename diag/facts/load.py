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

from collections.abc import Mapping

import numpy as np
import pandas as pd

LOAD_COLUMNS = ["ts", "rank", "kv_usage", "running", "waiting", "evicted", "source", "line"]


def _num(frame: pd.DataFrame, col: str) -> np.ndarray:
    if col not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


def _part(frame: pd.DataFrame, **cols: np.ndarray | float) -> pd.DataFrame:
    n = len(frame)
    data: dict[str, object] = {
        "ts": _num(frame, "ts"),
        "rank": (
            frame["rank"].astype("object").fillna("").to_numpy() if "rank" in frame else [""] * n
        ),
        "source": frame["source"].astype("object").to_numpy() if "source" in frame else [""] * n,
        "line": _num(frame, "line"),
    }
    for name in ("kv_usage", "running", "waiting", "evicted"):
        v = cols.get(name, np.nan)
        data[name] = v if isinstance(v, np.ndarray) else np.full(n, v)
    return pd.DataFrame(data)[LOAD_COLUMNS]


def load_frame(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """KV usage (fraction 0-1), running / waiting requests and evicted requests per sample,
    sorted by time; empty (with the columns) when the logs hold none of it."""
    parts: list[pd.DataFrame] = []
    s = tables.get("stats")
    if s is not None and not s.empty:
        part = _part(
            s,
            kv_usage=_num(s, "kv_usage") / 100.0,
            running=_num(s, "running"),
            waiting=_num(s, "waiting"),
            evicted=np.nan_to_num(_num(s, "preemptions"), nan=0.0),
        )
        if "engine_index" in s and s["engine_index"].notna().any():
            idx = pd.to_numeric(s["engine_index"], errors="coerce")
            named = "engine " + idx.astype("Int64").astype(str)
            part["rank"] = np.where(idx.notna(), named, part["rank"])
        parts.append(part)
    d = tables.get("decode_batch")
    if d is not None and not d.empty:
        parts.append(
            _part(
                d,
                kv_usage=_num(d, "token_usage"),
                running=_num(d, "batch_size"),
                waiting=_num(d, "queue"),
                evicted=0.0,
            )
        )
    p = tables.get("prefill_batch")
    if p is not None and not p.empty:
        parts.append(_part(p, running=_num(p, "running"), waiting=_num(p, "queue"), evicted=0.0))
    r = tables.get("retract")
    if r is not None and not r.empty:
        parts.append(_part(r, evicted=np.nan_to_num(_num(r, "count"), nan=1.0)))
    parts = [x for x in parts if not x.empty]
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
