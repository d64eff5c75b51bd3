"""Analysis by independent input groups (diag.fleet): the report of a folder read group by
group is the report of one pass over it, and the groups keep what must stay together."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.gen_logs import GENERATORS, write_log
from diag.api import analyze
from diag.ingest import ingest
from diag.render.serialize import to_json
from diag.sources.discover import discover
from diag.sources.groups import group_files, plan_groups
from tests.conftest import ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"
# incidents with artifacts beside their logs (a profiler table, a trace) and plain ones
MIXED = (
    "sglang-kv-squeeze",
    "sglang-profiled-capture",
    "sglang-trace-verified",
    "sglang-rotated-docker",
    "vllm-healthy",
    "vllm-capture-oom",
)


def _tree(tmp_path: Path, names: tuple[str, ...] = MIXED) -> Path:
    """A fleet folder: each incident's files in a pod folder of their own."""
    root = tmp_path / "fleet"
    for i, name in enumerate(names):
        shutil.copytree(INCIDENTS / name, root / f"pod-{i}-{name}")
    return root


def _one_pass(paths: list[str]) -> str:
    """The report of every input read as one group (what analyze did before groups)."""
    return to_json(analyze(paths, ingested=ingest(paths), generated_at="fixed"))


def test_a_fleet_folder_is_read_in_several_groups(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    plan = plan_groups([str(root)], max_files=1)
    assert len(plan.groups) == len(MIXED)  # one group a pod: each folder's artifacts with it


def test_grouped_report_is_the_one_pass_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups of one pod each, and runs' facts packed beyond two live runs: byte-identical."""
    import diag.sources.groups as groups
    import diag.spill as spill

    root = _tree(tmp_path)
    want = _one_pass([str(root)])
    monkeypatch.setattr(groups, "BATCH_FILES", 1)
    monkeypatch.setattr(spill, "LIVE", 2)
    got = to_json(analyze([str(root)], generated_at="fixed"))
    assert got == want


def test_a_fleet_page_of_packed_runs_is_the_one_pass_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past 25 runs most sections draw no chart and read their run back without its rows
    (``RunReport.light``): the page and the JSON are those of one pass holding every run."""
    import diag.sources.groups as groups
    import diag.spill as spill
    from diag.render.html import FIGURE_RUNS, render_html

    names = (*MIXED, "sglang-out-of-window", "vllm-request-too-long", "sglang-busy-day-40-80")
    root = tmp_path / "fleet"
    for i in range(FIGURE_RUNS + 3):
        shutil.copytree(INCIDENTS / names[i % len(names)], root / f"pod-{i:02d}")
    for i, engine in enumerate(("sglang-real", "vllm-real")):  # request lines: a summary
        (root / f"pod-gen-{i}").mkdir()
        write_log(root / f"pod-gen-{i}" / "server.log", GENERATORS[engine](30_000, seed=i))
    paths = [str(root)]
    one = analyze(paths, ingested=ingest(paths), generated_at="fixed")
    want_json, want_html = to_json(one), render_html(one)
    monkeypatch.setattr(groups, "BATCH_FILES", 1)
    monkeypatch.setattr(spill, "LIVE", 2)
    got = analyze(paths, generated_at="fixed")
    assert to_json(got) == want_json
    assert render_html(got) == want_html
    assert "figures-left-out" in want_html
    assert any(r.requests_summary is not None for r in got.runs)


def test_an_artifact_above_the_pods_joins_every_pod(tmp_path: Path) -> None:
    """A trace in the fleet's root shares its folder equally with every pod's log: which run
    it joins is decided by the runs, so all of them are one group."""
    root = _tree(tmp_path, ("sglang-kv-squeeze", "vllm-healthy", "sglang-trace-verified"))
    trace = next((root / "pod-2-sglang-trace-verified").glob("*.trace.json.gz"))
    trace.rename(root / trace.name)
    files, _ = discover([str(root)])
    assert len(group_files(files)) == 1
    assert to_json(analyze([str(root)], generated_at="fixed")) == _one_pass([str(root)])


def test_a_pod_of_server_info_or_metrics_alone_joins_no_other_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server-info document or a /metrics dump joins a log of its own folder only
    (``diag.facts.runs``): a pod folder holding one without a log is a group of its own,
    one beside a log stays with it, and the grouped report is the one-pass report."""
    import diag.sources.groups as groups

    names = (
        "sglang-2026-server-info-only",
        "sglang-kv-squeeze",
        "sglang-2026-metrics-only",
        "vllm-healthy",
        "vllm-server-info-json",
    )
    root = _tree(tmp_path, names)
    info = INCIDENTS / "sglang-2026-server-info-only" / "server_info.json"
    shutil.copy(info, root / "pod-1-sglang-kv-squeeze" / "server_info.json")
    files, _ = discover([str(root)])
    got = group_files(files)
    assert len(got) == len(names)
    beside = [g for g in got if any("kv-squeeze" in p for p in g.paths)]
    assert len(beside) == 1 and any(p.endswith("server_info.json") for p in beside[0].paths)
    want = _one_pass([str(root)])
    monkeypatch.setattr(groups, "BATCH_FILES", 1)
    assert to_json(analyze([str(root)], generated_at="fixed")) == want


def test_a_rotated_set_is_never_split(tmp_path: Path) -> None:
    root = _tree(tmp_path, ("sglang-rotated-docker",))
    files, _ = discover([str(root)])
    groups = group_files(files)
    rotated = {f.group for f in files if f.group != f.path}
    assert rotated
    for gid in rotated:
        assert sum(any(f.group == gid for f in g.files) for g in groups) == 1


def test_report_tables_are_every_groups_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import diag.sources.groups as groups

    root = _tree(tmp_path)
    one = ingest([str(root)]).tables
    monkeypatch.setattr(groups, "BATCH_FILES", 1)
    joined = analyze([str(root)], generated_at="fixed").tables
    assert sorted(joined) == sorted(one)
    for kind in one:
        a, b = one[kind].reset_index(drop=True), joined[kind].reset_index(drop=True)
        assert list(a.columns) == list(b.columns), kind
        assert a.astype(str).equals(b.astype(str)), kind
