"""Split each stream's events into runs: one server start-up and what followed it.

Rotated files of one server are one stream, so one run can span files. A start-up marker
(config echo, launch banner) that a run has already seen *from the same rank* starts a
new run: every rank prints its own init lines once per start-up, so a repeat means a
restart. Files written newest-first (some log viewers) are detected from their
timestamps and read in reverse.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from diag.events import EventTables
from diag.model import Stream

# markers that begin a start-up; "ready" only marks the end of one
SPLIT_MARKERS = {"server_args", "engine_config", "args", "api_server", "init_distributed"}
_FILE_STRIDE = 10**10


@dataclass
class Run:
    id: str
    stream: str
    backend: str
    sources: list[str]
    tables: EventTables
    year_source: str = "unknown"  # where year-less lines got their year: log | mtime | unknown


def _reversed_sources(tables: EventTables, sources: list[str]) -> set[str]:
    """Sources whose timestamps mostly decrease with the line number."""
    frames = [f[["source", "line", "ts"]] for f in tables._frames.values() if not f.empty]
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
            if len(d) >= 1 and (d < 0).mean() > 0.6:
                out.add(src)
    return out


def order_keys(frame: pd.DataFrame, file_index: dict[str, int], reversed_: set[str]) -> np.ndarray:
    """A total order of events within a stream: file, then line (reversed files flipped)."""
    idx = frame["source"].map(file_index).fillna(0).astype("int64").to_numpy()
    line = frame["line"].astype("int64").to_numpy()
    if reversed_:
        flip = frame["source"].isin(reversed_).to_numpy()
        line = np.where(flip, _FILE_STRIDE - 1 - line, line)
    return idx * _FILE_STRIDE + line


def _by_instance(tables: EventTables, streams: list[Stream]) -> list[tuple[Stream, EventTables]]:
    """A stream whose lines name several compose services / pods is several servers."""
    out: list[tuple[Stream, EventTables]] = []
    for stream in streams:
        mine = {k: f[f["source"].isin(stream.sources)] for k, f in tables._frames.items()}
        mine = {k: f for k, f in mine.items() if not f.empty}
        names = sorted({n for f in mine.values() for n in f["instance"].unique() if n})
        if len(names) <= 1:
            out.append((stream, EventTables(mine)))
            continue
        for name in ["", *names]:
            part = {k: f[f["instance"] == name] for k, f in mine.items()}
            part = {k: f for k, f in part.items() if not f.empty}
            if part:
                label = f"{stream.id}[{name}]" if name else stream.id
                sub = Stream(label, stream.backend, list(stream.sources), stream.year_source)
                out.append((sub, EventTables(part)))
    return out


def split_runs(tables: EventTables, streams: list[Stream]) -> list[Run]:
    runs: list[Run] = []
    for stream, sub_tables in _by_instance(tables, streams):
        file_index = {s: i for i, s in enumerate(stream.sources)}
        mine = dict(sub_tables._frames)
        sub = sub_tables
        if not mine:
            continue  # a file with nothing relevant makes no run (it is still listed in inputs)
        rev = _reversed_sources(sub, stream.sources)
        keyed = {k: f.assign(_order=order_keys(f, file_index, rev)) for k, f in mine.items()}
        bounds = _boundaries(keyed.get("startup"))
        n_runs = len(bounds) + 1
        parts: list[dict[str, pd.DataFrame]] = [{} for _ in range(n_runs)]
        for kind, frame in keyed.items():
            run_no = np.searchsorted(
                np.asarray(bounds, dtype="int64"), frame["_order"].to_numpy(), side="right"
            )
            frame = frame.assign(_run=run_no).sort_values("_order", kind="stable")
            for r, part in frame.groupby("_run", sort=True):
                parts[int(str(r))][kind] = part.drop(columns=["_run"]).reset_index(drop=True)
        backend = _backend_of(sub, stream.backend)
        for i, p in enumerate(parts):
            if not p:
                continue
            srcs = sorted(
                {s for f in p.values() for s in f["source"].unique()},
                key=lambda s: file_index.get(s, 0),
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
    return runs


def _boundaries(startup: pd.DataFrame | None) -> list[int]:
    """Order keys at which a new run begins."""
    if startup is None or startup.empty:
        return []
    seen: set[tuple[str, str]] = set()
    bounds: list[int] = []
    for marker, rank, order in startup.sort_values("_order")[
        ["marker", "rank", "_order"]
    ].itertuples(index=False, name=None):
        if marker not in SPLIT_MARKERS:
            continue
        key = (marker, rank)
        if key in seen:
            bounds.append(int(order))
            seen = set()
        seen.add(key)
    return bounds


def _backend_of(tables: EventTables, sniffed: str) -> str:
    engines: list[str] = []
    for frame in tables._frames.values():
        if "engine" in frame.columns:
            engines.extend(e for e in frame["engine"].dropna() if e in ("vllm", "sglang"))
    if engines:
        return max(("sglang", "vllm"), key=engines.count)
    return sniffed
