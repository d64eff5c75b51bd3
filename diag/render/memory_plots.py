"""Memory plots: the GPU memory budget (logs and snapshots) and capture time per rank.

Like :mod:`diag.render.plots`, these only read tables and records computed before them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from diag.model import GIB, Snapshot
from diag.render import palette as pal
from diag.render.axes import finish_axes
from diag.render.figspec import Spec
from diag.render.plots import MEMORY_COLORS, layout, plot_text
from diag.report import RunRecord


# ------------------------------------------------------------------ memory budget
def memory_budget_rows(
    sizing: pd.DataFrame,
    record: RunRecord | None,
    capture_end: pd.DataFrame,
    snapshots: Iterable[Snapshot] = (),
) -> list[tuple[str, dict[str, float]]]:
    """The GPU memory split as printed by the logs (rank 0), plus one row per snapshot.

    Only figures the inputs show are used; nothing is derived by subtraction except the
    vLLM reserve ``total x (1 - gpu_memory_utilization)``, which both numbers define.
    """

    def size(name: str) -> float | None:
        if sizing is None or sizing.empty:
            return None
        part = sizing[sizing["name"] == name]
        if "rank" in part and not part.empty:
            r0 = part[part["rank"].map(is_rank0).astype(bool)]
            part = r0 if not r0.empty else part
        vals = pd.to_numeric(part["value"], errors="coerce").dropna()
        return float(vals.iloc[-1]) if not vals.empty else None

    logs: dict[str, float] = {}
    weights = size("weights_gib")
    if weights is not None:
        logs["weights"] = weights
    kv = (
        record.kv_cache_gib
        if record is not None and record.kv_cache_gib is not None
        else size("kv_cache_gib")
    )
    if kv is not None:
        logs["KV cache pool"] = float(kv)
    graph = record.capture_mem_gib if record is not None else None
    if graph is None:
        graph = size("graph_pool_actual_gib") or size("graph_mem_actual_gib")
    if graph is not None:
        logs["CUDA graph capture"] = float(graph)
    else:
        est = size("graph_mem_est_gib")
        if est is not None:
            logs["CUDA graph capture (estimated)"] = est
    for name, label in (("activation_peak_gib", "activation peak"), ("non_torch_gib", "non-torch")):
        v = size(name)
        if v is not None:
            logs[label] = v
    free = None
    if capture_end is not None and not capture_end.empty and "avail_mem_gib" in capture_end:
        part = (
            capture_end[capture_end["rank"].map(is_rank0).astype(bool)]
            if "rank" in capture_end
            else capture_end
        )
        vals = pd.to_numeric(
            (part if not part.empty else capture_end)["avail_mem_gib"], errors="coerce"
        ).dropna()
        free = float(vals.iloc[-1]) if not vals.empty else None
    if free is None:
        free = size("available_gpu_mem_gib")
    if free is not None:
        logs["free after capture"] = free
    total, util = size("total_gpu_memory_gib"), size("gpu_memory_utilization")
    if total is not None and util is not None and 0 < util < 1:
        logs["reserve (1 - gpu_memory_utilization)"] = total * (1 - util)
    out: list[tuple[str, dict[str, float]]] = []
    if logs:
        out.append(("logs (rank 0)", logs))
    oom = oom_row(record)
    if oom is not None:
        out.append(oom)
    for snap in snapshots:
        pools: dict[str, float] = {}
        for pool in snap.pools:  # labels in the order the pools come
            if pool.kind == "graph":
                pools["graph pool"] = snap.graph_pool_bytes / GIB
            else:
                pools["default pool"] = snap.default_pool_bytes / GIB
        if pools:
            name = snap.path.replace("\\", "/").rsplit("/", 1)[-1]
            out.append((f"snapshot {name}", pools))
    return out


#: the parts of a capture OOM's row, as torch's message names them
OOM_PARTS = ("in use by this process", "free at the OOM", "allocation that failed")


def oom_row(record: RunRecord | None) -> tuple[str, dict[str, float]] | None:
    """A capture OOM's own figures (the process's memory in use, what was free, the
    allocation that failed), where the error message prints them."""
    err = record.capture_error if record is not None else None
    figs = err.oom if err is not None else None
    if err is None or figs is None or not figs.any():
        return None
    parts = {
        name: v
        for name, v in zip(OOM_PARTS, (figs.in_use_gib, figs.free_gib, figs.tried_gib), strict=True)
        if v is not None
    }
    gpu = f"GPU {figs.gpu}" if figs.gpu is not None else "GPU"
    return (f"capture OOM, {gpu} (line {err.line})", parts)


def oom_capacity(record: RunRecord | None) -> float | None:
    err = record.capture_error if record is not None else None
    figs = err.oom if err is not None else None
    return figs.capacity_gib if figs is not None else None


def is_rank0(rank: Any) -> bool:
    if not rank or not isinstance(rank, str):
        return True
    return all(int(n) == 0 for n in re.findall(r"\d+", rank))


def memory_figure(
    rows: Sequence[tuple[str, Mapping[str, float]]], capacity_gib: float | None = None
) -> Spec | None:
    """Horizontal stacked bars, one per source (logs, each snapshot, a capture OOM's
    message), in GiB; the GPU's capacity a line where the OOM message prints it."""
    rows = [(label, parts) for label, parts in rows if parts]
    if not rows:
        return None
    fig = Spec()
    components: list[str] = []
    for _, parts in rows:
        components += [c for c in parts if c not in components]
    ylabels = [plot_text(label if len(label) <= 48 else label[:45] + "…") for label, _ in rows]
    for comp in components:
        values = [parts.get(comp) for _, parts in rows]
        fig.add_trace(
            dict(
                type="bar",
                y=ylabels,
                x=[v if v is not None else 0 for v in values],
                orientation="h",
                name=comp,
                marker={"color": MEMORY_COLORS.get(comp, pal.LIGHT_GREY)},
                text=[f"{v:.2f}" if v else "" for v in values],
                textposition="inside",
                hovertemplate="%{x:.2f} GiB<extra>" + comp + "</extra>",
            )
        )
    if capacity_gib is not None:
        fig.add_vline(x=capacity_gib, line={"color": pal.NEAR_BLACK, "dash": "dash", "width": 1.5})
        fig.add_annotation(
            x=capacity_gib,
            y=1.0,
            xref="x",
            yref="paper",
            yanchor="top",
            xanchor="right",
            showarrow=False,
            text=plot_text(f"GPU capacity {capacity_gib:.2f} GiB"),
            font={"size": 11, "color": pal.NEAR_BLACK},
        )
    fig.update_xaxes(title_text="GPU memory (GiB)", rangemode="tozero")
    fig.update_yaxes(autorange="reversed", title_text="source")
    layout(fig, "GPU memory budget", height=170 + 60 * len(rows), barmode="stack")
    return finish_axes(fig)


def components(rows: Sequence[tuple[str, Mapping[str, float]]]) -> int:
    """How many distinct parts the budget has: one part is a sentence, not a composition."""
    return len({c for _, parts in rows for c in parts})


# ------------------------------------------------------------------ capture per rank
#: the capture_end ``phase`` the parsers write (diag.parsers: vLLM's "all" for a capture of
#: every graph set, SGLang's decode / verify / draft kinds), in words for captions and legends
CAPTURE_PHASE_WORDS = {
    "all": "every graph set",
    "decode": "decode graphs",
    "mixed": "mixed-batch graphs",
    "metrics": "graph sets",
    "verify": "verify graphs",
    "prefill": "prefill graphs",
    "piecewise": "piecewise graphs",
    "draft": "draft graphs",
    "draft_extend": "draft-extend graphs",
    "draft_verify": "draft verify graphs",
    "draft_prefill": "draft prefill graphs",
}


def phase_words(phase: object) -> str:
    """A capture phase as the captions say it ("capture" where the log names none)."""
    if phase is None or phase is pd.NA or (isinstance(phase, float) and phase != phase):
        return "capture"
    text = str(phase)
    return CAPTURE_PHASE_WORDS.get(text, f"{text} graphs") if text else "capture"


def capture_time_figure(capture_end: pd.DataFrame) -> Spec | None:
    """Capture duration per rank and phase (memory taken in the hover)."""
    if capture_end is None or capture_end.empty or "time_s" not in capture_end:
        return None
    f = capture_end.copy()
    f["time_s"] = pd.to_numeric(f["time_s"], errors="coerce")
    f = f[f["time_s"].notna()]
    if f.empty:
        return None
    f["rank"] = f["rank"].astype("object").fillna("").map(lambda r: r or "(no rank)")
    f["phase"] = f["phase"].map(phase_words) if "phase" in f else "capture"
    mem = (
        pd.to_numeric(f["mem_gib"], errors="coerce")
        if "mem_gib" in f
        else pd.Series(np.nan, index=f.index)
    )
    f["mem_gib"] = mem
    f = (
        f.groupby(["rank", "phase"], sort=False)
        .agg(time_s=("time_s", "last"), mem_gib=("mem_gib", "last"))
        .reset_index()
    )
    ranks = sorted(f["rank"].unique(), key=natural_key)
    fig = Spec()
    for i, (phase, part) in enumerate(f.groupby("phase", sort=True)):
        part = part.set_index("rank").reindex(ranks)
        fig.add_trace(
            dict(
                type="bar",
                x=[plot_text(r) for r in ranks],
                y=part["time_s"].to_numpy(),
                name=plot_text(phase),
                marker={"color": pal.SERIES[i % len(pal.SERIES)]},
                customdata=part["mem_gib"].to_numpy(),
                hovertemplate="%{y:.2f} s, %{customdata:.2f} GiB<extra>"
                + plot_text(phase)
                + "</extra>",
            )
        )
    fig.update_yaxes(title_text="capture time (s)", rangemode="tozero")
    fig.update_xaxes(title_text="rank", type="category")
    layout(fig, "Capture time per rank", height=300, barmode="group")
    return finish_axes(fig)


def natural_key(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))
