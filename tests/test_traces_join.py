"""Traces joined to logs: each profiled step meets the log's decode batch of the same rank
by time and batch size; the run record gets the trace-verified counts, a planted
contradiction fires GD180 on its own rank only, and ``--tz`` moves zone-less log stamps."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from click.testing import CliRunner

from diag.api import analyze
from diag.cli import main
from gen.traces import Step, trace_chunks, write_trace

T0 = datetime(2025, 11, 3, 9, 0, 0, tzinfo=timezone.utc)
HEAD = "[2025-11-03 08:59:00] Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32, 40, 48]\n"


def _line(t: datetime, rank: int, bs: int, graph: bool) -> str:
    return (
        f"[{t:%Y-%m-%d %H:%M:%S} TP{rank}] Decode batch, #running-req: {bs}, #token: 9000, "
        f"token usage: 0.10, cuda graph: {graph}, gen throughput (token/s): 600.00, #queue-req: 0\n"
    )


def _folder(
    tmp_path: Path, shift: timedelta = timedelta(0), plant: tuple[int, int] | None = None
) -> Path:
    """Two ranks, 6 logged batches each (2 s apart), a trace per rank with a step 0.3 s after
    each line's second; ``plant`` = (rank, i) makes that step eager; ``shift``: the log's
    clock ahead of UTC (local time stamps)."""
    log = [HEAD]
    for i in range(6):
        for rank in (0, 1):
            log.append(_line(T0 + shift + timedelta(seconds=2 * i), rank, 8 + 4 * i, True))
    (tmp_path / "server.log").write_text("".join(log))
    for rank in (0, 1):
        steps = [
            Step(
                (T0 + timedelta(seconds=2 * i)).timestamp() + 0.3,
                8 + 4 * i,
                "eager" if plant == (rank, i) else "graph",
                nodes=20,
            )
            for i in range(6)
        ]
        write_trace(
            tmp_path / f"1762160400.0-TP-{rank}-DECODE.trace.json.gz",
            trace_chunks(steps, rank=rank, world=2),
        )
    return tmp_path


def test_same_rank_steps_join_and_verify(tmp_path: Path) -> None:
    report = analyze([str(_folder(tmp_path))], generated_at="fixed")
    run = report.runs[0]
    tv = run.record.to_json()["trace_verified"]
    assert (tv["traces"], tv["matched_batches"], tv["agree"], tv["disagree"]) == (2, 12, 12, 0)
    assert tv["steps"]["graph"] == 12
    assert "GD180" not in {f.code for f in report.findings}
    assert {t["run"] for t in report.to_dict()["traces"]} == {run.id}


def test_planted_contradiction_fires_on_its_rank(tmp_path: Path) -> None:
    report = analyze([str(_folder(tmp_path, plant=(1, 3)))], generated_at="fixed")
    run = report.runs[0]
    tv = run.record.to_json()["trace_verified"]
    assert (tv["matched_batches"], tv["disagree"]) == (12, 1)
    bad = run.facts.trace_check.disagree
    assert bad[["rank", "batch_size", "log_verdict", "trace_verdict"]].values.tolist() == [
        [1, 20, "graph", "eager"]
    ]
    gd180 = [f for f in report.findings if f.code == "GD180"]
    assert gd180 and "1 of 12" in gd180[0].message
    # the evidence is the contradicted log line: rank 1, batch 20
    assert any("TP1] Decode batch, #running-req: 20," in e.text for e in gd180[0].evidence)


def test_local_time_log_needs_tz(tmp_path: Path) -> None:
    folder = _folder(tmp_path, shift=timedelta(hours=8), plant=(0, 2))
    plain = analyze([str(folder)], generated_at="fixed").runs[0]
    assert plain.record.to_json()["trace_verified"]["matched_batches"] == 0
    assert any("--tz" in n for n in plain.facts.notes)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main,
        [
            "analyze",
            str(folder),
            "--tz",
            "Asia/Shanghai",
            "--format",
            "json",
            "--no-html",
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    tv = doc["runs"][0]["record"]["trace_verified"]
    assert (tv["matched_batches"], tv["disagree"], tv["tz_offset_s"]) == (12, 1, 28800.0)
    assert "GD180" in {f["code"] for f in doc["runs"][0]["findings"]}
    assert {t["kind"] for t in doc["traces"]} == {"step_trace"}
    assert all(t["steps"]["graph"] + t["steps"]["eager"] == 6 for t in doc["traces"])


def test_bad_tz_is_a_usage_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["analyze", str(_folder(tmp_path)), "--tz", "Mars/Olympus"])
    assert res.exit_code == 2
    assert "zone name" in res.output
