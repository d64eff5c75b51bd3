"""Parquet export answers fleet questions in DuckDB: the README query on generated logs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from diag.export_parquet import node_name, sanitise, write_parquet
from diag.ingest import ingest
from tests.conftest import ROOT

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")
sys.path.insert(0, str(ROOT / "bench"))
import gen_logs  # noqa: E402


def _readme_query(events_dir: Path) -> str:
    """The DuckDB snippet from README.md, pointed at ``events_dir``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- duckdb-eager-share -->\s*```sql\n(.*?)```", text, re.S)
    assert m, "README.md lost its DuckDB snippet"
    return m.group(1).replace("'events/", f"'{events_dir.as_posix()}/")


def q(sql: str) -> list[tuple]:  # type: ignore[type-arg]
    """Rows of a DuckDB query (in-memory database)."""
    return duckdb.connect().execute(sql).fetchall()


def _server(ts_day: int, graph: list[bool], restart_no: int = 0) -> list[str]:
    ts = f"2025-06-{ts_day:02d} 08:00:00"
    lines = gen_logs._sglang_startup(ts, 160, restart_no)
    for i, g in enumerate(graph):
        bs = 8 if g else 200
        lines.append(
            f"[2025-06-{ts_day:02d} 09:{i // 60:02d}:{i % 60:02d} TP0] Decode batch, #running-req: {bs}, "
            f"#token: {bs * 100}, token usage: 0.10, cuda graph: {g}, gen throughput (token/s): 100.00, "
            f"#queue-req: 0, "
        )
        lines.append(
            f'[2025-06-{ts_day:02d} 09:{i // 60:02d}:{i % 60:02d}] INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK'
        )
    return lines


@pytest.fixture()
def fleet(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    gen_logs.write_log(logs / "node-a.log", _server(10, [True] * 30 + [False] * 10))
    b = _server(11, [True] * 5 + [False] * 15)
    gen_logs.write_log(logs / "node-b.log.1", b[: len(b) // 2])  # rotated: one node, one run
    gen_logs.write_log(logs / "node-b.log", b[len(b) // 2 :])
    gen_logs.write_log(
        logs / "node-c.log",
        _server(12, [True] * 4 + [False] * 4) + _server(13, [False] * 10, restart_no=1),
    )  # a restart: two runs
    return logs


def test_readme_query_eager_share_per_node(fleet: Path, tmp_path: Path) -> None:
    out = tmp_path / "events"
    ing = ingest([str(fleet)], jobs=1)
    write_parquet(ing, out)
    rows = q(_readme_query(out))
    got = {r[0]: (r[1], r[2]) for r in rows}
    assert got == {
        "node-a": (40, pytest.approx(10 / 40)),
        "node-b": (20, pytest.approx(15 / 20)),
        "node-c": (18, pytest.approx(14 / 18)),
    }
    assert [r[0] for r in rows] == ["node-c", "node-b", "node-a"]  # ORDER BY eager_share DESC


# ------------------------------------------------------------------ a mixed fleet
VLLM = "0.13.0"  # DEBUG step lines and the metrics table exist from 0.12 on


def _vllm_node(kind: str, graph: list[bool], seed: int) -> list[str]:
    """A vLLM start-up (capture sizes up to 64) then decode traffic of one kind: DEBUG step
    lines, a --cudagraph-metrics table, or stats lines only (verdicts inferred)."""
    from gen import vllm_logs as vl
    from gen.vllm_lines import Clock

    sizes = [1, 2, 4, 8, 16, 32, 64]
    lines, _ = vl.server_log(VLLM, capture_sizes=sizes, max_num_seqs=64, seed=seed)
    clock = Clock()
    clock.advance(3600)
    for g in graph:
        clock.advance(1)
        if kind == "debug":
            lines.append(
                vl.debug_step(
                    VLLM,
                    mode="FULL" if g else "NONE",
                    num_tokens=8,
                    num_reqs=8,
                    uniform=True,
                    clock=clock,
                    seed=seed,
                )
            )
        elif kind == "stats":
            lines.append(
                vl.stats_line(
                    VLLM,
                    gen_tput=500.0,
                    running=8 if g else 200,
                    kv_usage=20.0,
                    clock=clock,
                    seed=seed,
                )
            )
    if kind == "metrics":
        n_graph, n_eager = sum(graph), len(graph) - sum(graph)
        rows = [(6, 8, "FULL", n_graph), (100, 100, "NONE", n_eager)]
        lines += vl.metrics_table(
            VLLM, mode="FULL", capture_sizes=sizes, rows=rows, clock=clock, seed=seed
        )
    return lines


def test_readme_query_on_a_mixed_fleet_matches_analyze(tmp_path: Path) -> None:
    """SGLang decode lines and vLLM DEBUG steps, metrics-table rows and stats intervals in
    one export: the README query gives each node the decode steps and eager share that
    ``analyze`` reports for it, and every step says where it was read."""
    from diag.api import analyze

    logs = tmp_path / "fleet"
    logs.mkdir()
    gen_logs.write_log(logs / "sglang-0.log", _server(10, [True] * 12 + [False] * 8))
    gen_logs.write_log(logs / "vllm-debug.log", _vllm_node("debug", [True] * 9 + [False] * 3, 1))
    gen_logs.write_log(
        logs / "vllm-metrics.log", _vllm_node("metrics", [True] * 40 + [False] * 60, 2)
    )
    gen_logs.write_log(logs / "vllm-stats.log", _vllm_node("stats", [True] * 5 + [False] * 20, 3))
    out = tmp_path / "events"
    ing = ingest([str(logs)], jobs=1)
    write_parquet(ing, out)
    got = {r[0]: (r[1], r[2]) for r in q(_readme_query(out))}

    report = analyze([str(logs)], ingested=ing)
    want = {}
    for run in report.runs:
        b = run.record.to_json()["batches"]
        want[node_name(run.facts.run.sources[0])] = (
            b["graph"] + b["eager"],
            pytest.approx(b["eager"] / (b["graph"] + b["eager"])),
        )
    assert set(want) == {"sglang-0", "vllm-debug", "vllm-metrics", "vllm-stats"}
    assert all(n for n, _ in want.values())  # every node has decided steps
    assert got == want
    sources = dict(
        q(
            f"SELECT node, string_agg(DISTINCT step_source, ',') FROM "
            f"read_parquet('{out.as_posix()}/decode_step/*/*.parquet', hive_partitioning = true) "
            "GROUP BY node"
        )
    )
    assert sources == {
        "sglang-0": "decode_line",
        "vllm-debug": "debug_step",
        "vllm-metrics": "metrics_table",
        "vllm-stats": "stats_interval",
    }


def test_parse_help_duckdb_example_runs(fleet: Path, tmp_path: Path) -> None:
    """The DuckDB line of ``parse --help`` runs as printed (DuckDB's Python API) on an export."""
    import shlex
    import subprocess

    from click.testing import CliRunner

    from diag.cli import main

    help_text = CliRunner().invoke(main, ["parse", "--help"]).output
    line = next(ln.strip() for ln in help_text.splitlines() if "import duckdb" in ln)
    argv = shlex.split(line)
    assert argv[0] == "python"
    res = CliRunner().invoke(
        main, ["parse", str(fleet), "--format", "parquet", "-o", str(tmp_path / "events"), "-q"]
    )
    assert res.exit_code == 0, res.output
    done = subprocess.run(
        [sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    (n,) = q(f"SELECT count(*) FROM '{(tmp_path / 'events').as_posix()}/decode_step/*/*.parquet'")[
        0
    ]
    assert f"{n} rows" in done.stdout


@pytest.mark.slow
def test_layout_partitions_and_types(fleet: Path, tmp_path: Path) -> None:
    out = tmp_path / "events"
    ing = ingest([str(fleet)], jobs=1)
    write_parquet(ing, out)
    decode = out / "decode_batch"
    parts = sorted(p.name for p in decode.iterdir())
    assert len(parts) == 4 and all(p.startswith("run=") for p in parts)
    per_run = dict(
        q(
            f"SELECT run, count(*) FROM read_parquet('{decode.as_posix()}/*/*.parquet', hive_partitioning = true) "
            "GROUP BY run"
        )
    )
    runs = q(
        f"SELECT run, run_id, node, backend FROM read_parquet('{out.as_posix()}/runs/*.parquet') ORDER BY run"
    )
    assert {r[2] for r in runs} == {"node-a", "node-b", "node-c"}
    assert sorted(per_run.values()) == [8, 10, 20, 40]  # node-c: two runs, 8 and 10 batches
    assert all(r[0] == sanitise(r[1]) for r in runs) and all(r[3] == "sglang" for r in runs)
    types = {
        r[0]: r[1]
        for r in q(
            f"DESCRIBE SELECT * FROM read_parquet('{decode.as_posix()}/*/*.parquet', "
            "hive_partitioning = true)"
        )
    }
    assert (
        types["cuda_graph"] == "BOOLEAN"
        and types["batch_size"] == "BIGINT"
        and types["ts"] == "DOUBLE"
    )
    assert types["node"] == "VARCHAR" and types["line"] == "BIGINT"
    # line numbers point into the source files
    src, line = q(
        f"SELECT source, line FROM read_parquet('{decode.as_posix()}/*/*.parquet') "
        "ORDER BY source, line LIMIT 1"
    )[0]
    assert (
        b"Decode batch" in Path(src).read_bytes().split(b"\n")[line - 1]
    )  # line numbers count b"\\n" only
    # a second export replaces the first instead of adding to it
    write_parquet(ing, out)
    again = q(f"SELECT count(*) FROM read_parquet('{decode.as_posix()}/*/*.parquet')")
    assert again == [(sum(per_run.values()),)]


def test_cli_parse_parquet(fleet: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from diag.cli import main

    out = tmp_path / "cli-events"
    res = CliRunner().invoke(
        main, ["parse", str(fleet), "--format", "parquet", "-o", str(out), "-q"]
    )
    assert res.exit_code == 0, res.output
    rows = q(_readme_query(out))
    assert {r[0] for r in rows} == {"node-a", "node-b", "node-c"}


def test_names() -> None:
    assert sanitise("/var/log/x.log#2") == "var_log_x.log_2"
    assert node_name("/var/log/decode-7.log") == "decode-7"
    assert node_name("/var/log/decode-7.log.gz") == "decode-7"
    assert node_name("/var/log/x.log", "prefill-0") == "prefill-0"
    # fleets name every node's file alike: the folder below the shared one tells them apart
    assert node_name("/logs/node-a/server.log", common="/logs") == "node-a/server"
    assert node_name("/logs/node-a/server.log", common="/logs/node-a") == "server"
