"""The per-runner table (``record.graphs``) and the start-up timeline, for text and HTML.

Unknown values are left empty (never ``n/a``); sizes are written compactly with their unit.
"""

from __future__ import annotations

from typing import Any

from diag.figures import number, share
from diag.render.sizes import compact_sizes
from diag.report import RunReport

RUNNER_COLUMNS = [
    "runner",
    "model",
    "backend",
    "sizes",
    "capture (s)",
    "memory (GiB)",
    "status",
    "graph batches",
    "eager batches",
    "batches from",
]


def _sizes(sizes: tuple[int, ...] | None, unit: str | None) -> str:
    text = compact_sizes(sizes)
    return f"{text} {unit}" if text and unit else text or ""


def runner_rows(run: RunReport) -> list[list[str]]:
    """One row per graph runner of the run (``record.graphs``), the record's runner first."""
    rows = []
    for g in run.record.graphs:
        b = g.batches
        counted = b.source != "none"
        rows.append(
            [
                g.runner,
                g.model,
                g.backend or "",
                _sizes(g.sizes, g.unit),
                number(g.capture_time_s) if g.capture_time_s is not None else "",
                number(g.capture_mem_gib) if g.capture_mem_gib is not None else "",
                g.status.replace("_", " "),
                f"{b.graph:,}" if counted else "",
                f"{b.eager:,}" if counted else "",
                b.source if counted else "",
            ]
        )
    return rows


def runner_lines(run: RunReport) -> list[str]:
    """The runners in one line each (text summary), where the run has more than one or any
    status other than captured."""
    graphs = run.record.graphs
    if not graphs or (len(graphs) == 1 and graphs[0].status == "captured"):
        return []
    out = []
    for g in graphs:
        parts = [f"graphs {g.model} {g.runner}" + (f" ({g.backend})" if g.backend else "")]
        sizes = _sizes(g.sizes, g.unit)
        if sizes:
            parts.append(sizes)
        cap = ", ".join(
            x
            for x in (
                f"{number(g.capture_time_s)} s" if g.capture_time_s is not None else "",
                f"{number(g.capture_mem_gib)} GiB" if g.capture_mem_gib is not None else "",
            )
            if x
        )
        if cap:
            parts.append(f"capture {cap}")
        parts.append(g.status.replace("_", " "))
        b = g.batches
        if b.source != "none":
            parts.append(f"batches {b.graph:,} graph / {b.eager:,} eager ({b.source})")
        out.append(": ".join(parts[:1]) + (": " + ", ".join(parts[1:]) if parts[1:] else ""))
    return out


def _stage_name(s: Any) -> str:
    name = s.stage.replace("_", " ")
    return f"{name} {s.runner}" if s.runner else name


def startup_line(run: RunReport) -> str | None:
    """The start-up stages with their seconds, and the capture's share of the start-up."""
    stages = run.startup
    if not stages:
        return None
    parts = []
    for s in stages:
        if s.stage == "first_request":
            if s.seconds is not None:
                parts.append(f"first request at +{number(s.seconds)} s")
        elif s.seconds is not None and s.seconds >= 0.05:
            parts.append(f"{_stage_name(s)} {number(s.seconds)} s")
    if not parts:
        return None
    cs = run.startup_capture
    tail = f" (capture {share(cs[0] / cs[1])} of {number(cs[1])} s)" if cs else ""
    return "start-up: " + ", ".join(parts) + tail


def startup_view(run: RunReport) -> dict[str, Any] | None:
    """Rows of the HTML start-up table, each with a bar (its share of the longest stage)."""
    stages = [s for s in run.startup if s.stage != "ready"]
    if not stages:
        return None
    longest = max((s.seconds or 0.0) for s in stages if s.stage != "first_request") or 1.0
    rows = []
    for s in stages:
        bar = 0 if s.stage == "first_request" or s.seconds is None else 100 * s.seconds / longest
        rows.append(
            {
                "stage": _stage_name(s),
                "seconds": number(s.seconds) if s.seconds is not None else "",
                "timed": {
                    "engine": "printed",
                    "lines": "to the next stage",
                    "since_start": "since the first start-up line",
                }[s.timed_by],
                "where": f"{s.path}:{s.line}",
                "bar": round(bar, 1),
            }
        )
    cs = run.startup_capture
    return {
        "rows": rows,
        "share": f"capture {share(cs[0] / cs[1])} of a {number(cs[1])} s start-up" if cs else None,
    }
