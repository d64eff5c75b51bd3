"""settle_years: the year a stream's year-less lines get is the most common year among the
stream's dated lines, whatever the number of sources and however far apart the years are."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

import numpy as np
import pandas as pd
from hypothesis import example, given, settings
from hypothesis import strategies as st

from diag.events import EventTables
from diag.ingest.clock import settle_years
from diag.model import Stream
from diag.normalize.prefix import NO_YEAR


def _stamp(year: int, day: int) -> float:
    return datetime(year, 3, 1 + day, 12, tzinfo=timezone.utc).timestamp()


rows = st.lists(
    st.tuples(
        st.integers(0, 299),  # source
        st.sampled_from([1970, 2024, 2025, 2025, 2026, 2261, NO_YEAR]),
        st.integers(0, 20),  # day in March
    ),
    min_size=1,
    max_size=400,
)


@settings(max_examples=60, deadline=None)
@given(rows=rows, categorical=st.booleans())
def test_year_is_the_streams_most_common_dated_year(rows: list, categorical: bool) -> None:
    names = [f"pod-{s}.log" for s, _, _ in rows]
    ts = [_stamp(y, d) for _, y, d in rows]
    source = pd.Categorical(names) if categorical else names
    frame = pd.DataFrame({"source": source, "ts": np.array(ts, np.float64)})
    streams = [Stream(n, "vllm", [n]) for n in sorted(set(names))]
    tables = EventTables({"decode_batch": frame})

    settle_years(tables, streams)

    dated: dict[str, Counter[int]] = {}
    for (_, y, _), n in zip(rows, names, strict=True):
        if y != NO_YEAR:
            dated.setdefault(n, Counter())[y] += 1
    out = tables["decode_batch"]["ts"].to_numpy()
    by_name = {s.id: s for s in streams}
    for i, ((_, y, d), n) in enumerate(zip(rows, names, strict=True)):
        counts = dated.get(n)
        if counts:
            assert by_name[n].year_source == "log"
            best = max(counts.values())
            # ties: any of the most common years is a right answer
            allowed = {yy for yy, c in counts.items() if c == best}
        else:
            assert by_name[n].year_source in ("mtime", "unknown")
            allowed = None
        if y == NO_YEAR and allowed is not None:
            got = datetime.fromtimestamp(out[i], tz=timezone.utc)
            assert got.year in allowed and (got.month, got.day) == (3, 1 + d)
        elif y != NO_YEAR:
            assert out[i] == ts[i]


@given(st.lists(st.floats(-2e9, 5e9, allow_nan=False), min_size=1, max_size=60))
def test_years_by_day_table_are_the_calendar_years(stamps: list[float]) -> None:
    """The day-table year of a stamp is pandas' UTC calendar year (leap days, the epoch,
    negative stamps, year ends), on spans the table takes and on ones it leaves to pandas.
    Stamps at a log's precision (ms): within a nanosecond of midnight pandas rounds first."""
    from diag.ingest.clock import _years

    ts = np.round(np.array(stamps), 3)
    want = pd.to_datetime(ts, unit="s", utc=True).year.to_numpy(np.int64)
    np.testing.assert_array_equal(_years(ts), want)


@settings(max_examples=40, deadline=None)
@given(rows=rows, chunk=st.integers(1, 9))
@example(rows=[(0, 2026, 1), (0, 2024, 1), (0, NO_YEAR, 2)], chunk=1)  # a tie, later year first
def test_settling_in_chunks_is_settling_whole(rows: list, chunk: int) -> None:
    """The years and shifted stamps do not depend on the chunk the rows are read in (a big
    log's tables are read 256 K rows at a time), ties between years included."""
    from diag.ingest import clock

    names = [f"pod-{s % 7}.log" for s, _, _ in rows]  # few sources: ties across chunks
    ts = np.array([_stamp(y, d) for _, y, d in rows], np.float64)

    def settled(rows_at_a_time: int) -> tuple[list[float], list[str]]:
        frame = pd.DataFrame({"source": pd.Categorical(names), "ts": ts.copy()})
        streams = [Stream(n, "vllm", [n]) for n in sorted(set(names))]
        tables = EventTables({"decode_batch": frame})
        old = clock.CHUNK_ROWS
        clock.CHUNK_ROWS = rows_at_a_time
        try:
            settle_years(tables, streams)
        finally:
            clock.CHUNK_ROWS = old
        return tables["decode_batch"]["ts"].tolist(), [s.year_source for s in streams]

    assert settled(chunk) == settled(1 << 20)
