"""Facts per run and the ticket RECORD (exact keys of INTERFACE.md).

Run-level numbers come from rank 0 where ranks differ (``TP0``, ``DP0``, no rank tag);
every rank's own numbers go to ``ranks``. Nothing here invents a value: a key the logs
do not show stays ``None``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from diag.engines import SGLANG, VLLM, EngineConfig, spec_for
from diag.engines.config import as_count as _as_int
from diag.engines.config import as_int, as_sizes
from diag.engines.phases import REQUEST_PHASE
from diag.events import EventTables
from diag.facts import attribution
from diag.facts import classify as cls
from diag.facts.access import (
    Row,
    _first,
    _last,
    _plain,
    col,
    distinct,
    is_true,
    missing,
    mode_is_none,
    once_per_frame,
    rank0_rows,
    records,
    sizing,
)
from diag.facts.access import is_rank0 as is_rank0  # re-exported: callers read it from here
from diag.facts.agreement import agreement
from diag.facts.capture_totals import (
    _capture_totals,
    capture_rows,
    kv_tokens_with_source,
    summed,
    unfinished_capture,
    unplaced_error,
)
from diag.facts.capture_totals import (
    captured_size_count as captured_size_count,  # re-exported: tests read it from here
)
from diag.facts.config_eager import ConfigEager, config_eager
from diag.facts.graphs import build_graphs, error_runner, name_error_runner
from diag.facts.metric_counts import MetricCounts, metric_counts, with_metric_counts
from diag.facts.requests import request_table
from diag.facts.run_record import (
    RECORD_KEYS as RECORD_KEYS,  # re-exported: the record's keys are read from here
)
from diag.facts.run_record import (
    BatchCounts,
    BatchShape,
    CaptureError,
    GraphMode,
    Perf,
    RankRecord,
    RunRecord,
)
from diag.facts.runs import Run
from diag.facts.settings import engine_config
from diag.facts.signals import LineSignals, line_signals
from diag.facts.stalls import CaptureStall, capture_stalls
from diag.facts.startup import Stage, capture_share, startup_timeline
from diag.facts.steps import DecodeSteps, clock_jump_note, decode_steps
from diag.facts.trace_join import TraceCheck
from diag.facts.verdict import RunState, run_state
from diag.model import Snapshot, headline

DISABLING_REASONS = {
    "enforce_eager",
    "skipping_capture",
    "mode_none",
    "bitsandbytes",
    "rocm_unsupported",
    "dispatch_keys_uninitialized",
    "deepep",
    "prefill_server",
    "torch_native_attention",
    "flex_attention",
    "dual_chunk_attention",
    "deepep_normal",
    "double_sparsity",
    "tensor_dump",
    "dp_attention",
}
DECODE_PHASES = {"decode", "verify", "all", "draft", "draft_extend", "draft_verify"}


@dataclass(frozen=True)
class RunFacts:
    """Everything rules and renderers need about one run; frozen once built (the joins of
    artifacts and traces are inputs of the build, :func:`diag.facts.joins.joined`)."""

    run: Run
    config: EngineConfig  # the one typed reading of the run's settings (diag.engines)
    window: cls.Window
    steps: DecodeSteps  # the decode steps as logged: classification and advice read them
    batches: pd.DataFrame  # their classification (diag.facts.classify)
    record: RunRecord
    ranks: list[RankRecord]
    state: RunState  # what the log shows of the server's life (diag.facts.verdict)
    capture_error_at: tuple[str, int] | None = None
    agreement: dict[str, Any] | None = None
    requests: pd.DataFrame = field(default_factory=pd.DataFrame)
    memory_check: dict[str, Any] | None = None  # log capture memory vs snapshot graph pools
    notes: tuple[str, ...] = ()
    # the run's snapshot graph-pool total (GiB), from the artifacts joined to the run
    # (see snapshot_graph_pool_gib); rules, advice and renderers read it from here
    snapshot_graph_pool_gib: float | None = None
    # ranks stuck in a capture (diag.facts.stalls)
    stalls: tuple[CaptureStall, ...] = ()
    # settings that sent batches eager, with the engine's line (diag.facts.config_eager)
    config_eager: tuple[ConfigEager, ...] = ()
    # the start-up timeline (diag.facts.startup)
    startup: tuple[Stage, ...] = ()
    # (capture seconds, start-up seconds) of that timeline: GD140's share (capture_share)
    startup_capture: tuple[float, float] | None = None
    # batches per graph mode from /metrics counters (diag.facts.metric_counts)
    metric_counts: MetricCounts | None = None
    # how kv_tokens is known (run JSON, beside record)
    kv_tokens_source: str | None = None
    # the run's profiler traces joined to its batches (diag.facts.joins)
    trace_check: TraceCheck | None = None
    # what its lines say beyond the record, for the rules (diag.facts.signals): read while
    # the event tables are at hand, so the rules of a fleet's run never unpack them
    signals: LineSignals | None = None
    # the last start-up phase a log line opened, "serving" past the first periodic serving
    # line (read once at build: every surface asks, and a fleet's tables are packed by then)
    last_phase: str | None = None

    @property
    def tables(self) -> EventTables:
        return self.run.tables

    @property
    def engine_version(self) -> str | None:
        """The version the log printed (one fact: the config was read for it)."""
        return self.config.version

    @property
    def ceiling(self) -> int | None:
        """The run's one capture ceiling: the largest size of the window batches were
        classified against (logged, configured or the engine's default), else the ceiling the
        config or capture table names (``cuda_graph_max_bs``) where no size list is known."""
        return self.window.ceiling or self.record.cuda_graph_max_bs

    @property
    def ceiling_inferred(self) -> bool:
        """Is the ceiling the top of the engine's default list for the version (the log
        prints no size list)? Surfaces say so beside the figure."""
        return self.window.sizes_inferred and self.window.ceiling is not None

    @property
    def backend(self) -> str:
        return self.run.backend

    @property
    def startup_phase(self) -> str | None:
        """How far start-up got: the phase of the capture error if there is one, else the
        last phase a log line opened (None when no line says)."""
        err = self.record.capture_error
        if err is not None and err.phase != "unknown":
            return err.phase
        return self.last_phase

    @property
    def year_source(self) -> str:
        """Where the year of year-less log lines came from: log | mtime | unknown."""
        return self.run.year_source


def snapshot_graph_pool_gib(run_id: str, snapshots: Iterable[Snapshot]) -> float | None:
    """Reserved GiB of the CUDA-graph pools of the last snapshot joined to this run.

    One snapshot is one process (one GPU) at one moment, like the log's per-rank capture
    memory it is compared with, so several snapshots of a run are not added up: the last
    one (the one the memory check reports) stands for the run. None: no snapshot with pools."""
    gib = None
    for snap in snapshots:
        if snap.run == run_id and snap.pools:
            gib = round(snap.graph_pool_gib, 3)
    return gib


# ------------------------------------------------------------------ graph mode and window
def graph_mode(tables: EventTables, config: EngineConfig) -> GraphMode:
    phases = capture_phases(tables)
    decode_true = _flagged_graph(tables["decode_batch"])
    steps = tables["graph_step"]
    step_graph = bool((~mode_is_none(col(steps, "mode"))).any()) if len(steps) > 0 else False
    if phases & DECODE_PHASES or decode_true or step_graph:
        return "enabled"
    errors = tables["error"]
    if len(errors) > 0 and is_true(col(errors, "explicit_capture")).any():
        return "enabled"  # a capture was attempted
    disabled = tables["graph_disabled"]
    if len(disabled) > 0 and disabled["reason"].isin(DISABLING_REASONS).any():
        return "disabled"
    modes = tables["graph_mode"]
    if len(modes) > 0 and str(_last(modes, "mode") or "").upper() == "NONE":
        return "disabled"
    if phases:
        return "enabled"
    # vLLM estimates graph memory only for a run that will capture graphs (the estimate is
    # 0 with cudagraph_mode NONE: vllm==0.34.0:vllm/v1/worker/gpu/cudagraph_utils.py:1005)
    if (sizing(tables, "graph_mem_est_gib", rank0=False) or 0) > 0:
        return "enabled"
    if config.graphs_off is not None:
        return "disabled" if config.graphs_off else "enabled"
    return "unknown"


def capture_phases(tables: EventTables) -> set[Any]:
    """Every phase the capture lines name (graph_mode and cudagraph_mode read them both)."""
    kinds = ("capture_begin", "capture_end", "capture_progress", "capture_sizes")
    return set().union(*(_named_phases(tables[k]) for k in kinds))


@once_per_frame
def _named_phases(frame: pd.DataFrame) -> frozenset[Any]:
    if len(frame) == 0:
        return frozenset()
    phases = col(frame, "phase")
    return frozenset(phases[~pd.isna(phases)])


@once_per_frame
def _flagged_graph(decode: pd.DataFrame) -> bool:
    """Does a decode batch line say ``cuda graph: True``?"""
    return len(decode) > 0 and bool(is_true(col(decode, "cuda_graph")).any())


def cudagraph_mode(
    tables: EventTables, config: EngineConfig, backend: str, mode: str
) -> str | None:
    modes = tables["graph_mode"]
    if (spec_for(backend) or SGLANG).mode_names == "cudagraph_mode":
        origins = np.asarray(col(modes, "origin"), dtype=object) if len(modes) > 0 else None
        value = _first(
            _last(modes, "mode", origins == "downgrade") if origins is not None else None,
            _last(modes, "mode", origins == "config") if origins is not None else None,
            config.cudagraph_mode,
        )
        if value is None and len(modes) > 0:
            named = col(modes, "mode")
            seen = {str(m).upper() for m in named[~pd.isna(named)]}
            if "FULL" in seen and "PIECEWISE" in seen:
                value = "FULL_AND_PIECEWISE"
            elif seen:
                value = sorted(seen)[0]
        if value is None and mode == "disabled":
            value = "NONE"
        return None if value is None else str(value)
    # SGLang: the decode graph backend, plus piecewise prefill graphs when captured
    if mode != "enabled":
        return None
    sizes = tables["capture_sizes"]
    kinds = []
    phase = np.asarray(col(sizes, "phase"), dtype=object) if len(sizes) > 0 else None
    backend_name = _last(sizes, "mode", phase == "decode") if phase is not None else None
    phases = capture_phases(tables)
    if phases & DECODE_PHASES or _flagged_graph(tables["decode_batch"]):
        kinds.append(str(backend_name or "full"))
    if "prefill" in phases:
        kinds.append("piecewise_prefill")
    return "+".join(kinds) or None


def capture_sizes(tables: EventTables, config: EngineConfig) -> list[int] | None:
    listed = [
        r
        for r in rank0_rows(records(tables["capture_sizes"]))
        if not missing(r["sizes"]) and r["phase"] in ("decode", "verify", "mixed", "metrics", "all")
    ]
    if listed:
        got = as_sizes(json.loads(listed[-1]["sizes"]))
        if got:  # (sizes past what a config holds are a garbled list: not read)
            return list(got)
    return list(config.capture_sizes) if config.capture_sizes else None


def window_of(
    config: EngineConfig,
    backend: str,
    mode: str,
    version: str | None,
    sizes: list[int] | None,
    ceiling: int | None,
) -> cls.Window:
    inferred = False
    if sizes is None and mode == "enabled":
        spec = spec_for(backend)
        if spec is not None:
            sizes = spec.default_sizes(version, config.raw, ceiling)
        inferred = sizes is not None
    return cls.Window(mode, tuple(sizes) if sizes else None, inferred, config.padding, True)


# ------------------------------------------------------------------ capture error
def capture_error(tables: EventTables) -> tuple[CaptureError | None, tuple[str, int] | None]:
    """The run's capture error: the error the evidence places in capture, ``certain`` or
    ``likely`` (:mod:`diag.facts.attribution` collects and weighs the evidence)."""
    placed = attribution.place_capture_error(tables)
    if placed is None:
        return None, None
    row, verdict, decided = placed.row, placed.attribution, placed.decided
    out = CaptureError(
        error_class=row["error_class"],
        message=headline(str(row["message"])),
        path=str(row["source"]),
        line=int(row["line"]),
        phase=placed.phase,
        placed_by=decided.kind,
        reason=placed.reason,
        confidence=placed.confidence,
        evidence=decided.says,
        conflict=verdict.conflict_note(),
    )
    return out, (out.path, out.line)


# ------------------------------------------------------------------ the record
def _prefill_node(config: EngineConfig, tables: EventTables) -> bool | None:
    if config.disaggregation_mode is not None:
        return config.disaggregation_mode == "prefill"
    dis = tables["graph_disabled"]
    if len(dis) > 0 and (dis["reason"] == "prefill_server").any():
        return True
    if config.kv_role is not None:
        return config.kv_role == "kv_producer"
    return None


def _perf(tables: EventTables, batches: pd.DataFrame) -> Perf:
    bench = tables["benchmark"]

    def b(name: str) -> float | None:
        return _last(bench[bench["name"] == name], "value") if len(bench) > 0 else None

    if len(batches) > 0:
        verdicts = cls.verdict_codes(batches)
        gen = batches["gen_throughput"].to_numpy(dtype=float, na_value=np.nan)

    def mean_tput(verdict: str) -> float | None:
        part = gen[(verdicts == cls.VERDICTS.index(verdict)) & (gen > 0)]  # (NaN is not > 0)
        return round(float(part.mean()), 2) if len(part) else None

    return Perf(
        ttft_s_p50=b("ttft_s_p50"),
        ttft_s_p95=b("ttft_s_p95"),
        itl_s_p95=b("itl_s_p95"),
        throughput_in_window=mean_tput("graph") if len(batches) > 0 else None,
        throughput_out_window=mean_tput("eager") if len(batches) > 0 else None,
    )


def build_facts(run: Run) -> RunFacts:
    t = run.tables
    version = _last(t["version"], "version")
    config = engine_config(t, run.backend, version)
    mode = graph_mode(t, config)
    if mode == "unknown" and capture_error(t)[0] is not None:
        mode = "enabled"  # a capture was attempted and failed
    sizes = capture_sizes(t, config)
    capped = _capped(t)
    if sizes and capped is not None:  # the engine dropped the sizes above its cap
        sizes = [s for s in sizes if s <= capped] or sizes
    ceiling = _ceiling(t, config, run.backend, sizes)
    window = window_of(config, run.backend, mode, version, sizes, ceiling)
    steps = decode_steps(t, config)
    batches = cls.classify_batches(steps, window)
    counts = cls.batch_counts(batches)
    cap_time, cap_mem = _capture_totals(t)
    error, error_at = capture_error(t)
    kv_tokens, kv_source = kv_tokens_with_source(t, config, run.backend)
    failed_in = error_runner(t, error)
    error = name_error_runner(error, failed_in)
    record = RunRecord(
        graph_mode=mode,
        cudagraph_mode=cudagraph_mode(t, config, run.backend, mode),
        graph_capture_sizes=tuple(sizes) if sizes is not None else None,
        cuda_graph_max_bs=ceiling,
        max_running_requests=config.max_running,
        prefill_node=_prefill_node(config, t),
        capture_time_s=cap_time,
        capture_mem_gib=cap_mem,
        capture_error=error,
        kv_tokens=kv_tokens,
        gpu_blocks=_as_int(sizing(t, "gpu_blocks")),
        kv_cache_gib=sizing(t, "kv_cache_gib"),
        max_concurrency=sizing(t, "max_concurrency"),
        decode_batch_shape=BatchShape.of(cls.batch_shape(batches)),
        batches=BatchCounts.of(counts),
        captured_share=cls.captured_share(counts),
        padding_waste=cls.padding_waste(batches),
        perf=_perf(t, batches),
        resolved_backend=config.attention_backend,
    )
    counted = metric_counts(t)
    if counted is not None:
        record = with_metric_counts(record, counted)
    record = replace(
        record, graphs=build_graphs(t, run.backend, record, steps, config, failed_in, counted)
    )
    stalls = capture_stalls(t) if error is None else ()
    timeline = startup_timeline(t)
    facts = RunFacts(
        run,
        config,
        window,
        steps,
        batches,
        record,
        _ranks(run, batches),
        run_state(t, record, stalls),
        error_at,
        agreement(batches, window.ceiling or ceiling),
        request_table(t, batches),
        kv_tokens_source=kv_source,
        notes=tuple((_quiet_run_notes(t) if error is None else []) + _clock_notes(steps)),
        stalls=stalls,
        config_eager=config_eager(t, record, config, batches),
        startup=timeline,
        startup_capture=capture_share(timeline),
        metric_counts=counted,
        last_phase=_last_phase(t),
    )
    return replace(facts, signals=line_signals(facts))


def _last_phase(t: EventTables) -> str | None:
    """The last start-up phase the run's lines opened (errors placed in one count), or
    "serving" once a periodic serving line came after them."""
    seen: list[tuple[int, str]] = []
    for kind, name in (("phase", "phase"), ("error", "phase")):
        frame = t[kind]
        if len(frame) == 0:
            continue
        phases = np.asarray(col(frame, name), dtype=object)
        keep = ~pd.isna(phases) & (phases != REQUEST_PHASE)  # start-up
        key = "_order" if "_order" in frame.columns else "line"
        # (the kept rows' two columns, not a filtered copy of the frame)
        orders, names = np.asarray(col(frame, key))[keep], phases[keep]
        seen += [(int(o), str(p)) for o, p in zip(orders, names, strict=True)]
    for kind in ("decode_batch", "stats"):  # periodic serving lines
        frame = t[kind]
        if len(frame) > 0:
            key = "_order" if "_order" in frame.columns else "line"
            orders = col(frame, key)
            low = orders.min() if isinstance(orders, np.ndarray) else pd.Series(orders).min()
            seen.append((int(low), "serving"))
    return max(seen)[1] if seen else None


def _clock_notes(steps: DecodeSteps) -> list[str]:
    """A clock jump among the step lines (rates read only the stretches around it)."""
    f = steps.frame
    if len(f) < 2:
        return []
    note = clock_jump_note(steps.floats("ts"), col(f, "line"), col(f, "source"))
    return [note] if note else []


def _quiet_run_notes(t: EventTables) -> list[str]:
    """What a run without a capture error still shows: errors outside capture, a capture
    the log ends inside (never "No findings" in silence)."""
    notes = [note for note in (unplaced_error(t), unfinished_capture(t)) if note]
    return notes + attribution.overruled(t)


def _ceiling(
    t: EventTables, config: EngineConfig, backend: str, sizes: list[int] | None
) -> int | None:
    """The largest capture size; else where the engine says it capped them; else the
    ceiling a config key names; else, where the engine prints one, the capture-size
    table's largest size."""
    if sizes:
        return max(sizes)
    capped = _capped(t)
    if capped is not None:
        return capped
    if config.ceiling_named:
        return config.ceiling
    if not (spec_for(backend) or VLLM).ceiling_from_table:
        return None
    cs = t["capture_sizes"]
    largest = cs["largest"].dropna() if len(cs) > 0 else cs
    return as_int(_plain(largest.max())) if len(largest) else None


#: advisory topics in which the engine lowers its largest capture size after the config
#: (vLLM's Mamba cache cap and its speculative-decoding truncation: parsers/vllm/runtime.py)
CAPPING_TOPICS = ("capping_capture_sizes", "truncating_capture_size")


def _capped(t: EventTables) -> int | None:
    """The largest capture size the engine's last capping line leaves, if it logged one."""
    adv = t["advisory"]
    if len(adv) == 0:
        return None
    rows = adv[adv["topic"].isin(CAPPING_TOPICS)]["value"].dropna()
    return as_int(_plain(rows.iloc[-1])) if len(rows) else None


def _ranks(run: Run, batches: pd.DataFrame) -> list[RankRecord]:
    ranks: set[str] = set()
    for frame in run.tables._frames.values():
        ranks.update(r for r in distinct(col(frame, "rank")) if isinstance(r, str) and r)
    if not ranks:
        return []
    # each rank's figures from one pass over the few capture-end and sizing rows (a frame
    # per rank and table cost ~1 ms a rank); never copy the big batch tables per rank
    capture = _capture_totals_by_rank(run.tables["capture_end"])
    sized = _sizing_by_rank(run.tables["sizing"])
    summaries = cls.rank_summaries(batches)
    out = []
    for rank in sorted(ranks, key=_rank_sort_key):
        cap_time, cap_mem = capture.get(rank, (None, None))
        values = sized.get(rank, {})
        counts, waste = summaries.get(rank) or (cls.batch_counts(batches.iloc[:0]), None)
        entry = RankRecord(
            rank=rank,
            capture_time_s=cap_time,
            capture_mem_gib=cap_mem,
            kv_tokens=_as_int(_first(values.get("kv_tokens"), values.get("max_total_num_tokens"))),
            gpu_blocks=_as_int(values.get("gpu_blocks")),
            kv_cache_gib=values.get("kv_cache_gib"),
            max_concurrency=values.get("max_concurrency"),
            captured_share=cls.captured_share(counts),
            padding_waste=waste,
        )
        out.append(entry)
    return out


def _capture_totals_by_rank(ends: pd.DataFrame) -> dict[str, tuple[float | None, float | None]]:
    """Each rank's decode capture time and memory: :func:`_capture_totals` of its own rows."""
    mine: dict[str, list[Row]] = {}
    for row in capture_rows(ends):
        if isinstance(row["rank"], str):
            mine.setdefault(row["rank"], []).append(row)
    return {
        rank: (summed([r["time_s"] for r in rows]), summed([r["mem_gib"] for r in rows]))
        for rank, rows in mine.items()
    }


def _sizing_by_rank(frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Each rank's last logged value of every sizing name (:func:`sizing` of its own rows)."""
    out: dict[str, dict[str, Any]] = {}
    for row in records(frame):
        value = _plain(row["value"])
        if value is not None:
            out.setdefault(row["rank"], {})[row["name"]] = value
    return out


def _rank_sort_key(rank: str) -> tuple[Any, ...]:
    return tuple((p.rstrip("0123456789-"), int(re.sub(r"\D", "", p) or 0)) for p in rank.split("-"))
