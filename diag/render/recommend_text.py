"""`graphdiag recommend` as a terminal summary, read from the recommend document alone.

The two sets side by side, the decision, the flags to paste, the frontier and the
parameters; every figure formatted as analyze formats it (:mod:`diag.figures`)."""

from __future__ import annotations

from collections.abc import Sequence

from diag.figures import share
from diag.report import Recommendation

__all__ = ["render_text"]


def _fmt_sizes(sizes: Sequence[int]) -> str:
    if not sizes:
        return "[] (graphs off)"
    if len(sizes) <= 16:
        return "[" + ", ".join(map(str, sizes)) + "]"
    return f"[{', '.join(map(str, sizes[:8]))}, ..., {sizes[-1]}] ({len(sizes)} sizes)"


def _pct(v: float | None) -> str:
    return "not measured" if v is None else share(v)


def _num(v: float | int | None, unit: str, signed: bool = False) -> str:
    if v is None:
        return "not measured"
    return (f"{v:+,g}" if signed else f"{v:,g}") + unit


def _neg(v: float | None) -> float | None:
    return None if v is None else round(-v, 3) + 0.0  # + 0.0: no "-0"


def _frontier_lines(rec: Recommendation) -> list[str]:
    rows = rec.get("frontier") or []
    if not rows:
        return []
    out = [
        "  frontier (cost in GPU-s per hour of this traffic; * = recommended):",
        f"    {'K':>3} {'coverage':>8} {'held-out':>8} {'waste':>6} {'GiB':>6} {'padded':>8} "
        f"{'eager':>8} {'capture':>7} {'memory':>7} {'total':>8}  sizes",
    ]
    for r in rows:
        held = r["heldout_coverage"]
        waste = r["padding_waste"]
        out.append(
            f"  {'*' if r['recommended'] else ' '} {r['k']:>3} {r['coverage']:>8.2%} "
            f"{'in sample' if held is None else f'{held:.2%}':>8} "
            f"{'-' if waste is None else f'{waste:.1%}':>6} "
            f"{r['capture_gib']:>6.3f} {r['padded_s_h']:>8.2f} {r['eager_s_h']:>8.2f} "
            f"{r['capture_s_h']:>7.3f} {r['memory_s_h']:>7.3f} {r['total_s_h']:>8.2f}  "
            f"{_fmt_sizes(r['sizes'])}"
        )
    return out


def _parameter_lines(rec: Recommendation) -> list[str]:
    params = rec.get("parameters") or {}
    if not params:
        return []
    out = ["  parameters (value, source, why):"]
    for name, p in params.items():
        v = "unknown" if p["value"] is None else f"{p['value']:.4g}"
        src = p["source"] + (f" {p['source_of']}" if p.get("source_of") else "")
        out.append(f"    {name:22s} {v:>10s} {p['unit']:18s} [{src}] {p['why']}")
    return out


def _ceiling_basis(rec: Recommendation) -> str:
    """What the ceiling rests on: the options that lowered it, else the peak plus headroom."""
    c = rec.get("constraints") or {}
    if c.get("min_coverage") is not None:
        return f"--coverage {c['min_coverage']:g}, see notes"
    return "peak plus headroom"


def render_text(rec: Recommendation) -> str:
    """Terminal summary: the two sets side by side, the promise, the frontier, the parameters,
    the flags to paste, notes."""
    cur, new = rec["current"], rec["recommended"]
    head = f"{rec['engine']} {rec['version'] or '(version unknown)'}"
    if rec.get("node") == "prefill":
        lines = [
            f"Recommendation for {head}, prefill node {rec['main_run']}: CUDA graphs off",
            f"  current:     {_fmt_sizes(cur['sizes'])}, capture {_num(cur['capture_mem_gib'], ' GiB')}",
            f"  KV tokens regained (est.): {_num(new['kv_tokens_regained_est'], '')}",
        ]
    else:
        val = rec["validation"]
        unit = rec["unit"]
        lines = [
            f"Recommendation for {head} from {rec['decode_steps']:,} decode steps "
            f"({rec['decode_batches']} lines, main run {rec['main_run']}); sizes in {unit}:",
            f"  traffic ceiling {rec['ceiling']} {unit} ({_ceiling_basis(rec)}); "
            f"validation: {val['how']}",
            f"  current ({cur['source']}; {cur['figures'].split(':')[0]}): "
            f"{_fmt_sizes(cur['sizes'])}",
            f"      coverage {_pct(cur['coverage'])}, padding waste {_pct(cur['padding_waste'])}, "
            f"cost {cur['cost_s_h']:,.2f} GPU-s/h, "
            f"capture {_num(cur['capture_mem_gib'], ' GiB')} / {_num(cur['capture_time_s'], ' s')}"
            + (
                f" (snapshot graph pools {cur['snapshot_graph_pool_gib']:g} GiB)"
                if cur.get("snapshot_graph_pool_gib") is not None
                else ""
            ),
            f"  recommended ({new['figures'].split(':')[0]}): {_fmt_sizes(new['sizes'])}",
            f"      coverage {_pct(new['coverage'])} ("
            + (
                f"promised on new traffic: {_pct(new['promised_coverage'])}"
                if val["heldout_cost_s_h"] is not None
                else "in sample only, too few lines to hold any out"
            )
            + f"), padding waste {_pct(new['padding_waste'])}"
            + (
                f" (held out: {_pct(new['heldout_waste'])})"
                if new["heldout_waste"] is not None
                else ""
            )
            + f", cost {new['cost_s_h']:,.2f} GPU-s/h of {val['decode_gpu_s_h']:,.1f} decode GPU-s/h",
            f"      capture {_num(new['capture_mem_gib_est'], ' GiB')} / "
            f"{_num(new['capture_time_s_est'], ' s')} (est.)",
        ]
        decision = rec.get("decision") or {}
        if decision.get("kind") not in (None, "change"):
            lines.append(f"  decision: {decision['headline']}")
        elif new["capture_mem_saved_gib_est"] is not None:
            lines.append(
                f"  change (est.): capture memory {_num(_neg(new['capture_mem_saved_gib_est']), ' GiB', True)}"
                + (
                    f", capture time {_num(_neg(new['capture_time_saved_s_est']), ' s', True)}"
                    if new["capture_time_saved_s_est"] is not None
                    else ""
                )
                + (
                    f", KV tokens {_num(new['kv_tokens_regained_est'], '', True)}"
                    if new["kv_tokens_regained_est"] is not None
                    else ""
                )
            )
    lines.append("  flags:")
    kind = (rec.get("decision") or {}).get("kind")
    if rec["flags"]:
        lines.append(f"    {rec['flags']}")
    elif kind == "keep":
        lines.append("    (none: keep the current set)")
    elif kind == "insufficient":
        lines.append("    (none: too little decode traffic to size buckets, see the decision)")
    else:
        lines.append("    (none for this version, see notes)")
    if rec.get("node") != "prefill":
        lines.extend(_frontier_lines(rec))
        lines.extend(_parameter_lines(rec))
    said = (rec.get("decision") or {}).get("headline") if kind != "change" else None
    notes = [n for n in rec["notes"] if n != said]  # (the decision line above says it)
    if notes:
        lines.append("  notes:")
        lines.extend(f"  - {n}" for n in notes)
    return "\n".join(lines) + "\n"
