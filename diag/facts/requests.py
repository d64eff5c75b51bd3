"""Per request: which share of its decode steps ran inside the capture window.

No engine logs which request rode which graph, so each request's lifetime (received ->
finished, from request log lines) is laid over the classified decode batches of the same
run: the batches logged while the request was alive stand for its decode steps.
Prefill-dominated (long-prompt) requests are marked: graphs barely help them whatever
the window.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from diag.events import EventTables
from diag.facts import classify as cls
from diag.facts.access import as_floats, col, is_in

PREFILL_DOMINATED_RATIO = 4.0  # prompt tokens per generated token

COLUMNS = [
    "request_id",
    "start_ts",
    "end_ts",
    "prompt_tokens",
    "completion_tokens",
    "steps_graph",
    "steps_eager",
    "in_window_share",
    "prefill_dominated",
]


#: the table of a run with no request: copied (~10 us) rather than made (~160 us a run)
_NONE = pd.DataFrame(columns=COLUMNS)


def request_table(tables: EventTables, batches: pd.DataFrame) -> pd.DataFrame:
    req = tables["request"]
    if len(req) == 0:
        return _NONE.copy()
    no_id = pd.isna(col(req, "request_id"))
    if no_id.all():
        return _NONE.copy()
    usable = ~no_id & ~np.isnan(as_floats(col(req, "ts")))
    if not usable.all():  # (a copy only where some line lacks an id or a clock)
        req = req[usable]
    columns, seen = _lifetime_columns(req)
    n = len(columns["request_id"])
    if not n:
        return _NONE.copy()
    # counted in order of the ids' first lines, where the lifetimes are nearly in time order
    # (sorting them for the searches is then ~2x cheaper than in id order), placed back by row
    graph_w, eager_w = np.empty(n), np.empty(n)
    graph_w[seen], eager_w[seen] = _windowed_counts(
        batches, columns["start_ts"][seen], columns["end_ts"][seen]
    )
    columns["steps_graph"] = graph_w
    columns["steps_eager"] = eager_w
    total = graph_w + eager_w
    with np.errstate(invalid="ignore", divide="ignore"):
        columns["in_window_share"] = np.where(total > 0, graph_w / total, np.nan)
    p, c = as_floats(columns["prompt_tokens"]), as_floats(columns["completion_tokens"])
    with np.errstate(invalid="ignore"):  # (a missing count: not prefill-dominated)
        columns["prefill_dominated"] = p >= PREFILL_DOMINATED_RATIO * np.maximum(c, 1.0)
    # one frame of every column (a column added at a time cost ~0.1 ms each, a small run)
    return pd.DataFrame({c: columns[c] for c in COLUMNS}, copy=False)


_LIFETIME_COLUMNS = COLUMNS[:5]  # what _lifetimes makes (the step counts come after)


def _lifetimes(req: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """:func:`_lifetime_columns` as a frame."""
    columns, seen = _lifetime_columns(req)
    if not len(columns["request_id"]):
        return pd.DataFrame(columns=_LIFETIME_COLUMNS), seen
    return pd.DataFrame(columns, copy=False), seen  # (fresh arrays: no stacked copy of them)


def _lifetime_columns(req: pd.DataFrame) -> tuple[dict[str, Any], np.ndarray]:
    """Per request id (sorted) seen both starting and ending: first start ts, last end ts,
    the largest prompt and completion token counts of any of its lines; and the frame's
    rows in order of their ids' first lines. One hash
    factorisation and numpy reductions instead of four group-bys over string keys; only the
    ids kept are sorted (any id dtype: object, category or Arrow strings). Logs with no start
    or no end line (vLLM logs its finished requests at DEBUG only) keep no request: they are
    told by the action column alone, before any hashing of the ids (812 k distinct ids of the
    700 MB vLLM log: ~120 MB of hash table, dictionary and codes for an empty table)."""
    action = col(req, "action")
    is_start = is_in(action, ("received", "added"))
    is_end = is_in(action, ("finished", "aborted", "response"))
    if not (is_start.any() and is_end.any()):
        return {"request_id": ()}, np.zeros(0, dtype=np.intp)
    codes, uniques = pd.factorize(col(req, "request_id"), sort=False)
    ids = uniques if not isinstance(uniques, pd.Index) else uniques.array  # no object copy
    n = len(ids)
    ts = as_floats(col(req, "ts"))
    start = np.full(n, np.inf)
    np.minimum.at(start, codes[is_start], ts[is_start])
    end = np.full(n, -np.inf)
    np.maximum.at(end, codes[is_end], ts[is_end])
    both = np.flatnonzero(np.isfinite(start) & np.isfinite(end))  # (in order of first lines)
    order = _string_order(ids.take(both))
    keep = both[order]
    seen = np.empty(len(order), dtype=np.intp)  # the row of each id of ``both``
    seen[order] = np.arange(len(order))
    kept = ids.take(keep)
    if kept.dtype != _STR:  # the column pandas makes of the ids as Python strings
        kept = np.asarray(kept, dtype=object)
    out: dict[str, Any] = {"request_id": kept, "start_ts": start[keep], "end_ts": end[keep]}
    for column, name in (
        ("prompt_tokens", "prompt_tokens"),
        ("max_new_tokens", "completion_tokens"),
    ):
        most = np.full(n, np.nan)
        counts = col(req, column)
        np.fmax.at(most, codes, as_floats(counts))
        out[name] = pd.array(most[keep], dtype="Float64").astype(counts.dtype)
    return out, seen


_STR = pd.Series(["x"]).dtype  # pandas' own dtype for a column of Python strings


def _string_order(ids: np.ndarray | pd.api.extensions.ExtensionArray) -> np.ndarray:
    """The sorting permutation of distinct ids (so any sort is the sort): Arrow's byte-wise
    UTF-8 order, which is Python's code-point order, ~2x faster than sorting str objects
    (no conversion at all for Arrow strings); ids that are not all encodable strings are
    sorted by Python itself."""
    try:
        return np.asarray(pc.sort_indices(pa.array(ids, type=pa.large_string())).to_numpy())
    except (pa.ArrowException, UnicodeError, TypeError):
        return np.argsort(np.asarray(ids, dtype=object), kind="stable")


def _windowed_counts(
    batches: pd.DataFrame, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Graph and eager decode steps (weights) logged within each [start, end] interval:
    prefix sums over the batches in time order, from the columns alone (no frame copy)."""
    if len(batches) == 0:
        zeros = np.zeros(len(starts))
        return zeros, zeros.copy()
    ts = as_floats(col(batches, "ts"))
    w = as_floats(col(batches, "weight"))
    verdict = cls.verdict_codes(batches)
    graph = verdict == cls.VERDICTS.index("graph")
    eager = verdict == cls.VERDICTS.index("eager")
    keep = ~np.isnan(ts)
    if not keep.all():
        ts, w, graph, eager = ts[keep], w[keep], graph[keep], eager[keep]
    if len(ts) > 1 and not bool(np.all(ts[1:] >= ts[:-1])):
        order = np.argsort(ts, kind="stable")
        ts, w, graph, eager = ts[order], w[order], graph[order], eager[order]
    graph_cum = np.concatenate([[0.0], np.cumsum(np.where(graph, w, 0.0))])
    eager_cum = np.concatenate([[0.0], np.cumsum(np.where(eager, w, 0.0))])
    lo = _sorted_search(ts, starts, "left")
    hi = _sorted_search(ts, ends, "right")
    return graph_cum[hi] - graph_cum[lo], eager_cum[hi] - eager_cum[lo]


def _sorted_search(ts: np.ndarray, keys: np.ndarray, side: Literal["left", "right"]) -> np.ndarray:
    """``np.searchsorted(ts, keys, side)`` with the keys searched in sorted order (each search
    starts where the last ended: ~4x faster than keys in request-id order)."""
    order = np.argsort(keys, kind="stable")
    out = np.empty(len(keys), dtype=np.intp)
    out[order] = np.searchsorted(ts, keys[order], side=side)
    return out


def request_summary(frame: pd.DataFrame) -> dict[str, Any] | None:
    if len(frame) == 0:
        return None
    sampled = frame[frame["in_window_share"].notna()]
    return {
        "count": int(len(frame)),
        "with_decode_samples": int(len(sampled)),
        "in_window_share_mean": round(float(sampled["in_window_share"].mean()), 4)
        if len(sampled)
        else None,
        "fully_in_window": int((sampled["in_window_share"] >= 1.0).sum()),
        "partly_out_of_window": int((sampled["in_window_share"] < 1.0).sum()),
        "prefill_dominated": int(frame["prefill_dominated"].sum()),
    }
