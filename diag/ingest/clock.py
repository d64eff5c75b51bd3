"""Years for lines that print none (vLLM's ``mm-dd hh:mm:ss``), per stream.

The normaliser places year-less lines in the placeholder year ``NO_YEAR`` (a leap year, so
Feb 29 parses). Once a stream is read, the year comes from any dated line of the same stream
(docker/CI timestamps, python logging, SGLang headers), else from the modification time of its
first file; the stream's ``year_source`` says which (``log`` | ``mtime`` | ``unknown``). With
neither (standard input), the current year stands in and ``year_source`` is ``unknown``:
the placeholder year never reaches an output.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime, timezone
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from diag.events import EventTables
from diag.model import Stream
from diag.normalize.prefix import NO_YEAR

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd  # (imported where used: the scan workers never load it)

#: the years a log's timestamps can fall in: from the epoch (stamps are epoch seconds) to the
#: end of datetime64[ns], the range pandas and Arrow exports of the tables assume. A stamp
#: outside is not a timestamp (a garbled or hostile header): the row keeps no time, and its
#: input is noted.
LOG_YEARS = range(1970, 2262)
_FIRST = datetime(LOG_YEARS.start, 1, 1, tzinfo=timezone.utc).timestamp()
_LAST = datetime(LOG_YEARS.stop, 1, 1, tzinfo=timezone.utc).timestamp()
_START = datetime(NO_YEAR, 1, 1, tzinfo=timezone.utc).timestamp()
_END = datetime(NO_YEAR + 1, 1, 1, tzinfo=timezone.utc).timestamp()


def _mtime_year(stream: Stream) -> int | None:
    for src in stream.sources:
        if src == "-":
            continue
        try:
            return datetime.fromtimestamp(os.path.getmtime(src), tz=timezone.utc).year
        except OSError:
            continue
    return None


#: rows handled at a time: each pass's temporaries stay a few MB (whole-column temporaries of
#: a 700 MB log's 1.9 M step rows came to ~130 MB above its event tables)
CHUNK_ROWS = 1 << 18


@lru_cache(maxsize=64)
def _day_deltas(year: int) -> np.ndarray:
    """Seconds that move a placeholder-year stamp to ``year`` (same month, day and time), per
    day of the placeholder year (a leap year: 366 days)."""
    delta = np.empty(366, np.float64)
    for d in range(366):
        old = datetime.fromtimestamp(_START + d * 86400, tz=timezone.utc)
        try:
            new = old.replace(year=year)
        except ValueError:  # Feb 29 in a common year
            new = old.replace(year=year, day=28)
        delta[d] = new.timestamp() - old.timestamp()
    return delta


def _shift_into(ts: np.ndarray, rows: np.ndarray, year: int) -> None:
    """Placeholder-year stamps among ``rows`` (a mask of ``ts``) moved to ``year``, in place."""
    mask = rows & (ts >= _START) & (ts < _END)
    if mask.any():
        old = ts[mask]
        days = np.floor((old - _START) / 86400).astype(np.int64)
        ts[mask] = old + _day_deltas(year)[days]


def _source_codes(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes of a source column (-1: missing) and the names they stand for."""
    import pandas as pd

    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.cat.codes.to_numpy(), [str(c) for c in col.cat.categories]
    codes, uniques = pd.factorize(col, use_na_sentinel=True)
    return codes, [str(u) for u in uniques]


def _years(ts: np.ndarray) -> np.ndarray:
    """The UTC year of each epoch-seconds stamp (within ``LOG_YEARS``), by numpy's calendar
    arithmetic on days: no Timestamp objects, so no bound but int64 days."""
    days = np.floor(ts / 86400.0).astype(np.int64).astype("datetime64[D]")
    return days.astype("datetime64[Y]").astype(np.int64) + 1970


def _drop_timeless(frames: dict[str, pd.DataFrame]) -> dict[str, str]:
    """Stamps outside ``LOG_YEARS`` become missing, in place; the note of each source that
    had one (its first such line)."""
    notes: dict[str, tuple[int, str]] = {}
    for name, frame in frames.items():
        if frame.empty:
            continue
        ts = frame["ts"].to_numpy(dtype="float64", na_value=np.nan)
        bad = ~np.isnan(ts) & ((ts < _FIRST) | (ts >= _LAST))
        if not bad.any():
            continue
        for i in np.flatnonzero(bad).tolist():
            src, line = str(frame["source"].iat[i]), int(frame["line"].iat[i])
            if src not in notes or line < notes[src][0]:
                year = int(_years(ts[i : i + 1])[0]) if abs(ts[i]) < 1e15 else None
                when = f"year {year}" if year is not None else f"{ts[i]:.0f} s from the epoch"
                notes[src] = (line, when)
        new = ts.copy()
        new[bad] = np.nan
        frames[name] = frame.assign(ts=new)
    return {
        src: f"a timestamp in {when} (line {line}) is outside the years a log can hold "
        f"({LOG_YEARS.start}-{LOG_YEARS.stop - 1}): such lines are read without a time"
        for src, (line, when) in notes.items()
    }


def settle_years(tables: EventTables, streams: list[Stream]) -> dict[str, str]:
    """Give every stream's year-less timestamps a year, and say where it came from; returns
    the input note of each source whose stamps were outside ``LOG_YEARS`` (now missing).

    One grouped pass per event table (never one pass per stream: a folder may hold 10,000)."""
    frames = tables._frames
    notes = _drop_timeless(frames)
    years: dict[str, Counter[int]] = {}
    yearless: set[str] = set()
    for frame in frames.values():
        if frame.empty:
            continue
        ts_all = frame["ts"].to_numpy(dtype="float64", na_value=np.nan)
        codes_all, names = _source_codes(frame["source"])
        pairs: Counter[tuple[int, int]] = Counter()  # (source code, year) -> dated rows
        for at in range(0, len(ts_all), CHUNK_ROWS):
            ts, codes = ts_all[at : at + CHUNK_ROWS], codes_all[at : at + CHUNK_ROWS]
            _count_years(ts, codes, names, pairs, yearless)
        for code, year in sorted(pairs):  # in (source, year) order, as one pass would
            years.setdefault(names[code], Counter())[year] += pairs[code, year]
    target: dict[str, int] = {}
    for stream in streams:
        counts: Counter[int] = Counter()
        for src in stream.sources:
            counts.update(years.get(src, Counter()))
        if counts:
            year, stream.year_source = counts.most_common(1)[0][0], "log"
        else:
            mt = _mtime_year(stream)
            if mt is not None:
                year, stream.year_source = mt, "mtime"
            else:
                year, stream.year_source = datetime.now(timezone.utc).year, "unknown"
        target.update({src: year for src in stream.sources if src in yearless})
    if not target:
        return notes
    for name, frame in frames.items():
        if frame.empty:
            continue
        codes, names = _source_codes(frame["source"])
        year_of = np.array([target.get(n, 0) for n in names] + [0], np.int64)  # code -1: none
        if not year_of.any():
            continue
        new = np.array(frame["ts"].to_numpy(dtype="float64", na_value=np.nan), copy=True)
        for at in range(0, len(new), CHUNK_ROWS):
            part, row_year = new[at : at + CHUNK_ROWS], year_of[codes[at : at + CHUNK_ROWS]]
            for year in np.unique(row_year[row_year > 0]).tolist():
                _shift_into(part, row_year == year, int(year))
        frames[name] = frame.assign(ts=new)
    return notes


def _count_years(
    ts: np.ndarray,
    codes: np.ndarray,
    names: list[str],
    pairs: Counter[tuple[int, int]],
    yearless: set[str],
) -> None:
    """Rows of one chunk: the dated ones counted per (source code, year) into ``pairs``;
    the sources with placeholder-year stamps added to ``yearless``."""
    known = ~np.isnan(ts) & (codes >= 0)
    placeholder = known & (ts >= _START) & (ts < _END)
    yearless.update(names[c] for c in np.unique(codes[placeholder]).tolist())
    dated = known & ~placeholder
    if not dated.any():
        return
    got = _years(ts[dated])
    # one count per (source, year) pair by a bincount of one integer key: no Python
    # loop over rows (np.unique over pairs sorts structured rows: 50x slower)
    low = int(got.min())
    span = int(got.max()) - low + 1
    keys = codes[dated].astype(np.int64) * span + (got - low)
    if len(names) * span <= 4 * len(keys) + 1024:
        hist = np.bincount(keys)
        found, tally = np.flatnonzero(hist), hist[hist > 0]
    else:  # far-apart years (a garbled stamp) over many sources: sort instead
        found, tally = np.unique(keys, return_counts=True)
    for key, n in zip(found.tolist(), tally.tolist(), strict=True):
        code, offset = divmod(key, span)
        pairs[code, low + offset] += n
