"""An artifact at a fleet's root (beside every pod's folder) is read apart from the pods'
groups and joined afterwards (diag.facts.deferred): the fleet stays in many packed groups
and the report is the one-pass report, for a snapshot, a profiler table and a trace."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from diag.api import analyze
from diag.ingest import ingest
from diag.render.html import render_html
from diag.render.serialize import to_json
from diag.render.text import render_text
from diag.sources.discover import discover
from diag.sources.groups import group_files, join_scope, plan_groups
from fixtures.gen.profiler_tables import format_table
from tests.conftest import ROOT
from tests.test_profiler_table_generated import ROWS

INCIDENTS = ROOT / "fixtures" / "incidents"
PODS = (
    "sglang-kv-squeeze",
    "sglang-profiled-capture",
    "sglang-trace-verified",
    "sglang-rotated-docker",
    "vllm-healthy",
    "sglang-trace-contradiction",
)
SNAPSHOT = INCIDENTS / "sglang-profiled-capture" / "cuda_graph_runner_memory_usage.pickle"
TRACE = next((INCIDENTS / "sglang-trace-verified").glob("*.trace.json.gz"))


def _fleet(tmp_path: Path) -> Path:
    root = tmp_path / "fleet"
    for i, name in enumerate(PODS):
        shutil.copytree(INCIDENTS / name, root / f"pod-{i}-{name}")
    return root


def _root_snapshot(root: Path) -> None:  # a second snapshot of the run that has one
    shutil.copy(SNAPSHOT, root / SNAPSHOT.name)


def _root_trace(root: Path) -> None:  # a second trace of the run that has one
    shutil.copy(TRACE, root / TRACE.name)


def _root_table(root: Path) -> None:
    (root / "profile_table.txt").write_text(format_table(ROWS, sort_by="cuda_time_total"))


def _root_all(root: Path) -> None:
    _root_snapshot(root)
    _root_trace(root)
    _root_table(root)
    shutil.copy(TRACE, root / "pod-0-sglang-kv-squeeze" / TRACE.name)  # and one in a pod


def _zone_trace(root: Path) -> None:  # in the middle of the reading order: a zone's root
    zone = root / "zone-b"
    zone.mkdir()
    for pod in sorted(root.glob("pod-*"))[3:]:
        pod.rename(zone / pod.name)
    shutil.copy(TRACE, zone / TRACE.name)
    _root_snapshot(root)


@pytest.mark.parametrize("add", [_root_snapshot, _root_trace, _root_table, _root_all, _zone_trace])
def test_a_root_artifact_is_deferred_and_the_report_is_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, add: object
) -> None:
    import diag.sources.groups as groups
    import diag.spill as spill

    root = _fleet(tmp_path)
    add(root)  # type: ignore[operator]
    paths = [str(root)]
    one = analyze(paths, ingested=ingest(paths), generated_at="fixed")
    want_json, want_text, want_html = to_json(one), render_text(one), render_html(one)
    monkeypatch.setattr(groups, "BATCH_FILES", 1)
    monkeypatch.setattr(spill, "LIVE", 2)
    plan = plan_groups(paths, defer=True)
    assert any(g.deferred for g in plan.groups)
    assert sum(not g.deferred for g in plan.groups) == len(PODS)
    assert add is not _zone_trace or plan.groups[4].deferred  # after the first three pods
    got = analyze(paths, generated_at="fixed")
    assert to_json(got) == want_json
    assert render_text(got) == want_text
    assert render_html(got) == want_html
    assert sorted(got.tables) == sorted(one.tables)
    for kind in one.tables:
        a, b = one.tables[kind].reset_index(drop=True), got.tables[kind].reset_index(drop=True)
        assert a.astype(str).equals(b.astype(str)), kind


def test_the_root_artifacts_join_runs(tmp_path: Path) -> None:
    """The case above is not vacuous: the root snapshot and trace join a run beside that
    run's own, and the table joins a run."""
    root = _fleet(tmp_path)
    _root_all(root)
    paths = [str(root)]
    report = analyze(paths, ingested=ingest(paths), generated_at="fixed")
    runs = {r.facts.run.id for r in report.runs}
    tops = [s for s in report.snapshots if Path(s.path).parent == root]
    assert tops and all(s.run in runs for s in tops)
    assert sum(s.run == tops[0].run for s in report.snapshots) == 2
    traced = [t for t in report.traces if Path(t.path).parent == root]
    assert traced and traced[0].run in runs
    assert sum(t.run == traced[0].run for t in report.traces) == 2
    assert any(p.get("run") in runs for p in report.profiles if "profile_table" in p["path"])


def test_only_an_artifact_spanning_batches_is_deferred(tmp_path: Path) -> None:
    root = _fleet(tmp_path)
    _root_trace(root)
    files, _ = discover([str(root)])
    assert len(group_files(files)) == 1  # without defer: one group, as before
    spread = group_files(files, defer=True)
    assert [g.deferred for g in spread] == [True] + [False] * len(PODS)
    logs = {f.path for g in spread[1:] for f in g.files if join_scope(f) == "log"}
    assert set(spread[0].joins) == logs
    # one batch holds every pod: the trace goes back into it
    assert [len(g.files) for g in plan_groups([str(root)], defer=True).groups] == [len(files)]
    deferred = plan_groups([str(root)], max_files=1, defer=True).groups
    assert deferred[0].deferred and len(deferred) == len(PODS) + 1
