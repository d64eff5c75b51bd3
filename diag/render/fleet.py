"""The fleet summary written out: the JSON report's ``fleet`` key, the text summary's fleet
section and the HTML page's fleet table. The summary itself is made once, with the report
(:mod:`diag.summary`, ``Report.fleet``); this module only reads it.
"""

from __future__ import annotations

import math
from typing import Any

from diag.figures import share
from diag.render.sizes import compact_sizes
from diag.summary import CaptureConfig, FleetEntry, FleetGroup, FleetSummary, GroupAdvice

__all__ = ["fleet_json", "fleet_text", "fleet_view"]


# ------------------------------------------------------------------ JSON
def fleet_json(summary: FleetSummary) -> dict[str, Any]:
    """The report's ``fleet`` key (docs/interface-additions.md)."""
    return {
        "runs": summary.runs,
        "groups": [_entry_json(e) for e in summary.entries],
    }


def _config_json(c: CaptureConfig) -> dict[str, Any]:
    return {
        "graph_mode": c.graph_mode,
        "cudagraph_mode": c.cudagraph_mode,
        "graph_capture_sizes": None if c.capture_sizes is None else list(c.capture_sizes),
        "cuda_graph_max_bs": c.ceiling,
        "tp": c.tp,
        "pp": c.pp,
        "dp": c.dp,
        "attention_backend": c.attention,
        "prefill_node": c.prefill_node,
        "config_echoed": c.echoed,
        "switches_on": list(c.switches),
    }


def _entry_json(e: FleetEntry) -> dict[str, Any]:
    g = e.group
    return {
        "backend": g.backend,
        "engine_version": g.engine_version,
        "model": g.model,
        "config": _config_json(g.config),
        "runs": list(g.run_ids),
        "verdicts": dict(g.verdicts),
        "majority": g.majority,
        "outliers": [
            {"run": o.run_id, "verdict": o.verdict, "verdict_reason": o.verdict_reason}
            for o in g.outliers
        ],
        "recommendation": None if e.advice is None else _advice_json(e.advice),
        "no_recommendation": e.no_advice,
    }


def _r(v: float | None, nd: int) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v, nd)


def _advice_json(a: GroupAdvice) -> dict[str, Any]:
    adv = a.advice
    rec = adv.recommended
    cur = a.current
    return {
        "source": a.source,
        "runs_pooled": list(a.runs_pooled),
        "engine": adv.engine,
        "unit": adv.unit,
        "ceiling": adv.ceiling,
        "decision": None if adv.decision is None else adv.decision.kind,
        "headline": a.headline,
        "current": None
        if cur is None
        else {
            "sizes": list(cur.sizes),
            "coverage": _r(cur.coverage, 4),
            "padding_waste": _r(cur.padding_waste, 4),
        },
        "recommended": {
            "sizes": list(rec.sizes),
            "coverage": _r(rec.cost.coverage, 4),
            "padding_waste": _r(rec.cost.padding_waste, 4),
            "promised_coverage": _r(adv.promised_coverage, 4),
        },
        "flags": a.flags,
        "decode_steps": a.decode_steps,
    }


# ------------------------------------------------------------------ words (text and HTML)
def group_label(g: FleetGroup) -> str:
    """Engine, version, model and capture configuration, the unknown parts left out."""
    c = g.config
    parallel = " ".join(
        f"{name}{v}" for name, v in (("TP", c.tp), ("PP", c.pp), ("DP", c.dp)) if v is not None
    )
    mode = f"graphs {c.graph_mode}" + (f" ({c.cudagraph_mode})" if c.cudagraph_mode else "")
    parts = [
        " ".join(p for p in (g.backend, g.engine_version) if p),
        None if c.echoed else "no config echo in the logs",
        g.model,
        parallel or None,
        "prefill node" if c.prefill_node else None,
        mode,
        None if c.ceiling is None else f"ceiling {c.ceiling}",
        None if not c.capture_sizes else f"sizes {compact_sizes(c.capture_sizes)}",
        None if c.attention is None else f"attention {c.attention}",
        *(f"{s}=True" for s in c.switches),
    ]
    return ", ".join(p for p in parts if p)


def verdict_counts(g: FleetGroup) -> str:
    return ", ".join(f"{n} {v}" for v, n in g.verdicts)


def advice_words(a: GroupAdvice, with_flags: bool = True) -> str:
    """The recommendation in one sentence: what to do, the ceiling, the set and its flags
    (``with_flags`` False: the page shows them apart)."""
    adv = a.advice
    rec = adv.recommended
    pooled = len(a.runs_pooled)
    head = (
        f"{pooled} run{'s' if pooled != 1 else ''} pooled"
        + (" as one server (the advice its runs' findings quote)" if a.source == "server" else "")
        + f": {a.headline}"
    )
    if not a.flags:
        return head
    waste = rec.cost.padding_waste
    figures = [f"coverage {share(adv.promised_coverage)}"]
    if waste is not None:
        figures.append(f"padding waste {share(waste)}")
    words = f"{head}; ceiling {adv.ceiling} {adv.unit}, sizes {compact_sizes(rec.sizes)} "
    return words + f"({', '.join(figures)})" + (f": {a.flags}" if with_flags else "")


MAX_GROUPS = 10  # groups the text names; the JSON and HTML list every one
MAX_OUTLIERS = 5  # outliers a group's text names


def fleet_text(summary: FleetSummary, names: dict[str, str] | None = None) -> list[str]:
    """The text summary's fleet section: one paragraph per group (unwrapped lines)."""
    n = len(summary.entries)
    out = [
        f"Fleet: {summary.runs} runs in {n} group{'s' if n != 1 else ''} (engine, version, "
        "model and capture configuration):"
    ]
    for i, e in enumerate(summary.entries[:MAX_GROUPS], start=1):
        g = e.group
        runs = len(g.run_ids)
        out.append(f"[{i}] {runs} run{'s' if runs != 1 else ''}: {group_label(g)}")
        out.append(f"  verdicts: {verdict_counts(g)}")
        if g.majority is None and len(g.verdicts) > 1:
            out.append("  no verdict holds a majority of the group")
        for o in g.outliers[:MAX_OUTLIERS]:
            out.append(
                f"  differs from the group's {g.majority}: "
                f"{(names or {}).get(o.run_id, o.run_id)} {o.verdict}: "
                f"{o.verdict_reason}"
            )
        if len(g.outliers) > MAX_OUTLIERS:
            out.append(
                f"  ... and {len(g.outliers) - MAX_OUTLIERS:,} more that differ "
                "(the JSON report's fleet key lists every one)"
            )
        if e.advice is not None:
            out.append(f"  buckets, {advice_words(e.advice)}")
        elif e.no_advice:
            out.append(f"  no bucket advice: {e.no_advice}")
    if n > MAX_GROUPS:
        out.append(
            f"... and {n - MAX_GROUPS:,} more groups (the JSON report and the HTML page "
            "list every one)"
        )
    return out


def _flag_tokens(flags: str) -> list[str]:
    """``--a 1 2 --b 3`` as ``["--a 1", "2", "--b 3"]``: a flag never parts from its first
    value, and the page wraps only between tokens."""
    out: list[str] = []
    for word in flags.split():
        if out and out[-1].startswith("-") and " " not in out[-1] and not word.startswith("-"):
            out[-1] += " " + word
        else:
            out.append(word)
    return out


OPEN_GROUPS = 3  # the HTML fleet table is open up to this many groups, folded beyond
MAX_PAGE_OUTLIERS = 20  # outliers a group's row lists; the JSON lists every one


def fleet_view(
    summary: FleetSummary, anchors: dict[str, str], names: dict[str, str]
) -> dict[str, Any]:
    """What the HTML fleet section shows: one table row per group. ``anchors``: run id ->
    the id of the run's section, so an outlier links to it; ``names``: run id -> label."""
    n = len(summary.entries)
    rows = []
    for i, e in enumerate(summary.entries, start=1):
        g = e.group
        rows.append(
            {
                "index": i,
                "label": group_label(g),
                "runs": len(g.run_ids),
                "verdicts": verdict_counts(g),
                "majority": g.majority,
                "outliers": [
                    {
                        "anchor": anchors.get(o.run_id, ""),
                        "name": names.get(o.run_id, o.run_id),
                        "verdict": o.verdict,
                        "reason": o.verdict_reason,
                    }
                    for o in g.outliers[:MAX_PAGE_OUTLIERS]
                ],
                "more": max(0, len(g.outliers) - MAX_PAGE_OUTLIERS),
                "advice": None if e.advice is None else advice_words(e.advice, with_flags=False),
                # flag and value kept together ("--cuda-graph-max-bs 56" never split)
                "flags": [] if e.advice is None else _flag_tokens(e.advice.flags),
                "no_advice": e.no_advice,
            }
        )
    return {
        "title": f"Fleet: {summary.runs} runs in {n} group{'s' if n != 1 else ''}",
        "open": n <= OPEN_GROUPS,
        "rows": rows,
    }
