"""The run's decode steps as logged (:class:`DecodeSteps`), read from the event tables once.

The one fact the batch classification (:mod:`diag.facts.classify`), the bucket advice
(:func:`diag.advise.run_advice.run_traffic`) and, through the classification, the plots
derive decode traffic from.

One row per line that shows decode traffic (HTA style, one DataFrame behind a typed
wrapper): SGLang ``Decode batch`` lines, vLLM DEBUG step lines and ``--cudagraph-metrics``
rows, and vLLM stats intervals with requests running and tokens generated (these stand in
for steps only where the run logged none per step). Columns:

* ``source, line, ts, rank``: the event frame's own (shared, never written into);
* ``origin``: ``decode_line | graph_step | stats_interval`` (categorical);
* ``requests``, ``tokens``, ``padded``: requests in the step, its scheduled (unpadded)
  tokens, the padded size it was replayed at, -1 where the line shows none: int64 (the
  event column's own) where every line shows it, else int32 where the values fit;
* ``batches``: how many batches the row reports (a metrics row's Count, else 1);
* ``steps``: how many decode steps it stands for (SGLang: ``--decode-log-interval`` steps a
  line; vLLM stats: the interval over the step time; else ``batches``);
* ``graph``: the engine's own flag, int8 1 replayed / 0 eager / -1 the line does not say;
* ``mixed``: a mixed prefill+decode step (vLLM ``uniform=False``): not a decode batch for
  the classification, a step piecewise graphs serve for the advice;
* ``step_time_s`` (from the throughput a line logs), ``usage`` (KV pool use 0..1),
  ``gen_throughput``: NaN where the line shows none.

Columns of one value a row are zero-byte read-only views and counts are the event
columns' own buffers where nothing is missing: the frame lives as long as the run's facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from pandas.core.arrays.masked import BaseMaskedArray

from diag.engines import EngineConfig
from diag.events import EventTables
from diag.facts.access import (
    _rank0_mask,
    as_floats,
    categories,
    col,
    equals,
    once_per_frame,
    value_codes,
)

__all__ = [
    "COLUMNS",
    "DEFAULT_BASE_STEP_S",
    "ORIGINS",
    "DecodeSteps",
    "decode_steps",
    "step_time_from_throughput",
]

Origin = Literal["decode_line", "graph_step", "stats_interval", "iteration"]
ORIGINS: tuple[Origin, ...] = ("decode_line", "graph_step", "stats_interval", "iteration")
COLUMNS = [
    "source",
    "line",
    "ts",
    "rank",
    "origin",
    "requests",
    "tokens",
    "padded",
    "batches",
    "steps",
    "graph",
    "mixed",
    "step_time_s",
    "usage",
    "gen_throughput",
]
# seconds of one decode step where a stats line gives no step time (the cost model's base)
DEFAULT_BASE_STEP_S = 0.025
#: the step times a throughput line can stand for: a decode step is one forward pass of a
#: model (no GPU runs one in under 10 us) and no server logs stats over an hour-long step; a
#: time outside (a garbled throughput of 20 digits, or 1e-300) is no measurement
STEP_TIME_RANGE_S = (1e-5, 3600.0)


def step_time_from_throughput(
    requests: np.ndarray, gen_tokens_per_s: np.ndarray, accept_len: np.ndarray | None = None
) -> np.ndarray:
    """Seconds per decode step from a throughput line: each request yields ``accept_len`` tokens
    per step (1 without speculative decoding), so ``t = requests * accept / throughput``."""
    req = np.asarray(requests, dtype=float)
    thr = np.asarray(gen_tokens_per_s, dtype=float)
    acc = np.ones_like(req) if accept_len is None else np.nan_to_num(accept_len, nan=1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = req * acc / thr
    lo, hi = STEP_TIME_RANGE_S
    with np.errstate(invalid="ignore"):
        t[~((t >= lo) & (t <= hi)) | (thr <= 0) | (req < 1)] = np.nan
    return np.asarray(t)


#: a step line's clock going back more than this (a host clock reset, an NTP step), or
#: forward more than ``CLOCK_FORWARD_S`` (a clock set a day ahead; an idle server's quiet
#: night is shorter), is a clock jump, not elapsed time: rates read the stretches around it
CLOCK_BACK_S = 60.0
CLOCK_FORWARD_S = 24 * 3600.0


def clock_elapsed(ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seconds since the run's first stamp, counting only the stretches between clock jumps
    (see :data:`CLOCK_BACK_S`): each stretch starts where the one before it ended, so a
    clock reset 6 h back neither stretches nor shrinks the time the rows cover (without a
    jump: ``ts - min(ts)``, rows swapped by racing writers and all). Rows without a stamp
    take 0. Returns (elapsed, the row indices where a jump lands).

    The elapsed times are made :data:`_ROWS` rows at a time: each row's stretch is found
    and shifted in place, not through row-long index and offset arrays (~45 MB of them for
    a 700 MB log's million steps)."""
    t = np.asarray(ts, dtype=float)
    ok = np.isfinite(t)
    if not ok.any():
        return np.zeros(len(t)), np.zeros(0, dtype=np.int64)
    idx = None if bool(ok.all()) else np.flatnonzero(ok)
    v = t if idx is None else t[idx]
    starts = np.concatenate(([0], _jumps(v)))
    lo = np.minimum.reduceat(v, starts)
    hi = np.maximum.reduceat(v, starts)
    offset = np.concatenate(([0.0], np.cumsum(hi - lo)[:-1]))
    elapsed = np.empty(len(v))
    for at in range(0, len(v), _ROWS):
        part = v[at : at + _ROWS]
        seg = np.searchsorted(starts, np.arange(at, at + len(part)), side="right") - 1
        elapsed[at : at + len(part)] = part - lo[seg] + offset[seg]
    if idx is None:
        return elapsed, starts[1:]
    out = np.zeros(len(t))
    out[idx] = elapsed
    return out, idx[starts[1:]]


_ROWS = 1 << 16  # rows shifted at a time by clock_elapsed


def clock_jumps(ts: np.ndarray) -> np.ndarray:
    """The row indices where a clock jump lands (those of :func:`clock_elapsed`), without
    the elapsed times: a few MB of temporaries on a 700 MB log, not ~100."""
    t = np.asarray(ts, dtype=float)
    ok = np.isfinite(t)
    idx = None if bool(ok.all()) else np.flatnonzero(ok)
    at = _jumps(t if idx is None else t[idx])
    return at if idx is None else idx[at]


def _jumps(v: np.ndarray) -> np.ndarray:
    """Positions in stamps ``v`` (all finite) where a clock jump lands: differences taken
    :data:`_ROWS` at a time (not a row-long array of them)."""
    found = [np.zeros(0, dtype=np.int64)]
    for at in range(0, len(v) - 1, _ROWS):
        d = np.diff(v[at : at + _ROWS + 1])
        found.append(np.flatnonzero((d < -CLOCK_BACK_S) | (d > CLOCK_FORWARD_S)) + at + 1)
    return np.concatenate(found)


def clock_jump_note(ts: np.ndarray, lines: Any, sources: Any) -> str | None:
    """The run's note on its clock jumps (None: none), the first one placed by line
    (``lines``/``sources``: anything indexable by row, read at that row only)."""
    t = np.asarray(ts, dtype=float)
    jumps = clock_jumps(t)
    if not len(jumps):
        return None
    first = int(jumps[0])
    before = t[:first][np.isfinite(t[:first])][-1]
    delta = float(t[first] - before)
    way = "back" if delta < 0 else "forward"
    more = f" (and {len(jumps) - 1} more)" if len(jumps) > 1 else ""
    return (
        f"clock jump: the timestamps go {way} {abs(delta) / 3600:.1f} h at line "
        f"{int(lines[first])} of {sources[first]}{more} (a host clock reset?): rates and "
        "advice read only the time between the jumps"
    )


@dataclass(frozen=True)
class StepTiming:
    """What the engine's config says about the time a line covers (its spec in diag.engines)."""

    steps_per_batch_line: int = 1  # SGLang --decode-log-interval
    stats_interval_s: float = 1.0  # vLLM VLLM_LOG_STATS_INTERVAL
    spec_tokens: int = 0  # speculative tokens: a stats line's throughput then gives no step time


class DecodeSteps:
    """The run's decode step lines (see the module docstring for the columns).

    Pickled as its columns' arrays (:meth:`__reduce__`), not as a DataFrame: a fleet's run
    facts are pickled and unpickled several times a run, and pandas' own unpickling of the
    frame's blocks, categoricals and column index cost ~0.2 ms each time. An unpickled
    one reads its columns from those arrays and builds the frame only if asked."""

    __slots__ = ("_frame", "_n", "_parts", "_read")

    _frame: pd.DataFrame | None
    _n: int
    _parts: dict[str, tuple[Any, ...]] | None
    _read: dict[Any, Any]  # (arrays of an unpickled one, by name: a memo)

    def __init__(self, frame: pd.DataFrame) -> None:
        _set(self, frame, len(frame.index), None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"DecodeSteps is frozen: {name} is not set after it is built")

    @property
    def frame(self) -> pd.DataFrame:
        if self._frame is None:  # (an unpickled one: built once, from its own arrays)
            arrays = {name: self._array(name) for name in self._parts or {}}
            object.__setattr__(self, "_frame", pd.DataFrame(arrays, copy=False))
            assert self._frame is not None
        return self._frame

    def __len__(self) -> int:
        return self._n

    @property
    def empty(self) -> bool:
        return self._n == 0

    def __reduce__(self) -> tuple[Any, ...]:
        if self._parts is not None:
            return (_unpickled, (self._n, self._parts))
        frame = self.frame
        return (_unpickled, (self._n, {str(c): _part(col(frame, c)) for c in frame.columns}))

    def _array(self, name: str) -> Any:
        """The column's values as the frame holds them (:func:`~diag.facts.access.col`)."""
        if self._frame is not None:
            return col(self._frame, name)
        got = self._read.get(name)
        if got is None:
            if self._parts is None or name not in self._parts:
                raise KeyError(name)
            got = self._read[name] = _unpart(self._parts[name], self._n)
        return got

    def column(self, name: str) -> np.ndarray:
        """A column as its numpy array (read-only views stay read-only: never write into it);
        each read once per frame while it is among the frames read last (classify, advice,
        signals and rules read the same few columns, ~14 reads a run)."""
        read = _read_columns(self._frame) if self._frame is not None else self._read
        key = ("column", name)
        got = read.get(key)
        if got is None:
            values = self._array(name)
            got = read[key] = np.asarray(
                values if isinstance(values, np.ndarray) else values.to_numpy()
            )
        return got

    def floats(self, name: str) -> np.ndarray:
        """A column as float64, NaN where missing (``ts`` of event frames may be nullable)."""
        return as_floats(self._array(name))

    def origin_codes(self) -> np.ndarray:
        """``origin`` as int8 codes into :data:`ORIGINS`."""
        return np.asarray(self._array("origin").codes)

    def rank_rows(self, every_rank_of: tuple[Origin, ...] = ()) -> np.ndarray | None:
        """Rows of rank 0, per origin: every row of an origin where none of its rows is rank 0
        (a log of one non-zero rank) or where the origin is in ``every_rank_of`` (SGLang DP
        attention: each DP rank's batch line is a batch of its own). None: every row."""
        if self.empty:
            return None
        rank0 = _rank0_mask(self._array("rank"))  # (per category, not a Series.map)
        if rank0.all():
            return None
        codes = self.origin_codes()
        keep = rank0.copy()
        for code, origin in enumerate(ORIGINS):
            rows = codes == code
            if origin in every_rank_of or not (rank0 & rows).any():
                keep |= rows
        return None if keep.all() else keep


def _part(values: Any) -> tuple[Any, ...]:
    """A column's values as plain picklable parts: numpy arrays and Python lists (a column
    of one value a row as that value), rebuilt by :func:`_unpart`."""
    if isinstance(values, np.ndarray):
        if values.ndim == 1 and len(values) and values.strides[0] == 0:
            return ("same", values[:1].copy())
        return ("array", np.ascontiguousarray(values))
    if isinstance(values, pd.Categorical):
        cats = values.categories
        plain = cats.dtype == np.dtype(object)
        return ("category", np.asarray(values.codes), cats.tolist() if plain else cats)
    if isinstance(values, BaseMaskedArray):
        return ("masked", type(values), np.asarray(values._data), np.asarray(values._mask))
    return ("other", values)


def _unpart(part: tuple[Any, ...], n: int) -> Any:
    """The column values of :func:`_part`'s parts (read-only numpy arrays)."""
    kind = part[0]
    if kind == "same":
        return np.broadcast_to(part[1][0], (n,))
    if kind == "array":
        return _readonly(part[1])
    if kind == "category":
        cats = part[2]
        if isinstance(cats, list):
            dtype = (
                categories(ORIGINS)
                if tuple(cats) == ORIGINS
                else pd.CategoricalDtype(pd.Index(cats, dtype=object))
            )
        else:
            dtype = pd.CategoricalDtype(cats)
        return pd.Categorical.from_codes(part[1], dtype=dtype)
    if kind == "masked":
        return part[1](part[2], part[3])
    return part[1]


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _unpickled(n: int, parts: dict[str, tuple[Any, ...]]) -> DecodeSteps:
    """A :class:`DecodeSteps` of pickled parts: its frame is built only if asked for."""
    steps = DecodeSteps.__new__(DecodeSteps)
    _set(steps, None, n, parts)
    return steps


def _set(
    steps: DecodeSteps,
    frame: pd.DataFrame | None,
    n: int,
    parts: dict[str, tuple[Any, ...]] | None,
) -> None:
    for name, value in (("_frame", frame), ("_n", n), ("_parts", parts), ("_read", {})):
        object.__setattr__(steps, name, value)


@once_per_frame
def _read_columns(frame: pd.DataFrame) -> dict[Any, Any]:
    """The columns of a steps frame read so far, by name (:meth:`DecodeSteps.column` fills
    it: a memo of arrays nobody writes into, the one thing held here that grows)."""
    return {}


def decode_steps(tables: EventTables, config: EngineConfig) -> DecodeSteps:
    """The decode steps of a run's tables, timed with its engine's config."""
    timing = StepTiming(
        steps_per_batch_line=config.steps_per_batch_line or 1,
        stats_interval_s=config.stats_interval_s or 1.0,
        spec_tokens=config.spec_tokens,
    )
    return from_tables(tables, timing)


def from_tables(tables: EventTables, timing: StepTiming) -> DecodeSteps:
    """Per-step lines win over stats intervals (stats only stand in where none is logged)."""
    steps = tables["graph_step"]
    parts = [_batch_lines(tables["decode_batch"], timing), _step_lines(steps)]
    if len(steps) == 0:  # iteration lines stand in where no step line says the mode
        parts.append(_iteration_lines(tables["iteration"]))
    if len(steps) == 0 and parts[-1] is None:
        parts.append(_stats_lines(tables["stats"], timing))
    kept = [p for p in parts if p is not None]
    if not kept:
        return DecodeSteps(_EMPTY.copy())
    if len(kept) == 1:
        return DecodeSteps(kept[0])
    return DecodeSteps(pd.concat(kept, ignore_index=True)[COLUMNS])


_EMPTY = pd.DataFrame(
    {
        **{c: pd.Series(dtype="object") for c in ("source", "line", "ts", "rank")},
        "origin": pd.Categorical.from_codes([], dtype=categories(ORIGINS)),
        **{c: pd.Series(dtype=np.int64) for c in ("requests", "tokens", "padded")},
        **{c: pd.Series(dtype=float) for c in ("batches", "steps")},
        "graph": pd.Series(dtype=np.int8),
        "mixed": pd.Series(dtype=bool),
        **{c: pd.Series(dtype=float) for c in ("step_time_s", "usage", "gen_throughput")},
    }
)


def _num(frame: pd.DataFrame, name: str, missing: float = np.nan) -> np.ndarray:
    """A column as float64, ``missing`` where it has no value."""
    if name not in frame.columns:
        return np.full(len(frame), missing)
    values = col(frame, name)
    if np.isnan(missing):
        return as_floats(values)
    return np.asarray(pd.Series(values, copy=False).to_numpy(dtype="float64", na_value=missing))


def _count(frame: pd.DataFrame, name: str) -> np.ndarray:
    """An integer column, -1 where missing: the frame's own int64 buffer when none is, else
    an array of its own, int32 where every value fits (a vLLM step line's request and token
    counts: 15 MB less a column on a 700 MB log), converted once (not through float copies
    of the column: 45 MB of them)."""
    values = col(frame, name) if name in frame.columns else None
    if values is not None and pd.api.types.is_integer_dtype(values.dtype):
        if isinstance(values, np.ndarray):  # (no missing value: the column's own buffer)
            return np.asarray(values.astype(np.int64, copy=False))
        gone = np.asarray(values.isna())
        narrow = False
        if gone.any() and not gone.all():
            kept = values[~gone]
            narrow = bool(_INT32[0] <= kept.min() <= kept.max() < _INT32[1])
        return np.asarray(
            values.to_numpy(dtype=np.int32 if narrow else np.int64, na_value=-1, copy=False)
        )
    return np.asarray(np.nan_to_num(_num(frame, name), nan=-1).astype(np.int64))


_INT32 = (-(2**31), 2**31)


def _is_zero(frame: pd.DataFrame, name: str) -> np.ndarray:
    """Rows where a column is 0 (False), never where it has no value: compared as it is,
    not converted to floats first."""
    if name not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    return equals(col(frame, name), 0)


def _same(value: object, n: int) -> np.ndarray:
    """One value on every row: a read-only view of zero bytes."""
    return np.broadcast_to(np.asarray(value), (n,))


def _floats(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A float column shared (its read-only values) when it is float64 already, else
    converted."""
    values = col(frame, column)
    if values.dtype == np.float64:
        return np.asarray(values)
    return _num(frame, column)


def _frame(rows: pd.DataFrame, origin: Origin, **cols: object) -> pd.DataFrame:
    """The steps of these event rows: their common columns are the event columns' own
    values (read-only; never written into, as an event frame never is), handed over as
    arrays, not Series: the frame is then built without aligning indexes (~0.3 ms less on
    a frame of a few rows)."""
    n = len(rows)
    data = {
        "source": col(rows, "source"),
        "line": col(rows, "line"),
        "ts": col(rows, "ts"),
        "rank": col(rows, "rank"),
        "origin": pd.Categorical.from_codes(
            _same(np.int8(ORIGINS.index(origin)), n), dtype=categories(ORIGINS)
        ),
        **cols,
    }
    return pd.DataFrame({c: data[c] for c in COLUMNS}, copy=False)


def _batch_lines(frame: pd.DataFrame, timing: StepTiming) -> pd.DataFrame | None:
    """SGLang ``Decode batch`` lines: one line per ``--decode-log-interval`` steps."""
    if len(frame) == 0:
        return None
    n = len(frame)
    req = _count(frame, "batch_size")
    flag = _num(frame, "cuda_graph")
    return _frame(
        frame,
        "decode_line",
        requests=req,
        tokens=_same(np.int64(-1), n),
        padded=_same(np.int64(-1), n),
        batches=_same(1.0, n),
        steps=_same(float(timing.steps_per_batch_line), n),
        graph=np.where(np.isnan(flag), -1, flag > 0).astype(np.int8),
        mixed=_same(False, n),
        step_time_s=step_time_from_throughput(
            req, _num(frame, "gen_throughput"), _num(frame, "accept_len")
        ),
        usage=_num(frame, "token_usage"),
        gen_throughput=_floats(frame, "gen_throughput"),
    )


def _step_lines(frame: pd.DataFrame) -> pd.DataFrame | None:
    """vLLM DEBUG step lines and cudagraph-metrics rows (one row per distinct size and mode,
    its Count the batches it stands for): mixed prefill+decode steps included and marked."""
    if len(frame) == 0:
        return None
    n = len(frame)
    # -1 no mode (missing or empty), 0 NONE, 1 any other: per distinct value, not per row
    codes, modes = value_codes(col(frame, "mode"))
    per_mode = [str(m).upper() for m in modes]
    graph = np.array([-1 if m == "" else int(m != "NONE") for m in per_mode] + [-1], np.int8)
    count = col(frame, "count") if "count" in frame.columns else None
    # every count 1 or missing: one batch a row (no float copy of the counts to say so)
    one = count is None or bool((equals(count, 1) | pd.isna(count)).all())
    weight = _same(1.0, n) if one else _num(frame, "count", missing=1.0)
    return _frame(
        frame,
        "graph_step",
        requests=_count(frame, "num_reqs"),
        tokens=_count(frame, "num_tokens"),
        padded=_count(frame, "padded_tokens"),
        batches=weight,
        steps=weight,
        graph=graph[codes],
        mixed=_is_zero(frame, "uniform"),
        step_time_s=_same(np.nan, n),
        usage=_same(np.nan, n),
        gen_throughput=_same(np.nan, n),
    )


def _iteration_lines(frame: pd.DataFrame) -> pd.DataFrame | None:
    """vLLM ``Iteration(N)`` lines: one engine step each, its size the step's scheduled tokens
    (vLLM's capture unit), no graph flag (the window decides: ``source: inferred``); a step
    with context requests is a mixed step, a step of no tokens (a DP dummy) none at all.
    The elapsed time is host time, not a GPU step time: not used as one."""
    if len(frame) == 0:
        return None
    ctx_t, gen_t = _num(frame, "ctx_tokens"), _num(frame, "gen_tokens")
    tokens = np.nan_to_num(ctx_t, nan=0.0) + np.nan_to_num(gen_t, nan=0.0)
    rows = frame[tokens > 0]
    if len(rows) == 0:
        return None
    tokens = tokens[tokens > 0]
    n = len(rows)
    return _frame(
        rows,
        "iteration",
        requests=_same(np.int64(-1), n),
        tokens=tokens.astype(np.int64),
        padded=_same(np.int64(-1), n),
        batches=_same(1.0, n),
        steps=_same(1.0, n),
        graph=_same(np.int8(-1), n),
        mixed=_num(rows, "ctx_reqs") > 0,
        step_time_s=_same(np.nan, n),
        usage=_num(rows, "kv_usage") / 100.0,
        gen_throughput=_same(np.nan, n),
    )


def _stats_lines(frame: pd.DataFrame, timing: StepTiming) -> pd.DataFrame | None:
    """vLLM stats intervals with requests running and tokens generated: running requests
    stand for the batch size; steps per line = interval / step time (with speculative
    decoding the tokens per step are not known, so the step time is not measured)."""
    if len(frame) == 0:
        return None
    with np.errstate(invalid="ignore"):  # (missing: not active)
        mask = (_num(frame, "running") > 0) & (_num(frame, "gen_throughput") > 0)
    active = frame if mask.all() else frame[mask]
    if len(active) == 0:
        return None
    n = len(active)
    running = _num(active, "running")
    t = step_time_from_throughput(running, _num(active, "gen_throughput"))
    if timing.spec_tokens > 0:
        t = np.full(n, np.nan)
    return _frame(
        active,
        "stats_interval",
        requests=np.nan_to_num(running, nan=-1).astype(np.int64),
        tokens=_same(np.int64(-1), n),
        padded=_same(np.int64(-1), n),
        batches=_same(1.0, n),
        steps=timing.stats_interval_s / np.where(np.isfinite(t), t, DEFAULT_BASE_STEP_S),
        graph=_same(np.int8(-1), n),
        mixed=_same(False, n),
        step_time_s=t,
        usage=_num(active, "kv_usage") / 100.0,
        gen_throughput=_floats(active, "gen_throughput"),
    )
