"""Per-rank figures of a run and the rank-0 choice of logged sizing values.

Split from :mod:`diag.facts.record` (which builds the run's facts and calls these): every
rank prints its own capture, KV and sizing lines, and the run's figures prefer rank 0's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from diag.facts import classify as cls
from diag.facts.runs import Run


def is_rank0(rank: str | None) -> bool:
    """'' / 'TP0' / 'DP0-TP0' / 'GPU0' count as rank 0; anything with a non-zero index does not."""
    if not rank:
        return True
    return all(int(n) == 0 for n in re.findall(r"-?\d+", rank))


def plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def sizing_values(frame: pd.DataFrame, rank0: bool = True) -> dict[str, Any]:
    """Every sizing name's last logged value (rank 0's if rank 0 logged that name), in one
    pass over the rows: a filter per name cost a few pandas calls per name and run."""
    if frame.empty:
        return {}
    return _last_sizing(zip(frame["name"], frame["rank"], frame["value"], strict=True), rank0)


def _last_sizing(rows: Iterable[tuple[Any, Any, Any]], rank0: bool) -> dict[str, Any]:
    last_any: dict[str, Any] = {}
    last_rank0: dict[str, Any] = {}
    has_rank0: set[str] = set()
    for name, rank, value in rows:
        zero = rank0 and is_rank0(rank)
        if zero:
            has_rank0.add(name)
        value = plain(value)
        if value is None:
            continue
        last_any[name] = value
        if zero:
            last_rank0[name] = value
    out = {n: v for n, v in last_any.items() if n not in has_rank0}
    out.update(last_rank0)
    return out


def as_int(v: Any) -> int | None:
    try:
        return None if v is None or isinstance(v, bool) else int(v)
    except (TypeError, ValueError):
        return None


def kv_tokens(values: dict[str, Any]) -> int | None:
    v = values.get("kv_tokens")
    return as_int(v if v is not None else values.get("max_total_num_tokens"))


def rank_figures(run: Run, batches: pd.DataFrame) -> list[dict[str, Any]]:
    """Per-rank figures. Only capture ends, sizing and batches are read per rank, each
    split by rank on arrays (a pandas filter per rank and table cost more than the rest)."""
    ranks: set[str] = set()
    for frame in run.tables._frames.values():
        ranks.update(r for r in pd.unique(frame["rank"]) if isinstance(r, str) and r)
    if not ranks:
        return []
    ends, sized = run.tables["capture_end"], run.tables["sizing"]
    end_rank = ends["rank"].to_numpy(dtype=object)
    end_time = ends["time_s"].to_numpy(dtype=float)
    end_mem = ends["mem_gib"].to_numpy(dtype=float)
    sizing_rows = (
        list(zip(sized["name"], sized["rank"], sized["value"], strict=True))
        if not sized.empty
        else []
    )
    no_batches = None
    if batches.empty:  # every rank reads the same (empty) figures
        counts = cls.batch_counts(batches)
        no_batches = (cls.captured_share(counts), cls.padding_waste(batches))
    out = []
    for rank in sorted(ranks, key=_rank_sort_key):
        mine = end_rank == rank
        cap_time, cap_mem = _sum_or_none(end_time[mine]), _sum_or_none(end_mem[mine])
        # one rank's rows: rank 0 or not, all of them count (as _rank0 keeps them all)
        values = _last_sizing((r for r in sizing_rows if r[1] == rank), rank0=False)
        if no_batches is not None:
            share, waste = no_batches
        else:
            rb = batches[batches["rank"] == rank]
            share, waste = cls.captured_share(cls.batch_counts(rb)), cls.padding_waste(rb)
        out.append(
            {
                "rank": rank,
                "capture_time_s": cap_time,
                "capture_mem_gib": cap_mem,
                "kv_tokens": kv_tokens(values),
                "gpu_blocks": as_int(values.get("gpu_blocks")),
                "kv_cache_gib": values.get("kv_cache_gib"),
                "max_concurrency": values.get("max_concurrency"),
                "captured_share": share,
                "padding_waste": waste,
            }
        )
    return out


def _sum_or_none(values: np.ndarray) -> float | None:
    """The rounded sum of the logged values, as _capture_totals gives it for one rank."""
    values = values[~np.isnan(values)]
    return round(float(pd.Series(values).sum()), 3) if len(values) else None


def _rank_sort_key(rank: str) -> tuple[Any, ...]:
    return tuple((p.rstrip("0123456789-"), int(re.sub(r"\D", "", p) or 0)) for p in rank.split("-"))
