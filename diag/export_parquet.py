"""Event tables as Parquet, laid out for fleet-wide questions in DuckDB or Spark.

Layout (one hive-partitioned dataset per event kind, since kinds have different columns)::

    DIR/<kind>/run=<run id, sanitised>/part-0.parquet    e.g. DIR/decode_batch/run=node1.log_1/
    DIR/decode_step/run=<run id>/part-0.parquet           every engine's decode steps
    DIR/runs/part-0.parquet                               one row per run
    DIR/trace_step/part-0.parquet                         one row per profiled step of the
                                                          torch-profiler traces (trace, rank,
                                                          diag.artifacts.trace.STEP_COLUMNS)

Every event row has the kind's columns (``diag.events.EVENT_KINDS``: source, line, ts,
rank, instance, then the kind's fields) plus ``run_id`` (the run id as in the JSON report)
and ``node`` (the server the run belongs to: the stream's file stem, ``x`` for a rotated
``x.log``/``x.log.1``, or the compose/k8s instance when one file interleaves several
servers). The hive key ``run`` is the run id with every character outside
``[A-Za-z0-9._-]`` replaced by ``_``. Column types are fixed per kind (int64, double,
boolean, string; JSON fields as string), so partitions written by different runs of
graphdiag read back as one table. ``ts`` is seconds since the epoch (``to_timestamp(ts)``
in DuckDB). Existing ``DIR/<kind>``, ``DIR/decode_step`` and ``DIR/runs`` folders are
replaced.

``decode_step`` (diag.export) holds the decode steps of SGLang and vLLM alike, as the report
counts them, ``weight`` steps a row (a metrics-table row stands for its count)::

    SELECT node, sum(weight) AS decode_steps,
           sum(CASE WHEN cuda_graph THEN 0 ELSE weight END) / sum(weight) AS eager_share
    FROM read_parquet('DIR/decode_step/*/*.parquet', hive_partitioning = true)
    WHERE cuda_graph IS NOT NULL GROUP BY node ORDER BY node;
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from diag.artifacts.trace import step_table
from diag.events import EVENT_KINDS
from diag.export import STEP_COLUMNS, STEP_KIND, decode_steps

if TYPE_CHECKING:  # pragma: no cover
    from diag.ingest import Ingested

_LOG_SUFFIXES = (".gz", ".log", ".txt", ".out", ".err")
_COMMON_TYPES = {"source": "str", "line": "int", "ts": "float", "rank": "str", "instance": "str"}


def sanitise(run_id: str) -> str:
    """A run id as a safe folder name (hive partition value)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("_") or "run"


def node_name(stream_id: str, instance: str = "", common: str = "") -> str:
    """The server a stream stands for: its instance if named, else its path below the folder
    all streams share, without log suffixes (``node-a/server`` for ``logs/node-a/server.log``:
    fleets name every node's file alike)."""
    if instance:
        return instance
    name = Path(stream_id).name or stream_id
    if common:
        try:
            name = str(Path(stream_id).relative_to(common))
        except ValueError:
            pass
    changed = True
    while changed:
        changed = False
        for suffix in _LOG_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name, changed = name[: -len(suffix)], True
    return name


def _arrow_type(pa: Any, t: str) -> Any:
    return {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}.get(t, pa.string())


def _schema(pa: Any, kind: str) -> Any:
    if kind == STEP_KIND:
        fields = [pa.field(c, _arrow_type(pa, t)) for c, t in STEP_COLUMNS.items()]
        return pa.schema([*fields, pa.field("run_id", pa.string()), pa.field("node", pa.string())])
    ek = EVENT_KINDS[kind]
    types = {**_COMMON_TYPES, **dict(ek.fields)}
    fields = [pa.field(c, _arrow_type(pa, types.get(c, "str"))) for c in ek.columns]
    fields += [pa.field("run_id", pa.string()), pa.field("node", pa.string())]
    return pa.schema(fields)


def _run_instance(run: Any) -> str:
    """The instance a run was split out for (one per run when a file interleaves servers)."""
    values: set[str] = set()
    for frame in run.tables._frames.values():
        if "instance" in frame.columns and not frame.empty:
            values.update(v for v in frame["instance"].dropna().unique() if v)
    return next(iter(values)) if len(values) == 1 else ""


def _write(
    pa: Any, pq: Any, frame: pd.DataFrame, kind: str, target: Path, run_id: str, node: str
) -> None:
    schema = _schema(pa, kind)
    data = frame.reindex(columns=[f.name for f in schema][:-2]).copy()
    data["run_id"] = run_id
    data["node"] = node
    for col in data.columns:
        if data[col].dtype == object or str(data[col].dtype) in ("string", "str"):
            data[col] = data[col].astype(object).where(data[col].notna(), None)
    table = pa.Table.from_pandas(data, schema=schema, preserve_index=False)
    target.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, target / "part-0.parquet")


def write_parquet(ing: Ingested, out: Path) -> dict[str, int]:
    """Write the event tables of ``ing`` under ``out`` (see the module doc for the layout);
    the rows written per kind."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("Parquet export needs pyarrow") from exc
    from diag.facts.runs import split_runs

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for kind in [*EVENT_KINDS, STEP_KIND, "runs", "trace_step"]:
        old = out / kind
        if old.is_dir():
            shutil.rmtree(old)
    runs = split_runs(ing.tables, ing.streams)
    folders = [str(Path(r.stream.split("[", 1)[0]).parent) for r in runs if r.stream != "-"]
    common = os.path.commonpath(folders) if folders else ""
    used: dict[str, int] = {}
    written: dict[str, int] = {}
    run_rows: list[dict[str, Any]] = []
    for run in runs:
        part = sanitise(run.id)
        if part in used:  # two ids that sanitise alike stay apart
            used[part] += 1
            part = f"{part}-{used[part]}"
        else:
            used[part] = 1
        node = node_name(run.stream.split("[", 1)[0], _run_instance(run), common)
        run_rows.append(
            {
                "run": part,
                "run_id": run.id,
                "node": node,
                "stream": run.stream,
                "backend": run.backend,
                "sources": json.dumps(run.sources),
            }
        )
        frames = [*run.tables._frames.items(), (STEP_KIND, decode_steps(run))]
        for kind, frame in frames:
            if frame.empty or (kind not in EVENT_KINDS and kind != STEP_KIND):
                continue
            _write(pa, pq, frame, kind, out / kind / f"run={part}", run.id, node)
            written[kind] = written.get(kind, 0) + len(frame)
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(
        run_rows, columns=["run", "run_id", "node", "stream", "backend", "sources"]
    )
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), runs_dir / "part-0.parquet")
    steps = step_table(ing.traces)
    if not steps.empty:  # one flat table of profiled steps: DIR/trace_step/part-0.parquet
        target = out / "trace_step"
        target.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pandas(steps, preserve_index=False), target / "part-0.parquet")
        written["trace_step"] = len(steps)
    return written


__all__ = ["write_parquet", "sanitise", "node_name"]
