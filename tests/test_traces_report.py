"""The report's trace parts: the JSON ``traces`` list as INTERFACE.md gives it, the run
record's ``trace_verified``, the text summary, and the "verified by trace" panel in a real
Chromium (the page checks: no console error, no unknown marker, tiles whole)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from diag.cli import main
from tests.conftest import ROOT, need_corpus
from tests.page_checks import ARGS, CHROMIUM, open_everything, run_checks

INCIDENT = ROOT / "fixtures" / "incidents" / "sglang-trace-contradiction"
INTERFACE_KEYS = [
    "path",
    "kind",
    "rank",
    "graph_launches",
    "eager_launches",
    "gpu_ops_on_graphs",
    "gpu_ops_eager",
    "steps",
    "run",
]


def _analyze(tmp_path: Path, *paths: Path, fmt: str = "json") -> tuple[dict[str, Any], Path]:
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main, ["analyze", *map(str, paths), "-o", str(out), "--format", fmt, "--fail-on", "never"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads((next(out.glob("*.graphdiag.json"))).read_text())
    return doc, next(out.glob("*.graphdiag.html"))


def test_json_traces_list_and_record(tmp_path: Path) -> None:
    cap = sorted(need_corpus("traces").glob("tracelens-vllm-decode-full-capture_traces-*"))[0]
    doc, _ = _analyze(tmp_path, INCIDENT, cap)
    kinds = {t["kind"]: t for t in doc["traces"]}
    for t in doc["traces"]:
        assert all(k in t for k in INTERFACE_KEYS)
        assert {"graph", "piecewise", "eager"} <= set(t["steps"])
    step = kinds["step_trace"]
    assert (step["rank"], step["run"]) == (0, doc["runs"][0]["id"])
    assert step["steps"]["graph"] == 7 and step["steps"]["eager"] == 1
    assert kinds["capture_trace"]["captures"][0]["nodes_per_graph"] == [421]
    # beside the log's capture lines: size 32 is among the sizes the SGLang log captured
    assert kinds["capture_trace"]["captures"][0]["in_log_capture_sizes"] is True
    assert doc["runs"][0]["record"]["trace_verified"]["disagree"] == 1
    inputs = {Path(i["path"]).name: i["kind"] for i in doc["inputs"]}
    assert inputs[cap.name] == "trace"


def test_trace_only_input_is_recognised(tmp_path: Path) -> None:
    path = need_corpus("traces") / "tracelens-sglang-qwen3-8b-decode.json.gz"
    res = CliRunner().invoke(main, ["analyze", str(path), "-o", str(tmp_path), "--format", "text"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "1 graph launch (544 GPU ops on graphs), 11 eager launches" in text
    assert "steps: 1 full graph replay" in text


sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (pip) not installed")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():  # pragma: no cover - depends on the machine
        pytest.skip(f"{CHROMIUM} missing")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.mark.browser
def test_verified_by_trace_panel_passes_the_page_checks(browser: Any, tmp_path: Path) -> None:
    cap = sorted(need_corpus("traces").glob("tracelens-vllm-prefilldecode-piecewise-capture*"))[0]
    _, html = _analyze(tmp_path, INCIDENT, cap)
    assert run_checks(browser, html, multi_run=False, expect_kv=False) == []
    page = browser.new_page()
    try:
        page.goto(html.as_uri())
        open_everything(page)
        panel = page.locator("section.trace-panel")
        assert panel.count() == 1 and panel.is_visible()
        text = panel.inner_text()
        assert "8 profiled steps in 1 trace: 7 full graph replay, 1 eager." in text
        rows = page.locator("table.trace-contradictions tbody tr")
        assert rows.count() == 1 and "graph (logged)" in rows.inner_text()
        cap_row = page.locator("table.trace-captures tbody tr").inner_text()
        assert "8192" in cap_row and "PIECEWISE" in cap_row and "25" in cap_row
    finally:
        page.close()


@pytest.mark.browser
def test_traces_without_a_run_have_their_section(browser: Any, tmp_path: Path) -> None:
    _, html = _analyze(tmp_path, need_corpus("traces"))
    assert run_checks(browser, html, multi_run=False, expect_kv=False) == []
    page = browser.new_page()
    try:
        page.goto(html.as_uri())
        text = page.locator("section#traces").inner_text()
        assert "Profiler traces not tied to a run" in text
        assert page.locator("table.trace-launches tbody tr").count() == 6
    finally:
        page.close()


def test_parse_exports_the_step_table(tmp_path: Path) -> None:
    """Every profiled step, as trace_step rows (csv) and one Parquet table DuckDB reads."""
    duckdb = pytest.importorskip("duckdb")
    csv = tmp_path / "ev.csv"
    res = CliRunner().invoke(main, ["parse", str(INCIDENT), "--format", "csv", "-o", str(csv)])
    assert res.exit_code == 0, res.output
    assert "trace_step 8" in res.output
    rows = [ln for ln in csv.read_text().splitlines() if ln.startswith("trace_step,")]
    assert len(rows) == 8
    out = tmp_path / "pq"
    res = CliRunner().invoke(main, ["parse", str(INCIDENT), "--format", "parquet", "-o", str(out)])
    assert res.exit_code == 0, res.output
    got = duckdb.sql(
        f"SELECT verdict, count(*) FROM '{out}/trace_step/*.parquet' GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert got == [("eager", 1), ("graph", 7)]
