"""Evidence selectors: which log lines take the reader to the proof of a finding.

A rule names its selector in the pack (``evidence: eager_batches``); each selector is a
small function of the run's facts returning (path, line) pairs, at most a handful. The
line text is filled in afterwards by :mod:`diag.evidence`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from diag.engines import SETTINGS_KEYS, WINDOW_KEYS
from diag.facts import classify as cls
from diag.facts.record import RunFacts
from diag.model import Evidence

Selector = Callable[[RunFacts], list[Evidence]]
SELECTORS: dict[str, Selector] = {}
MAX_EVIDENCE = 5


def selector(name: str) -> Callable[[Selector], Selector]:
    def register(fn: Selector) -> Selector:
        SELECTORS[name] = fn
        return fn

    return register


def _ev(frame: pd.DataFrame, n: int = 2, label: str = "") -> list[Evidence]:
    if frame is None or frame.empty:
        return []
    return [
        Evidence(str(s), int(ln), label)
        for s, ln in zip(frame["source"].head(n), frame["line"].head(n), strict=True)
    ]


def _dedupe(items: list[Evidence]) -> list[Evidence]:
    seen: set[tuple[str, int]] = set()
    out = []
    for e in items:
        if (e.path, e.line) not in seen:
            seen.add((e.path, e.line))
            out.append(e)
    return out[:MAX_EVIDENCE]


def _window_lines(f: RunFacts) -> list[Evidence]:
    t = f.tables
    cs = t["capture_sizes"]
    cfg = t["config"]
    return _ev(cs, 1) or _ev(cfg[cfg["key"].isin(WINDOW_KEYS)] if not cfg.empty else cfg, 1)


def _seek(message: str) -> str:
    """The text of an error's exception line to point the evidence at (its first 60
    characters: the log line holds it whole, behind its own prefix)."""
    head = message.split("\n", 1)[0].strip()
    return head[:60] if len(head) >= 8 else ""


@selector("capture_error")
def capture_error(f: RunFacts) -> list[Evidence]:
    out = []
    err = f.record.capture_error
    if f.capture_error_at:
        seek = _seek(err.message if err is not None else "")
        out.append(Evidence(f.capture_error_at[0], f.capture_error_at[1], "", seek=seek))
    out += _ev(f.tables["capture_begin"], 1) or _ev(f.tables["capture_progress"], 1)
    adv = f.tables["advisory"]
    if not adv.empty:  # a cause the remedy names first (the NCCL library that failed to load)
        out += _ev(adv[adv["topic"] == "nccl_load_failed"], 1)
    return _dedupe(out)


@selector("engine_error")
def engine_error(f: RunFacts) -> list[Evidence]:
    """The error line, then the last phase line the log opened before it."""
    e = f.state.engine_error
    if e is None:
        return []
    out = [Evidence(e.path, e.line, "", seek=_seek(e.headline))]
    ph = f.tables["phase"]
    if not ph.empty:
        before = ph[(ph["source"] == e.path) & (ph["line"] < e.line)]
        out += _ev(before.tail(1), 1)
    return _dedupe(out)


@selector("request_errors")
def request_errors(f: RunFacts) -> list[Evidence]:
    """The first and the last request error."""
    r = f.state.request_errors
    if r is None:
        return []
    return _dedupe(
        [
            Evidence(r.first.path, r.first.line, "", seek=_seek(r.first.message)),
            Evidence(r.last.path, r.last.line, "", seek=_seek(r.last.message)),
        ]
    )


def _top(frame: pd.DataFrame, mask: np.ndarray, key: np.ndarray, n: int) -> pd.DataFrame:
    """The first ``n`` rows of ``frame[mask].sort_values(key, ascending=False, kind="stable")``
    (NaN last), taking only those rows: the candidates are the rows at or above the n-th
    largest key, so only a handful are sorted."""
    idx = np.flatnonzero(mask)
    k = key[idx]
    finite = ~np.isnan(k)
    pos, vals = idx[finite], k[finite]
    if len(vals) > n:
        nth = np.partition(vals, len(vals) - n)[len(vals) - n]
        pos, vals = pos[vals >= nth], vals[vals >= nth]
    top = pos[np.argsort(-vals, kind="stable")][:n]  # ties keep their order, as pandas does
    if len(top) < n:
        top = np.concatenate([top, idx[~finite][: n - len(top)]])
    return frame.iloc[top]


def _verdict_is(b: pd.DataFrame, verdict: str) -> np.ndarray:
    return np.asarray(cls.verdict_codes(b) == cls.VERDICTS.index(verdict))


def _floats(b: pd.DataFrame, column: str) -> np.ndarray:
    return np.asarray(b[column].to_numpy(dtype=float, na_value=np.nan))


@selector("eager_batches")
def eager_batches(f: RunFacts) -> list[Evidence]:
    b = f.batches
    eager = _top(b, _verdict_is(b, "eager"), _floats(b, "batch_size"), 3) if not b.empty else b
    return _dedupe(_window_lines(f) + _ev(eager, 3))


@selector("padded_batches")
def padded_batches(f: RunFacts) -> list[Evidence]:
    b = f.batches
    if not b.empty:
        padded = _floats(b, "padded")
        b = _top(b, _verdict_is(b, "graph") & ~np.isnan(padded), padded, 3)
    return _dedupe(_window_lines(f) + _ev(b, 3))


@selector("window")
def window(f: RunFacts) -> list[Evidence]:
    b = f.batches
    top = _top(b, np.ones(len(b), dtype=bool), _floats(b, "batch_size"), 1) if not b.empty else b
    return _dedupe(_window_lines(f) + _ev(f.tables["capture_end"], 1) + _ev(top, 1))


@selector("kv")
def kv(f: RunFacts) -> list[Evidence]:
    t = f.tables
    s = t["sizing"]
    kv_rows = (
        s[
            s["name"].isin(
                ["kv_cache_gib", "kv_tokens", "graph_mem_est_gib", "graph_pool_actual_gib"]
            )
        ]
        if not s.empty
        else s
    )
    adv = t["advisory"]
    adv = (
        adv[
            adv["topic"].isin(
                ["graph_memory_profiling", "graph_memory_warning", "capping_capture_sizes"]
            )
        ]
        if not adv.empty
        else adv
    )
    return _dedupe(_ev(t["capture_end"], 1) + _ev(kv_rows, 2) + _ev(adv, 1) + _ev(t["retract"], 1))


@selector("config")
def config(f: RunFacts) -> list[Evidence]:
    t = f.tables
    cfg = t["config"]
    rows = cfg[cfg["key"].isin(SETTINGS_KEYS)] if not cfg.empty else cfg
    return _dedupe(_ev(rows, 1) + _ev(t["graph_disabled"], 2) + _ev(t["capture_begin"], 1))


@selector("capture_time")
def capture_time(f: RunFacts) -> list[Evidence]:
    ends = f.tables["capture_end"]
    if not ends.empty:
        ends = ends.sort_values("time_s", ascending=False, kind="stable")
    return _dedupe(_ev(f.tables["capture_begin"], 1) + _ev(ends, 2))


@selector("capture_stall")
def capture_stall(f: RunFacts) -> list[Evidence]:
    """The begin line of each rank stuck in capture."""
    return _dedupe([Evidence(s.path, s.line, "") for s in f.stalls])


@selector("config_eager")
def config_eager(f: RunFacts) -> list[Evidence]:
    """The engine's own line for each setting that sent batches eager."""
    return _dedupe([Evidence(c.path, c.line, "") for c in f.config_eager])


@selector("downgrade")
def downgrade(f: RunFacts) -> list[Evidence]:
    t = f.tables
    modes = t["graph_mode"]
    down = modes[modes["downgraded"] == True] if not modes.empty else modes  # noqa: E712
    return _dedupe(_ev(down, 2) + _ev(t["graph_disabled"], 2))


@selector("speed")
def speed(f: RunFacts) -> list[Evidence]:
    b = f.batches
    if b.empty:
        return []
    gen = ~np.isnan(_floats(b, "gen_throughput"))
    e = b.iloc[np.flatnonzero(_verdict_is(b, "eager") & gen)[:2]]
    g = b.iloc[np.flatnonzero(_verdict_is(b, "graph") & gen)[:1]]
    return _dedupe(_ev(g, 1) + _ev(e, 2))


@selector("buckets")
def buckets(f: RunFacts) -> list[Evidence]:
    return _dedupe(_window_lines(f) + _ev(f.tables["capture_progress"], 1) + capture_error(f))
