"""`graphdiag compare` rendered: the :mod:`diag.comparison` document as text, JSON or a page.

Nothing is compared here: what each side is, what differs, the metric table with its verdicts
and the promise check are built by :func:`diag.comparison.compare` before rendering.
"""

from __future__ import annotations

import json
from typing import Any

from diag.comparison import Comparison
from diag.figures import number, share


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


def render_text(doc: Comparison) -> str:
    """What differs first, then the warnings (a refusal to compare first of all), the sides
    with what each is and their verdicts, the metric table (metric, before, after, delta) and
    the findings moves."""
    summary = [doc["summary"]] if doc.get("summary") else []
    warned = [f"WARNING: {w_}" for w_ in doc["warnings"] if w_ != doc.get("summary")]
    # a refusal to compare at all comes before what differs
    lines = summary + warned if doc.get("comparable", True) else warned + summary
    if lines:
        lines.append("")
    lines += [_side_line("before", doc["before"]), _side_line("after ", doc["after"])]
    for label in ("before", "after"):
        said = (doc.get("identity_lines") or {}).get(label)
        if said:
            lines.append(f"  {label}: {said}")
    lines.append("")
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


def render_json(doc: Comparison) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


_CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 10px;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f3f3f3}
.better{color:#176b2c}.worse{color:#a3271b}.warn{background:#fff4d6;border-left:4px solid #e0a800;padding:6px 10px}
code{background:#f3f3f3;padding:0 3px}"""


def render_html(doc: Comparison) -> str:
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
