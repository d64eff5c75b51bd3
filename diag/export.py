"""Event-table export for users' own analysis (jsonl, csv; Parquet in export_parquet).

Besides the raw event kinds, every export holds ``decode_step``: one row per decode step
of every engine as the report counts it (the run's classify frame, diag.facts.classify):
SGLang's ``Decode batch`` lines, vLLM's DEBUG step lines, ``--cudagraph-metrics`` rows
(``weight`` = the row's count) and, where vLLM logged no step, its stats intervals
(batch size = running requests, verdict inferred from the bucket list). ``step_source``
says which; ``cuda_graph`` is true / false where the step is decided, null where not, so
``sum(weight)`` per ``cuda_graph`` gives the report's graph / eager counts.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import IO, Literal

import numpy as np
import pandas as pd

from diag.artifacts.trace import step_table
from diag.events import COMMON_COLUMNS, EventTables
from diag.facts.record import build_facts
from diag.facts.runs import Run, split_runs
from diag.facts.steps import ORIGINS
from diag.ingest import Ingested

STEP_KIND = "decode_step"

#: where a decode step was read: the parsers' own origin names (diag.parsers: SGLang's
#: decode line, vLLM's debug_step and metrics_table rows of graph_step, stats intervals,
#: iteration lines)
StepSource = Literal["decode_line", "debug_step", "metrics_table", "stats_interval", "iteration"]

#: the decode_step columns and their types, the one declaration the Parquet schema and the
#: jsonl/csv rows follow (int / float / bool / str; missing values are null)
STEP_COLUMNS: dict[str, str] = {
    "source": "str",
    "line": "int",
    "ts": "float",
    "rank": "str",
    "batch_size": "int",
    "weight": "int",
    "cuda_graph": "bool",
    "verdict": "str",
    "reason": "str",
    "logged": "bool",
    "step_source": "str",
    "bucket": "int",
    "padded": "int",
}


def _step_sources(run: Run, batches: pd.DataFrame) -> np.ndarray:
    """Each classify row's :data:`StepSource`: its origin, and for graph_step rows the
    origin the vLLM parser gave that line (a DEBUG step or a metrics-table row)."""
    names = np.asarray(ORIGINS, dtype=object)[batches["origin"].cat.codes.to_numpy()]
    steps = run.tables["graph_step"]
    is_step = names == "graph_step"
    if is_step.any() and not steps.empty:
        by_line = (
            steps[["source", "line", "origin"]]
            .astype({"source": str})
            .drop_duplicates(["source", "line"])
            .set_index(["source", "line"])["origin"]
        )
        keys = pd.MultiIndex.from_arrays(
            [batches["source"].astype(str)[is_step], batches["line"].to_numpy()[is_step]]
        )
        names[is_step] = by_line.reindex(keys).astype(object).fillna("debug_step").to_numpy()
    return names


def _whole(values: pd.Series | np.ndarray) -> pd.Series:
    """Floats that hold whole numbers (or NaN) as nullable Int64."""
    return pd.Series(np.asarray(values, dtype="float64")).round().astype("Int64")


def decode_steps(run: Run, batches: pd.DataFrame | None = None) -> pd.DataFrame:
    """The run's decode steps as :data:`STEP_COLUMNS` (``batches``: its classify frame,
    built here when not given)."""
    if batches is None:
        batches = build_facts(run).batches
    if batches.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in STEP_COLUMNS})
    verdict = batches["verdict"].astype(str).to_numpy()
    graph = pd.array(np.where(verdict == "graph", True, False), dtype="boolean")
    graph[verdict == "unknown"] = pd.NA
    return pd.DataFrame(
        {
            "source": batches["source"].astype(str).to_numpy(),
            "line": _whole(batches["line"].to_numpy(dtype="float64", na_value=np.nan)),
            "ts": batches["ts"].to_numpy(dtype="float64", na_value=np.nan),
            "rank": batches["rank"].astype(object).to_numpy(),
            "batch_size": _whole(batches["batch_size"]),
            "weight": _whole(batches["weight"]),
            "cuda_graph": graph,
            "verdict": verdict,
            "reason": batches["reason"].astype(str).to_numpy(),
            "logged": batches["logged"].to_numpy(dtype=bool),
            "step_source": _step_sources(run, batches),
            "bucket": _whole(batches["bucket"]),
            "padded": _whole(batches["padded"]),
        }
    )


def runs_of(ing: Ingested) -> list[Run]:
    return split_runs(ing.tables, ing.streams)


def long_rows(ing: Ingested) -> pd.DataFrame:
    """All events in one frame (kind, source, line, ts, rank, instance and a JSON 'data'
    column), the decode steps of every run included as kind ``decode_step``; the profiled
    steps of torch-profiler traces follow as kind ``trace_step`` (source: the trace, ts: the
    step's start in epoch seconds where the trace has it)."""
    steps = [decode_steps(run) for run in runs_of(ing)]
    steps = [s for s in steps if not s.empty]
    frame = ing.tables.long()
    if steps:
        extra = EventTables({STEP_KIND: pd.concat(steps, ignore_index=True).assign(instance=None)})
        frame = pd.concat([frame, extra.long([STEP_KIND])], ignore_index=True)
        frame = frame.sort_values(["source", "line"], kind="stable").reset_index(drop=True)
    traced = step_table(ing.traces)
    if traced.empty:
        return frame
    data = traced.drop(columns=["trace", "rank", "epoch_s"])
    rows = pd.DataFrame(
        {
            "kind": "trace_step",
            "source": traced["trace"],
            "line": pd.array([None] * len(traced), dtype="Int64"),
            "ts": traced["epoch_s"],
            "rank": traced["rank"].astype(object).where(traced["rank"].notna(), None),
            "data": [
                json.dumps({k: _plain(v) for k, v in r.items()}) for r in data.to_dict("records")
            ],
        }
    )
    return pd.concat([frame, rows.reindex(columns=frame.columns)], ignore_index=True)


def export_events(
    ing: Ingested, fmt: Literal["jsonl", "csv"], output: str | None
) -> dict[str, int]:
    """Write the long table to ``output`` (stdout: None); the rows written per kind."""
    frame = long_rows(ing)
    fh: IO[str] = open(output, "w", encoding="utf-8", newline="") if output else sys.stdout  # noqa: SIM115
    try:
        if fmt == "csv":
            frame.to_csv(fh, index=False)
        else:
            for rec in _records(frame):
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    finally:
        if output:
            fh.close()
    return {str(k): int(n) for k, n in frame["kind"].value_counts(sort=False).items()}


def _records(frame: pd.DataFrame) -> Iterator[dict[str, object]]:
    for row in frame.itertuples(index=False):
        rec = {"kind": row.kind, **{c: _plain(getattr(row, c)) for c in COMMON_COLUMNS}}
        rec.update(json.loads(row.data))
        yield rec


def _plain(v: object) -> object:
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and v != v:
        return None
    return v.item() if hasattr(v, "item") else v
