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

import numpy as np
import pandas as pd

from diag.batch_labels import EAGER_REASONS as EAGER_REASONS
from diag.batch_labels import OTHER_VERDICT as _OTHER
from diag.batch_labels import REASONS as REASONS
from diag.batch_labels import VERDICTS as VERDICTS
from diag.batch_labels import Reason as Reason
from diag.batch_labels import verdict_codes as verdict_codes
from diag.facts.access import categories, once_per_frame
from diag.facts.pricing import tally
from diag.facts.steps import ORIGINS, DecodeSteps, shared

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
    are not decode batches (they are the advice's, see :mod:`diag.facts.steps`)."""
    if steps.empty:
        return _empty()
    mixed = steps.column("mixed")
    keep = ~mixed
    if not keep.any():
        return _empty()
    every = bool(keep.all())
    n_kept = int(np.count_nonzero(keep))

    def kept(a: np.ndarray) -> np.ndarray:
        """The decode rows of a step column; one of one value a row (zero stride: the
        steps' constant columns) stays a zero-byte view instead of n_kept copies of it."""
        if every:
            return a
        if a.ndim == 1 and len(a) and a.strides[0] == 0:
            return np.broadcast_to(a[:1], (n_kept,))
        return np.asarray(a[keep])

    frame = steps.frame
    rows = frame if every else frame[_STEP_ROW].iloc[np.flatnonzero(keep)]
    req, tok = _sized(kept(steps.column("requests"))), _sized(kept(steps.column("tokens")))
    weights = kept(steps.column("batches"))
    gen = frame["gen_throughput"] if every else kept(steps.column("gen_throughput"))
    flags = kept(steps.column("graph")).astype(float)
    flags[flags < 0] = np.nan
    return _rows(
        rows,
        np.where(np.isnan(req), tok, req),  # requests, else the step's tokens
        None if bool((weights == 1.0).all()) else weights,  # (one batch a row: one value)
        flags,
        window,
        kept(steps.origin_codes()),
        gen.reset_index(drop=True) if isinstance(gen, pd.Series) else gen,
        (_sized(kept(steps.column("padded"))), tok),
    )


_STEP_ROW = ["source", "line", "ts", "rank"]  # what the classify frame keeps of a step row


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


def _rows(
    frame: pd.DataFrame,
    bs: np.ndarray,
    weights: np.ndarray | None,
    flags: np.ndarray,
    window: Window,
    origin: np.ndarray,
    gen: pd.Series | np.ndarray | None,
    logged_padding: tuple[np.ndarray, np.ndarray] | None = None,
) -> pd.DataFrame:
    """The classify frame of ``frame``'s rows: float batch sizes ``bs``, step ``weights``
    (None: one step a row), the engine's own graph ``flags`` (1.0 / 0.0 / NaN: it does not
    say). ``logged_padding``: (padded, unpadded) tokens a row logged; a logged padded size
    beats one computed from the bucket list. ``bs`` and ``weights`` become columns as they
    are where they are arrays of their own (the callers' fresh conversions), else copies."""
    bs = _own(bs)
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
    if logged_padding is not None:
        padded_tokens, unpadded = logged_padding
        has = ~np.isnan(padded_tokens) & (verdict == _GRAPH)
        bucket[has] = padded_tokens[has]
        both = has & ~np.isnan(unpadded)
        padded[both] = padded_tokens[both] - unpadded[both]
        bs[both] = unpadded[both]
    n = len(bs)
    # the arrays below are this frame's own and event columns are handed over as Series
    # (shared, copy-on-write), so the frame is built without pandas copying anything;
    # columns of one value a row (weight 1, the origin) are one read-only value broadcast
    # (no memory per row: the frame lives until the report is written)
    return pd.DataFrame(
        {
            "source": shared(frame, "source"),  # categoricals stay categoricals
            "line": _readonly(frame["line"].to_numpy()),  # (Int64's: a view of its data)
            "ts": shared(frame, "ts"),
            "rank": shared(frame, "rank"),
            "batch_size": bs,
            "weight": _constant(1.0, n)
            if weights is None
            else _own(np.asarray(weights, dtype=float)),
            "verdict": labels(verdict, VERDICTS),
            "logged": has_flag,
            "origin": labels(_one_value(origin), ORIGINS),
            "reason": labels(reason, REASONS),
            "bucket": _narrow(bucket),
            "padded": _narrow(padded),
            "inferred": labels(inferred, VERDICTS),
            "gen_throughput": _constant(np.nan, n) if gen is None else gen,
        },
        copy=False,
    )


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


def _narrow(a: np.ndarray) -> np.ndarray:
    """Float32 where that holds every value exactly (bucket and padding sizes are whole
    numbers far below 2**24), else ``a`` as it is: half the memory of a column the frame
    keeps through the report, and every reader reads it back as float64 (``to_numpy(dtype=
    float)``), so no sum or product is done in float32."""
    narrow = a.astype(np.float32)
    step = 1 << 16  # compared in slices: no float64 copy of the whole column on the way
    for i in range(0, len(a), step):
        if not np.array_equal(narrow[i : i + step], a[i : i + step], equal_nan=True):
            return a
    return narrow


def _one_value(codes: np.ndarray) -> np.ndarray:
    """Codes of one value on every row as that value broadcast (no memory per row)."""
    if len(codes) and bool((codes == codes[0]).all()):
        return _constant(codes[0], len(codes))
    return codes


def _constant(value: float | np.int8, n: int) -> np.ndarray:
    """``n`` rows of one value without ``n`` copies of it (read-only, stride 0)."""
    return np.broadcast_to(value, n)


# ------------------------------------------------------------------ summaries for the record
def _floats(batches: pd.DataFrame, column: str) -> np.ndarray:
    return np.asarray(batches[column].to_numpy(dtype=float, na_value=np.nan))


@once_per_frame  # (the run's and its one rank's: the same frame)
def batch_counts(batches: pd.DataFrame) -> dict[str, object]:
    if batches.empty:
        return {"graph": 0, "eager": 0, "unknown": 0, "source": "none"}
    v = verdict_codes(batches)
    # weights are step counts (whole numbers): per-verdict sums are exact in any order
    w = np.bincount(v, weights=_floats(batches, "weight"), minlength=_OTHER + 1)
    logged = batches["logged"].to_numpy(dtype=bool)
    decided = v != _UNKNOWN
    if not decided.any():
        source = "none"
    elif logged[decided].all():
        source = "logged"
    elif not logged[decided].any():
        source = "inferred"
    else:
        source = "mixed"
    return {
        "graph": int(round(w[_GRAPH])),
        "eager": int(round(w[_EAGER])),
        "unknown": int(round(w[_UNKNOWN])),
        "source": source,
    }


#: what :func:`batch_counts` and :func:`padding_waste` read of the batches (a per-rank
#: summary needs these columns of each rank's rows, not a copy of every column)
SUMMARY_COLUMNS = ("verdict", "weight", "logged", "bucket", "padded")


def captured_share(counts: dict[str, object]) -> float | None:
    g, e = int(counts["graph"]), int(counts["eager"])  # type: ignore[call-overload]
    return round(g / (g + e), 4) if g + e else None


@once_per_frame
def padding_waste(batches: pd.DataFrame) -> float | None:
    """Padded slots over graph slots of the graph batches, each at its own bucket (logged or
    inferred)."""
    if batches.empty:  # runs without batches: no filter on an empty frame (per run and rank)
        return None
    bucket, padded = _floats(batches, "bucket"), _floats(batches, "padded")
    g = (verdict_codes(batches) == _GRAPH) & ~np.isnan(bucket) & ~np.isnan(padded)
    if not g.any():
        return None
    waste = tally(bucket, padded, _floats(batches, "weight"), g).padding_waste
    return None if waste is None else round(waste, 4)


def batch_shape(batches: pd.DataFrame) -> dict[str, object] | None:
    if batches.empty:
        return None
    size = _floats(batches, "batch_size")
    known = ~np.isnan(size)
    if not known.any():
        return None
    sizes = np.rint(size[known]).astype(np.int64)
    weights = _floats(batches, "weight")[known]
    if sizes.min() >= 0 and sizes.max() <= 1 << 20:  # binned directly: no sort of every row
        uniq = np.flatnonzero(np.bincount(sizes) > 0)  # sorted sizes
        per_size = np.bincount(sizes, weights=weights)[uniq]  # (each bin summed in row order)
    else:
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
    if batches.empty:
        return None
    inferred = verdict_codes(batches, "inferred")
    comparable = batches["logged"].to_numpy(dtype=bool) & (inferred != _UNKNOWN)
    if not comparable.any():
        return None
    agree = (inferred[comparable] == verdict_codes(batches)[comparable]).mean()
    return {"compared": int(comparable.sum()), "agreement": round(float(agree), 4)}
