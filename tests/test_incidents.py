"""Fixture incidents: committed files equal the generator's output, and analysing each one
gives the ground truth the generator put in (record values, findings that must/must not fire)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from diag.api import analyze
from gen import incidents as gen
from tests.conftest import ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"
NAMES = sorted(gen.BUILDERS)


def test_committed_fixtures_match_the_generator(tmp_path: Path) -> None:
    for inc in gen.build_all():
        inc.write(tmp_path)
    for folder in sorted(tmp_path.iterdir()):
        for path in sorted(folder.iterdir()):
            committed = INCIDENTS / folder.name / path.name
            assert committed.exists(), (
                f"{committed} missing: run python fixtures/gen/incidents.py fixtures/incidents"
            )
            assert committed.read_bytes() == path.read_bytes(), (
                f"{committed} differs from the generator"
            )


@pytest.mark.parametrize("name", NAMES)
def test_incident_truth(name: str) -> None:
    folder = INCIDENTS / name
    truth = yaml.safe_load((folder / "truth.yaml").read_text())
    report = analyze([str(folder)], generated_at="fixed")
    assert len(report.runs) == 1, [r.id for r in report.runs]
    rec = report.runs[0].record.to_json()  # the truth files hold the JSON record
    for key, want in truth["record"].items():
        if key == "batches":
            assert {k: rec["batches"][k] for k in want} == want
        else:
            assert rec[key] == want, key
    if "verdict" in truth:
        assert report.runs[0].verdict == truth["verdict"], report.runs[0].verdict_reason
    fired = {f.code for f in report.findings}
    assert set(truth["must_fire"]) <= fired, f"missing {set(truth['must_fire']) - fired}"
    assert not (set(truth["must_not_fire"]) & fired), (
        f"unexpected {set(truth['must_not_fire']) & fired}"
    )
