"""The trace reader's budget (issue 36): what it keeps grows with the trace, so a trace built
to exhaust memory stops at MAX_KEPT launches and GPU ops (MAX_SPANS spans) with its reason,
on both read paths; what was read stands and the logs beside it are analysed. The budget is
lowered here so the hostile trace stays small; bench figures are in the note."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.api import analyze
from diag.artifacts import trace_reader as tr
from diag.artifacts.trace_reader import read_trace
from gen.traces import serving_steps, trace_chunks, write_trace
from tests.conftest import ROOT

HEALTHY = ROOT / "fixtures" / "incidents" / "sglang-healthy" / "server.log"


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    steps = serving_steps(9, 1767225600.0, ("graph", "piecewise", "eager", "lost"), filler=3)
    path = tmp_path / "run" / "trace.json"
    path.parent.mkdir()
    write_trace(path, trace_chunks(steps, rank=0, world=1))
    return path


@pytest.mark.parametrize("native", [True, False])
def test_a_trace_over_the_budget_stops_with_its_reason(
    trace: Path, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = read_trace(trace, native=native)
    kept = len(whole.o_corr) + len(whole.l_corr)
    assert whole.complete and kept > 600
    monkeypatch.setattr(tr, "MAX_KEPT", 500)
    raw = read_trace(trace, native=native)
    assert any("reading budget" in p and "500 launches and GPU ops" in p for p in raw.problems)
    assert 500 < len(raw.o_corr) + len(raw.l_corr) < kept
    monkeypatch.setattr(tr, "MAX_KEPT", 10**9)
    monkeypatch.setattr(tr, "MAX_SPANS", 2)
    raw = read_trace(trace, native=native)
    assert any("2 step and capture spans" in p for p in raw.problems), raw.problems


def test_the_logs_beside_it_are_analysed(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (trace.parent / "server.log").write_text(HEALTHY.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(tr, "MAX_KEPT", 500)
    report = analyze([str(trace.parent)], generated_at="fixed")
    assert [r.verdict for r in report.runs] == ["ok"]
    status = next(i for i in report.inputs if i.path.endswith("trace.json"))
    assert status.status == "partial" and "reading budget" in (status.reason or ""), status
