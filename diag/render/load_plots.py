"""The run's KV and queue timeline: KV-pool usage, running / waiting requests and evictions
(the first panel of a serving dashboard), on the run's shared time axis.

Reads :func:`diag.facts.load.load_frame`; draws only. Capture memory's share of the pool
is a band above 100 %: the pool would have been that much larger without the captured
graphs, so usage pressed against 100 % under a wide band reads "the buckets cost the KV".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diag.render import palette as pal
from diag.render.axes import TimeAxis, finish_axes, integer_ticks
from diag.render.figspec import Spec
from diag.render.plots import layout

KV_COLORS = {
    "kv": pal.BLUE,
    "running": pal.BLUISH_GREEN,
    "waiting": pal.ORANGE,
    "evict": pal.VERMILLION,
}


def _take(x: list[str] | np.ndarray, mask: np.ndarray) -> list[str] | np.ndarray:
    if isinstance(x, list):
        return [v for v, keep in zip(x, mask, strict=True) if keep]
    return x[mask]


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def share_label(capture_share: float, capture_gib: float | None) -> str:
    label = f"capture memory = {capture_share:.1%} of the KV pool"
    return label + (f" ({capture_gib:,.2f} GiB)" if capture_gib else "")


def kv_timeline_figure(
    frame: pd.DataFrame,
    axis: TimeAxis,
    capture_share: float | None = None,
    capture_gib: float | None = None,
    evictions: str = "preemptions",
    bin_s: float | None = None,
) -> Spec | None:
    """Stacked panels sharing x: KV usage %, running / waiting, evictions (when any).
    ``bin_s``: the samples are time bins of that width (see :func:`binned_load`)."""
    if frame.empty:  # (the caller draws only a load with KV usage or requests logged)
        return None
    ts = frame["ts"].to_numpy(dtype="float64")
    x = axis.x(ts) if axis.kind != "sequence" else np.arange(1, len(frame) + 1, dtype="float64")
    evict = frame["evicted"].fillna(0).to_numpy(dtype="float64")
    kv = frame["kv_usage"].to_numpy(dtype="float64") * 100
    has_kv = np.isfinite(kv)
    rows = (2 if has_kv.any() else 1) + (1 if evict.sum() > 0 else 0)
    heights = {1: [1.0], 2: [0.55, 0.45], 3: [0.42, 0.32, 0.26]}[rows]
    fig = Spec(rows, row_heights=heights, vertical_spacing=0.08)
    row = 1
    if has_kv.any():
        fig.add_trace(
            dict(
                type="scatter",
                x=_take(x, has_kv),
                y=kv[has_kv],
                mode="lines+markers",
                name="KV cache usage",
                line={"color": KV_COLORS["kv"], "width": 1.5},
                marker={"size": 4},
                hovertemplate="%{y:.1f} % of the KV pool<extra></extra>",
            ),
            row=1,
            col=1,
        )
        top = 100.0
        if capture_share:
            top = 100.0 + 100.0 * capture_share
            fig.add_hrect(
                y0=100, y1=top, fillcolor=pal.CAPTURE_BAND, opacity=0.6, line_width=0, row=1, col=1
            )
            fig.add_annotation(
                x=0.01,
                xref="x domain",
                y=top,
                yref="y",
                yanchor="bottom",
                xanchor="left",
                text=share_label(capture_share, capture_gib),
                showarrow=False,
                font={"color": pal.TEXT_VERMILLION, "size": 11},
            )
        fig.add_hline(y=100, line={"color": pal.DARK_GREY, "dash": "dot", "width": 1}, row=1, col=1)
        # a percentage axis: ticks 0-100 % only; the capture share above it is a band
        fig.update_yaxes(
            title_text="KV usage (%)",
            range=[0, top + 14],
            tickvals=[0, 25, 50, 75, 100],
            row=1,
            col=1,
        )
        row = 2
    for col, name in (("running", "running"), ("waiting", "waiting (queue)")):
        v = frame[col].to_numpy(dtype="float64")
        ok = np.isfinite(v)
        if ok.any():
            fig.add_trace(
                dict(
                    type="scatter",
                    x=_take(x, ok),
                    y=v[ok],
                    mode="lines",
                    name=name,
                    line={"color": KV_COLORS[col], "width": 1.5, "shape": "hv"},
                    hovertemplate="%{y:,.0f} requests<extra>" + name + "</extra>",
                ),
                row=row,
                col=1,
            )
    counts = frame[["running", "waiting"]].to_numpy(dtype="float64")
    top = float(np.nanmax(counts)) if np.isfinite(counts).any() else 0.0
    fig.update_yaxes(title_text="requests", row=row, col=1)
    integer_ticks(fig, top, row=row, col=1)
    if evict.sum() > 0:
        hit = evict > 0
        fig.add_trace(
            dict(
                type="bar",
                x=_take(x, hit),
                y=evict[hit],
                name=evictions,
                marker={"color": KV_COLORS["evict"]},
                hovertemplate="%{y:,.0f} requests<extra>" + evictions + "</extra>",
            ),
            row=rows,
            col=1,
        )
        # two lines: the short bottom panel fits its title inside its own height
        fig.update_yaxes(title_text=f"{evictions}<br>(requests)", row=rows, col=1)
        integer_ticks(fig, float(evict.max()), row=rows, col=1)
    axis.apply(fig, rows)
    title = "KV cache and queue" + ("" if evict.sum() > 0 else f" (no {evictions} logged)")
    if bin_s is not None:
        title += f" (binned: each point is the highest of its {_span(bin_s)})"
    layout(fig, title, height=200 + 120 * rows)
    return finish_axes(fig)


def kv_timeline_rows(
    frame: pd.DataFrame, axis: TimeAxis, evictions: str
) -> tuple[list[str], list[list[str]]]:
    """The same samples as a small table; columns with nothing logged are dropped."""

    def fmt(v: float, pct: bool = False) -> str:
        if pd.isna(v):
            return ""
        return f"{v:.0%}" if pct else f"{v:,.0f}"

    ts = frame["ts"].to_numpy(dtype="float64")
    when = (
        [axis.label(t) for t in ts]
        if axis.kind != "sequence"
        else [str(i) for i in range(1, len(frame) + 1)]
    )
    cols: dict[str, list[str]] = {
        "time": when,
        "KV usage": [fmt(v, True) for v in frame["kv_usage"]],
        "running": [fmt(v) for v in frame["running"]],
        "waiting": [fmt(v) for v in frame["waiting"]],
        evictions: ["" if pd.isna(v) or v == 0 else fmt(v) for v in frame["evicted"]],
    }
    kept = [c for c, vals in cols.items() if any(vals)]
    return kept, [[cols[c][i] for c in kept] for i in range(len(frame))]
