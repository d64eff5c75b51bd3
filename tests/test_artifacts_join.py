"""Operator tables and snapshots found next to a run's logs are joined to that run, and the
snapshot's graph pools are checked against the capture memory the log printed."""

from __future__ import annotations

import shutil
from pathlib import Path

from diag.api import analyze
from gen import snapshots as snap
from tests.conftest import ROOT

INCIDENT = ROOT / "fixtures" / "incidents" / "sglang-profiled-capture"


def test_tables_and_snapshot_join_the_run() -> None:
    report = analyze([str(INCIDENT)], generated_at="fixed")
    run = report.runs[0]
    assert [p["sort_by"] for p in report.profiles] == ["cuda_time_total", "cpu_time_total"]
    assert all(p["run"] == run.id for p in report.profiles)
    assert report.profiles[0]["rows"][0]["name"] == "aten::mm"
    assert report.profiles[0]["rows"][0]["self_cuda_s"] == 0.412
    (s,) = report.snapshots
    assert s["run"] == run.id
    assert [p["kind"] for p in s["pools"]] == ["default", "graph"]
    check = run.facts.memory_check
    assert check is not None and check["disagrees"]
    assert check["log_capture_mem_gib"] == 0.6 and check["snapshot_graph_pool_gib"] == 0.9
    assert any("capture memory disagrees" in n for n in run.to_dict()["notes"])


def test_snapshot_joins_the_nearest_run(tmp_path: Path) -> None:
    a, b = tmp_path / "node-a", tmp_path / "node-b"
    shutil.copytree(ROOT / "fixtures" / "incidents" / "sglang-healthy", a)
    shutil.copytree(ROOT / "fixtures" / "incidents" / "sglang-kv-squeeze", b)
    snap.write_snapshot(
        b / "cuda_graph_runner_memory_usage.pickle",
        default_pool_bytes=2**30,
        graph_pools=[int(2.4 * 2**30)],
    )
    report = analyze([str(tmp_path)], generated_at="fixed")
    (s,) = report.snapshots
    owner = next(r for r in report.runs if r.id == s["run"])
    assert "node-b" in owner.id
    assert owner.facts.memory_check is not None and not owner.facts.memory_check["disagrees"]
    other = next(r for r in report.runs if r is not owner)
    assert other.facts.memory_check is None


def test_malicious_snapshot_is_refused_and_the_rest_analysed(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "fixtures" / "incidents" / "sglang-healthy", tmp_path / "inc")
    marker = tmp_path / "pwned"
    snap.write_malicious_pickle(tmp_path / "inc" / "cuda_graph_runner_memory_usage.pickle", marker)
    report = analyze([str(tmp_path / "inc")], generated_at="fixed")
    assert not marker.exists()
    bad = next(i for i in report.inputs if i.path.endswith(".pickle"))
    assert bad.status == "skipped" and "GLOBAL" in (bad.reason or "")
    assert report.runs and report.runs[0].record.to_json()["batches"]["graph"] == 80
