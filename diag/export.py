"""Event-table export for users' own analysis (jsonl, csv, Parquet)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO

import pandas as pd

from diag.artifacts.trace import step_table
from diag.events import COMMON_COLUMNS
from diag.ingest import Ingested


def long_rows(ing: Ingested) -> pd.DataFrame:
    """All events in one frame: kind, source, line, ts, rank and a JSON 'data' column; the
    profiled steps of torch-profiler traces follow as kind ``trace_step`` (source: the
    trace, ts: the step's start in epoch seconds where the trace has it)."""
    frame = ing.tables.long()
    steps = step_table(ing.traces)
    if steps.empty:
        return frame
    data = steps.drop(columns=["trace", "rank", "epoch_s"])
    rows = pd.DataFrame(
        {
            "kind": "trace_step",
            "source": steps["trace"],
            "line": pd.array([None] * len(steps), dtype="Int64"),
            "ts": steps["epoch_s"],
            "rank": steps["rank"].astype(object).where(steps["rank"].notna(), None),
            "data": [
                json.dumps({k: _plain(v) for k, v in r.items()}) for r in data.to_dict("records")
            ],
        }
    )
    return pd.concat([frame, rows.reindex(columns=frame.columns)], ignore_index=True)


def export_events(ing: Ingested, fmt: str, output: str | None) -> None:
    if fmt == "parquet":
        from diag.export_parquet import write_parquet

        assert output is not None
        write_parquet(ing, Path(output))
        return
    frame = long_rows(ing)
    fh: IO[str] = open(output, "w", encoding="utf-8", newline="") if output else sys.stdout  # noqa: SIM115
    try:
        if fmt == "csv":
            frame.to_csv(fh, index=False)
        else:
            for row in frame.itertuples(index=False):
                rec = {"kind": row.kind, **{c: _plain(getattr(row, c)) for c in COMMON_COLUMNS}}
                rec.update(json.loads(row.data))
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    finally:
        if output:
            fh.close()


def _plain(v: object) -> object:
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float) and v != v:
        return None
    return v.item() if hasattr(v, "item") else v
