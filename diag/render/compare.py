"""`graphdiag compare`: two diagnosed sides (e.g. eager vs graph, old vs new bucket set) side by side.

Each side is one ``analyze`` report; its *main run* is the run with the most decode batches (ties:
the later start-up, i.e. the restart after a failed one), and only main runs are compared. The
warnings matter as much as the numbers: a side that ran with graphs disabled is the diagnostic
state (DOMAIN.md step 7), and two sides fed different traffic move captured share and padding
for reasons other than the buckets.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from diag.about import __version__
from diag.engines import spec_for
from diag.engines.vllm import capture_unit
from diag.facts.figures import number, share
from diag.model import Snapshot, clean_json
from diag.report import Report, RunReport
from diag.rules.metrics import run_metrics

__all__ = [
    "SCHEMA",
    "compare",
    "main_run",
    "promise_held",
    "render_html",
    "render_json",
    "render_text",
]

SCHEMA = "graphdiag.compare/1"

# (key, label, unit, kind, better): kind "share" deltas are percentage points;
# better "up"/"down" says which direction is an improvement, None when it depends.
METRICS: list[tuple[str, str, str, str, str | None]] = [
    ("graph_mode", "graph mode", "", "text", None),
    ("cudagraph_mode", "graph kind", "", "text", None),
    ("n_buckets", "captured sizes", "", "int", None),
    ("ceiling", "window ceiling", "", "int", None),
    ("decode_batches", "decode batches", "", "int", None),
    ("batch_p50", "decode batch size p50", "", "int", None),
    ("batch_p99", "decode batch size p99", "", "int", None),
    ("captured_share", "captured share", "", "share", "up"),
    ("padding_waste", "padding waste", "", "share", "down"),
    ("throughput_in_window", "gen throughput in window", " tok/s", "num", "up"),
    ("throughput_out_window", "gen throughput out of window", " tok/s", "num", "up"),
    ("speed_in", "per-request speed in window", " tok/s", "num", "up"),
    ("speed_out", "per-request speed out of window", " tok/s", "num", "up"),
    ("ttft_s_p50", "TTFT p50", " s", "num", "down"),
    ("ttft_s_p95", "TTFT p95", " s", "num", "down"),
    ("itl_s_p95", "ITL p95", " s", "num", "down"),
    ("capture_time_s", "capture time", " s", "num", "down"),
    ("capture_mem_gib", "capture memory", " GiB", "num", "down"),
    ("kv_tokens", "KV tokens", "", "int", "up"),
    ("kv_cache_gib", "KV cache", " GiB", "num", "up"),
    ("max_concurrency", "max concurrency", "x", "num", "up"),
]


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
        "n_buckets": m.n_buckets,
        "ceiling": run.facts.ceiling,  # the run's one ceiling, as analyze prints it
        "decode_batches": _decode_batches(run),
        "batch_p50": shape.p50 if shape else None,
        "batch_p99": shape.p99 if shape else None,
        "captured_share": rec.captured_share,
        "padding_waste": rec.padding_waste,
        "throughput_in_window": perf.throughput_in_window,
        "throughput_out_window": perf.throughput_out_window,
        "speed_in": m.speed_in,
        "speed_out": m.speed_out,
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


def compare(
    before: Report, after: Report, before_paths: Sequence[str] = (), after_paths: Sequence[str] = ()
) -> dict[str, Any]:
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
    metrics = []
    for key, name, unit, kind, better in METRICS:
        a, b = values["before"].get(key), values["after"].get(key)
        if a is None and b is None:
            continue
        # across engines or unit-changing versions a delta is shown, never a verdict on it
        d, winner = _delta(a, b, kind, None if refusal else better)
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
    warnings = ([refusal] if refusal else []) + _warnings(runs, values)
    if promise is not None and promise["held"] is False:
        warnings.append(promise["summary"])
    doc = {
        "schema": SCHEMA,
        "tool_version": __version__,
        "before": sides["before"],
        "after": sides["after"],
        "comparable": refusal is None,
        "metrics": metrics,
        "findings": findings,
        "promise": promise,
        "warnings": warnings,
    }
    return clean_json(doc)  # type: ignore[no-any-return]


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


# ------------------------------------------------------------------ renderings
def _fmt(v: Any, kind: str, unit: str = "") -> str:
    if v is None:
        return "-"
    if kind == "share":
        return share(v)
    if kind == "int" and isinstance(v, int | float):
        return f"{int(v):,}{unit}"
    if isinstance(v, float):
        return f"{number(v)}{unit}"  # the same figure reads as analyze prints it
    return f"{v}{unit}"


def _fmt_delta(m: dict[str, Any]) -> str:
    d = m["delta"]
    if d is None:
        return "" if m["before"] == m["after"] else "changed"
    if d == 0:
        return ""
    if m["kind"] == "share":
        s = f"{d * 100:+.1f} pp"
    elif m["kind"] == "int":
        s = f"{int(d):+,}{m['unit']}"
    else:
        s = f"{d:+,.4g}{m['unit']}"
    return s + {"after": " (better)", "before": " (worse)"}.get(m["better"] or "", "")


def _side_line(label: str, side: dict[str, Any]) -> str:
    verdict = (
        f"; verdict {side['verdict']}: {side['verdict_reason']}" if side.get("verdict") else ""
    )
    return (
        f"{label}: {side['main_run'] or '-'} ({side['why']}) from "
        f"{', '.join(side['paths']) or '-'}{verdict}"
    )


def render_text(doc: dict[str, Any]) -> str:
    """Warnings first (a refusal to compare first of all), then the sides with their
    verdicts, the metric table (metric, before, after, delta) and the findings moves."""
    lines = [f"WARNING: {w_}" for w_ in doc["warnings"]]
    if lines:
        lines.append("")
    lines += [_side_line("before", doc["before"]), _side_line("after ", doc["after"]), ""]
    rows = [
        (
            m["label"],
            _fmt(m["before"], m["kind"], m["unit"]),
            _fmt(m["after"], m["kind"], m["unit"]),
            _fmt_delta(m),
        )
        for m in doc["metrics"]
    ]
    w = [
        max([len(h), *(len(r[i]) for r in rows)])
        for i, h in enumerate(("metric", "before", "after", "delta"))
    ]
    lines.append(f"{'metric':<{w[0]}}  {'before':>{w[1]}}  {'after':>{w[2]}}  delta")
    lines.extend(f"{r[0]:<{w[0]}}  {r[1]:>{w[1]}}  {r[2]:>{w[2]}}  {r[3]}".rstrip() for r in rows)
    f = doc["findings"]
    lines.append("")
    for key, title in (
        ("disappeared", "findings gone"),
        ("appeared", "findings new"),
        ("persisting", "findings still there"),
    ):
        items = ", ".join(f"{x['code']} {x['name']}" for x in f[key]) or "none"
        lines.append(f"{title}: {items}")
    promise = doc.get("promise")
    if promise is not None and promise["held"] is not False:  # a miss is among the warnings
        lines.extend(["", promise["summary"]])
    return "\n".join(lines) + "\n"


def render_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


_CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 10px;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f3f3f3}
.better{color:#176b2c}.worse{color:#a3271b}.warn{background:#fff4d6;border-left:4px solid #e0a800;padding:6px 10px}
code{background:#f3f3f3;padding:0 3px}"""


def render_html(doc: dict[str, Any]) -> str:
    """A self-contained page (inline CSS, no scripts, no network), from a Jinja2 template
    with autoescape: every value is escaped."""
    from markupsafe import Markup

    from diag.render.html_page import environment

    metrics = [
        {
            "label": m["label"],
            "before": _fmt(m["before"], m["kind"], m["unit"]),
            "after": _fmt(m["after"], m["kind"], m["unit"]),
            "delta": _fmt_delta(m),
            "cls": {"after": "better", "before": "worse"}.get(m["better"] or "", ""),
        }
        for m in doc["metrics"]
    ]
    page = (
        environment()
        .get_template("compare.html.j2")
        .render(doc=doc, metrics=metrics, css=Markup(_CSS))
    )
    return page.rstrip("\n") + "\n"
