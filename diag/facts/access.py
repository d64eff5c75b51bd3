"""Small accessors of the event tables that facts modules share (rank 0, last value, sizing)."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from pandas.api.extensions import ExtensionDtype
from pandas.core.dtypes.cast import maybe_box_native

from diag.events import EventTables


def is_rank0(rank: str | None) -> bool:
    """'' / 'TP0' / 'DP0-TP0' / 'GPU0' count as rank 0; anything with a non-zero index does not."""
    if not rank:
        return True
    return all(int(n) == 0 for n in re.findall(r"-?\d+", rank))


def _rank_number(rank: object) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", rank)) if isinstance(rank, str) else ()


def _rank0(frame: pd.DataFrame) -> pd.DataFrame:
    """Rank 0's rows; where no row is rank 0 (every line behind a Ray / wrapper pid, TP0's
    lines cut), the lowest rank's: TP1 before TP2, and of processes named by their pid alone
    the lowest pid, the driver that spawned the others (never the sum over all ranks)."""
    if len(frame.index) == 0:
        return frame
    mask = _rank0_mask(col(frame, "rank"))
    if not mask.any():
        ranks = [r for r in pd.unique(frame["rank"]) if isinstance(r, str) and r]
        if len(ranks) > 1:
            low = min(ranks, key=lambda r: (_rank_number(r), r))
            return frame[(frame["rank"] == low).to_numpy(dtype=bool)]
        return frame
    return frame[mask] if not mask.all() else frame  # (all rank 0: no copy)


def rank0_rows(rows: Sequence[Row]) -> Sequence[Row]:
    """:func:`_rank0` of rows read as :func:`records`."""
    if not rows:
        return rows
    mask = [is_rank0(r["rank"]) for r in rows]
    if not any(mask):
        ranks = list(dict.fromkeys(r["rank"] for r in rows if isinstance(r["rank"], str)))
        ranks = [r for r in ranks if r]
        if len(ranks) > 1:
            low = min(ranks, key=lambda r: (_rank_number(r), r))
            return [r for r in rows if r["rank"] == low]
        return rows
    return [r for r, zero in zip(rows, mask, strict=True) if zero]


def _rank0_mask(ranks: pd.Series | Any) -> np.ndarray:
    """Per row: is its rank rank 0? On categorical ranks, asked once per category (a run's
    few ranks) instead of through ``Series.map``, which costs ~0.2 ms on a frame of a few rows.
    ``ranks``: the column as a Series or its values (:func:`col`)."""
    if isinstance(ranks.dtype, pd.CategoricalDtype):
        cat = ranks.array if isinstance(ranks, pd.Series) else ranks
        codes = np.asarray(cat.codes)
        if not (codes < 0).any():  # (a missing rank: as ``map`` reads it, below)
            says = np.array([is_rank0(r) for r in cat.categories], dtype=bool)
            return np.asarray(says[codes])
    if not isinstance(ranks, pd.Series):
        ranks = pd.Series(ranks, copy=False)
    return np.asarray(ranks.map(is_rank0).to_numpy(dtype=bool))


def distinct(values: pd.Series | Any) -> set[Any]:
    """``set(values.unique())``; on a categorical without missing values, from its codes
    (``unique`` builds a Categorical: ~30 us a call, a few times per kind of each small run).
    ``values``: a column as a Series or its values (:func:`col`)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        cat = values.array if isinstance(values, pd.Series) else values
        codes = np.asarray(cat.codes)
        if not (codes < 0).any():
            names = cat.categories
            if len(codes) <= _ROWS:  # (a few rows: which codes, not how many of each)
                every = names.tolist()  # (not an Index lookup a value: ~3 us each)
                return {every[i] for i in np.unique(codes).tolist()}
            used = np.zeros(len(names), dtype=np.int64)
            for at in range(0, len(codes), _ROWS):  # (bincount makes intp codes: 8 bytes a row)
                used += np.bincount(codes[at : at + _ROWS], minlength=len(used))
            return set(names[np.flatnonzero(used)])
    return set(pd.unique(values))


def numbered(index: pd.Index) -> bool:
    """Is this the index ``reset_index(drop=True)`` gives (rows numbered from 0)?"""
    return (
        isinstance(index, pd.RangeIndex)
        and index.start == 0
        and index.step == 1
        and index.name is None
    )


Row = Mapping[str, Any]


def col(frame: pd.DataFrame, name: str) -> Any:
    """A column's values (a read-only numpy array or the pandas extension array) without
    the Series ``frame[name]`` builds: ~10 us on a frame of a few rows, ~150 reads a small
    run. For reading only; KeyError where the frame has no such column."""
    loc = frame.columns.get_loc(name)
    # (pandas 2-3's block manager; any other pandas reads the Series' values)
    get = getattr(getattr(frame, "_mgr", None), "iget_values", None)
    values = get(loc) if isinstance(loc, int) and get is not None else None
    if values is None:
        return frame[name]._values  # (a duplicated name, or no such block manager)
    if isinstance(values, np.ndarray):
        values = values.view()
        values.flags.writeable = False
    return values


def as_floats(values: Any) -> np.ndarray:
    """Column values (:func:`col`) as float64, NaN where missing: ``Series.to_numpy(dtype=
    float, na_value=np.nan)`` of them, without the Series."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiub":
        return np.asarray(values, dtype=float)
    if not isinstance(values, np.ndarray):
        return np.asarray(values.to_numpy(dtype=float, na_value=np.nan))
    return np.asarray(pd.Series(values, copy=False).to_numpy(dtype=float, na_value=np.nan))


def orders(frame: pd.DataFrame) -> np.ndarray:
    """The rows' order keys as int64 (``_order``, else ``line``), read from the column."""
    values = col(frame, "_order" if "_order" in frame.columns else "line")
    if isinstance(values, np.ndarray):
        return np.asarray(values.astype(np.int64, copy=False))
    return np.asarray(values.to_numpy(np.int64))


def is_in(values: Any, names: Sequence[Any]) -> np.ndarray:
    """Per row: is the value one of ``names`` (``Series.isin``, missing never)? A categorical
    is asked once per category, not per row."""
    if isinstance(values, pd.Categorical):
        says = np.array([c in names for c in values.categories] + [False], dtype=bool)
        return np.asarray(says[np.asarray(values.codes)])  # (code -1: the last slot)
    return np.asarray(pd.Series(values, copy=False).isin(names).to_numpy(dtype=bool))


def is_true(values: Any) -> np.ndarray:
    """Per row: is the value True (``values == True``, missing not)? The mask pandas' own
    filter ``frame[frame[c] == True]`` keeps, from the column's values (:func:`col`)."""
    return equals(values, True)


def equals(values: Any, value: Any) -> np.ndarray:
    """Per row: does the value equal ``value`` (missing: False)? ``(frame[c] == value)
    .to_numpy(dtype=bool, na_value=False)`` from the column's values (:func:`col`)."""
    said = values == value
    if isinstance(said, np.ndarray):
        return said.astype(bool, copy=False)
    return np.asarray(said.to_numpy(dtype=bool, na_value=False))


def empty(frame: pd.DataFrame) -> bool:
    """``len(frame) == 0`` of an event or batch frame (it has columns): ``len``, not the ~2 us
    pandas' property costs (~90 asks a run)."""
    return len(frame.index) == 0 or len(frame.columns) == 0


T = TypeVar("T")

#: frames read lately, with what was read of them (by reader): a run's few small kinds
#: (capture, phase, sizing lines) are read by several facts modules in turn, each read done
#: once (held with its frame, so an id is never reused while held; callers never modify
#: frames in place, nor what these readers return)
_HELD: dict[tuple[int, str], tuple[pd.DataFrame, Any]] = {}
_HELD_KEEP = 64  # (frame, reader) pairs: a run's kinds and a few over
_HELD_MAX_ROWS = 2048  # a larger frame's reading is not held (a big log's serving tables)


def once_per_frame(read: Callable[[pd.DataFrame], T]) -> Callable[[pd.DataFrame], T]:
    """``read(frame)``, done once per frame while the frame is among the last few read."""
    name = read.__qualname__

    def held(frame: pd.DataFrame) -> T:
        key = (id(frame), name)
        got = _HELD.get(key)
        if got is not None and got[0] is frame:
            value: T = got[1]
            return value
        value = read(frame)
        if len(frame) <= _HELD_MAX_ROWS:
            if len(_HELD) >= _HELD_KEEP:
                del _HELD[next(iter(_HELD))]  # the oldest
            _HELD[key] = (frame, value)
        return value

    held.__doc__ = read.__doc__
    return held


@once_per_frame
def records(frame: pd.DataFrame) -> tuple[Row, ...]:
    """``frame.to_dict("records")``, read-only and boxed once per frame: pandas' own takes
    ~0.5 ms on a frame of a few rows, 18 calls a small run (most of them the same frames).
    A column is boxed when a reader first reads it: readers read a few of a dozen."""
    if len(frame.index) == 0:
        return ()
    columns = _Columns(frame)
    return tuple(_LazyRow(columns, at) for at in range(len(frame)))


def box_rows(frame: pd.DataFrame) -> tuple[Row, ...]:
    """The frame's rows as dicts, the values pandas' ``to_dict("records")`` gives, every
    column boxed at once (:func:`box_column`)."""
    columns = frame.columns.tolist()
    values = [box_column(col) for _, col in frame.items()]
    return tuple(dict(zip(columns, row, strict=True)) for row in zip(*values, strict=True))


def box_column(column: pd.Series | Any) -> list[Any]:
    """A column's values as ``to_dict("records")`` gives them (Python scalars; object and
    extension columns boxed by pandas' own ``maybe_box_native``), from one ``tolist``
    instead of through ``itertuples``; ``column`` a Series or its values (:func:`col`)."""
    values: list[Any] = column.tolist()
    if column.dtype == np.dtype(object) or isinstance(column.dtype, ExtensionDtype):
        values = list(map(maybe_box_native, values))
    return values


class _Columns:
    """A frame's columns, each boxed (:func:`box_column`) on its first read."""

    __slots__ = ("boxed", "frame", "names")

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame
        self.names: list[str] = frame.columns.tolist()
        self.boxed: dict[str, list[Any]] = {}

    def column(self, name: str) -> list[Any]:
        values = self.boxed.get(name)
        if values is None:
            values = self.boxed[name] = box_column(col(self.frame, name))  # (KeyError: no such)
        return values


class _LazyRow(Mapping[str, Any]):
    """One row of :func:`records`: the mapping of column to value a dict of it would be."""

    __slots__ = ("_at", "_columns")

    def __init__(self, columns: _Columns, at: int) -> None:
        self._columns = columns
        self._at = at

    def __getitem__(self, name: str) -> Any:
        values = self._columns.boxed.get(name)  # (inline: ~300 reads a small run)
        if values is None:
            values = self._columns.column(name)
        return values[self._at]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns.names)

    def __len__(self) -> int:
        return len(self._columns.names)


def box_value(column: pd.Series | Any, at: int) -> Any:
    """The value at row ``at`` of the column (a Series or its values, :func:`col`), as
    :func:`box_rows` gives it."""
    value = column.iloc[at] if isinstance(column, pd.Series) else column[at]
    if column.dtype == np.dtype(object) or isinstance(column.dtype, ExtensionDtype):
        return maybe_box_native(value) if value is not pd.NA else None
    return value.item() if isinstance(value, np.generic) else value


@functools.cache
def categories(names: tuple[str, ...]) -> pd.CategoricalDtype:
    """The categorical dtype of exactly these names, built once: ``from_codes`` with the
    names took ~80 us a call (building and checking the dtype), with the dtype ~4 us.

    The names are held as Python strings (an object Index), as the event frames' ``source``
    and ``rank`` are: pandas would infer its Arrow-backed ``str`` dtype, whose categories
    cost ~0.1 ms each to unpickle, and a fleet's runs are unpickled at every pass over
    them (a small run's facts loaded in 1.9 ms with them, 0.9 ms without)."""
    return pd.CategoricalDtype(pd.Index(list(names), dtype=object))


def _last(frame: pd.DataFrame, name: str, rows: np.ndarray | None = None) -> Any:
    """The column's last value that ``dropna`` keeps (None: none), read from its array;
    of the rows the mask ``rows`` keeps (``_last(frame[rows], name)`` without the copy)."""
    if len(frame.index) == 0:
        return None
    values = col(frame, name)
    if rows is not None:
        values = values[rows]
        if not len(values):
            return None
    gone = pd.isna(values)
    if not gone[-1]:
        return _plain(values[-1])
    kept = np.flatnonzero(~gone)
    return _plain(values[kept[-1]]) if len(kept) else None


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def sizing(tables: EventTables, name: str, rank0: bool = True) -> float | None:
    read = _rank0_sizing if rank0 else _any_rank_sizing
    value: float | None = read(tables["sizing"]).get(name)
    return value


@once_per_frame
def _rank0_sizing(frame: pd.DataFrame) -> dict[str, Any]:
    return sizing_values(frame, rank0=True)


@once_per_frame
def _any_rank_sizing(frame: pd.DataFrame) -> dict[str, Any]:
    return sizing_values(frame, rank0=False)


def sizing_values(frame: pd.DataFrame, rank0: bool = True) -> dict[str, Any]:
    """Every sizing name's last logged value (rank 0's if rank 0 logged that name), in one
    pass over the few sizing rows: a pandas filter per name cost ~0.4 ms, ~18 times a run."""
    if len(frame.index) == 0:
        return {}
    last_any: dict[str, Any] = {}
    last_rank0: dict[str, Any] = {}
    has_rank0: set[str] = set()
    names, ranks, values = col(frame, "name"), col(frame, "rank"), col(frame, "value")
    for name, rank, value in zip(names, ranks, values, strict=True):
        zero = rank0 and is_rank0(rank)
        if zero:
            has_rank0.add(name)
        value = _plain(value)
        if value is None:
            continue
        last_any[name] = value
        if zero:
            last_rank0[name] = value
    out = {n: v for n, v in last_any.items() if n not in has_rank0}
    out.update(last_rank0)
    return out


def missing(value: Any) -> bool:
    """None, NA or NaN (a row's value that ``dropna`` drops)."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _first(*values: Any) -> Any:
    for v in values:
        if v is not None:
            return v
    return None


def mode_is_none(modes: pd.Series | Any) -> np.ndarray:
    """Per row: the cudagraph mode column says NONE (any case). Missing or non-text values
    are not NONE, as ``.astype(object).str.upper() == "NONE"`` says; each distinct value is
    upper-cased once instead of every row (millions of step lines)."""
    codes, uniques = value_codes(modes)
    says = np.array(
        [isinstance(u, str) and u.upper() == "NONE" for u in uniques] + [False], dtype=bool
    )
    return np.asarray(says[codes])  # code -1 (missing) reads the last slot


def value_codes(column: pd.Series | Any) -> tuple[np.ndarray, Any]:
    """(codes, values): each row as the position of its value in ``values``, -1 where it
    has none (``pd.factorize``). A categorical's own codes and categories, unused ones
    included: no intp array of the rows (15 MB for a 700 MB log's step modes)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        cat = column.array if isinstance(column, pd.Series) else column
        return np.asarray(cat.codes), cat.categories
    codes, values = pd.factorize(column, use_na_sentinel=True)
    return np.asarray(codes), values


def first_min(values: np.ndarray) -> int:
    """``int(values.argmin())`` of values without NaN (row orders, line numbers): numpy's
    argmin copies a whole read-only array first (an event column: 15 MB for 1.9 M step
    lines), so the first row at the minimum is looked for a chunk at a time."""
    if not len(values):
        return int(values.argmin())  # (raises as argmin does)
    low = values.min()
    for at in range(0, len(values), _ROWS):
        hit = np.flatnonzero(values[at : at + _ROWS] == low)
        if len(hit):
            return at + int(hit[0])
    return int(values.argmin())  # (NaN: argmin's answer)


_ROWS = 1 << 16
