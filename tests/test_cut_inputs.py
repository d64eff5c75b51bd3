"""Issue 34 point 7: a cut input is never plainly ok. A truncated .gz, a log cut mid-line or
mid-traceback makes the run holding the cut ``incomplete``, the cut said first; a run that
ended before the cut keeps its verdict and names the cut."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from diag.api import analyze
from diag.render.text import render_text
from tests.conftest import ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"
HEALTHY = INCIDENTS / "sglang-healthy" / "server.log"

CUTS = [
    ("sglang-cut-gz", "truncated gzip"),
    ("sglang-cut-mid-line", "ends mid-line"),
    ("vllm-cut-mid-traceback", "cut inside a traceback"),
]


@pytest.mark.parametrize(("name", "said"), CUTS, ids=[c[0] for c in CUTS])
def test_a_cut_input_is_incomplete_with_the_cut_first(name: str, said: str) -> None:
    report = analyze([str(INCIDENTS / name)], generated_at="fixed")
    (run,) = report.runs
    assert run.verdict == "incomplete", run.verdict_reason
    assert run.verdict_reason.startswith("the input ") and said in run.verdict_reason.split(";")[0]
    assert "what was read before the cut" in run.verdict_reason
    doc = run.to_dict()
    assert doc["input_cut"]["in_run"] is True and said in doc["input_cut"]["reason"]
    assert said in " ".join(render_text(report).split())  # wrapped lines joined


def test_the_whole_file_is_ok_and_names_no_cut() -> None:
    (run,) = analyze([str(HEALTHY)], generated_at="fixed").runs
    assert run.verdict == "ok" and run.to_dict()["input_cut"] is None


def test_a_paste_whose_last_line_is_whole_is_not_cut(tmp_path: Path) -> None:
    """No final line end, but the last line is a whole decode line: not a cut."""
    log = tmp_path / "x.log"
    log.write_text(HEALTHY.read_text().rstrip("\n"))
    (run,) = analyze([str(log)], generated_at="fixed").runs
    assert run.verdict == "ok", run.verdict_reason


def test_a_run_that_ended_before_the_cut_keeps_its_verdict(tmp_path: Path) -> None:
    text = HEALTHY.read_text()
    lines = text.splitlines()
    second = lines[: len(lines) // 3]  # a restart cut during its start-up
    log = tmp_path / "two.log.gz"
    z = gzip.compress((text + "\n".join(second) + "\n").encode(), mtime=0)
    log.write_bytes(z[: len(z) - 40])
    runs = analyze([str(log)], generated_at="fixed").runs
    assert len(runs) == 2, [r.id for r in runs]
    first, last = runs
    assert first.verdict == "ok", first.verdict_reason
    assert "after this run, the input" in first.verdict_reason
    assert last.verdict == "incomplete" and last.verdict_reason.startswith("the input ")
