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

import numpy as np
import pandas as pd

from diag.events import EventTables
from diag.model import Stream
from diag.normalize.prefix import NO_YEAR

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


def _shift(ts: np.ndarray, year: int) -> np.ndarray:
    """Placeholder-year timestamps moved to ``year`` (same month, day and time)."""
    out = ts.copy()
    mask = (ts >= _START) & (ts < _END)
    if not mask.any():
        return out
    days = np.floor((ts[mask] - _START) / 86400).astype("int64")
    distinct, which = np.unique(days, return_inverse=True)
    delta = np.empty(len(distinct), np.float64)
    for i, d in enumerate(distinct.tolist()):  # once per calendar day, not per row
        old = datetime.fromtimestamp(_START + d * 86400, tz=timezone.utc)
        try:
            new = old.replace(year=year)
        except ValueError:  # Feb 29 in a common year
            new = old.replace(year=year, day=28)
        delta[i] = new.timestamp() - old.timestamp()
    out[mask] = ts[mask] + delta[which.ravel()]
    return out


def _source_codes(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes of a source column (-1: missing) and the names they stand for."""
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
        ts = frame["ts"].to_numpy(dtype="float64", na_value=np.nan)
        codes, names = _source_codes(frame["source"])
        known = ~np.isnan(ts) & (codes >= 0)
        placeholder = known & (ts >= _START) & (ts < _END)
        yearless.update(names[c] for c in np.unique(codes[placeholder]).tolist())
        dated = known & ~placeholder
        if dated.any():
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
                years.setdefault(names[code], Counter())[low + offset] += n
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
        year_of = frame["source"].map(target)
        if year_of.isna().all():
            continue
        ts = frame["ts"].to_numpy(dtype="float64", na_value=np.nan)
        new = ts.copy()
        for year in pd.unique(year_of.dropna()):
            mine = (year_of == year).to_numpy()
            new[mine] = _shift(ts[mine], int(year))
        frames[name] = frame.assign(ts=new)
    return notes
