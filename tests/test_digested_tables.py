"""The command line analyses without event tables (``keep_tables=False``): the runs' facts
are built, then the raw rows they digested (``diag.pipeline.DIGESTED``: a big log's largest
frames) are let go. Every output must be what the full analysis gives, on every fixture
incident: nothing after the facts stage may read those rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.api import analyze
from diag.pipeline import DIGESTED
from diag.render.html import render_html
from diag.render.serialize import to_json, to_yaml
from diag.render.text import render_text
from tests.conftest import ROOT

INCIDENTS = sorted(p for p in (ROOT / "fixtures" / "incidents").iterdir() if p.is_dir())


def _outputs(folder: Path, keep_tables: bool) -> tuple[str, ...]:
    report = analyze([str(folder)], generated_at="fixed", keep_tables=keep_tables)
    if not keep_tables:
        assert not report.tables._frames
        for run in report.runs:
            assert not set(DIGESTED) & set(run.facts.run.tables._frames)
    return to_json(report), render_text(report), to_yaml(report), render_html(report)


@pytest.mark.parametrize("folder", INCIDENTS, ids=lambda p: p.name)
def test_outputs_without_the_digested_rows_are_the_same(folder: Path) -> None:
    assert _outputs(folder, keep_tables=False) == _outputs(folder, keep_tables=True)


def test_the_full_analysis_keeps_them() -> None:
    folder = ROOT / "fixtures" / "incidents" / "vllm-healthy"
    report = analyze([str(folder)], generated_at="fixed")
    assert not report.tables["graph_step"].empty
    assert any(not r.facts.run.tables["graph_step"].empty for r in report.runs)
