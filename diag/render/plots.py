"""Plotly figures for the HTML report, built from the facts' DataFrames (HTA style).

Each ``*_figure`` function takes plain DataFrames / dicts and returns a figure as a
:class:`~diag.render.figspec.Spec` (the dict plotly.js reads; ``.figure()`` is the
``go.Figure``), or ``None`` when the input holds nothing to draw (the page then says "not
in the logs" instead of showing an empty axis). Analysis stays in :mod:`diag.facts`; the helpers
here only aggregate for drawing, so a 10-million-row batches frame still yields a few
thousand points: the timeline is binned to at most :data:`MAX_TIMELINE_POINTS` and the
histogram to at most :data:`MAX_HIST_BARS` bars per verdict.

Strings that came from a log (rank names, file names) go into figures through
:func:`plot_text`, because plotly renders a subset of HTML in labels and hover text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from diag.batch_labels import VERDICTS as VERDICTS
from diag.batch_labels import verdict_codes as label_codes
from diag.render import palette as pal
from diag.render.axes import F, TimeAxis, finish_axes, integer_ticks, time_axis
from diag.render.figspec import Spec

MAX_TIMELINE_POINTS = 5000
MAX_HIST_BARS = 300
COLORS = {"graph": pal.BLUISH_GREEN, "eager": pal.VERMILLION, "unknown": pal.LIGHT_GREY}
LABELS = {"graph": "graph (captured)", "eager": "eager (fallback)", "unknown": "not decided"}
MEMORY_COLORS = {
    "weights": pal.GREY,
    "KV cache pool": pal.BLUE,
    "CUDA graph capture": pal.VERMILLION,
    "CUDA graph capture (estimated)": pal.ORANGE,
    "activation peak": pal.REDDISH_PURPLE,
    "non-torch": pal.NEAR_BLACK,
    "free after capture": pal.BLUISH_GREEN,
    "reserve (1 - gpu_memory_utilization)": pal.PALE_GREY,
    "default pool": pal.SKY_BLUE,
    "graph pool": pal.YELLOW,  # the snapshot's graph pools: not the log's capture figure
    # a capture OOM's message (diag.render.memory_plots.oom_row)
    "in use by this process": pal.REDDISH_PURPLE,
    "free at the OOM": pal.BLUISH_GREEN,
    "allocation that failed": pal.VERMILLION,
}
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"


def plot_text(value: Any) -> str:
    """A log-derived string made inert for plotly's HTML-ish label renderer."""
    return html.escape(str(value), quote=True)


def layout(fig: F, title: str, height: int = 340, **extra: Any) -> F:
    """A small, template-free layout (the default template alone is ~10 KB per figure)."""
    fig.update_layout(
        template="none",
        height=height,
        title={"text": title, "x": 0.01, "font": {"size": 15}},
        font={"family": FONT, "size": 12, "color": "#212529"},
        paper_bgcolor="white",
        plot_bgcolor="white",
        # plotly's toolbar (shown on hover) stands upright in the right margin, beside the
        # plot and never over the legend, which ends at the plot's right edge
        margin={"l": 64, "r": 40, "t": 48, "b": 48},
        modebar={"orientation": "v", "bgcolor": "rgba(255,255,255,0.8)"},
        legend={
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.02,
            "xanchor": "right",
            "x": 1,
            "traceorder": "normal",
        },
        hoverlabel={"font": {"family": FONT}},
        **extra,
    )
    fig.update_xaxes(
        showgrid=True,
        gridcolor="#f1f3f5",
        zeroline=False,
        linecolor="#ced4da",
        ticks="outside",
        automargin=True,
    )
    fig.update_yaxes(
        showgrid=True, gridcolor="#f1f3f5", zeroline=False, linecolor="#ced4da", automargin=True
    )
    return fig


def verdict_codes(verdict: pd.Series) -> np.ndarray:
    """0 graph, 1 eager, 2 anything else, as int8 (the classification's own codes, with
    "unknown" and any other value drawn alike)."""
    return np.minimum(label_codes(verdict.to_frame("verdict")), 2)


def _numeric(frame: pd.DataFrame, col: str, default: float) -> np.ndarray:
    """The column as float64 (NaN where missing or not a number); a float64 column as it is
    (read-only, no copy: the classify frame of a million batch lines holds several)."""
    if col not in frame:
        return np.full(len(frame), default)
    series = frame[col]
    if series.dtype == np.float64:
        return series.to_numpy()
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


ROW_COLUMNS = ["batch_size", "weight", "v", "ts", "gen_throughput"]


def prepare_batches(batches: pd.DataFrame) -> pd.DataFrame:
    """The classify frame reduced to what the plots read: rows with a positive batch size,
    numeric columns only (``v`` = verdict code). Figure functions accept either frame;
    passing this one lets several figures share one pass over a huge frame."""
    return _decode_rows(batches)


def _decode_rows(batches: pd.DataFrame) -> pd.DataFrame:
    cols = ROW_COLUMNS
    if batches is not None and list(batches.columns) == cols:
        return batches  # already prepared
    if batches is None or batches.empty or "batch_size" not in batches:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    size = _numeric(batches, "batch_size", np.nan)
    keep = np.isfinite(size) & (size > 0)
    weight = _numeric(batches, "weight", 1.0)
    weight = np.where(np.isfinite(weight), weight, 1.0)
    v = (
        verdict_codes(batches["verdict"])
        if "verdict" in batches
        else np.full(len(batches), 2, np.int8)
    )
    every = bool(keep.all())

    def kept(a: np.ndarray) -> np.ndarray:
        return a if every else a[keep]

    # copy=False: the arrays are new already; pandas would stack the float ones into one
    # more copy (the render's memory peak on a log of a million batch lines)
    return pd.DataFrame(
        {
            "batch_size": kept(size),
            "weight": kept(weight),
            "v": kept(v),
            "ts": kept(_numeric(batches, "ts", np.nan)),
            "gen_throughput": kept(_numeric(batches, "gen_throughput", np.nan)),
        },
        copy=False,
    )


def group_max(key: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """``out[k]`` = the largest value with key k (-inf where none): ``np.maximum.at`` in
    effect, through a stable sort and ``reduceat``, since ``ufunc.at`` took ~150 ns a row
    (0.17 s on a million decode batches) where the sort of keys in time order is ~7 ms."""
    out = np.full(n, -np.inf)
    if key.size == 0:
        return out
    order = np.argsort(key, kind="stable")
    keys = key[order]
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    out[keys[starts]] = np.maximum.reduceat(values[order], starts)
    return out


# ------------------------------------------------------------------ batch-size distribution
def histogram_table(
    batches: pd.DataFrame, max_bars: int = MAX_HIST_BARS
) -> tuple[pd.DataFrame, int]:
    """Weighted batch counts per (size bin, verdict) and the bin width used.

    Sizes are integers; past ``max_bars`` distinct sizes they are grouped into equal bins.
    """
    rows = _decode_rows(batches)
    if rows.empty:
        return pd.DataFrame(columns=["lo", "hi", "verdict", "weight"]), 1
    size = np.rint(rows["batch_size"].to_numpy()).astype(np.int64)
    lo_all, hi_all = int(size.min()), int(size.max())
    width = max(1, math.ceil((hi_all - lo_all + 1) / max_bars))
    lo = lo_all + ((size - lo_all) // width) * width
    key = ((lo - lo_all) // width) * 3 + rows["v"].to_numpy().astype(np.int64)
    sums = np.bincount(key, weights=rows["weight"].to_numpy())
    hit = np.flatnonzero(np.bincount(key))
    agg = pd.DataFrame(
        {
            "lo": lo_all + (hit // 3) * width,
            "verdict": np.asarray(VERDICTS, dtype=object)[hit % 3],
            "weight": sums[hit],
        }
    )
    agg["hi"] = agg["lo"] + width - 1
    return agg[["lo", "hi", "verdict", "weight"]], width


def batch_size_figure(
    batches: pd.DataFrame, sizes: Sequence[int] | None, sizes_inferred: bool = False
) -> Spec | None:
    """Observed decode batch sizes (stacked graph / eager), the capture window shaded behind
    and each captured size a short mark at the bottom of the same axes (a rug subplot under
    a shared x axis took the x numbers away in Chromium's relayout)."""
    table, width = histogram_table(batches)
    if table.empty:
        return None
    fig = Spec()
    for verdict in VERDICTS:
        part = table[table["verdict"] == verdict]
        if part.empty:
            continue
        centers = (part["lo"] + part["hi"]) / 2.0
        label = [
            f"{a}" if a == b else f"{a}–{b}" for a, b in zip(part["lo"], part["hi"], strict=True)
        ]
        fig.add_trace(
            {
                "type": "bar",
                "x": centers.to_numpy(),
                "y": part["weight"].to_numpy(),
                "width": width * 0.9,
                "name": LABELS[verdict],
                "marker": {"color": COLORS[verdict]},
                "customdata": label,
                "hovertemplate": "batch size %{customdata}<br>%{y:,.0f} batches<extra>"
                + LABELS[verdict]
                + "</extra>",
            }
        )
    title = "Decode batch sizes against the capture window"
    if sizes:
        ceiling = max(sizes)
        fig.add_vrect(
            x0=0.5,
            x1=ceiling + 0.5,
            fillcolor=pal.WINDOW_BAND,
            opacity=0.45,
            line_width=0,
            layer="below",
        )
        fig.add_vline(
            x=ceiling + 0.5, line={"color": pal.BLUISH_GREEN, "dash": "dash", "width": 1.5}
        )
        fig.add_annotation(
            x=ceiling + 0.5,
            y=1,
            yref="y domain",
            xanchor="left",
            showarrow=False,
            text=f" ceiling {ceiling}",
            font={"color": pal.TEXT_GREEN},
        )
        for s in sizes:
            fig.add_shape(
                type="line",
                x0=s,
                x1=s,
                y0=0,
                y1=0.05,
                yref="y domain",
                line={"color": pal.TEXT_GREEN, "width": 1.5},
            )
        title += " (marks: captured sizes" + (", engine default)" if sizes_inferred else ")")
    else:
        title += " (bucket list not in the logs)"
    fig.update_yaxes(title_text="decode batches")
    stacked = table.groupby("lo")["weight"].sum()
    integer_ticks(fig, float(stacked.max()))
    fig.update_xaxes(title_text="decode batch size (running requests)", rangemode="tozero")
    layout(fig, title, barmode="stack", bargap=0.05, height=360)
    return finish_axes(fig)


# ------------------------------------------------------------------ timeline
def timeline_table(
    batches: pd.DataFrame, max_points: int = MAX_TIMELINE_POINTS
) -> tuple[pd.DataFrame, str, bool]:
    """Points for the batch-size timeline: ``x, verdict, max, mean, n`` plus the x kind.

    x is a timestamp (``"time"``) when most rows have one, else the batch's position
    (``"seq"``). Beyond ``max_points`` rows, x is cut into equal bins and each
    (bin, verdict) keeps its largest batch (the one that decides graph vs eager), its
    mean and its count.
    """
    rows = _decode_rows(batches)
    if rows.empty:
        return pd.DataFrame(columns=["x", "verdict", "max", "mean", "n"]), "seq", False
    ts = rows["ts"].to_numpy()
    size = rows["batch_size"].to_numpy()
    v = rows["v"].to_numpy()
    timed = np.isfinite(ts)
    n_timed = int(timed.sum())
    if n_timed >= 0.5 * len(ts):
        kind = "time"
        if n_timed == len(ts):  # (no masked copies of a million rows when all are timed)
            x = ts
        else:
            x, size, v = ts[timed], size[timed], v[timed]
    else:
        x, kind = np.arange(1, len(rows) + 1, dtype="float64"), "seq"
    names = np.asarray(VERDICTS, dtype=object)
    if len(x) <= max_points:
        out = pd.DataFrame(
            {"x": x, "verdict": names[v], "max": size, "mean": size, "n": np.ones(len(x))}
        )
        return out, kind, False
    present = max(1, int((np.bincount(v, minlength=3) > 0).sum()))
    bins = max(1, max_points // present)
    lo, hi = float(np.min(x)), float(np.max(x))
    step = (hi - lo) / bins or 1.0
    idx = np.minimum(((x - lo) / step).astype(np.int64), bins - 1)
    key = idx * 3 + v.astype(np.int64)
    count = np.bincount(key, minlength=bins * 3)
    total = np.bincount(key, weights=size, minlength=bins * 3)
    largest = group_max(key, size, bins * 3)
    hit = np.flatnonzero(count)
    agg = pd.DataFrame(
        {
            "x": lo + (hit // 3 + 0.5) * step,
            "verdict": names[hit % 3],
            "max": largest[hit],
            "mean": total[hit] / count[hit],
            "n": count[hit],
        }
    )
    agg = agg.rename(columns={"count": "n"})
    return agg[["x", "verdict", "max", "mean", "n"]], kind, True


def timeline_figure(
    batches: pd.DataFrame, ceiling: int | None, axis: TimeAxis | None = None
) -> Spec | None:
    """Batch size over time, coloured graph / eager, with the ceiling as a line; x is the
    run's shared time axis (the KV timeline uses the same one)."""
    table, kind, binned = timeline_table(batches)
    if table.empty:
        return None
    if kind != "time":
        axis = TimeAxis("sequence")
    elif axis is None:
        axis = time_axis([table["x"].to_numpy()])
    fig = Spec()
    for verdict in VERDICTS:
        part = table[table["verdict"] == verdict]
        if part.empty:
            continue
        xs = axis.x(part["x"].to_numpy())
        if binned:
            custom = np.column_stack([part["mean"].to_numpy(), part["n"].to_numpy()])
            hover = (
                "largest %{y:.0f}, mean %{customdata[0]:.1f}<br>%{customdata[1]:,.0f} batches in bin"
                "<extra>" + LABELS[verdict] + "</extra>"
            )
            fig.add_trace(
                {
                    "type": "scatter",
                    "x": xs,
                    "y": part["max"].to_numpy(),
                    "mode": "markers",
                    "name": LABELS[verdict],
                    "marker": {"color": COLORS[verdict], "size": 4},
                    "customdata": custom,
                    "hovertemplate": hover,
                }
            )
        else:
            fig.add_trace(
                {
                    "type": "scatter",
                    "x": xs,
                    "y": part["max"].to_numpy(),
                    "mode": "markers",
                    "name": LABELS[verdict],
                    "marker": {"color": COLORS[verdict], "size": 6, "opacity": 0.85},
                    "hovertemplate": "batch size %{y:.0f}<extra>" + LABELS[verdict] + "</extra>",
                }
            )
    if ceiling:
        fig.add_hline(
            y=ceiling,
            line={"color": pal.BLUISH_GREEN, "dash": "dash", "width": 1.5},
            annotation_text=f"ceiling {ceiling}",
            annotation_font_color=pal.TEXT_GREEN,
        )
    title = "Decode batch size over time"
    if binned:
        title += " (binned: each point is the largest batch of its bin)"
    axis.apply(fig)
    if axis.kind == "sequence":
        fig.update_xaxes(title_text="decode batch # (the log has no timestamps)")
    fig.update_yaxes(title_text="batch size (running requests)")
    integer_ticks(fig, max(float(table["max"].max()), float(ceiling or 0)))
    return finish_axes(layout(fig, title))
