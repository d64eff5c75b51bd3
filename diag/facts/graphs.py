"""The record's ``graphs``: one entry per graph runner the logs show (facts layer).

A run captures several graph sets: SGLang one per runner and model (target decode or verify,
target prefill, draft decode / verify / extend), vLLM a FULL set for uniform decode steps, a
PIECEWISE set for mixed steps and encoder budgets. Each entry carries what the logs say of
that runner alone: its backend, sizes and their unit, capture time and memory (rank 0's, as
the record's top-level figures), its status and the batches that ran on it. The runner the
record's top-level keys describe (target decode, else target verify) gets the record's own
batch counts, so the two never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from diag.engines import EngineConfig
from diag.engines.runners import PHASE_RUNNER, Model, Runner, Status, phase_of, unit_of
from diag.events import EventTables
from diag.facts.access import Row, _rank0, col, missing, once_per_frame, rank0_rows, records
from diag.facts.metric_counts import MetricCounts
from diag.facts.run_record import BatchCounts, CaptureError, GraphRunner, RunRecord
from diag.facts.steps import DecodeSteps

#: the vLLM runtime mode each V1 set replays with (backend as the entry names it)
_VLLM_SETS: dict[str, tuple[tuple[Runner, str], ...]] = {
    "FULL_AND_PIECEWISE": (("decode", "full"), ("mixed", "piecewise")),
    "FULL_DECODE_ONLY": (("decode", "full"),),
    "FULL": (("mixed", "full"),),
    "PIECEWISE": (("mixed", "piecewise"),),
}


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _key(row: Row) -> int:
    return int(row.get("_order", row["line"]))


def _phases(tables: EventTables) -> list[str]:
    """Every capture phase the logs name, in order of first appearance."""
    seen: dict[str, int] = {}
    for kind in ("capture_begin", "capture_sizes", "capture_progress", "capture_end"):
        for phase, key in _first_keys(tables[kind]).items():
            seen[phase] = min(seen.get(phase, 1 << 62), key)
    return sorted(seen, key=seen.__getitem__)


@once_per_frame
def _first_keys(frame: pd.DataFrame) -> dict[str, int]:
    """Each phase the frame names -> the order key of its first row (two columns read, not
    every row boxed)."""
    seen: dict[str, int] = {}
    if len(frame) == 0:
        return seen
    keys = col(frame, "_order" if "_order" in frame.columns else "line").tolist()
    for phase, key in zip(col(frame, "phase").tolist(), keys, strict=True):
        if _text(phase) is not None:
            seen[phase] = min(seen.get(phase, 1 << 62), int(key))
    return seen


def _sum(values: Iterable[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None and not pd.isna(v)]
    return round(sum(vals), 3) if vals else None


def _phase_rows(frame: pd.DataFrame, phases: set[str]) -> Sequence[Row]:
    """Rank 0's rows of these phases (as :func:`~diag.facts.access._rank0` picks them)."""
    return rank0_rows([r for r in records(frame) if r["phase"] in phases])


def _sizes(tables: EventTables, phases: set[str]) -> tuple[tuple[int, ...] | None, str | None]:
    """The runner's last logged size list (rank 0) and the backend its line names."""
    sizes: tuple[int, ...] | None = None
    backend = None
    for row in _phase_rows(tables["capture_sizes"], phases):
        if _text(row.get("mode")):
            backend = str(row["mode"])
        raw = row.get("sizes")
        if isinstance(raw, str) and raw:
            sizes = tuple(sorted(set(json.loads(raw))))
    return sizes, backend


def _status(tables: EventTables, phases: set[str], failed: bool, disabled: bool) -> Status:
    if failed:
        return "failed"
    if _phase_rows(tables["capture_end"], phases):
        return "captured"
    bars = _phase_rows(tables["capture_progress"], phases)
    if bars:
        done = [b["done"] for b in bars if not missing(b["done"])]
        total = [b["total"] for b in bars if not missing(b["total"])]
        if done and total and int(max(done)) >= int(max(total)):
            return "captured"
        return "not_captured"
    if _phase_rows(tables["capture_begin"], phases):
        return "not_captured"
    return "disabled" if disabled else "unknown"


def _counts(graph: int, eager: int, unknown: int, source: str) -> BatchCounts:
    if graph + eager + unknown == 0:
        source = "none"
    return BatchCounts(graph, eager, unknown, source)  # type: ignore[arg-type]


def _prefill_counts(tables: EventTables) -> BatchCounts:
    """SGLang prefill batches by the line's own ``cuda graph:`` flag (rank 0's lines)."""
    frame = _rank0(tables["prefill_batch"])
    if len(frame) == 0:
        return BatchCounts()
    flag = frame["cuda_graph"]
    graph = int((flag == True).sum())  # noqa: E712
    eager = int((flag == False).sum())  # noqa: E712
    return _counts(graph, eager, int(flag.isna().sum()), "logged")


def _mixed_counts(steps: DecodeSteps, ceiling: int | None, serves_mixed: bool) -> BatchCounts:
    """vLLM mixed (prefill + decode) steps: by their logged mode (DEBUG step lines), else
    inferred from their scheduled tokens (``Iteration`` lines): within the mixed set's
    largest size a piecewise graph replays, above it the step runs eagerly (vllm==0.34.0:
    vllm/v1/cudagraph_dispatcher.py)."""
    if len(steps) == 0:
        return BatchCounts()
    keep = steps.rank_rows()
    mixed = np.asarray(steps.column("mixed"), dtype=bool)
    if keep is not None:
        mixed = mixed & keep  # (the column may be a read-only view)
    if not mixed.any():
        return BatchCounts()
    flag = steps.column("graph")[mixed].astype(np.int64)
    weight = steps.column("batches")[mixed]
    tokens = steps.column("tokens")[mixed]
    guess = (flag < 0) & (tokens > 0)
    if ceiling is not None and guess.any():
        flag = flag.copy()
        flag[guess] = np.where((tokens[guess] <= ceiling) & serves_mixed, 2, 3)
    logged = bool(((flag == 0) | (flag == 1)).any())
    inferred = bool((flag >= 2).any())
    source = "mixed" if logged and inferred else "inferred" if inferred else "logged"
    return _counts(
        int(weight[(flag == 1) | (flag == 2)].sum()),
        int(weight[(flag == 0) | (flag == 3)].sum()),
        int(weight[flag < 0].sum()),
        source,
    )


def _vllm_runners(tables: EventTables, cudagraph_mode: str | None) -> list[tuple[Runner, str]]:
    """vLLM V1's sets: as the bars and the memory profile name them, else as the mode says."""
    named: list[tuple[Runner, str]] = []
    for phase in _phases(tables):
        if phase in ("decode", "mixed", "encoder"):
            named.append((PHASE_RUNNER[phase][0], phase))
    if named:
        return named
    sets = _VLLM_SETS.get(str(cudagraph_mode or "").upper())
    return [(runner, runner) for runner, _ in sets] if sets else []


def build_graphs(
    tables: EventTables,
    engine: str,
    record: RunRecord,
    steps: DecodeSteps,
    config: EngineConfig,
    error_runner: tuple[Runner, Model] | None,
    counted: MetricCounts | None = None,
) -> tuple[GraphRunner, ...]:
    """One entry per runner the logs show; the target decode (or verify) entry first."""
    phases = _phases(tables)
    wanted: list[tuple[Runner, Model, set[str]]] = []
    spans_all = "all" in phases or "metrics" in phases
    if engine == "vllm":
        sets = _vllm_runners(tables, record.cudagraph_mode)
        if config.encoder_budgets and not any(r == "encoder" for r, _ in sets):
            sets.append(("encoder", "encoder"))  # cudagraph_mm_encoder with its budgets
        for runner, phase in sets:
            wanted.append(
                (runner, "target", {phase} | ({"all", "metrics"} if spans_all else set()))
            )
    for phase in phases:
        if phase in PHASE_RUNNER and not (
            engine == "vllm" and phase in ("decode", "mixed", "encoder")
        ):
            runner, model = PHASE_RUNNER[phase]
            if not any(w[0] == runner and w[1] == model for w in wanted):
                wanted.append((runner, model, {phase}))
            else:
                next(w for w in wanted if w[0] == runner and w[1] == model)[2].add(phase)
    if not wanted and counted is not None:  # a /metrics dump alone: the runners it counts
        wanted.append(("decode", "target", {"decode"}))
        if counted.has_prefill:
            wanted.append(("prefill", "target", {"prefill"}))
    if not wanted and (record.graph_mode == "disabled" or spans_all or error_runner):
        runner0: Runner = "mixed" if engine == "vllm" else "decode"
        if error_runner is not None:
            runner0 = error_runner[0]
        wanted.append((runner0, "target", {phase_of(runner0, "target") or runner0, "all"}))
    if error_runner is not None and not any((w[0], w[1]) == error_runner for w in wanted):
        wanted.append((error_runner[0], error_runner[1], {phase_of(*error_runner) or ""}))
    disabled_prefill = _prefill_disabled(tables)
    main = _main_runner(wanted)
    out: list[GraphRunner] = []
    for runner, model, which in wanted:
        is_main = (runner, model) == main
        sizes, backend = _sizes(tables, which - {"all", "metrics"})
        if engine == "vllm":
            sizes, backend = _vllm_sizes(tables, runner, which, record, config)
        elif is_main and sizes is None:
            sizes = record.graph_capture_sizes
        # vLLM prints one capture time for every set: the main entry carries it
        time_s, mem = _time_mem(tables, which if is_main else which - {"all", "metrics"})
        disabled = record.graph_mode == "disabled" or (runner == "prefill" and disabled_prefill)
        status = _status(tables, which, error_runner == (runner, model), disabled)
        if status == "unknown" and counted is not None:
            tot = counted.totals
            if (tot.prefill_graph if runner == "prefill" else tot.decode_graph) > 0:
                status = "captured"  # the counters show passes served by this runner's graphs
        if is_main:
            batches = record.batches
        elif runner == "prefill" and model == "target" and engine == "sglang":
            batches = _prefill_counts(tables)
            if batches.source == "none" and counted is not None and counted.has_prefill:
                tot = counted.totals
                batches = BatchCounts(tot.prefill_graph, tot.prefill_eager, 0, "metrics")
        elif runner == "mixed" and engine == "vllm":
            batches = _mixed_counts(
                steps,
                max(sizes) if sizes else None,
                str(record.cudagraph_mode or "").upper() != "FULL_DECODE_ONLY",
            )
        else:
            batches = BatchCounts()
        out.append(
            GraphRunner(
                runner=runner,
                model=model,
                backend=backend.lower() if backend else None,
                sizes=sizes,
                unit=unit_of(engine, runner) if sizes else None,
                capture_time_s=time_s,
                capture_mem_gib=mem,
                status=status,
                batches=batches,
                specialized=("lora",)
                if config.lora_specialized and runner in ("decode", "mixed")
                else (),
            )
        )
    if (
        engine == "sglang"
        and disabled_prefill
        and not any(g.runner == "prefill" and g.model == "target" for g in out)
    ):
        out.append(
            GraphRunner(
                "prefill",
                "target",
                None,
                None,
                None,
                None,
                None,
                "disabled",
                _prefill_counts(tables),
            )
        )
    out.sort(key=lambda g: (g.model != "target", (g.runner, g.model) != main))
    return tuple(out)


def _main_runner(wanted: list[tuple[Runner, Model, set[str]]]) -> tuple[str, str] | None:
    """The runner the record's top-level keys describe: target decode, else target verify,
    else (vLLM FULL / PIECEWISE only) the target's mixed set."""
    have = {(w[0], w[1]) for w in wanted}
    for runner in ("decode", "verify", "mixed"):
        if (runner, "target") in have:
            return (runner, "target")
    return None


def _time_mem(tables: EventTables, phases: set[str]) -> tuple[float | None, float | None]:
    ends = _phase_rows(tables["capture_end"], phases)
    if not ends:
        return None, None
    return _sum(e["time_s"] for e in ends), _sum(e["mem_gib"] for e in ends)


def _vllm_sizes(
    tables: EventTables,
    runner: Runner,
    which: set[str],
    record: RunRecord,
    config: EngineConfig,
) -> tuple[tuple[int, ...] | None, str | None]:
    """vLLM: the mixed set is every capture size; the FULL decode set the sizes up to the
    memory profile's ``largest`` (else max_num_seqs x (1 + k), vllm==0.34.0:
    vllm/v1/cudagraph_dispatcher.py); the encoder set its token budgets."""
    largest = None
    backend = None
    for row in _phase_rows(tables["capture_sizes"], which - {"all"}):
        if row.get("largest") is not None and not pd.isna(row.get("largest")):
            largest = int(row["largest"])
        if _text(row.get("mode")):
            backend = str(row["mode"])
    if runner == "encoder":
        return config.encoder_budgets or None, backend or "full"
    mode = str(record.cudagraph_mode or "").upper()
    if backend is None:
        backend = "full" if runner == "decode" or mode == "FULL" else "piecewise"
    full = record.graph_capture_sizes
    if full is None:
        return None, backend
    if runner == "decode" and mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", ""):
        top = largest
        if top is None and config.max_running:
            top = config.max_running * (1 + config.spec_tokens)
        low = 1 + config.spec_tokens
        if top is not None:
            return tuple(s for s in full if low <= s <= top) or None, backend
    return full, backend


def _prefill_disabled(tables: EventTables) -> bool:
    frame = tables["graph_disabled"]
    return len(frame) > 0 and bool((frame["reason"] == "prefill_graph_only").any())


def error_runner(tables: EventTables, error: CaptureError | None) -> tuple[Runner, Model] | None:
    """The runner a capture error happened in: the capture open on the error's rank at its
    line (the last begin or bar with no end since), else its placed phase's runner."""
    if error is None:
        return None
    err = tables["error"]
    at = None
    who = None
    for row in records(err):
        if str(row["source"]) == error.path and int(row["line"]) == error.line:
            at, who = _key(row), _text(row.get("rank"))
            break
    if at is not None:
        opened: list[tuple[int, str, str | None]] = []
        for kind in ("capture_begin", "capture_progress"):
            for row in records(tables[kind]):
                phase = _text(row.get("phase"))
                if phase is not None and _key(row) <= at:
                    opened.append((_key(row), phase, _text(row.get("rank"))))
        mine = [o for o in opened if o[2] in (who, None)] or opened
        if mine:
            k0, phase, rank = max(mine)
            ended = any(
                k0 <= _key(r) <= at and _text(r.get("rank")) in (rank, None)
                for r in records(tables["capture_end"])
            )
            if not ended and phase in PHASE_RUNNER:
                return PHASE_RUNNER[phase]
            if not ended and phase == "all":
                return ("mixed", "target")
    return _PLACED_RUNNER.get(error.phase)


#: a capture error's placed phase (diag/engines/data/phases.yaml) -> its runner
_PLACED_RUNNER: dict[str, tuple[Runner, Model]] = {
    "capture_piecewise": ("prefill", "target"),
    "capture_draft": ("decode", "draft"),
    "capture_decode": ("decode", "target"),
}


def name_error_runner(
    error: CaptureError | None, where: tuple[Runner, Model] | None
) -> CaptureError | None:
    if error is None or where is None:
        return error
    return replace(error, runner=where[0], model=where[1])


def total(
    graphs: Iterable[GraphRunner], model: str | None = None, runner: str | None = None
) -> tuple[float | None, float | None]:
    """Capture time and memory summed over the matching entries (None where none logs it)."""
    chosen = [
        g
        for g in graphs
        if (model is None or g.model == model) and (runner is None or g.runner == runner)
    ]
    return _sum(g.capture_time_s for g in chosen), _sum(g.capture_mem_gib for g in chosen)
