"""Capture cost per phase and the KV pool in tokens, as the logs show them (facts layer)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from diag.engines import EngineConfig, spec_for
from diag.engines.config import as_count as _as_int
from diag.events import EventTables
from diag.facts.access import Row, _first, col, missing, orders, rank0_rows, records, sizing
from diag.model import headline

# capture phases by what they serve: the record's capture_time_s / capture_mem_gib are the
# decode graphs' (what --disable-cuda-graph on a prefill node recovers, what bucket advice
# prices); piecewise prefill and draft captures get their own fields in the run JSON
CAPTURE_PHASE_GROUPS = {
    "decode": ("decode", "verify", "all", "mixed", "metrics"),
    "piecewise": ("prefill",),
    "draft": ("draft", "draft_extend", "draft_verify", "draft_prefill"),
}


def _capture_totals(
    tables: EventTables, group: str = "decode"
) -> tuple[float | None, float | None]:
    # phase first, then rank 0 of that phase (a draft model may capture on another rank only)
    ends = rank0_rows(capture_rows(tables["capture_end"], group))
    # several ranks' or several decode captures (e.g. one per graph backend) add up
    return summed([e["time_s"] for e in ends]), summed([e["mem_gib"] for e in ends])


def capture_rows(ends: pd.DataFrame, group: str = "decode") -> list[Row]:
    """The capture-end rows of a phase group (a row naming no phase is a decode capture's),
    read from the run's shared rows."""
    phases = CAPTURE_PHASE_GROUPS[group]
    return [e for e in records(ends) if ("decode" if missing(e["phase"]) else e["phase"]) in phases]


def summed(values: list[Any]) -> float | None:
    """The sum of the known values to 3 places (None: none known), summed as pandas sums a
    column (numpy's pairwise sum, so the figure is the same to the last bit)."""
    known = np.asarray(values, dtype=float)
    known = known[~np.isnan(known)]
    return round(float(known.sum()), 3) if len(known) else None


def _kv_tokens(tables: EventTables) -> int | None:
    v = _first(sizing(tables, "kv_tokens"), sizing(tables, "max_total_num_tokens"))
    return _as_int(v)


def kv_tokens_with_source(
    tables: EventTables, config: EngineConfig, backend: str
) -> tuple[int | None, str | None]:
    """The KV pool in tokens and how it is known: printed, or GPU blocks x block size where
    the engine prints only blocks (vLLM V0 "# GPU blocks: N")."""
    printed = _kv_tokens(tables)
    if printed is not None:
        return printed, "logged"
    blocks = _as_int(sizing(tables, "gpu_blocks"))
    spec = spec_for(backend)
    if blocks is None or spec is None or spec.default_block_size is None:
        return None, None
    size = config.block_size
    if size is not None:
        return blocks * size, f"derived: {blocks} GPU blocks x block_size {size} (config echo)"
    size = spec.default_block_size
    return blocks * size, (
        f"derived: {blocks} GPU blocks x block_size {size} ({spec.name} default; "
        "the log does not echo block_size)"
    )


def captured_size_count(tables: EventTables) -> int | None:
    """How many decode sizes were captured, from size-list counts or tqdm totals."""
    counts: list[int] = []
    for kind, column in (("capture_sizes", "count"), ("capture_progress", "total")):
        frame = tables[kind]
        if len(frame) > 0:  # (two columns read: not a filtered frame per kind)
            phases, values = col(frame, "phase").tolist(), col(frame, column).tolist()
            counts += [
                int(c)
                for p, c in zip(phases, values, strict=True)
                if p != "prefill" and not missing(c)
            ]
    return max(counts) if counts else None


_BEGUN = ("capture_begin", "capture_progress")
_SERVING = ("decode_batch", "prefill_batch", "stats", "graph_step")


def unfinished_capture(tables: EventTables) -> str | None:
    """A note when the log ends inside a capture: a capture began, and after its last begin
    or progress line nothing says it ended (no end line, no complete progress bar, no
    serving line), and no capture error was placed. Never silent: such a log is either a
    capture that stopped without words graphdiag can read (the error cut off, a killed
    process) or an excerpt cut during capture; either way the run has no capture figures."""

    def order(kind: str) -> np.ndarray:
        frame = tables[kind]
        if len(frame) == 0:
            return np.zeros(0, np.int64)
        return orders(frame)

    begun = []  # (latest order key, kind rank: progress over begin on one line, last such row)
    for rank, kind in enumerate(_BEGUN):
        if len(o := order(kind)):
            begun.append((int(o.max()), rank, len(o) - 1 - int(np.argmax(o[::-1]))))
    if not begun:
        return None
    last, rank, row_at = max(begun)
    kind = _BEGUN[rank]
    row = records(tables[kind])[row_at]  # (a row of a mixed frame via iloc: ~0.3 ms)
    if kind == "capture_progress" and _as_int(row.get("done")) is not None:
        total = _as_int(row.get("total"))
        if total is not None and _as_int(row.get("done")) == total:
            return None  # the bar reached its total: the last size was captured
    for later in ("capture_end", *_SERVING):  # (whole columns: millions of serving lines)
        if len(o := order(later)) and int(o.max()) > last:
            return None
    phase = row.get("phase")
    what = f"{phase} capture" if isinstance(phase, str) and phase else "capture"
    return (
        f"{what} began (line {int(row['line'])} of {row['source']}) and the log ends before it "
        "finished: no end of capture, no serving line and no error graphdiag can place after "
        "it (a capture that stopped without a readable error, or a log cut during capture)"
    )


def first_root_error(errors: pd.DataFrame) -> int:
    """The position of the run's first root error: a whole error before a traceback cut
    before its exception line, both before a follow-on report or a process's summary line
    ("EngineCore failed to start.", errors marked ``secondary``); the earliest of a rank."""
    order = errors["_order" if "_order" in errors.columns else "line"].to_numpy(np.int64)
    secondary = errors["secondary"].fillna(False).astype(bool).to_numpy()
    cut = errors["reason"].notna().to_numpy()
    rank = np.where(secondary, 2, np.where(cut, 1, 0))
    return int(np.lexsort((order, rank))[0])


def unplaced_error(tables: EventTables) -> str | None:
    """A note for a run with errors but no capture error: the first error, and why it is not
    read as one (its phase), so a traceback in the log is never passed over in silence."""
    errors = tables["error"]
    if len(errors) == 0:
        return None
    row = records(errors)[first_root_error(errors)]  # (not a row via iloc: ~0.3 ms)
    phase = next(
        (p for p in (row.get("phase"), row.get("log_phase")) if isinstance(p, str) and p),
        None,
    )
    where = f"placed in {phase.replace('_', ' ')}" if phase else "in no phase the log shows"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    message = headline(str(row["message"]))
    return (
        f"an error at line {int(row['line'])} of {row['source']}{more} is not read as a capture "
        f"error, {where}: {message}"
    )
