"""The fleet summary (issue 27 point 3) on a generated fleet: groups, verdict counts, the runs
that differ from their group, and one bucket set per group priced on the pooled traffic.

Expected values come from the generator (fixtures/gen/fleet.py): which pods share a
configuration, which one fails, and the batch sizes it wrote; the ceiling is derived by hand
from those with the advice's stated rule (the observed peak plus 10 % headroom, up to the next
size of SGLang's own default list, taken from SGLang's source rows in
tests/data/engine_defaults.yaml) rather than read back from the code under test.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from diag.advise.recommend import recommend
from diag.api import analyze
from diag.events import EventTables
from diag.render.html import render_html
from diag.render.serialize import to_json
from diag.render.text import WIDTH, render_text
from diag.report import Report
from gen import fleet as fleet_gen
from gen import sglang_logs as sg
from tests.conftest import ROOT

HEADROOM = 0.10  # the advice's documented default headroom over the observed peak


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[fleet_gen.Fleet, Path, Report]:
    built = fleet_gen.build()
    folder = built.write(tmp_path_factory.mktemp("fleet") / "pods")
    return built, folder, analyze([str(folder)], generated_at="fixed")


def _doc(report: Report) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(to_json(report))
    return doc


def _pods(ids: list[str]) -> list[str]:
    return sorted(Path(i.split("#", 1)[0]).name for i in ids)


def _group_of(doc: dict[str, Any], pod: str) -> dict[str, Any]:
    (group,) = [g for g in doc["fleet"]["groups"] if pod in _pods(g["runs"])]
    return group


def _sglang_ceiling(steps: dict[int, int]) -> int:
    """Peak (the p99.9 of these weights is never above it) plus headroom, rounded up to the
    next size of SGLang's default capture list."""
    want = math.ceil(max(steps) * (1 + HEADROOM))
    return min(s for s in sg.default_sizes(512) if s >= want)


def test_groups_are_the_generated_configurations(fleet: Any) -> None:
    built, _, report = fleet
    doc = _doc(report)
    assert doc["fleet"]["runs"] == len(built.files)
    found = sorted(_pods(g["runs"]) for g in doc["fleet"]["groups"])
    assert found == sorted(sorted(g.pods) for g in built.groups.values())
    # largest group first
    sizes = [len(g["runs"]) for g in doc["fleet"]["groups"]]
    assert sizes == sorted(sizes, reverse=True)
    tp2 = _group_of(doc, "pod-sg32-tp2.log")
    assert tp2["config"]["tp"] == 2 and tp2["config"]["cuda_graph_max_bs"] == 32
    assert _group_of(doc, "pod-vllm-1.log")["backend"] == "vllm"


def test_verdict_counts_and_the_failing_node(fleet: Any) -> None:
    built, _, report = fleet
    doc = _doc(report)
    group = built.groups["sglang-32"]
    g = _group_of(doc, group.pods[0])
    # five pods serve batches above their ceiling of 32 (eager: GD110, a warning); one fails
    assert g["verdicts"] == {"warn": 5, "capture_failed": 1}
    assert g["majority"] == "warn"
    (outlier,) = g["outliers"]
    assert _pods([outlier["run"]]) == group.failing
    assert outlier["verdict"] == "capture_failed"
    run = next(r for r in doc["runs"] if r["id"] == outlier["run"])
    assert outlier["verdict_reason"] == run["verdict_reason"]
    assert "capture failed" in outlier["verdict_reason"]
    for name in ("sglang-64", "vllm"):
        other = _group_of(doc, built.groups[name].pods[0])
        assert other["verdicts"] == {"ok": len(built.groups[name].pods)}
        assert other["outliers"] == []


def test_pooled_recommendation_names_the_hand_derived_ceiling(fleet: Any) -> None:
    built, _, report = fleet
    doc = _doc(report)
    group = built.groups["sglang-32"]
    rec = _group_of(doc, group.pods[0])["recommendation"]
    ceiling = _sglang_ceiling(group.steps)
    assert rec["source"] == "pooled"
    assert _pods(rec["runs_pooled"]) == sorted(set(group.pods) - set(group.failing))
    assert rec["unit"] == "requests"
    assert rec["ceiling"] == ceiling
    assert rec["decode_steps"] == sum(group.steps.values())
    assert rec["decision"] == "change"
    assert max(rec["recommended"]["sizes"]) == ceiling
    assert f"--cuda-graph-max-bs {ceiling}" in rec["flags"]
    assert rec["current"]["sizes"] == sg.default_sizes(32)
    # no pod alone reaches the pooled peak: each one's own advice names a lower ceiling
    own = [
        r.advice.ceiling for r in report.runs if r.advice is not None and r.id in rec["runs_pooled"]
    ]
    assert len(own) == 5 and min(own) < ceiling


def test_recommend_and_the_summary_name_the_same_ceiling(fleet: Any) -> None:
    built, _, report = fleet
    doc = _doc(report)
    for name in ("sglang-32", "sglang-64"):
        pods = set(built.groups[name].pods)
        runs = [r for r in report.runs if Path(r.id.split("#")[0]).name in pods]
        rec = _group_of(doc, next(iter(pods)))["recommendation"]
        got = recommend(runs, report.snapshots)
        assert got["ceiling"] == rec["ceiling"]
        assert got["recommended"]["sizes"] == rec["recommended"]["sizes"]
        assert got["decision"]["kind"] == rec["decision"]
        assert got["flags"] == rec["flags"]


def test_one_server_quotes_the_advice_its_findings_quote(fleet: Any) -> None:
    built, _, report = fleet
    doc = _doc(report)
    group = built.groups["sglang-64"]
    rec = _group_of(doc, group.pods[0])["recommendation"]
    assert rec["source"] == "server"
    assert rec["ceiling"] == _sglang_ceiling(group.steps)
    ceilings = {r.advice.ceiling for r in report.runs if r.id in rec["runs_pooled"] and r.advice}
    assert ceilings == {rec["ceiling"]}
    # traffic inside the window: keep, and no flag to paste (never a remedy already in effect)
    assert rec["decision"] == "keep" and rec["flags"] == ""
    assert rec["headline"].startswith("Keep the current set")


def test_summary_reads_no_event_table(tmp_path: Path) -> None:
    """A pure function of per-run results: with every run's tables gone, the same summary."""
    report = analyze([str(fleet_gen.build().write(tmp_path / "pods"))], generated_at="x")
    before = _doc(report)["fleet"]
    for run in report.runs:  # facts are frozen: each run given facts without tables
        f = run.facts
        run.facts = dataclasses.replace(f, run=dataclasses.replace(f.run, tables=EventTables()))
    bare = Report(report.inputs, report.runs, report.profiles, report.snapshots, EventTables(), "x")
    assert _doc(bare)["fleet"] == before


def test_a_group_analysed_alone_gets_the_same_summary(tmp_path: Path) -> None:
    """Transformation: the sglang-32 pods alone, in another folder and under other names,
    give that group the same counts, outliers and recommendation as in the whole fleet."""
    built = fleet_gen.build()
    whole = built.write(tmp_path / "all")
    alone = tmp_path / "alone"
    alone.mkdir()
    group = built.groups["sglang-32"]
    for pod in group.pods:
        shutil.copy(whole / pod, alone / f"node-{pod}")
    in_fleet = _group_of(_doc(analyze([str(whole)], generated_at="x")), group.pods[0])
    (solo,) = _doc(analyze([str(alone)], generated_at="x"))["fleet"]["groups"]
    assert solo["verdicts"] == in_fleet["verdicts"]
    assert len(solo["outliers"]) == 1
    assert _pods([solo["outliers"][0]["run"]]) == [f"node-{group.failing[0]}"]
    for key in ("ceiling", "decision", "flags", "recommended", "current", "decode_steps"):
        assert solo["recommendation"][key] == in_fleet["recommendation"][key], key


def test_text_section(fleet: Any) -> None:
    built, _, report = fleet
    text = render_text(report)
    section = text[text.index("Fleet: ") :].split("\n\n")[0].splitlines()
    assert section[0].startswith(f"Fleet: {len(built.files)} runs in 4 groups")
    assert all(len(line) <= WIDTH for line in section)
    body = " ".join(line.strip() for line in section)
    assert "differs from the group's warn:" in body and "pod-sg32-6.log" in body
    ceiling = _sglang_ceiling(built.groups["sglang-32"].steps)
    assert f"--cuda-graph-max-bs {ceiling}" in body


def test_html_section_is_a_table_with_every_group(fleet: Any, tmp_path: Path) -> None:
    built, folder, _ = fleet
    # a pod name with markup in it: escaped, never markup
    odd = tmp_path / "pods"
    shutil.copytree(folder, odd)
    (odd / "pod-sg32-6.log").rename(odd / "pod-<b>x&y-6.log")
    html = render_html(analyze([str(odd)], generated_at="x"))
    section = html[html.index('<section id="fleet">') : html.index('<section id="findings">')]
    assert section.count("<tbody>") == 1
    assert section.split("<tbody>")[1].count("<tr>") == len(built.groups)
    assert "<b>x" not in section and "&lt;b&gt;x&amp;y-6.log" in section.replace("<wbr>", "")


@pytest.mark.parametrize(
    "incident", ["sglang-healthy", "vllm-healthy", "sglang-capture-oom", "sglang-rotated-docker"]
)
def test_single_run_reports_have_no_fleet_section(incident: str) -> None:
    report = analyze([str(ROOT / "fixtures" / "incidents" / incident)], generated_at="x")
    assert len(report.runs) == 1
    doc, full = json.loads(to_json(report)), json.loads(json.dumps(report.to_dict()))
    for d in (doc, full):  # the JSON cuts a run's frontier to its decision (test_json_size)
        for run in d["runs"]:
            (run.get("recommendation") or {}).pop("frontier", None)
            (run.get("recommendation") or {}).pop("frontier_rows", None)
    assert doc == full
    assert "fleet" not in _doc(report)
    assert "Fleet:" not in render_text(report)
    assert 'id="fleet"' not in render_html(report)


def _member(run_id: str, verdict: Any, echoed: bool = True) -> Any:
    from diag.facts.fleet import CaptureConfig, FleetMember

    config = CaptureConfig("enabled", "full", (1, 2, 4, 8), 8, 1, 1, 1, "fa3", False, echoed)
    return FleetMember(run_id, "sglang", "0.5.5", "m", config, verdict, f"{run_id} {verdict}")


def test_no_majority_names_no_outlier() -> None:
    from diag.facts.fleet import group_fleet

    (tied,) = group_fleet([_member("a", "ok"), _member("b", "capture_failed")])
    assert tied.majority is None and tied.outliers == ()
    assert tied.verdicts == (("ok", 1), ("capture_failed", 1))  # in the verdicts' own order
    (three,) = group_fleet([_member("a", "ok"), _member("b", "incomplete"), _member("c", "ok")])
    assert three.majority == "ok"
    assert [(o.run_id, o.verdict_reason) for o in three.outliers] == [("b", "b incomplete")]
    # runs without a config echo are not grouped with those that have one
    assert len(group_fleet([_member("a", "ok"), _member("b", "ok", echoed=False)])) == 2
