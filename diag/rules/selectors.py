"""Evidence selectors: which log lines take the reader to the proof of a finding.

A rule names its selector in the pack (``evidence: eager_batches``); each selector is a
small function of the run's facts returning (path, line) pairs, at most a handful. The
line text is filled in afterwards by :mod:`diag.evidence`.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

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
    keys = [
        "cuda_graph_max_bs",
        "cuda_graph_bs",
        "compilation_config.cudagraph_capture_sizes",
        "compilation_config.max_cudagraph_capture_size",
        "compilation_config.max_capture_size",
    ]
    return _ev(cs, 1) or _ev(cfg[cfg["key"].isin(keys)] if not cfg.empty else cfg, 1)


@selector("capture_error")
def capture_error(f: RunFacts) -> list[Evidence]:
    out = []
    if f.capture_error_at:
        out.append(Evidence(f.capture_error_at[0], f.capture_error_at[1], ""))
    out += _ev(f.tables["capture_begin"], 1) or _ev(f.tables["capture_progress"], 1)
    adv = f.tables["advisory"]
    if not adv.empty:  # a cause the remedy names first (the NCCL library that failed to load)
        out += _ev(adv[adv["topic"] == "nccl_load_failed"], 1)
    return _dedupe(out)


@selector("eager_batches")
def eager_batches(f: RunFacts) -> list[Evidence]:
    b = f.batches
    eager = b[b["verdict"] == "eager"] if not b.empty else b
    if not eager.empty:
        eager = eager.sort_values("batch_size", ascending=False, kind="stable")
    return _dedupe(_window_lines(f) + _ev(eager, 3))


@selector("padded_batches")
def padded_batches(f: RunFacts) -> list[Evidence]:
    b = f.batches
    g = b[(b["verdict"] == "graph") & b["padded"].notna()] if not b.empty else b
    if not g.empty:
        g = g.assign(_p=g["padded"].astype(float)).sort_values("_p", ascending=False, kind="stable")
    return _dedupe(_window_lines(f) + _ev(g, 3))


@selector("window")
def window(f: RunFacts) -> list[Evidence]:
    b = f.batches
    top = b.sort_values("batch_size", ascending=False, kind="stable") if not b.empty else b
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
    keys = [
        "disaggregation_mode",
        "disable_cuda_graph",
        "enforce_eager",
        "compilation_config.cudagraph_mode",
        "enable_torch_compile",
        "torch_compile_max_bs",
        "kv_transfer_config",
    ]
    rows = cfg[cfg["key"].isin(keys)] if not cfg.empty else cfg
    return _dedupe(_ev(rows, 1) + _ev(t["graph_disabled"], 2) + _ev(t["capture_begin"], 1))


@selector("capture_time")
def capture_time(f: RunFacts) -> list[Evidence]:
    ends = f.tables["capture_end"]
    if not ends.empty:
        ends = ends.sort_values("time_s", ascending=False, kind="stable")
    return _dedupe(_ev(f.tables["capture_begin"], 1) + _ev(ends, 2))


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
    e = b[(b["verdict"] == "eager") & b["gen_throughput"].notna()]
    g = b[(b["verdict"] == "graph") & b["gen_throughput"].notna()]
    return _dedupe(_ev(g, 1) + _ev(e, 2))


@selector("buckets")
def buckets(f: RunFacts) -> list[Evidence]:
    return _dedupe(_window_lines(f) + _ev(f.tables["capture_progress"], 1) + capture_error(f))
