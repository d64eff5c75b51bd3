"""sqlfluff-style rule tests: YAML cases (a log snippet or a fixture incident) per rule.

Every rule has at least one case where it must fire and one near miss where it must not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from diag.api import analyze
from diag.rules.engine import RuleEngine
from tests.conftest import ROOT

CASES_DIR = Path(__file__).parent / "rule_cases"
INCIDENTS = ROOT / "fixtures" / "incidents"


def _cases() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(CASES_DIR.glob("GD*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for case in doc["cases"]:
            out.append((doc["rule"], case))
    return out


CASES = _cases()


def test_every_rule_has_a_firing_case_and_a_near_miss() -> None:
    codes = {r.code for r in RuleEngine.load().rules}
    fire = {rule for rule, c in CASES if c["fire"]}
    miss = {rule for rule, c in CASES if not c["fire"]}
    assert codes == fire, f"rules without a firing case: {codes - fire}"
    assert codes == miss, f"rules without a near miss: {codes - miss}"


@pytest.mark.parametrize(("rule", "case"), CASES, ids=[f"{r}-{c['name']}" for r, c in CASES])
def test_rule_case(rule: str, case: dict[str, Any], tmp_path: Path) -> None:
    if "incident" in case:
        target = INCIDENTS / case["incident"]
        assert target.is_dir(), f"missing fixture incident {target}"
    else:
        target = tmp_path / "case.log"
        target.write_text(case["log"])
    report = analyze([str(target)], generated_at="fixed")
    fired = {f.code for f in report.findings}
    if case["fire"]:
        assert rule in fired, f"{rule} did not fire; fired: {sorted(fired)}"
        finding = next(f for f in report.findings if f.code == rule)
        assert finding.evidence, "a finding must point at log lines"
        assert all(e.text for e in finding.evidence), "evidence lines carry their text"
        assert finding.remediation, "a finding carries remediation"
        if "class" in case:
            assert report.runs[0].record["capture_error"]["class"] == case["class"]
    else:
        assert rule not in fired, (
            f"{rule} fired on a near miss: {[f.message for f in report.findings]}"
        )
