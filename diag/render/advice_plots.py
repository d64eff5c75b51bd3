"""The run's bucket advice in the HTML report: the frontier over K and the current vs
recommended buckets over the decode-step histogram (issue 14).

Both figures read the :class:`~diag.advise.bucket_sets.Advice` the run carries (its
``frontier_frame()`` and pooled histogram, in the engine's own unit); nothing is recomputed
here. :func:`advice_panels` is one of the run section's figure slots (html_run.RUN_PANELS).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from diag.figures import share
from diag.render import palette as pal
from diag.render.axes import finish_axes
from diag.render.figspec import Spec
from diag.render.html_page import Page
from diag.render.plots import layout, plot_text
from diag.render.view import Panel, SmallTable
from diag.report import Advice

__all__ = ["advice_panels", "bucket_overlay_figure", "frontier_figure"]

COST_TERMS = (
    ("padded_s_h", "padded compute", pal.SKY_BLUE),
    ("eager_s_h", "eager steps", pal.VERMILLION),
    ("capture_s_h", "capture time", pal.GREY),
    ("memory_s_h", "graph memory (KV lost)", pal.REDDISH_PURPLE),
)
CURRENT_COLOR = pal.DARK_GREY
RECOMMENDED_COLOR = pal.BLUISH_GREEN
MAX_OVERLAY_BARS = 300


def frontier_figure(advice: Advice) -> Spec | None:
    """Cost (stacked terms), coverage and padding waste, capture memory, each against K; the
    recommended K marked, the run's current set a dotted level apart (never on the K axis)."""
    fr = _per_k(advice)
    if fr.empty:
        return None
    fig = Spec(3, row_heights=[0.45, 0.3, 0.25], vertical_spacing=0.1)  # room for x labels
    k = fr["k"].to_numpy()
    for col, name, color in COST_TERMS:
        fig.add_trace(
            dict(
                type="bar",
                x=k,
                y=fr[col].to_numpy(),
                name=name,
                marker={"color": color},
                hovertemplate="K=%{x}: %{y:,.3f} GPU-s/h<extra>" + name + "</extra>",
            ),
            row=1,
            col=1,
        )
    held = fr["heldout_coverage"].astype("float64").to_numpy()
    coverage = np.where(np.isnan(held), fr["coverage"].to_numpy(dtype=float), held)
    fig.add_trace(
        dict(
            type="scatter",
            x=k,
            y=coverage * 100,
            mode="lines+markers",
            name="coverage (held out)" if not np.isnan(held).all() else "coverage (in sample)",
            line={"color": RECOMMENDED_COLOR},
            hovertemplate="K=%{x}: %{y:.2f}% of steps in a graph<extra></extra>",
        ),
        row=2,
        col=1,
    )
    waste = fr["padding_waste"].astype("float64").to_numpy()
    fig.add_trace(
        dict(
            type="scatter",
            x=k,
            y=waste * 100,
            mode="lines+markers",
            name="padding waste",
            line={"color": pal.BLUE, "dash": "dot"},
            hovertemplate="K=%{x}: %{y:.1f}% of graph slots padding<extra></extra>",
        ),
        row=2,
        col=1,
    )
    fig.add_trace(
        dict(
            type="scatter",
            x=k,
            y=fr["capture_gib"].to_numpy(),
            mode="lines+markers",
            name="capture memory",
            line={"color": pal.REDDISH_PURPLE},
            hovertemplate="K=%{x}: %{y:.3f} GiB<extra></extra>",
        ),
        row=3,
        col=1,
    )
    rec = fr[fr["recommended"]]
    if advice.current is not None and tuple(advice.recommended.sizes) == tuple(
        advice.current.sizes
    ):
        rec = rec.iloc[0:0]  # the current set kept: said by its level line, not a point
    if not rec.empty:
        rk = int(rec["k"].iloc[0])
        for row in (1, 2, 3):
            fig.add_vline(
                x=rk,
                line={"color": RECOMMENDED_COLOR, "dash": "dash", "width": 1.5},
                row=row,
                col=1,
            )
        fig.add_trace(
            dict(
                type="scatter",
                x=[rk],
                y=[float(rec["total_s_h"].iloc[0])],
                mode="markers",  # named in the legend: a text label sat on the bars
                name="recommended",
                marker={"symbol": "star", "size": 14, "color": RECOMMENDED_COLOR},
                hovertemplate="recommended K=%{x}: %{y:,.3f} GPU-s/h<extra></extra>",
            ),
            row=1,
            col=1,
        )
    cur = advice.current
    if cur is not None:
        _current_apart(fig, cur, kept=tuple(advice.recommended.sizes) == tuple(cur.sizes))
    fig.update_yaxes(title_text="GPU-s/h", row=1, col=1)
    fig.update_yaxes(title_text="% steps / slots", row=2, col=1, range=[-4, 106], tick0=0, dtick=25)
    fig.update_yaxes(title_text="GiB", row=3, col=1)
    # K counts capture sizes: whole numbers, the axis spans the sets drawn (plotly's own
    # range padding put ticks at -1 and 0), a tick per K up to 20 sizes
    lo_k, top_k = int(fr["k"].min()), int(fr["k"].max())
    fig.update_xaxes(
        range=[lo_k - 0.5, top_k + 0.5],
        tick0=lo_k,
        dtick=max(1, int(np.ceil((top_k - lo_k + 1) / 20))),
    )
    fig.update_xaxes(title_text="K (number of capture sizes)", row=3, col=1)
    fig.update_layout(meta={"axis_min": {f"xaxis{r if r > 1 else ''}": 1 for r in (1, 2, 3)}})
    layout(
        fig,
        f"Bucket sets by K: cost (GPU-s/h), coverage and padding waste (%), capture memory (GiB); ceiling {advice.ceiling} {advice.unit}",
        height=680,
        barmode="stack",
    )
    # the legend below the x title, never over the chart title
    fig.update_layout(
        margin={"b": 120},
        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": -0.14, "yanchor": "top"},
    )
    return finish_axes(fig)


def _per_k(advice: Advice) -> pd.DataFrame:
    """The frontier as the chart draws it: one set per K (bars of two sets at one K would
    stack into a cost neither has), the recommended set where it shares its K; the current
    set is left to its level lines (drawn apart, it never stretches the K axis)."""
    fr = advice.frontier_frame()
    if fr.empty:
        return fr
    cur = advice.current
    if cur is not None:
        others = fr[fr["sizes"].map(tuple) != tuple(cur.sizes)]
        if len(others) >= 2:
            fr = others
    fr = fr.sort_values(["k", "recommended"], ascending=[True, False], kind="stable")
    return fr.drop_duplicates("k", keep="first").reset_index(drop=True)


def _current_apart(fig: Spec, cur: Any, kept: bool) -> None:
    """The current set as a dotted level in each row, named with its K (and whether the
    advice keeps it), not a point that stretches the K axis."""
    k = len(cur.sizes)
    name = f"current set (K={k}{', kept' if kept else ''})"
    for row, y, text in (
        (1, cur.total_s_h, f"{name}: {cur.total_s_h:,.2f} GPU-s/h"),
        (2, cur.coverage * 100, f"{name}: coverage {cur.coverage:.0%}"),
        (3, cur.capture_gib, f"{name}: {cur.capture_gib:.2f} GiB"),
    ):
        fig.add_hline(
            y=y,
            line={"color": CURRENT_COLOR, "dash": "dot", "width": 1.5},
            annotation_text=plot_text(text),
            annotation_font_color=CURRENT_COLOR,
            row=row,
            col=1,
        )


def _binned(hist: dict[int, float], max_bars: int) -> tuple[np.ndarray, np.ndarray, int]:
    sizes = np.array(sorted(hist), dtype=np.int64)
    weights = np.array([hist[s] for s in sizes.tolist()], dtype=float)
    lo = int(sizes.min())
    width = max(1, -(-(int(sizes.max()) - lo + 1) // max_bars))
    bins = lo + ((sizes - lo) // width) * width
    uniq, inv = np.unique(bins, return_inverse=True)
    return uniq + (width - 1) / 2.0, np.bincount(inv, weights=weights), width


def bucket_overlay_figure(advice: Advice, current_sizes: Sequence[int] | None) -> Spec | None:
    """Decode steps per size (the advice's pooled histogram, in the engine's unit) with the
    current and the recommended buckets beneath and both ceilings marked."""
    hist = advice.hist()
    if not hist:
        return None
    x, y, width = _binned(hist, MAX_OVERLAY_BARS)
    fig = Spec(2, row_heights=[0.78, 0.22], vertical_spacing=0.12)  # room for x labels
    fig.add_trace(
        dict(
            type="bar",
            x=x,
            y=y,
            width=width * 0.9,
            name="decode steps",
            marker={"color": pal.LIGHT_GREY},
            hovertemplate="size %{x}: %{y:,.0f} steps<extra></extra>",
        ),
        row=1,
        col=1,
    )
    rows = []
    if current_sizes:
        rows.append(("current", list(current_sizes), CURRENT_COLOR, 1))
    rows.append(("recommended", list(advice.recommended.sizes), RECOMMENDED_COLOR, -1))
    for name, sizes, color, level in rows:
        top = max(sizes)
        fig.add_vline(
            x=top + 0.5, line={"color": color, "dash": "dash", "width": 1.5}, row=1, col=1
        )
        fig.add_annotation(
            x=top + 0.5,
            y=1 if level > 0 else 0.9,
            yref="y domain",
            xanchor="left",
            showarrow=False,
            text=f" {name} ceiling {top}",
            font={"color": color},
            row=1,
            col=1,
        )
        fig.add_trace(
            dict(
                type="scatter",
                x=sizes,
                y=[level] * len(sizes),
                mode="markers",
                name=f"{name} buckets ({len(sizes)})",
                marker={"symbol": "line-ns-open", "size": 12, "color": color, "line": {"width": 2}},
                hovertemplate=f"{name} bucket %{{x}}<extra></extra>",
            ),
            row=2,
            col=1,
        )
    fig.update_yaxes(visible=False, row=2, col=1, range=[-2, 2], fixedrange=True)
    fig.update_yaxes(title_text="decode steps", row=1, col=1)
    fig.update_xaxes(title_text=f"step size ({advice.unit})", row=2, col=1)
    layout(fig, "Decode steps against the current and the recommended buckets", height=420)
    return finish_axes(fig)


def parameter_table(advice: Advice) -> SmallTable:
    """The cost model's parameters: value, unit, where it came from and why."""
    rows = [
        [name, "unknown" if p.value is None else f"{p.value:.4g}", p.unit, p.source, p.why]
        for name, p in advice.parameters.table().items()
    ]
    return SmallTable(
        "cost-parameters",
        "Cost model parameters (GPU-seconds per hour of the observed traffic)",
        ["parameter", "value", "unit", "source", "why"],
        rows,
    )


def advice_panels(page: Page, advice: Advice | None) -> list[Panel]:
    """What the run section shows of its advice: both figures, the promise and parameters."""
    if advice is None:
        return []
    rec = advice.recommended
    waste = (
        "" if rec.heldout_waste is None else f", held-out padding waste {share(rec.heldout_waste)}"
    )
    caption = (
        f"Recommended {len(rec.sizes)} sizes up to {max(rec.sizes)} {advice.unit}: promised "
        f"coverage {share(advice.promised_coverage)}{waste} ({advice.folds})."
        if advice.changes or advice.decision is None
        else f"{advice.decision.headline}."  # keep, or too little traffic: said, with figures
    )
    out = [
        Panel(
            "advice",
            heading="Bucket advice",
            caption=caption,
        )
    ]
    # a frontier needs two K values or more: one K is a point, said in the caption above
    frontier = frontier_figure(advice) if len(advice.frontier_frame()) >= 2 else None
    if frontier is not None:
        out.append(Panel("frontier", chart=page.chart(frontier, "Bucket sets by K", "frontier")))
    overlay = bucket_overlay_figure(advice, advice.current.sizes if advice.current else None)
    if overlay is not None:
        out.append(
            Panel(
                "bucket-overlay",
                chart=page.chart(overlay, "Current vs recommended buckets", "bucket-overlay"),
            )
        )
    out.append(Panel("cost-parameters", table=parameter_table(advice), fold=True))
    return out
