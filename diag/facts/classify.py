"""Classify every decode batch of a run's steps (:mod:`diag.facts.steps`) as graph, eager or unknown.

Where the engine says it per batch (SGLang's ``cuda graph:`` field, vLLM's DEBUG step
lines and ``--cudagraph-metrics`` rows) that is the truth (``source: logged``). Elsewhere
the verdict is inferred from the run's bucket list, ceiling and mode with the engine's
own eligibility rules (``source: inferred``). Where both exist, the inference is still
computed so its agreement with the logged flag can be measured.

The result is a DataFrame (HTA style), one row per observed batch or metrics row:
``source, line, ts, rank, batch_size, weight, verdict, logged, origin, reason, bucket,
padded, inferred, gen_throughput`` (``logged``: the verdict is the engine's own flag).
The frame lives until the report is written, so it holds little of its own: ``line``,
``ts`` and ``gen_throughput`` share the event frame's data, a weight of one step a row is
one broadcast value (so is the throughput of lines that log none: vLLM step lines),
``bucket`` and ``padded`` are float32 where that is exact. Readers read columns with
``to_numpy(dtype=float)`` (sums in float64) and never write into them (the shared and
broadcast columns are read-only: a write raises).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from diag.batch_labels import EAGER_REASONS as EAGER_REASONS
from diag.batch_labels import OTHER_VERDICT as _OTHER
from diag.batch_labels import REASONS as REASONS
from diag.batch_labels import VERDICTS as VERDICTS
from diag.batch_labels import Reason as Reason
from diag.batch_labels import verdict_codes as _labelled_codes
from diag.facts.access import as_floats, categories, col, once_per_frame, value_codes
from diag.facts.pricing import Served, tally
from diag.facts.steps import ORIGINS, DecodeSteps

COLUMNS = [
    "source",
    "line",
    "ts",
    "rank",
    "batch_size",
    "weight",
    "verdict",
    "logged",
    "origin",
    "reason",
    "bucket",
    "padded",
    "inferred",
    "gen_throughput",
]


@dataclass(frozen=True)
class Window:
    """What a run captured: the decode buckets, whether padding is on, and the mode."""

    graphs: str  # "enabled" | "disabled" | "unknown"
    sizes: tuple[int, ...] | None
    sizes_inferred: bool = False
    padding: bool = True
    decode_graphs: bool = True  # False for modes without decode graphs (NONE)

    @property
    def ceiling(self) -> int | None:
        return max(self.sizes) if self.sizes else None

    def infer(self, batch_size: int | None) -> tuple[str, str, int | None]:
        """(verdict, reason, bucket) from the window alone."""
        if self.graphs == "disabled" or not self.decode_graphs:
            return "eager", "graphs_disabled", None
        if batch_size is None or self.graphs == "unknown" or not self.sizes:
            return "unknown", "window_unknown", None
        if batch_size <= 0:
            return "unknown", "idle", None
        sizes = list(self.sizes)
        i = bisect.bisect_left(sizes, batch_size)
        if i >= len(sizes):
            return "eager", "above_ceiling", None
        if not self.padding and sizes[i] != batch_size:
            return "eager", "unpadded_gap", None
        return "graph", "in_window", sizes[i]


def _empty() -> pd.DataFrame:
    return _EMPTY.copy()  # building it anew cost ~5 ms, several times per run


_EMPTY = pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})


def classify_batches(steps: DecodeSteps, window: Window) -> pd.DataFrame:
    """The verdict of every decode batch of the run's steps: mixed prefill+decode steps
    are not decode batches (they are the advice's, see :mod:`diag.facts.steps`).

    Classified :data:`_CHUNK` step rows at a time into the frame's own columns, made once:
    a row's verdict reads that row alone, so each conversion on the way (counts to floats,
    the window's buckets, the logged padding) is a temporary of one chunk, not of the
    whole run (~110 MB of them on a 700 MB vLLM log)."""
    if len(steps) == 0:
        return _empty()
    keep = ~steps.column("mixed")
    n_kept = int(np.count_nonzero(keep))
    if not n_kept:
        return _empty()
    every = n_kept == len(keep)

    def kept(a: np.ndarray) -> np.ndarray:
        """The decode rows of a step column; one of one value a row (zero stride: the
        steps' constant columns) stays a zero-byte view instead of n_kept copies of it."""
        if every:
            return a
        if a.ndim == 1 and len(a) and a.strides[0] == 0:
            return np.broadcast_to(a[:1], (n_kept,))
        return np.asarray(a[keep])

    out = _Verdicts(n_kept)
    read = {name: steps.column(name) for name in ("requests", "tokens", "padded", "graph")}
    for start in range(0, len(keep), _CHUNK):
        part = slice(start, start + _CHUNK)
        rows = None if every else keep[part]

        def chunk(name: str, part: slice = part, rows: np.ndarray | None = rows) -> np.ndarray:
            a = read[name][part]
            return a if rows is None else a[rows]

        req, tok = _sized(chunk("requests")), _sized(chunk("tokens"))
        flags = chunk("graph").astype(float)
        flags[flags < 0] = np.nan
        out.add(
            np.where(np.isnan(req), tok, req),  # requests, else the step's tokens
            flags,
            window,
            (_sized(chunk("padded")), tok),
        )
    frame = steps.frame
    weights = kept(steps.column("batches"))
    gen = col(frame, "gen_throughput") if every else kept(steps.column("gen_throughput"))
    # the arrays are this frame's own and event columns are handed over as their values
    # (read-only, never written into) or the decode rows of them, so the frame is built without pandas
    # copying anything; columns of one value a row (weight 1, the origin) are one read-only
    # value broadcast (no memory per row: the frame lives until the report is written)
    return pd.DataFrame(
        {
            "source": _kept_rows(frame, "source", keep, every),  # categoricals stay so
            "line": _readonly(_numpy(_kept_rows(frame, "line", keep, every))),  # (Int64's data)
            "ts": _kept_rows(frame, "ts", keep, every),
            "rank": _kept_rows(frame, "rank", keep, every),
            "batch_size": out.bs,
            "weight": _constant(1.0, n_kept)
            if bool((weights == 1.0).all())  # (one batch a row: one value)
            else _own(np.asarray(weights, dtype=float)),
            "verdict": labels(out.verdict, VERDICTS),
            "logged": out.logged,
            "origin": labels(_one_value(kept(steps.origin_codes())), ORIGINS),
            "reason": labels(out.reason, REASONS),
            "bucket": out.bucket,
            "padded": out.padded,
            "inferred": labels(out.inferred, VERDICTS),
            "gen_throughput": gen,
        },
        copy=False,
    )


#: step rows classified at a time (a few MB of temporaries a chunk)
_CHUNK = 1 << 16


def _kept_rows(frame: pd.DataFrame, column: str, keep: np.ndarray, every: bool) -> Any:
    """An event column's decode rows: its values shared as they are (read-only, never
    written into) where every row is one, else those rows' values (masked by ``keep``: no
    index array of the rows); arrays, not Series (no index to align: the frame is built
    ~0.2 ms sooner on a few rows)."""
    values = col(frame, column)
    return values if every else values[keep]


def _numpy(values: Any) -> np.ndarray:
    """Column values as numpy (``Series.to_numpy()`` of them)."""
    return values if isinstance(values, np.ndarray) else np.asarray(values.to_numpy())


def _sized(counts: np.ndarray) -> np.ndarray:
    """A count column (-1: not shown) as floats, NaN where not shown."""
    return np.where(counts < 0, np.nan, counts.astype(float))


_GRAPH, _EAGER, _UNKNOWN = 0, 1, 2
_R = {name: i for i, name in enumerate(REASONS)}


def infer_codes(window: Window, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised :meth:`Window.infer` on float batch sizes (NaN: unknown), as codes:
    (verdict codes into VERDICTS, reason codes into REASONS, bucket). The bucket is the
    one a batch would be padded to whatever the verdict (NaN above the ceiling), so a
    logged graph batch gets one even where the inference says eager."""
    n = len(sizes)
    verdict = np.full(n, _UNKNOWN, dtype=np.int8)
    reason = np.full(n, _R["window_unknown"], dtype=np.int8)
    if window.graphs == "disabled" or not window.decode_graphs:
        verdict[:] = _EAGER
        reason[:] = _R["graphs_disabled"]
        return verdict, reason, np.full(n, np.nan)
    if window.graphs == "unknown" or not window.sizes:
        return verdict, reason, np.full(n, np.nan)
    known = ~np.isnan(sizes)
    caps = np.asarray(window.sizes, dtype=float)
    idx = np.searchsorted(caps, np.where(known, sizes, 0.0), side="left")
    above = known & (idx >= len(caps))
    inside = known & ~above & (sizes > 0)
    nearest = caps[np.minimum(idx, len(caps) - 1)]
    graph = inside & ((nearest == sizes) | window.padding)
    gap = inside & ~graph
    verdict[graph], reason[graph] = _GRAPH, _R["in_window"]
    verdict[above], reason[above] = _EAGER, _R["above_ceiling"]
    verdict[gap], reason[gap] = _EAGER, _R["unpadded_gap"]
    reason[known & (sizes <= 0)] = _R["idle"]
    return verdict, reason, np.where(inside, nearest, np.nan)


def infer_many(window: Window, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised :meth:`Window.infer`: (verdicts, reasons, buckets) for float batch sizes."""
    verdict, reason, bucket = infer_codes(window, sizes)
    return (
        np.asarray(VERDICTS, dtype=object)[verdict],
        np.asarray(REASONS, dtype=object)[reason],
        bucket,
    )


def labels(codes: np.ndarray, names: tuple[str, ...]) -> pd.Categorical:
    """Codes into ``names`` as a categorical column of exactly those categories."""
    return pd.Categorical.from_codes(codes, dtype=categories(names))


class _Verdicts:
    """The classify frame's computed columns of ``n`` rows, filled a chunk at a time
    (:meth:`add`). ``bucket`` and ``padded`` are float32 while every value is exact in
    it (bucket and padding sizes are whole numbers far below 2**24), else float64: half
    the memory of columns the frame keeps through the report, and every reader reads
    them back as float64 (``to_numpy(dtype=float)``), so no sum is done in float32."""

    def __init__(self, n: int) -> None:
        self.bs = np.empty(n)
        self.verdict = np.empty(n, dtype=np.int8)
        self.reason = np.empty(n, dtype=np.int8)
        self.inferred = np.empty(n, dtype=np.int8)
        self.logged = np.empty(n, dtype=bool)
        self.bucket = np.empty(n, dtype=np.float32)
        self.padded = np.empty(n, dtype=np.float32)
        self.filled = 0

    def add(
        self,
        bs: np.ndarray,
        flags: np.ndarray,
        window: Window,
        logged_padding: tuple[np.ndarray, np.ndarray],
    ) -> None:
        """The next rows: float batch sizes ``bs`` (this chunk's own array), the engine's
        own graph ``flags`` (1.0 / 0.0 / NaN: it does not say), and (padded, unpadded)
        tokens a row logged (a logged padded size beats one computed from the buckets)."""
        inferred, inferred_reason, bucket_any = infer_codes(window, bs)
        has_flag = ~np.isnan(flags)
        said_graph = has_flag & (flags == 1.0)
        said_eager = has_flag & (flags == 0.0)
        verdict = inferred.copy()
        reason = inferred_reason.copy()
        bucket = np.where(inferred == _GRAPH, bucket_any, np.nan)
        verdict[said_graph], reason[said_graph] = _GRAPH, _R["logged_graph"]
        bucket[said_graph] = bucket_any[said_graph]
        verdict[said_eager] = _EAGER
        bucket[said_eager] = np.nan
        # why the engine ran a batch eagerly: the window's reason if it says eager too
        if window.graphs == "disabled":
            reason[said_eager] = _R["graphs_disabled"]
        else:
            eager_why = np.where(
                inferred == _EAGER,
                inferred_reason,
                np.where(inferred == _GRAPH, _R["engine_reported_eager"], _R["logged_eager"]),
            ).astype(np.int8)
            reason[said_eager] = eager_why[said_eager]
        padded = np.where(verdict == _GRAPH, bucket - bs, np.nan)
        padded_tokens, unpadded = logged_padding
        has = ~np.isnan(padded_tokens) & (verdict == _GRAPH)
        bucket[has] = padded_tokens[has]
        both = has & ~np.isnan(unpadded)
        padded[both] = padded_tokens[both] - unpadded[both]
        bs[both] = unpadded[both]
        at = slice(self.filled, self.filled + len(bs))
        self.filled = at.stop
        self.bs[at], self.logged[at] = bs, has_flag
        self.verdict[at], self.reason[at], self.inferred[at] = verdict, reason, inferred
        self.bucket = _put(self.bucket, at, bucket)
        self.padded = _put(self.padded, at, padded)


def _put(column: np.ndarray, at: slice, values: np.ndarray) -> np.ndarray:
    """``values`` written at ``at`` of a float32 column while float32 holds them exactly,
    else of the column as float64 from then on (the rows before were exact: the same
    values); returns the column written."""
    if column.dtype == np.float32:
        narrow = values.astype(np.float32)
        if np.array_equal(narrow, values, equal_nan=True):
            column[at] = narrow
            return column
        column = column.astype(float)
    column[at] = values
    return column


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a``: a column shared with an event frame outside pandas'
    copy-on-write bookkeeping can then never be written through (a write raises)."""
    view = a.view()
    view.flags.writeable = False
    return np.asarray(view)


def _own(a: np.ndarray) -> np.ndarray:
    """``a`` itself where it owns its (writable) data, else a copy: never a view, which
    would share an event column outside copy-on-write or keep a whole block alive."""
    return a if a.flags.owndata and a.flags.writeable else a.copy()


def _one_value(codes: np.ndarray) -> np.ndarray:
    """Codes of one value on every row as that value broadcast (no memory per row)."""
    if len(codes) and bool((codes == codes[0]).all()):
        return _constant(codes[0], len(codes))
    return codes


def _constant(value: float | np.int8, n: int) -> np.ndarray:
    """``n`` rows of one value without ``n`` copies of it (read-only, stride 0)."""
    return np.broadcast_to(value, n)


# ------------------------------------------------------------------ summaries for the record
def verdict_codes(batches: pd.DataFrame, column: str = "verdict") -> np.ndarray:
    """:func:`diag.batch_labels.verdict_codes`: the categorical's own codes read from its
    array (no Series nor ``.cat`` accessor: ~10 reads a small run), else as it reads them."""
    values = col(batches, column)
    if isinstance(values, pd.Categorical) and (
        values.dtype is categories(VERDICTS) or tuple(values.categories) == VERDICTS
    ):
        return np.asarray(values.codes)
    return _labelled_codes(batches, column)


def floats(batches: pd.DataFrame, column: str, rows: slice | None = None) -> np.ndarray:
    """A column (of ``rows``) as float64, NaN where missing."""
    values = col(batches, column)
    return as_floats(values if rows is None else values[rows])


def row_chunks(batches: pd.DataFrame) -> list[slice]:
    """The rows :data:`_CHUNK` at a time: sums read a chunk at a time convert a chunk of the
    float32 and one-value columns to float64, never a whole column (10 MB each on a 700 MB
    log). Weights, buckets and padding are whole numbers, so their sums (below 2**53) are
    exact in any order: summed a chunk at a time they are the same figures."""
    return [slice(at, at + _CHUNK) for at in range(0, len(batches), _CHUNK)]


@once_per_frame  # (the run's and its one rank's: the same frame)
def batch_counts(batches: pd.DataFrame) -> dict[str, object]:
    if len(batches) == 0:
        return {"graph": 0, "eager": 0, "unknown": 0, "source": "none"}
    v = verdict_codes(batches)
    # weights are step counts (whole numbers): per-verdict sums are exact in any order
    w = np.zeros(_OTHER + 1)
    for rows in row_chunks(batches):
        w += np.bincount(v[rows], weights=floats(batches, "weight", rows), minlength=_OTHER + 1)
    decided = v != _UNKNOWN
    logged = np.asarray(col(batches, "logged"), dtype=bool)[decided]
    return _counts(w, int(np.count_nonzero(decided)), int(np.count_nonzero(logged)))


def _counts(w: np.ndarray, decided: int, logged: int) -> dict[str, object]:
    """:func:`batch_counts` from the weight per verdict and the decided rows (logged ones)."""
    source = "none" if not decided else "logged" if logged == decided else "mixed"
    if decided and not logged:
        source = "inferred"
    return {
        "graph": int(round(w[_GRAPH])),
        "eager": int(round(w[_EAGER])),
        "unknown": int(round(w[_UNKNOWN])),
        "source": source,
    }


def rank_summaries(batches: pd.DataFrame) -> dict[str, tuple[dict[str, object], float | None]]:
    """(:func:`batch_counts`, :func:`padding_waste`) of each rank's rows, by rank (rows
    without a rank belong to none; a rank without rows has no entry): one pass over the
    batches a chunk at a time, each sum kept per rank, instead of a copy of each rank's
    rows (12 MB a rank of a 700 MB vLLM log, and an index of every row to find them)."""
    if len(batches) == 0:
        return {}
    codes, names = value_codes(batches["rank"])
    v, logged = verdict_codes(batches), np.asarray(col(batches, "logged"), dtype=bool)
    k, cells = len(names), _OTHER + 1
    w, slots = np.zeros(k * cells), np.zeros((2, k))
    rows_of, decided, said, graph_rows = (np.zeros(k, dtype=np.int64) for _ in range(4))
    for rows in row_chunks(batches):
        rank = codes[rows].astype(np.intp)
        mine = rank >= 0
        weight = floats(batches, "weight", rows)
        vc = v[rows]
        w += np.bincount(rank[mine] * cells + vc[mine], weights=weight[mine], minlength=k * cells)
        rows_of += np.bincount(rank[mine], minlength=k)
        dec = mine & (vc != _UNKNOWN)
        decided += np.bincount(rank[dec], minlength=k)
        said += np.bincount(rank[dec & logged[rows]], minlength=k)
        bucket, padded = floats(batches, "bucket", rows), floats(batches, "padded", rows)
        g = mine & (vc == _GRAPH) & ~np.isnan(bucket) & ~np.isnan(padded)
        graph_rows += np.bincount(rank[g], minlength=k)
        slots[0] += np.bincount(rank[g], weights=padded[g] * weight[g], minlength=k)
        slots[1] += np.bincount(rank[g], weights=bucket[g] * weight[g], minlength=k)
    out = {}
    for j in np.flatnonzero(rows_of):
        waste = Served(0.0, 0.0, slots[0, j], slots[1, j]).padding_waste if graph_rows[j] else None
        out[names[j]] = (
            _counts(w[j * cells : (j + 1) * cells], int(decided[j]), int(said[j])),
            None if waste is None else round(waste, 4),
        )
    return out


def captured_share(counts: dict[str, object]) -> float | None:
    g, e = int(counts["graph"]), int(counts["eager"])  # type: ignore[call-overload]
    return round(g / (g + e), 4) if g + e else None


@once_per_frame
def padding_waste(batches: pd.DataFrame) -> float | None:
    """Padded slots over graph slots of the graph batches, each at its own bucket (logged or
    inferred)."""
    if len(batches) == 0:  # runs without batches: no filter on an empty frame (per run and rank)
        return None
    v = verdict_codes(batches)
    parts = []
    for rows in row_chunks(batches):
        bucket, padded = floats(batches, "bucket", rows), floats(batches, "padded", rows)
        g = (v[rows] == _GRAPH) & ~np.isnan(bucket) & ~np.isnan(padded)
        if g.any():
            parts.append(tally(bucket, padded, floats(batches, "weight", rows), g))
    if not parts:
        return None
    slots = Served(0.0, 0.0, sum(p.padded_slots for p in parts), sum(p.graph_slots for p in parts))
    waste = slots.padding_waste
    return None if waste is None else round(waste, 4)


def batch_shape(batches: pd.DataFrame) -> dict[str, object] | None:
    if len(batches) == 0:
        return None

    def known_sizes(rows: slice) -> tuple[np.ndarray, np.ndarray]:
        """(whole sizes, weights) of the rows with a size: a chunk's (see row_chunks)."""
        size = floats(batches, "batch_size", rows)
        known = ~np.isnan(size)
        return np.rint(size[known]).astype(np.int64), floats(batches, "weight", rows)[known]

    chunks = row_chunks(batches)
    ends = [(int(s.min()), int(s.max())) for s, _ in map(known_sizes, chunks) if len(s)]
    if not ends:
        return None
    lo, hi = min(e[0] for e in ends), max(e[1] for e in ends)
    per_size: np.ndarray  # steps per size, summed in row order
    if lo >= 0 and hi <= 1 << 20:  # binned directly: no sort of every row
        rows_at, per_size = np.zeros(hi + 1, dtype=np.int64), np.zeros(hi + 1)
        for part in chunks:
            sizes, weights = known_sizes(part)
            rows_at += np.bincount(sizes, minlength=hi + 1)
            per_size += np.bincount(sizes, weights=weights, minlength=hi + 1)
        uniq = np.flatnonzero(rows_at > 0)  # sorted sizes
        per_size = per_size[uniq]
    else:
        sizes, weights = (np.concatenate(c) for c in zip(*map(known_sizes, chunks), strict=True))
        uniq, inverse = np.unique(sizes, return_inverse=True)  # sorted sizes
        per_size = np.bincount(inverse, weights=weights, minlength=len(uniq))
    cum = np.cumsum(per_size)
    total = float(cum[-1])

    def q(p: float) -> int:
        return int(uniq[min(int(np.searchsorted(cum, p * total)), len(uniq) - 1)])

    hist = {str(s): int(round(w)) for s, w in zip(uniq.tolist(), per_size.tolist(), strict=True)}
    return {
        "count": int(round(total)),
        "min": int(uniq[0]),
        "p50": q(0.5),
        "p90": q(0.9),
        "p99": q(0.99),
        "max": int(uniq[-1]),
        "histogram": hist,
    }


def inference_agreement(batches: pd.DataFrame) -> dict[str, object] | None:
    """How often the window-based inference matches the engine's logged flag."""
    if len(batches) == 0:
        return None
    inferred = verdict_codes(batches, "inferred")
    comparable = np.asarray(col(batches, "logged"), dtype=bool) & (inferred != _UNKNOWN)
    if not comparable.any():
        return None
    agree = (inferred[comparable] == verdict_codes(batches)[comparable]).mean()
    return {"compared": int(comparable.sum()), "agreement": round(float(agree), 4)}
