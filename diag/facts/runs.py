"""Split each stream's events into runs: one server start-up and what followed it.

Rotated files of one server are one stream, so one run can span files. A start-up marker
(config echo, launch banner) that a run has already seen *from the same rank* starts a
new run: every rank prints its own init lines once per start-up, so a repeat means a
restart. Files written newest-first (some log viewers) are detected from their
timestamps and read in reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diag.events import EventTables
from diag.facts.access import distinct, numbered
from diag.model import Stream

# markers that begin a start-up; "ready" only marks the end of one
SPLIT_MARKERS = {"server_args", "engine_config", "args", "api_server", "init_distributed"}
_PER_RUNNER = frozenset({"init_distributed"})  # printed by each model runner, draft ones too
_FILE_STRIDE = 10**10


@dataclass(frozen=True)
class Run:
    id: str
    stream: str
    backend: str
    sources: list[str]
    tables: EventTables
    year_source: str = "unknown"  # where year-less lines got their year: log | mtime | unknown


# clock steps a member of a rotated set needs before it is read newest-first: rotation cuts
# at any line, and a tail of a few lines whose one step goes back holds a late line, not a
# viewer's export (a lone file keeps one step: real newest-first pastes are that short)
MIN_REVERSED_STEPS_IN_SET = 2


def _reversed_sources(tables: EventTables, sources: list[str]) -> set[str]:
    """Sources whose timestamps mostly decrease with the line number."""
    if len(sources) == 1:  # one file: no concat and per-source filter (thousands of streams)
        frames = [f for f in tables._frames.values() if not _empty(f)]
        if not frames:
            return set()
        ts = _clocked(frames)
        if len(ts) >= 2 and ts.min() != ts.max():  # 2 stamps at least
            d = np.diff(ts)
            del ts  # (each step frees what it no longer needs: these are all event rows)
            d = d[d != 0]
            if len(d) >= 1 and (d < 0).mean() > 0.6:
                return set(sources)
        return set()
    frames = [f[["source", "line", "ts"]] for f in tables._frames.values() if not _empty(f)]
    if not frames:
        return set()
    allf = pd.concat(frames)
    out: set[str] = set()
    for src in sources:
        part = allf[(allf["source"] == src) & allf["ts"].notna()].sort_values("line")
        ts = part["ts"].drop_duplicates().to_numpy()
        if len(ts) >= 2:
            d = np.diff(part["ts"].to_numpy())
            d = d[d != 0]
            # newest-first viewers: (almost) every step back in time; a stray late line is not enough
            if len(d) >= MIN_REVERSED_STEPS_IN_SET and (d < 0).mean() > 0.6:
                out.add(src)
    return out


def _clocked(frames: list[pd.DataFrame]) -> np.ndarray:
    """The timestamps of every row that has one, in line order. Rows without a clock are
    dropped before the (stable) sort: the same sequence as dropping them after it, with
    the sort and its copies over fewer rows, and no column held longer than needed."""
    lines, stamps = [], []
    for f in frames:
        ts = f["ts"].to_numpy(dtype="float64")
        line = f["line"].to_numpy(dtype="int64")
        clock = ~np.isnan(ts)
        if not clock.all():
            ts, line = ts[clock], line[clock]
        lines.append(line)
        stamps.append(ts)
    line = np.concatenate(lines)
    del lines
    order = np.argsort(line, kind="stable")
    del line
    ts = np.concatenate(stamps)
    del stamps
    return ts[order]


def order_keys(frame: pd.DataFrame, file_index: dict[str, int], reversed_: set[str]) -> np.ndarray:
    """A total order of events within a stream: file, then line (reversed files flipped)."""
    line = frame["line"].to_numpy(dtype="int64")
    if len(file_index) == 1 and not reversed_:  # one file in order: the line is the key
        return np.asarray(line)
    if len(file_index) == 1:  # one file: every row maps to 0
        idx = np.zeros(len(line), dtype="int64")
    else:
        idx = frame["source"].map(file_index).fillna(0).astype("int64").to_numpy()
    if reversed_:
        flip = frame["source"].isin(reversed_).to_numpy()
        line = np.where(flip, _FILE_STRIDE - 1 - line, line)
    return np.asarray(idx * _FILE_STRIDE + line)


def _line_keys(frame: pd.DataFrame) -> pd.Series:
    """The order keys of a file read in order: its line (:func:`_keys`)."""
    return _keys(frame, {"": 0}, set())


def _keys(frame: pd.DataFrame, file_index: dict[str, int], reversed_: set[str]) -> pd.Series:
    """:func:`order_keys` as the ``_order`` column. A Series, not an array: pandas copies
    an array assigned as a column, and for one file in order the keys are the ``line``
    column's own int64 data (a view, read-only here so no write reaches ``line``), which
    spares a copy of every event row's key (~26 MB on a 5 M-line log)."""
    keys = order_keys(frame, file_index, reversed_).view()
    keys.flags.writeable = False
    return pd.Series(keys, index=frame.index, copy=False)


@dataclass(frozen=True)
class _Split:
    """Each stream's frames (:func:`_stream_frames`), and what split_runs asks of each stream's
    rows, read in the same pass over every frame (per stream it cost a column read and a
    Series per frame, ~11 frames of each of thousands of pod logs): None where it was not
    read (then split_runs reads the stream's frames as before)."""

    frames: list[dict[str, pd.DataFrame]]
    #: per stream: the non-empty ``instance`` values of its rows
    names: list[set[str]] | None = None
    #: per stream: do its clocked rows step back in time (in line order) mostly
    newest_first: np.ndarray | None = None
    #: per stream: rows of each engine (``_backend_of``'s counts)
    engines: dict[str, np.ndarray] | None = None
    #: per kind: the streams whose rows of it are not in line order
    unsorted: dict[str, set[int]] | None = None


def _stream_frames(tables: EventTables, streams: list[Stream]) -> _Split:
    """Each stream's rows of every frame, in one grouped pass per frame, with only its own
    files as ``source`` categories and its line as ``_order`` (the order key of a file read
    in order, :func:`split_runs` keys the others): the column added once per frame, not per
    stream and frame (a new column costs ~0.1 ms, per kind of each small run).

    Equal to ``f[f["source"].isin(stream.sources)]`` per stream and frame (same rows and
    order), without filtering every frame once per stream: thousands of small files made
    that quadratic. A source listed by two streams (never made by ingest) falls back to the
    per-stream filter (its frames as they are)."""
    stream_of: dict[str, int] = {}
    for i, stream in enumerate(streams):
        for src in stream.sources:
            if stream_of.setdefault(src, i) != i:
                return _Split(
                    [
                        {k: f[f["source"].isin(st.sources)] for k, f in tables._frames.items()}
                        for st in streams
                    ]
                )
    out: list[dict[str, pd.DataFrame]] = [{} for _ in streams]
    reads = _StreamReads(len(streams))
    dtypes: dict[tuple[object, ...], pd.CategoricalDtype] = {}  # a stream's files' dtype, made once
    for kind, frame in tables._frames.items():
        if _empty(frame):
            continue
        src = frame["source"]
        categorical = isinstance(src.dtype, pd.CategoricalDtype)
        if categorical:
            by_code = np.array(
                [stream_of.get(c, -1) for c in src.cat.categories] + [-1], dtype=np.int64
            )
            keys = by_code[src.cat.codes.to_numpy()]  # code -1 (missing) -> the last entry
        else:
            keys = src.map(stream_of).fillna(-1).to_numpy(dtype=np.int64)
        one = bool(len(keys)) and keys[0] >= 0 and bool((keys == keys[0]).all())
        order = None if one else np.argsort(keys, kind="stable")
        reads.add(kind, frame, keys, order)
        if one:
            # one stream holds every row (one file, one rotated set): the frame itself
            local = (
                _own_categories(np.asarray(src.array.codes), src.array.categories, dtypes)
                if categorical
                else None
            )
            own = {} if local is None else {"source": local}
            out[int(keys[0])][kind] = frame.assign(**own, _order=_line_keys(frame))
            continue
        assert order is not None
        grouped = frame.take(order)  # one copy, each stream's rows a slice (not a take each)
        grouped = grouped.assign(_order=_line_keys(grouped))
        at = grouped.columns.get_loc("source")
        if categorical:
            codes = np.asarray(grouped["source"].array.codes)
            cats = grouped["source"].array.categories
        sorted_keys = keys[order]
        starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
        ends = np.r_[starts[1:], len(sorted_keys)]
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            key = int(sorted_keys[a])
            if key >= 0:
                # the slice (its data shared: copy on write) with the column replaced in
                # it and its rows numbered, as assign + reset_index would give
                part = grouped.iloc[a:b]  # (a frame of its own: copy on write)
                local = _own_categories(codes[a:b], cats, dtypes) if categorical else None
                if local is not None:
                    part.isetitem(at, local)
                part.index = pd.RangeIndex(b - a)
                out[key][kind] = part
    # keep the frames' order as in the tables, as the per-stream filter did
    names = list(tables._frames)
    frames = [dict(sorted(m.items(), key=lambda kv: names.index(kv[0]))) for m in out]
    return reads.finish(frames)


#: rows of a group's frames up to which each stream's clock is read in the grouping pass (a
#: folder of pod logs: ~40,000 rows a group); past it (a big log) each stream's own frames
#: are read after, as they always were, in their memory
_READ_ROWS = 1 << 18


class _StreamReads:
    """What :class:`_Split` holds besides the frames, gathered frame by frame."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.names: list[set[str]] | None = [set() for _ in range(n)]
        self.clock: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = []
        self.engines: dict[str, np.ndarray] | None = {
            e: np.zeros(n, np.int64) for e in ("sglang", "vllm")
        }
        self.unsorted: dict[str, set[int]] = {}
        self.rows = 0

    def add(self, kind: str, frame: pd.DataFrame, keys: np.ndarray, order: Any) -> None:
        """One frame's rows: ``keys`` their streams, ``order`` their stable sort by stream
        (None: one stream holds them all)."""
        mine = keys >= 0
        self._names(frame, keys, mine)
        line = frame["line"].to_numpy(dtype="int64")
        # streams whose rows step back in line (each stream's rows keep their order)
        if order is None:
            back_at = keys[1:][line[1:] < line[:-1]]
        else:
            at, lines = keys[order], line[order]
            back_at = at[1:][(at[1:] == at[:-1]) & (lines[1:] < lines[:-1])]
            del at, lines
        self.unsorted[kind] = set(np.unique(back_at).tolist())
        self.rows += len(keys)
        if self.clock is not None and self.rows > _READ_ROWS:
            self.clock = None  # a big log's rows: each stream judged alone (its memory)
        if self.clock is not None:  # the clocked rows (``_clocked``): stream, line, ts
            ts = frame["ts"].to_numpy(dtype="float64")
            clock = ~np.isnan(ts) & mine
            self.clock.append((keys[clock], line[clock], ts[clock]))
        if self.engines is not None and "engine" in frame.columns:
            engine = frame["engine"]
            if not isinstance(engine.dtype, pd.CategoricalDtype):
                self.engines = None
                return
            codes = np.asarray(engine.array.codes)
            for i, value in enumerate(engine.array.categories):
                if value in self.engines:
                    at = keys[(codes == i) & mine]
                    self.engines[value] += np.bincount(at, minlength=self.n)

    def _names(self, frame: pd.DataFrame, keys: np.ndarray, mine: np.ndarray) -> None:
        if self.names is None:
            return
        instance = frame["instance"]
        if not isinstance(instance.dtype, pd.CategoricalDtype):
            self.names = None
            return
        cats = instance.array.categories
        codes = np.asarray(instance.array.codes)
        if (codes[mine] < 0).any():  # a missing value (``distinct`` reads it as NaN)
            self.names = None
            return
        named = [i for i, c in enumerate(cats) if c]
        if not named:  # (a pod's log: "" only)
            return
        codes = codes.astype(np.int64)
        sel = mine & np.isin(codes, named)
        for pair in np.unique(keys[sel] * len(cats) + codes[sel]).tolist():
            self.names[pair // len(cats)].add(cats[pair % len(cats)])

    def finish(self, frames: list[dict[str, pd.DataFrame]]) -> _Split:
        """Per stream, as :func:`_reversed_sources` judges one file: its clocked rows in
        line order (a stable sort of the frames' rows in the tables' order, as ``_clocked``),
        the steps between them that are not 0, and whether more than 60 % go back."""
        if self.clock is None:
            return _Split(frames, self.names, None, self.engines, self.unsorted)
        keys = np.concatenate([k for k, _, _ in self.clock]) if self.clock else np.zeros(0, int)
        line = np.concatenate([v for _, v, _ in self.clock]) if self.clock else keys
        ts = np.concatenate([t for _, _, t in self.clock]) if self.clock else np.zeros(0)
        order = np.lexsort((line, keys))
        keys, ts = keys[order], ts[order]
        d = np.diff(ts)
        step = (keys[1:] == keys[:-1]) & (d != 0)
        at = keys[1:]
        moved = np.bincount(at[step], minlength=self.n)
        back = np.bincount(at[step & (d < 0)], minlength=self.n)
        with np.errstate(invalid="ignore", divide="ignore"):
            newest_first = (moved >= 1) & (back / np.maximum(moved, 1) > 0.6)
        return _Split(frames, self.names, newest_first, self.engines, self.unsorted)


def _own_categories(
    codes: np.ndarray, cats: pd.Index, dtypes: dict[tuple[object, ...], pd.CategoricalDtype]
) -> pd.Categorical | None:
    """A stream's ``source`` column (``codes`` into the frame's ``cats``) with only its own
    files as categories, None where it has them already: every later per-stream step
    (``map``, ``isin``, ``unique``) then costs the stream's files, not the whole folder's
    (10,000 files made each of them quadratic). ``dtypes``: the dtypes made so far by the
    files they hold (a dtype costs ~80 us to make, a stream's frames share it)."""
    if len(codes) and (one := int(codes.min())) >= 0 and one == int(codes.max()):
        # one file (a pod's log): no count over every file of the folder, per frame
        if len(cats) == 1:
            return None
        key: tuple[object, ...] = (cats[one],)
        local = np.zeros(len(codes), dtype=np.int8)
        present = None
    else:
        seen = np.bincount(codes + 1, minlength=len(cats) + 1) > 0  # slot 0: missing (-1)
        present = np.flatnonzero(seen[1:])
        if len(present) == len(cats):  # every category is in use: already its own
            return None
        remap = np.full(len(cats) + 1, -1, dtype=np.int64)
        remap[present + 1] = np.arange(len(present))
        local = remap[codes + 1]  # missing values keep code -1
        key = tuple(cats[present])  # (by the names: each frame's categories are its own)
    dtype = dtypes.get(key)
    if dtype is None:
        names = cats[[one] if present is None else present]
        dtype = dtypes[key] = pd.CategoricalDtype(names, ordered=False)
    # (codes within the categories by construction)
    return pd.Categorical.from_codes(local, dtype=dtype, validate=False)


def _by_instance(
    tables: EventTables, streams: list[Stream]
) -> tuple[list[tuple[Stream, EventTables, int | None]], _Split]:
    """A stream whose lines name several compose services / pods is several servers. Each
    with the index of its stream in the ``_Split`` where it is the whole stream."""
    out: list[tuple[Stream, EventTables, int | None]] = []
    split = _stream_frames(tables, streams)
    for i, (stream, frames) in enumerate(zip(streams, split.frames, strict=True)):
        mine = {k: f for k, f in frames.items() if not _empty(f)}
        if split.names is not None:
            names = sorted(split.names[i])
        else:
            names = sorted({n for f in mine.values() for n in distinct(f["instance"]) if n})
        if len(names) <= 1:
            out.append((stream, EventTables(mine), i))
            continue
        for name in ["", *names]:
            part = {k: f[f["instance"] == name] for k, f in mine.items()}
            part = {k: f for k, f in part.items() if not _empty(f)}
            if part:
                label = f"{stream.id}[{name}]" if name else stream.id
                sub = Stream(
                    label, stream.backend, list(stream.sources), stream.kind, stream.year_source
                )
                out.append((sub, EventTables(part), None))
    return out, split


def split_runs(tables: EventTables, streams: list[Stream]) -> list[Run]:
    runs: list[Run] = []
    parts_of, split = _by_instance(tables, streams)
    for stream, sub_tables, whole in parts_of:
        file_index = {s: i for i, s in enumerate(stream.sources)}
        mine = dict(sub_tables._frames)
        sub = sub_tables
        if not mine:
            continue  # a file with nothing relevant makes no run (it is still listed in inputs)
        if whole is not None and split.newest_first is not None and len(stream.sources) == 1:
            rev = set(stream.sources) if split.newest_first[whole] else set()
        else:
            rev = _reversed_sources(sub, stream.sources)
        in_order = len(file_index) == 1 and not rev  # (the line is the key: set already)
        keyed = {
            k: f
            if in_order and "_order" in f.columns
            else f.assign(_order=_keys(f, file_index, rev))
            for k, f in mine.items()
        }
        bounds = _boundaries(keyed.get("startup"))
        n_runs = len(bounds) + 1
        parts: list[dict[str, pd.DataFrame]] = [{} for _ in range(n_runs)]
        # a file read in order and not restarted: its kinds in line order (``_Split``) are
        # its run's frames as they are, without reading each one's order keys
        unsorted = split.unsorted if whole is not None and in_order and n_runs == 1 else None
        for kind, frame in keyed.items():
            if unsorted is not None and whole not in unsorted.get(kind, ()) and "_order" in frame:
                parts[0][kind] = frame if numbered(frame.index) else frame.reset_index(drop=True)
                continue
            order = frame["_order"].to_numpy()
            if len(order) > 1 and not bool(np.all(order[1:] >= order[:-1])):
                frame = frame.sort_values("_order", kind="stable")  # rarely: logs are in order
                order = frame["_order"].to_numpy()
            if not numbered(frame.index):
                frame = frame.reset_index(drop=True)
            if n_runs == 1:  # no restart: one run of all rows, no copy
                parts[0][kind] = frame
                continue
            # runs are contiguous in order-key order: slices, not a grouped copy of each row
            cuts = np.searchsorted(order, np.asarray(bounds, dtype="int64"), side="left")
            for r, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(order)], strict=True)):
                if b > a:
                    part = frame.iloc[a:b]  # (a frame of its own: copy on write)
                    part.index = pd.RangeIndex(b - a)  # as reset_index(drop=True), no copy
                    parts[r][kind] = part
        if whole is not None and split.engines is not None:
            backend = _backend_by_counts({e: int(n[whole]) for e, n in split.engines.items()})
            backend = backend or stream.backend
        else:
            backend = _backend_of(sub, stream.backend)
        for i, p in enumerate(parts):
            if not p:
                continue
            # every row of a stream's frames is of one of its files (``_stream_frames``): a
            # one-file stream's run is of that file, read without a pass over each frame
            srcs = (
                list(stream.sources)
                if len(stream.sources) == 1
                else sorted(
                    {s for f in p.values() for s in distinct(f["source"])},
                    key=lambda s: file_index.get(s, 0),
                )
            )
            runs.append(
                Run(
                    f"{stream.id}#{i + 1}",
                    stream.id,
                    backend,
                    srcs,
                    EventTables(p),
                    stream.year_source,
                )
            )
    documents = {s.id for s in streams if s.kind == "server_info"}
    return _join_companions(runs, documents)


_METRICS_ONLY = frozenset({"metric", "input_note"})


def _companion(run: Run, documents: set[str]) -> bool:
    """A run made by a /metrics dump or a server-info document alone, not by a log."""
    if run.stream in documents:
        return True
    kinds = {k for k, f in run.tables._frames.items() if not _empty(f)}
    return bool(kinds) and kinds <= _METRICS_ONLY and "metric" in kinds


def _join_companions(runs: list[Run], documents: set[str]) -> list[Run]:
    """A /metrics dump or a server-info document makes a stream of its own; beside a log of
    the same engine (same folder: ``diag.sources.groups.join_scope`` keeps them in one
    group) it joins that log's last run, as a snapshot does. Alone it
    stays a run. What the log itself shows wins: a document's event kinds the log already
    has (its config echo, its capture lines) are not added twice."""
    runs = list(runs)  # a host is replaced by itself with the dump joined
    joined: set[int] = set()
    companion = [_companion(run, documents) for run in runs]
    # each run's folders, made once (a host's entries are made again when it is replaced)
    folders_of: dict[int, set[str]] = {}

    def folders(j: int) -> set[str]:
        got = folders_of.get(j)
        if got is None:
            got = folders_of[j] = {str(Path(s).parent) for s in runs[j].sources}
        return got

    for i, run in enumerate(runs):
        if not companion[i]:
            continue
        mine = folders(i)
        at = next(
            (
                j
                for j in reversed(range(len(runs)))
                if j != i
                and runs[j].backend == run.backend
                and not companion[j]
                and mine & folders(j)
            ),
            None,
        )
        if at is None:
            continue
        host = runs[at]
        frames = dict(host.tables._frames)
        document = run.stream in documents
        for kind, frame in run.tables._frames.items():
            if kind not in frames or _empty(frames[kind]):
                frames[kind] = frame
            elif not document:
                frames[kind] = pd.concat([frames[kind], frame], ignore_index=True)
        sources = [*host.sources, *[s for s in run.sources if s not in host.sources]]
        runs[at] = replace(host, tables=EventTables(frames), sources=sources)
        folders_of.pop(at, None)
        companion[at] = _companion(runs[at], documents)  # (a lone input note's run may be one now)
        joined.add(i)
    return [r for i, r in enumerate(runs) if i not in joined]


def _boundaries(startup: pd.DataFrame | None) -> list[int]:
    """Order keys at which a new run begins."""
    if startup is None or _empty(startup):
        return []
    seen: set[tuple[str, str]] = set()
    bounds: list[int] = []
    keys = startup["_order"].to_numpy()
    by_order = np.argsort(keys, kind="quicksort")  # as sort_values("_order") orders them
    markers = startup["marker"].to_numpy()[by_order].tolist()
    ranks = startup["rank"].to_numpy()[by_order].tolist()
    # every SGLang ModelRunner says "Init torch distributed begin.", a speculative draft
    # runner's as well as its target's (sglang==0.5.3:srt/model_executor/model_runner.py:285,
    # 626): it marks a launch only in a log that shows no launch line of its own
    splits = (
        SPLIT_MARKERS
        if SPLIT_MARKERS.isdisjoint(set(markers) - _PER_RUNNER)
        else (SPLIT_MARKERS - _PER_RUNNER)
    )
    for marker, rank, order in zip(markers, ranks, keys[by_order].tolist(), strict=True):
        if marker not in splits:
            continue
        key = (marker, rank)
        if key in seen:
            bounds.append(int(order))
            seen = set()
        seen.add(key)
    return bounds


def _value_counts(col: pd.Series) -> list[tuple[object, int]]:
    """(value, count) pairs of a column; on a categorical, a bincount of its codes (pandas'
    own value_counts costs ~0.5 ms a call there, paid per frame of every small run)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cat = col.array  # (its codes and categories without a Series each)
        codes = np.asarray(cat.codes)
        counts = np.bincount(codes[codes >= 0], minlength=len(cat.categories))
        return [(v, int(n)) for v, n in zip(cat.categories, counts, strict=True) if n]
    return [(v, int(n)) for v, n in col.value_counts().items()]


def _empty(frame: pd.DataFrame) -> bool:
    """``frame.empty`` (~7 us a call, several per frame of each small run)."""
    return len(frame.index) == 0 or len(frame.columns) == 0


def _backend_of(tables: EventTables, sniffed: str) -> str:
    counts = {"sglang": 0, "vllm": 0}
    for frame in tables._frames.values():
        if "engine" in frame.columns and len(frame):
            for engine, n in _value_counts(frame["engine"]):
                if engine in counts:
                    counts[str(engine)] += n
    return _backend_by_counts(counts) or sniffed


def _backend_by_counts(counts: dict[str, int]) -> str | None:
    """The engine most rows name (SGLang on a tie), None when no row names one."""
    if any(counts.values()):
        return max(("sglang", "vllm"), key=counts.__getitem__)
    return None
