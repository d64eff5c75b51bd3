"""The typed ticket record of one run (INTERFACE.md's RECORD) and its JSON view.

Every surface (rules, text, HTML, compare, advice) reads these fields; ``to_json()`` is the
one place the INTERFACE key names and order are spelled, so the contract and the typed
record cannot drift. Nothing here computes: :mod:`diag.facts.record` builds the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

from diag.engines.errors import ErrorClass
from diag.engines.runners import Model, Runner, Status, Unit
from diag.facts.oom import OomFigures, oom_figures

GraphMode = Literal["enabled", "disabled", "unknown"]
BatchSource = Literal["logged", "inferred", "mixed", "metrics", "none"]
# the evidence that decided a capture error (diag.facts.attribution): traceback frames, the
# process's own phase, the neighbouring processes' capture lines, a cut capture bar, the
# message's words, the engine's advice block, a capture-only runtime code
PlacedBy = Literal[
    "frames",
    "process_phase",
    "neighbours",
    "capture_bar",
    "message",
    "advice_block",
    "capture_code",
    "none",
]
Confidence = Literal["certain", "likely"]


@dataclass(frozen=True)
class CaptureError:
    """The run's capture error: its class, first message line, where it was logged, the
    start-up phase it was placed in, the evidence that decided it (``placed_by`` and its
    sentence) with how sure that is, and the evidence it overrules (said, not hidden)."""

    error_class: ErrorClass  # JSON "class"
    message: str
    path: str
    line: int
    phase: str
    placed_by: PlacedBy
    reason: str | None = None  # why the error text alone places it (JSON only when known)
    confidence: Confidence = "certain"
    evidence: str = ""  # the deciding evidence, one sentence
    conflict: str | None = None  # the evidence against it, overruled (JSON only when some)
    runner: str | None = None  # the graph runner whose capture failed (diag.facts.graphs)
    model: str | None = None  # target | draft, with runner

    @property
    def oom(self) -> OomFigures | None:
        """A capture OOM's figures as torch's message prints them (None: not an OOM, or a
        message without them)."""
        return oom_figures(self.message) if self.error_class == "oom" else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "class": self.error_class,
            "message": self.message,
            "path": self.path,
            "line": self.line,
            "phase": self.phase,
            "placed_by": self.placed_by,
            "confidence": self.confidence,
            "evidence": self.evidence,
        }
        if self.reason is not None:
            out["reason"] = self.reason
        if self.conflict is not None:
            out["conflict"] = self.conflict
        if self.runner is not None:
            out.update(runner=self.runner, model=self.model)
        return out


@dataclass(frozen=True)
class BatchShape:
    """Observed decode batch sizes, step-weighted: quantiles and the histogram."""

    count: int
    min: int
    p50: int
    p90: int
    p99: int
    max: int
    histogram: tuple[tuple[int, int], ...]  # (size, steps), ascending size

    @classmethod
    def of(cls, shape: Mapping[str, Any] | None) -> BatchShape | None:
        """From :func:`diag.facts.classify.batch_shape`'s mapping (its histogram keys are
        the sizes as text)."""
        if shape is None:
            return None
        return cls(
            count=int(shape["count"]),
            min=int(shape["min"]),
            p50=int(shape["p50"]),
            p90=int(shape["p90"]),
            p99=int(shape["p99"]),
            max=int(shape["max"]),
            histogram=tuple((int(s), int(n)) for s, n in shape["histogram"].items()),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["histogram"] = {str(s): n for s, n in self.histogram}
        return out


@dataclass(frozen=True)
class BatchCounts:
    """Decode steps served by a graph, eagerly, or undecided, and where the verdicts came
    from (the engine's own per-batch flag, inference from the window, both, none)."""

    graph: int = 0
    eager: int = 0
    unknown: int = 0
    source: BatchSource = "none"

    @classmethod
    def of(cls, counts: Mapping[str, Any]) -> BatchCounts:
        source = str(counts["source"])
        assert source in get_args(BatchSource), source
        return cls(int(counts["graph"]), int(counts["eager"]), int(counts["unknown"]), source)  # type: ignore[arg-type]

    @property
    def decided(self) -> int:
        """Steps with a verdict (graph or eager): the captured share's denominator."""
        return self.graph + self.eager

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class GraphRunner:
    """One graph runner of the run (INTERFACE.md's GRAPH): what it captured and served."""

    runner: Runner
    model: Model
    backend: str | None  # as the engine names it, lower case
    sizes: tuple[int, ...] | None
    unit: Unit | None
    capture_time_s: float | None
    capture_mem_gib: float | None
    status: Status
    batches: BatchCounts = BatchCounts()
    # what each size is captured once per (vLLM "lora": with and without LoRA, twice the
    # graphs and their memory); JSON only when set
    specialized: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["sizes"] = list(self.sizes) if self.sizes is not None else None
        out["batches"] = self.batches.to_json()
        if self.specialized:
            out["specialized"] = list(self.specialized)
        else:
            del out["specialized"]
        return out


@dataclass(frozen=True)
class Perf:
    """Latency figures a benchmark printed, and mean decode throughput in / out of the window."""

    ttft_s_p50: float | None = None
    ttft_s_p95: float | None = None
    itl_s_p95: float | None = None
    throughput_in_window: float | None = None
    throughput_out_window: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class TraceVerified:
    """The run's decode batches checked against its profiler traces (beside ``batches``)."""

    traces: int
    steps: tuple[tuple[str, int], ...]  # step verdict -> steps, in the traces' order
    decode_steps: tuple[tuple[str, int], ...]
    graph_launches: int
    graph_launches_without_ops: int
    matched_batches: int
    agree: int
    disagree: int
    tz_offset_s: float

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["steps"] = dict(self.steps)
        out["decode_steps"] = dict(self.decode_steps)
        return out


@dataclass(frozen=True)
class RunRecord:
    """INTERFACE.md's RECORD, typed; ``None`` where the logs do not show the value. Field
    names are the JSON keys, in the JSON's order."""

    graph_mode: GraphMode
    cudagraph_mode: str | None
    graph_capture_sizes: tuple[int, ...] | None
    cuda_graph_max_bs: int | None
    max_running_requests: int | None
    prefill_node: bool | None
    capture_time_s: float | None
    capture_mem_gib: float | None
    capture_error: CaptureError | None
    kv_tokens: int | None
    gpu_blocks: int | None
    kv_cache_gib: float | None
    max_concurrency: float | None
    decode_batch_shape: BatchShape | None
    batches: BatchCounts
    captured_share: float | None
    padding_waste: float | None
    perf: Perf
    resolved_backend: str | None
    graphs: tuple[GraphRunner, ...] = ()  # one per runner (diag.facts.graphs)
    # set where profiler traces join the run (diag.api); JSON only when set
    trace_verified: TraceVerified | None = None

    @property
    def capture_mem_share(self) -> float | None:
        """Capture memory over the KV pool: the figure GD120 judges and the memory caption
        and KV timeline print (None where either is not logged, or the pool is 0)."""
        if self.capture_mem_gib is None or not self.kv_cache_gib:
            return None
        return self.capture_mem_gib / self.kv_cache_gib

    def to_json(self) -> dict[str, Any]:
        """The INTERFACE record: every key always present (null where unknown), in order."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "trace_verified" and value is None:
                continue
            if hasattr(value, "to_json"):
                value = value.to_json()
            elif isinstance(value, tuple):
                value = [v.to_json() if hasattr(v, "to_json") else v for v in value]
            out[f.name] = value
        return out


@dataclass(frozen=True)
class RankRecord:
    """One rank's own figures (INTERFACE's ``ranks``: the RECORD's numeric fields)."""

    rank: str
    capture_time_s: float | None
    capture_mem_gib: float | None
    kv_tokens: int | None
    gpu_blocks: int | None
    kv_cache_gib: float | None
    max_concurrency: float | None
    captured_share: float | None
    padding_waste: float | None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: the record's JSON keys, in order (the INTERFACE set; ``trace_verified`` only with traces)
RECORD_KEYS: tuple[str, ...] = tuple(
    f.name for f in fields(RunRecord) if f.name != "trace_verified"
)
