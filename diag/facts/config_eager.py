"""Batches the configuration pushed out of the graph window, with the engine's own line.

Not batch size but a setting decides these: vLLM truncating ``max_cudagraph_capture_size``
to the ladder below it while speculative decoding multiplies a verify step's tokens by
``1 + k`` (vllm==0.34.0:vllm/config/vllm.py:2506-2527 "Truncating max_cudagraph_capture_size
to %d"; vllm-project/vllm PR 37865: 42 -> 40 with 6 speculative tokens, 25 -> 133 tok/s once
fixed), and SGLang turning its prefill graphs off for a feature or for memory
(sglang==0.5.23:srt/model_executor/model_runner_components/cuda_graph_setup.py: "Disable
prefill CUDA graph because ...", "Disabling auto-selected prefill CUDA graph: ..."). Each
says which batches it pushed out and the change that brings them back.

Data-parallel ranks vote on graphs each step and take the minimum: SGLang all-gathers each
DP rank's ``can_run_decode_cuda_graph`` (False where graphs are disabled) and runs graphs
only if every rank can (sglang==0.5.23:srt/managers/scheduler_components/dp_attn.py:290,
369-381); vLLM synchronises ``cudagraph_mode`` across DP ranks by the minimum, "If any rank
has NONE (0), all ranks use NONE" (vllm==0.20.0:vllm/v1/worker/dp_utils.py:90-97). So one
DP rank that captured no graphs while the others did runs every rank's steps eager.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from diag.engines import EngineConfig
from diag.events import EventTables
from diag.facts.access import Row, _rank0, records
from diag.facts.run_record import RunRecord


@dataclass(frozen=True)
class ConfigEager:
    """One setting that sent batches eager: what, the engine's line, the batches, the fix."""

    kind: str  # truncated_ceiling_spec | prefill_graph_disabled | dp_rank_eager
    path: str
    line: int
    said: str  # the engine's own words
    runner: str
    batches_out: int  # batches the logs show pushed out (eager)
    batches_seen: int  # batches of that runner the logs show
    detail: str  # the arithmetic, in words
    needed: int | None = None  # the size that brings them back (vLLM: tokens)


def _truncation(
    tables: EventTables, record: RunRecord, config: EngineConfig, batches: pd.DataFrame
) -> ConfigEager | None:
    adv = tables["advisory"]
    rows = [r for r in records(adv) if r.get("topic") == "truncating_capture_size"]
    k = config.spec_tokens
    if not rows or k <= 0 or pd.isna(rows[-1].get("value")):
        return None
    row = rows[-1]
    cap = int(row["value"])
    per_step = 1 + k
    needed = config.max_running * per_step if config.max_running else None
    out = seen = 0
    if len(batches) > 0:
        size = batches["batch_size"].to_numpy(dtype=float, na_value=np.nan)
        eager = (batches["verdict"].astype(object) == "eager").to_numpy(dtype=bool)
        weight = (
            batches["weight"].to_numpy(dtype=float, na_value=1.0)
            if "weight" in batches
            else np.ones(len(size))
        )
        weight = np.nan_to_num(weight, nan=1.0)
        seen = int(weight[~np.isnan(size)].sum())
        out = int(weight[eager & (size > cap)].sum())
    if not out and not (needed is not None and needed > cap):
        return None
    reqs = cap // per_step
    detail = (
        f"with {k} speculative tokens a verify step of n requests carries n x {per_step} "
        f"tokens, so verify steps of more than {reqs} requests run eager"
    )
    if needed is not None:
        detail += f" (max_num_seqs {config.max_running} needs {needed} tokens)"
    return ConfigEager(
        "truncated_ceiling_spec",
        str(row["source"]),
        int(row["line"]),
        str(row["text"]),
        "decode",
        out,
        seen,
        detail,
        needed,
    )


def _prefill_disabled(tables: EventTables, config: EngineConfig) -> ConfigEager | None:
    frame = tables["graph_disabled"]
    rows = [r for r in records(frame) if r.get("reason") == "prefill_graph_only"]
    if not rows or config.prefill_graphs_off:
        return None
    row = rows[0]
    pre = _rank0(tables["prefill_batch"])
    flag = pre["cuda_graph"] if len(pre) > 0 else pd.Series(dtype=object)
    out = int((flag == False).sum())  # noqa: E712
    return ConfigEager(
        "prefill_graph_disabled",
        str(row["source"]),
        int(row["line"]),
        str(row["text"]),
        "prefill",
        out,
        len(pre),
        "every prefill batch runs eager while the prefill runner has no graphs",
    )


DP_RANK = re.compile(
    r"(?:^|[^A-Za-z])DP(\d+)", re.ASCII
)  # "DP1-TP1", "EngineCore_DP1", "Worker_DP1_TP0"


def _dp(rank: Any) -> int | None:
    m = DP_RANK.search(rank) if isinstance(rank, str) else None
    return int(m.group(1)) if m else None


def _dp_rank_eager(tables: EventTables, batches: pd.DataFrame) -> ConfigEager | None:
    """A DP rank that logged no capture at all while other DP ranks captured theirs: by the
    ranks' minimum vote every step of every rank runs eager."""
    began = {_dp(r.get("rank")) for r in records(tables["capture_begin"])}
    ended = {_dp(r.get("rank")) for r in records(tables["capture_end"])}
    began.discard(None)
    ended.discard(None)
    if not ended:
        return None
    first: dict[int, Row] = {}  # each DP rank's first serving line
    for kind in ("decode_batch", "prefill_batch"):
        for r in records(tables[kind]):
            dp = _dp(r.get("rank"))
            if (
                dp is not None
                and dp not in began
                and (dp not in first or int(r["line"]) < int(first[dp]["line"]))
            ):
                first[dp] = r
    if not first:
        return None
    disabled = {
        _dp(r.get("rank")): r
        for r in records(tables["graph_disabled"])
        if _dp(r.get("rank")) in first
    }
    dp = min(first)
    row = disabled.get(dp, first[dp])
    rank = str(row.get("rank"))
    others = ", ".join(f"DP{d}" for d in sorted(d for d in ended if d is not None))
    also = f" (and {len(first) - 1} more DP rank(s) without graphs)" if len(first) > 1 else ""
    out = seen = 0
    if len(batches) > 0:
        eager = (batches["verdict"].astype(object) == "eager").to_numpy(dtype=bool)
        weight = (
            batches["weight"].to_numpy(dtype=float, na_value=1.0)
            if "weight" in batches
            else np.ones(len(batches))
        )
        weight = np.nan_to_num(weight, nan=1.0)
        seen = int(weight.sum())
        out = int(weight[eager].sum())
    detail = (
        f"DP rank {rank} captured no graphs while {others} did{also}; the DP ranks run a "
        "step on graphs only when every rank can (the minimum of their votes), so one rank "
        "without graphs runs every rank's steps eager"
    )
    return ConfigEager(
        "dp_rank_eager",
        str(row["source"]),
        int(row["line"]),
        str(row.get("text") or ""),
        "decode",
        out,
        seen,
        detail,
    )


def config_eager(
    tables: EventTables, record: RunRecord, config: EngineConfig, batches: pd.DataFrame
) -> tuple[ConfigEager, ...]:
    """The settings that pushed batches out of the window, each with its engine line."""
    found = [
        _truncation(tables, record, config, batches),
        _prefill_disabled(tables, config),
        _dp_rank_eager(tables, batches),
    ]
    return tuple(f for f in found if f is not None)
