"""Axis rules every report figure follows, and the one time axis a run's figures share.

- :func:`finish_axes` is the last call of every figure builder: ticks, tick labels and a
  line on every axis, and it raises when an axis that shows labels has no title (title =
  what is measured and its unit), so no figure can ship without one. Every subplot of a
  shared-x stack shows its x tick labels; the upper ones ``match`` the bottom axis, whose
  title names them all.
- :func:`wants_table`: fewer than :data:`MIN_CHART_POINTS` observations read better as a
  small table than as a chart (two batches are two rows, not one full-width bar).
- :func:`time_axis`: wall clock when the log carries the year, else time since the run's
  first sample (vLLM prints ``MM-DD hh:mm:ss``: drawing it as a date says "2000"). The date
  goes in the axis title, never on a second tick line (that line is what got clipped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from diag.render.figspec import Spec

if TYPE_CHECKING:  # pragma: no cover  (plotly loads only for the HTML page: figspec.py)
    import plotly.graph_objects as go

MIN_CHART_POINTS = 20
#: normalisation places year-less stamps (vLLM) in this year (diag.normalize.prefix.NO_YEAR;
#: render does not import normalize, the number is the contract between them)
NO_YEAR = 2000
MIN_SPAN_S = 10.0  # a time axis never spans less: two batches 0.5 ms apart stay two dots

YearSource = Literal["log", "mtime", "unknown"]


_FINISH = {
    "ticks": "outside",
    "showline": True,
    "linecolor": "#ced4da",
    "gridcolor": "#f1f3f5",
    "zeroline": False,
    "automargin": True,
}

F = TypeVar("F", "go.Figure", Spec)


def finish_axes(fig: F) -> F:
    """Ticks, labels and a line on every visible axis; a title on every labelled one."""
    if isinstance(fig, Spec):
        for name in fig.axis_names():
            ax = fig.layout[name]
            if ax.get("visible") is False:
                continue
            ax.update(_FINISH)
            if ax.get("showticklabels") is False:
                continue
            ax["showticklabels"] = True
            if ax.get("matches"):  # titled by the axis it matches
                continue
            if not str((ax.get("title") or {}).get("text") or "").strip():
                raise ValueError(f"{name} has no title: say what is measured and its unit")
        return fig
    for ax in [*fig.select_xaxes(), *fig.select_yaxes()]:
        if ax.visible is False:
            continue
        ax.update(_FINISH)
        if ax.showticklabels is False:
            continue
        ax.update(showticklabels=True)
        if ax.matches:
            continue
        if not (ax.title and ax.title.text and str(ax.title.text).strip()):
            raise ValueError(f"{ax.plotly_name} has no title: say what is measured and its unit")
    return fig


def integer_ticks(fig: go.Figure | Spec, top: float, **where: Any) -> None:
    """Counts are whole: ``,d`` labels, and one tick per unit when the axis is short (plotly
    would put ticks at 0.25 steps and print 0, 0, 1, 1)."""
    fig.update_yaxes(tickformat=",d", rangemode="tozero", **where)
    if np.isfinite(top) and top <= 6:
        fig.update_yaxes(tick0=0, dtick=1, range=[0, max(1.0, float(top)) * 1.08], **where)


def wants_table(n_points: int) -> bool:
    return n_points < MIN_CHART_POINTS


def figure_height(fig: go.Figure | Spec) -> int:
    """The div gets exactly this height (no CSS min-height band under short figures)."""
    return fig.height if isinstance(fig, Spec) else int(fig.layout.height or 340)


# ------------------------------------------------------------------ time axis
Clock = Literal["wall", "elapsed", "sequence"]


@dataclass(frozen=True)
class TimeAxis:
    """How one run's time is drawn; every time-based figure of the run uses the same one."""

    kind: Clock
    t0: float | None = None  # epoch seconds of the run's first sample
    t1: float | None = None
    divisor: float = 1.0  # elapsed seconds -> unit
    unit: str = "s"

    def x(self, ts: np.ndarray) -> list[str] | np.ndarray:
        ts = np.asarray(ts, dtype="float64")
        if self.kind == "wall":
            return iso_stamps(ts)
        if self.kind == "elapsed":
            assert self.t0 is not None
            return (ts - self.t0) / self.divisor
        return ts

    def label(self, t: float) -> str:
        """One sample's time for a small table, in the axis' own terms."""
        if not np.isfinite(t) or self.t0 is None:
            return ""
        if self.kind == "wall":
            return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%H:%M:%S")
        return f"+{(t - self.t0) / self.divisor:,.1f} {self.unit}"

    def origin(self) -> str:
        """What the small tables' time column counts from, in words."""
        if self.kind == "sequence" or self.t0 is None:
            return "sample number (the log has no timestamps)"
        start = datetime.fromtimestamp(self.t0, tz=timezone.utc)
        if self.kind == "wall":
            return f"time as logged, {start.strftime('%Y-%m-%d')}"
        return f"time since {start.strftime('%m-%d %H:%M:%S')} (the log prints no year)"

    def _range(self) -> list[Any] | None:
        if self.t0 is None or self.t1 is None:
            return None
        lo, hi = self.t0, self.t1
        if hi - lo < MIN_SPAN_S and self.kind == "elapsed":
            hi = lo + MIN_SPAN_S  # time since the first sample never runs below zero
        elif hi - lo < MIN_SPAN_S:
            mid = (lo + hi) / 2
            lo, hi = mid - MIN_SPAN_S / 2, mid + MIN_SPAN_S / 2
        pad = (hi - lo) * 0.03
        lo, hi = lo - pad, hi + pad
        if self.kind == "wall":
            return [_iso(lo), _iso(hi)]
        return [(lo - self.t0) / self.divisor, (hi - self.t0) / self.divisor]

    def apply(self, fig: go.Figure | Spec, rows: int = 1) -> None:
        """Set type, format, range on every x axis and the title on the bottom one."""
        if self.kind == "sequence":
            fig.update_xaxes(type="linear")
            title = "sample # (the log has no timestamps)"
        else:
            assert self.t0 is not None and self.t1 is not None
            start = datetime.fromtimestamp(self.t0, tz=timezone.utc)
            end = datetime.fromtimestamp(self.t1, tz=timezone.utc)
            if self.kind == "wall":
                multi_day = end.date() != start.date()
                days = start.strftime("%Y-%m-%d") + (
                    " to " + end.strftime("%Y-%m-%d") if multi_day else ""
                )
                fig.update_xaxes(
                    type="date",
                    tickformat="%m-%d %H:%M" if multi_day else "%H:%M:%S",
                    hoverformat="%Y-%m-%d %H:%M:%S.%L",
                    range=self._range(),
                )
                title = f"time as logged, {days}"
            else:
                fig.update_xaxes(type="linear", ticksuffix=f" {self.unit}", range=self._range())
                title = (
                    f"time since {start.strftime('%m-%d %H:%M:%S')} ({self.unit}; "
                    "the log prints no year)"
                )
        if rows > 1:
            fig.update_xaxes(title_text=title, row=rows, col=1)
        else:
            fig.update_xaxes(title_text=title)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(float(t), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def iso_stamps(ts: np.ndarray) -> list[str]:
    """``[_iso(t) for t in ts]`` in bulk (a chart's x of thousands of points): epoch seconds
    rounded to the microsecond, cut to milliseconds, UTC. A missing stamp gives ``""``
    (where ``_iso`` raises)."""
    ts = np.asarray(ts, dtype="float64")
    if ts.size == 0:
        return []
    finite = np.isfinite(ts)
    ts = np.where(finite, ts, 0.0)
    whole = np.floor(ts)  # as CPython does: the fraction alone is scaled and rounded half-even
    micro = (
        whole.astype("int64") * 1_000_000 + np.round((ts - whole) * 1e6).astype("int64")
    ).astype("datetime64[us]")
    text = np.datetime_as_string(micro, unit="us").astype("<U23")  # ...T12:34:56.789
    out = np.char.replace(text, "T", " ")
    return np.where(finite, out, "").tolist()


def year_in_stamps(ts: np.ndarray) -> bool:
    """Fallback while no year fact exists: year-less stamps all sit in :data:`NO_YEAR`."""
    ts = np.asarray(ts, dtype="float64")
    ts = ts[np.isfinite(ts)]
    if ts.size == 0:
        return False
    years = {datetime.fromtimestamp(float(t), tz=timezone.utc).year for t in (ts.min(), ts.max())}
    return years != {NO_YEAR}


def time_axis(ts_columns: Sequence[np.ndarray], year_source: str | None = None) -> TimeAxis:
    """One axis for all the run's time series (batches, stats, retractions): the union of
    their stamps sets the range and the origin, so the panels line up.

    ``year_source`` is the run's fact: ``log`` (a dated line or wrapper gave the year) draws
    wall-clock time; ``mtime`` (the year was taken from the file's modification time, which
    is when a file was copied as often as when it was written) and ``unknown`` draw time since
    the first sample, whose month, day and time the title gives. Without the fact the stamps
    decide (year :data:`NO_YEAR` = not printed).
    """
    parts = [np.asarray(c, dtype="float64") for c in ts_columns if c is not None and len(c)]
    allts = np.concatenate(parts) if parts else np.array([])
    finite = allts[np.isfinite(allts)]
    if finite.size == 0 or finite.size < 0.5 * allts.size:
        return TimeAxis("sequence")
    t0, t1 = float(finite.min()), float(finite.max())
    known = year_source == "log" if year_source is not None else year_in_stamps(finite)
    if known:
        return TimeAxis("wall", t0, t1)
    span = t1 - t0
    if span >= 3 * 3600:
        return TimeAxis("elapsed", t0, t1, 3600.0, "h")
    if span >= 15 * 60:
        return TimeAxis("elapsed", t0, t1, 60.0, "min")
    return TimeAxis("elapsed", t0, t1, 1.0, "s")
