"""What ``graphdiag compare`` compares, built before any rendering: two diagnosed sides (e.g.
eager vs graph, old vs new bucket set), what each side is, what differs between them, and which
figures may be called better or worse.

Each side is one ``analyze`` report; its *main run* is the run with the most decode batches (ties:
the later start-up, i.e. the restart after a failed one), and only main runs are compared. The
warnings matter as much as the numbers: a side that ran with graphs disabled is the diagnostic
state (DOMAIN.md step 7), and two sides fed different traffic move captured share and padding
for reasons other than the buckets.

What a side is (:class:`Identity`: engine, version, model, TP/PP/DP, GPU, capture configuration)
is stated for both; a figure that depends on something that differs (KV cache across models,
throughput across tensor-parallel sizes) is shown but never called better or worse, and the
first line says what differs (issue 34). The capture configuration is stated too, but a bucket
change is what a before/after usually tests: the figures it moves (captured share, padding,
capture time and memory, the KV pool they leave) keep their verdicts across it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, TypedDict

from diag.about import __version__
from diag.engines import spec_for
from diag.engines.vllm import capture_unit
from diag.model import Snapshot, clean_json
from diag.report import Report, RunReport
from diag.rules.metrics import run_metrics

__all__ = [
    "METRICS",
    "SCHEMA",
    "Difference",
    "Identity",
    "compare",
    "differences",
    "summary_line",
    "main_run",
    "not_comparable",
    "promise_held",
]

SCHEMA = "graphdiag.compare/1"

# what a side is, by key: the ones a figure may depend on (the capture configuration is said,
# never a dependency: it is what a before/after of bucket sets changes on purpose)
HARDWARE_AND_MODEL = ("model", "parallel", "gpu", "version")

# (key, label, unit, kind, better, depends): kind "share" deltas are percentage points;
# better "up"/"down" says which direction is an improvement, None when it depends; depends:
# the identity keys whose difference makes the figure not comparable (shown, no verdict)
METRICS: list[tuple[str, str, str, str, str | None, tuple[str, ...]]] = [
    ("graph_mode", "graph mode", "", "text", None, ()),
    ("cudagraph_mode", "graph kind", "", "text", None, ()),
    ("n_buckets", "captured sizes", "", "int", None, ()),
    ("ceiling", "window ceiling", "", "int", None, ()),
    ("decode_batches", "decode batches", "", "int", None, ()),
    ("batch_p50", "decode batch size p50", "", "int", None, ()),
    ("batch_p99", "decode batch size p99", "", "int", None, ()),
    ("captured_share", "captured share", "", "share", "up", ()),
    ("padding_waste", "padding waste", "", "share", "down", ()),
    ("throughput_in_window", "gen throughput in window", " tok/s", "num", "up", HARDWARE_AND_MODEL),
    (
        "throughput_out_window",
        "gen throughput out of window",
        " tok/s",
        "num",
        "up",
        HARDWARE_AND_MODEL,
    ),
    ("speed_in", "per-request speed in window", " tok/s", "num", "up", HARDWARE_AND_MODEL),
    ("speed_out", "per-request speed out of window", " tok/s", "num", "up", HARDWARE_AND_MODEL),
    ("ttft_s_p50", "TTFT p50", " s", "num", "down", HARDWARE_AND_MODEL),
    ("ttft_s_p95", "TTFT p95", " s", "num", "down", HARDWARE_AND_MODEL),
    ("itl_s_p95", "ITL p95", " s", "num", "down", HARDWARE_AND_MODEL),
    ("capture_time_s", "capture time", " s", "num", "down", HARDWARE_AND_MODEL),
    ("capture_mem_gib", "capture memory", " GiB", "num", "down", HARDWARE_AND_MODEL),
    ("kv_tokens", "KV tokens", "", "int", "up", HARDWARE_AND_MODEL),
    ("kv_cache_gib", "KV cache", " GiB", "num", "up", HARDWARE_AND_MODEL),
    ("max_concurrency", "max concurrency", "x", "num", "up", HARDWARE_AND_MODEL),
]


@dataclass(frozen=True)
class Identity:
    """What one side is, from its own log: None where the log does not say."""

    engine: str
    version: str | None
    model: str | None
    tp: int | None
    pp: int | None
    dp: int | None
    gpu: str | None  # no engine log line names the GPU model; kept so the output says so
    capture: str  # graphs on/off, graph kind and the captured sizes, in words

    @classmethod
    def of(cls, run: RunReport) -> Identity:
        f = run.facts
        cfg = f.config
        return cls(
            engine=f.backend,
            version=f.engine_version,
            model=cfg.model,
            tp=cfg.tp_size,
            pp=cfg.pp_size,
            dp=cfg.dp_size,
            gpu=None,
            capture=_capture_words(run),
        )

    def value(self, key: str) -> str | None:
        """The side's value for an identity key, in words (None: not in the log)."""
        if key == "parallel":
            parts = [
                f"{name}{v}"
                for name, v in (("TP", self.tp), ("PP", self.pp), ("DP", self.dp))
                if v is not None
            ]
            return " ".join(parts) or None
        if key == "version":
            return f"{self.engine} {self.version}" if self.version else None
        return {"model": self.model, "gpu": self.gpu, "capture": self.capture}.get(key)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def line(self) -> str:
        """'Qwen/Qwen3-32B, TP2 PP1, sglang 0.5.5, GPU not in the log, graphs on: 52 sizes ...'"""
        return ", ".join(
            self.value(k) or f"{LABELS[k]} not in the log"
            for k in ("model", "parallel", "version", "gpu", "capture")
        )


LABELS = {
    "model": "model",
    "parallel": "parallelism",
    "version": "engine version",
    "gpu": "GPU",
    "capture": "capture configuration",
}


@dataclass(frozen=True)
class Difference:
    """One identity key the sides differ in (both sides known and unequal)."""

    key: str
    before: str
    after: str

    @property
    def label(self) -> str:
        return LABELS[self.key]

    def words(self) -> str:
        return f"{self.label} {self.before} -> {self.after}"

    def to_dict(self) -> dict[str, str]:
        return {"key": self.key, "label": self.label, "before": self.before, "after": self.after}


def differences(before: Identity, after: Identity) -> list[Difference]:
    """Identity keys known on both sides with other values, in :data:`LABELS` order."""
    out = []
    for key in LABELS:
        a, b = before.value(key), after.value(key)
        if a is not None and b is not None and a != b:
            out.append(Difference(key, a, b))
    return out


def _capture_words(run: RunReport) -> str:
    rec = run.record
    if rec.graph_mode == "disabled":
        return "graphs off"
    kind = f" ({rec.cudagraph_mode})" if rec.cudagraph_mode else ""
    sizes = rec.graph_capture_sizes or (
        tuple(sorted(run.facts.window.sizes)) if run.facts.window.sizes else ()
    )
    if not sizes:
        return f"graphs {rec.graph_mode}{kind}, sizes not in the log"
    return (
        f"graphs {rec.graph_mode}{kind}, {len(sizes)} sizes {min(sizes)}-{max(sizes)} "
        f"{size_unit(run)}"
    )


def summary_line(
    before: Identity | None, after: Identity | None, diffs: Sequence[Difference]
) -> str:
    """The first line: what differs, and what that leaves without a verdict."""
    if before is None or after is None:
        return "one side has no run: nothing to set side by side"
    if not diffs:
        return (
            "BEFORE and AFTER are the same model, parallelism, engine version and capture "
            "configuration as far as their logs show"
        )
    held = [d for d in diffs if d.key in HARDWARE_AND_MODEL]
    out = "BEFORE and AFTER differ in " + "; ".join(d.words() for d in diffs)
    if held:
        out += (
            ": the figures that depend on "
            + " and ".join(sorted({d.label for d in held}))
            + " (throughput, latency, capture time and memory, KV cache) are shown, not "
            "called better or worse"
        )
    return out


def _decode_batches(run: RunReport) -> int:
    b = run.record.batches
    return b.graph + b.eager + b.unknown


def main_run(report: Report) -> tuple[RunReport | None, str]:
    """The run to compare and a sentence saying why it was picked."""
    if not report.runs:
        return None, "no run found"
    _, run = max(enumerate(report.runs), key=lambda ir: (_decode_batches(ir[1]), ir[0]))
    if len(report.runs) == 1:
        return run, "the only run"
    return run, f"{_decode_batches(run)} decode batches, the most of {len(report.runs)} runs"


def _values(run: RunReport, snapshots: list[Snapshot]) -> dict[str, Any]:
    rec = run.record
    m = run_metrics(run.facts, snapshots)
    shape = rec.decode_batch_shape
    perf = rec.perf
    return {
        "graph_mode": rec.graph_mode,
        "cudagraph_mode": rec.cudagraph_mode,
        "n_buckets": m.capture.n_buckets,
        "ceiling": run.facts.ceiling,  # the run's one ceiling, as analyze prints it
        "decode_batches": _decode_batches(run),
        "batch_p50": shape.p50 if shape else None,
        "batch_p99": shape.p99 if shape else None,
        "captured_share": rec.captured_share,
        "padding_waste": rec.padding_waste,
        "throughput_in_window": perf.throughput_in_window,
        "throughput_out_window": perf.throughput_out_window,
        "speed_in": m.window.speed_in,
        "speed_out": m.window.speed_out,
        "ttft_s_p50": perf.ttft_s_p50,
        "ttft_s_p95": perf.ttft_s_p95,
        "itl_s_p95": perf.itl_s_p95,
        "capture_time_s": rec.capture_time_s,
        "capture_mem_gib": rec.capture_mem_gib,
        "kv_tokens": rec.kv_tokens,
        "kv_cache_gib": rec.kv_cache_gib,
        "max_concurrency": rec.max_concurrency,
    }


def _delta(a: Any, b: Any, kind: str, better: str | None) -> tuple[float | None, str | None]:
    if kind == "text" or not isinstance(a, int | float) or not isinstance(b, int | float):
        return None, None
    d = round(float(b) - float(a), 4)
    if d == 0 or better is None:
        return d, None
    return d, "after" if (d > 0) == (better == "up") else "before"


def _finding(f: Any) -> dict[str, str]:
    return {"code": f.code, "name": f.name, "severity": f.severity, "message": f.message}


def _side(
    report: Report, paths: Sequence[str], label: str
) -> tuple[dict[str, Any], RunReport | None]:
    run, why = main_run(report)
    side: dict[str, Any] = {
        "paths": list(paths),
        "main_run": run.id if run else None,
        "why": why,
        "runs": [r.id for r in report.runs],
        "verdict": run.verdict if run else None,
        "verdict_reason": run.verdict_reason if run else None,
        "inputs_skipped": [
            {"path": i.path, "reason": i.reason} for i in report.inputs if i.status == "skipped"
        ],
        "run": run.to_dict() if run else None,
    }
    return side, run


class Comparison(TypedDict):
    """The ``graphdiag.compare/1`` document (:func:`compare`)."""

    schema: str
    tool_version: str
    before: dict[str, Any]  # the side: its paths, main run, findings, the run's whole dict
    after: dict[str, Any]
    comparable: bool
    summary: str
    identity: dict[str, dict[str, Any] | None]  # model, GPU, parallelism, version per side
    identity_lines: dict[str, str | None]
    differs: list[dict[str, Any]]
    metrics: list[dict[str, Any]]  # key, label, unit, kind, before, after, delta, better
    findings: dict[str, list[dict[str, str]]]  # appeared / disappeared / persisting
    promise: dict[str, Any] | None  # did the recommendation's coverage hold
    warnings: list[str]


def compare(
    before: Report, after: Report, before_paths: Sequence[str] = (), after_paths: Sequence[str] = ()
) -> Comparison:
    """The ``graphdiag.compare/1`` document: both main runs (full run dicts, records included),
    a metric table with deltas, findings that appeared / disappeared / persist, and warnings."""
    sides: dict[str, dict[str, Any]] = {}
    runs: dict[str, RunReport | None] = {}
    values: dict[str, dict[str, Any]] = {}
    for label, rep, paths in (("before", before, before_paths), ("after", after, after_paths)):
        sides[label], runs[label] = _side(rep, paths, label)
        run = runs[label]
        values[label] = _values(run, rep.snapshots) if run else {}

    refusal = not_comparable(runs["before"], runs["after"])
    ids = {k: Identity.of(r) if r is not None else None for k, r in runs.items()}
    idb, ida = ids["before"], ids["after"]
    diffs = differences(idb, ida) if idb is not None and ida is not None else []
    differing = {d.key for d in diffs}
    metrics = []
    for key, name, unit, kind, better, depends in METRICS:
        a, b = values["before"].get(key), values["after"].get(key)
        if a is None and b is None:
            continue
        # across engines or unit-changing versions a delta is shown, never a verdict on it;
        # likewise a figure whose model, parallelism, GPU or version differs
        held = refusal is not None or bool(differing.intersection(depends))
        d, winner = _delta(a, b, kind, None if held else better)
        metrics.append(
            {
                "key": key,
                "label": name,
                "unit": unit,
                "kind": kind,
                "before": a,
                "after": b,
                "delta": d,
                "better": winner,
                "not_compared": sorted(differing.intersection(depends)) or None,
            }
        )

    rb, ra = runs["before"], runs["after"]
    codes_b = {f.code: f for f in (rb.findings if rb else [])}
    codes_a = {f.code: f for f in (ra.findings if ra else [])}
    findings = {
        "appeared": [_finding(codes_a[c]) for c in sorted(set(codes_a) - set(codes_b))],
        "disappeared": [_finding(codes_b[c]) for c in sorted(set(codes_b) - set(codes_a))],
        "persisting": [_finding(codes_a[c]) for c in sorted(set(codes_a) & set(codes_b))],
    }
    promise = promise_held(rb, ra, refusal)
    first = summary_line(idb, ida, diffs)
    held_back = [d for d in diffs if d.key in HARDWARE_AND_MODEL]
    warnings = ([refusal] if refusal else []) + ([first] if held_back else [])
    warnings += _warnings(runs, values)
    if promise is not None and promise["held"] is False:
        warnings.append(promise["summary"])
    doc: Comparison = {
        "schema": SCHEMA,
        "tool_version": __version__,
        "before": sides["before"],
        "after": sides["after"],
        "comparable": refusal is None,
        "summary": first,
        "identity": {k: v.to_dict() if v is not None else None for k, v in ids.items()},
        "identity_lines": {k: v.line() if v is not None else None for k, v in ids.items()},
        "differs": [d.to_dict() for d in diffs],
        "metrics": metrics,
        "findings": findings,
        "promise": promise,
        "warnings": warnings,
    }
    cleaned: Comparison = clean_json(doc)
    return cleaned


PROMISE_TOLERANCE = 0.005  # half a point: below the resolution of a day's coverage figure


def size_unit(run: RunReport) -> str:
    """What the run's capture sizes and decode batch sizes count, for its engine version."""
    if run.facts.backend == "vllm":
        return capture_unit(run.facts.engine_version)
    spec = spec_for(run.facts.backend)
    return spec.size_unit if spec is not None else "unknown"


def not_comparable(before: RunReport | None, after: RunReport | None) -> str | None:
    """Why no metric may be called better or worse across the two sides (None: they may):
    other engines, or versions whose sizes count other things. Said first, everywhere."""
    if before is None or after is None:
        return None
    eb, ea = before.facts.backend, after.facts.backend
    if eb != ea:
        return (
            f"not comparable: BEFORE is {eb}, AFTER is {ea}; their sizes count "
            f"{size_unit(before)} and {size_unit(after)} and their batches and throughputs are "
            "measured differently, so no metric below is called better or worse"
        )
    ub, ua = size_unit(before), size_unit(after)
    if ub != ua:
        vb = before.facts.engine_version or "unknown version"
        va = after.facts.engine_version or "unknown version"
        return (
            f"not comparable: BEFORE ({eb} {vb}) counts capture and batch sizes in {ub}, "
            f"AFTER ({ea} {va}) in {ua}, so no metric below is called better or worse"
        )
    return None


def promise_held(
    before: RunReport | None, after: RunReport | None, refusal: str | None = None
) -> dict[str, Any] | None:
    """Did BEFORE's advice hold on AFTER? The promise is the recommended set's held-out coverage
    and waste (``Advice.promised_coverage`` / ``heldout_waste``); the measurement is what AFTER's
    engine logged with the set it captured. It is checked only where AFTER applied that set
    (and the sides are comparable); otherwise ``held`` is None and the one sentence says why.
    Also the promised set priced on AFTER's traffic, so a miss can be told apart: other
    traffic (that price misses too) or another set applied."""
    if before is None or after is None or before.advice is None:
        return None
    adv = before.advice
    rec = adv.recommended
    promised_cov = adv.promised_coverage
    promised_waste = rec.heldout_waste if rec.heldout_waste is not None else rec.cost.padding_waste
    after_sizes = after.record.graph_capture_sizes or (
        sorted(after.facts.window.sizes) if after.facts.window.sizes else []
    )
    cov, waste = after.record.captured_share, after.record.padding_waste
    on_after = (
        adv.price(rec.sizes, after.advice.hist())
        if after.advice is not None and after.advice.unit == adv.unit
        else None
    )
    applied = refusal is None and list(after_sizes) == list(rec.sizes)
    cov_ok = None if cov is None or not applied else cov >= promised_cov - PROMISE_TOLERANCE
    waste_ok = (
        None
        if waste is None or promised_waste is None or not applied
        else waste <= promised_waste + PROMISE_TOLERANCE
    )
    held = None if cov_ok is None else bool(cov_ok and waste_ok is not False)
    summary = _promise_sentence(
        list(rec.sizes),
        list(after_sizes),
        held,
        applied,
        refusal,
        (promised_cov, promised_waste),
        (cov, waste),
        None if on_after is None else (on_after.coverage, on_after.padding_waste),
    )
    return {
        "recommended_sizes": list(rec.sizes),
        "ceiling": adv.ceiling,
        "unit": adv.unit,
        "validation": adv.folds,
        "promised_coverage": round(promised_cov, 4),
        "promised_padding_waste": None if promised_waste is None else round(promised_waste, 4),
        "after_sizes": list(after_sizes),
        "applied": applied,
        "measured_coverage": cov,
        "measured_padding_waste": waste,
        "recommended_on_after_traffic": None
        if on_after is None
        else {
            "coverage": round(on_after.coverage, 4),
            "padding_waste": None
            if on_after.padding_waste is None
            else round(on_after.padding_waste, 4),
        },
        "coverage_held": cov_ok,
        "waste_held": waste_ok,
        "held": held,
        "tolerance": PROMISE_TOLERANCE,
        "summary": summary,
    }


def _pct(v: float | None) -> str | None:
    return None if v is None else f"{v:.1%}"


def _figures(label: str, cov: float | None, waste: float | None) -> str:
    parts = [f"coverage {c}" for c in [_pct(cov)] if c] + [
        f"padding waste {w}" for w in [_pct(waste)] if w
    ]
    return f"{label} " + " and ".join(parts) if parts else ""


def _promise_sentence(
    sizes: list[int],
    after_sizes: list[int],
    held: bool | None,
    applied: bool,
    refusal: str | None,
    promised: tuple[float, float | None],
    measured: tuple[float | None, float | None],
    on_after: tuple[float, float | None] | None,
) -> str:
    """The promise check as one sentence whose parts never contradict each other."""
    head = f"BEFORE's recommended set {sizes}"
    promise = _figures("promised", *promised)
    if refusal is not None:
        return f"{head} is not checked on AFTER: the sides are {refusal.split(': ', 1)[0]}"
    if not applied:
        own = _figures("measured", *measured)
        tail = (
            f"; priced on AFTER's traffic it would give {_figures('', *on_after).strip()}"
            if (on_after is not None)
            else ""
        )
        return (
            f"{head} was not applied (AFTER captured {after_sizes or 'no set'}), so its promise "
            f"({promise}) is not checked" + (f"; AFTER's own set {own}" if own else "") + tail
        )
    if held is None:
        return f"{head} was applied, but AFTER logged no decided decode batch: its promise ({promise}) cannot be checked"
    measured_text = _figures("measured", *measured)
    if held:
        return f"{head} was applied and the promise held: {promise}, {measured_text}"
    tail = ""
    if on_after is not None:
        tail = f"; priced on AFTER's traffic the set gives {_figures('', *on_after).strip()}"
    return f"{head} was applied and the promise was missed: {promise}, {measured_text}{tail}"


def _warnings(runs: dict[str, RunReport | None], values: dict[str, dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for label, run in runs.items():
        side = label.upper()
        if run is None:
            out.append(f"{side} has no run: nothing to compare on that side")
            continue
        rec = run.record
        if rec.graph_mode == "disabled":
            out.append(
                f"{side} ran with CUDA graphs disabled: that is the diagnostic state, its throughput and "
                "latency are the eager path's, not the graph path's real magnitude (re-measure with graphs on)"
            )
        if rec.capture_error:
            out.append(
                f"{side}: capture failed ({rec.capture_error.error_class}), the server did not come up "
                "with graphs"
            )
        if not _decode_batches(run):
            out.append(
                f"{side} has no decode batches: its share, padding and throughput are unknown"
            )
    rb, ra = runs["before"], runs["after"]
    if rb is not None and ra is not None:
        pb, pa = values["before"].get("batch_p50"), values["after"].get("batch_p50")
        if pb and pa and max(pb, pa) > 1.25 * min(pb, pa):
            out.append(
                f"the sides saw different traffic (decode batch p50 {pb} vs {pa}): captured share and "
                "padding move with the traffic, not only with the buckets"
            )
    return out
