"""sqlfluff-style rule tests: YAML cases (a log snippet or a fixture incident) per rule.

Every rule has at least one case where it must fire and one near miss where it must not. A
firing case asserts the message (``message``: substrings, in the log's own numbers) and the
evidence lines (``evidence``: substrings, each found in some evidence line's text); it may
assert remedies (``remedy`` / ``remedy_absent``: substrings), the first change of the run
(``first_change``), and run with ``--rules`` overrides (``rules``). Every finding of every case is
checked for unfilled templates and ``n/a`` / ``None``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from diag.api import analyze
from diag.rules.engine import first_change
from diag.rules.registry import ALL_CODES
from tests.conftest import ROOT

CASES_DIR = Path(__file__).parent / "rule_cases"
INCIDENTS = ROOT / "fixtures" / "incidents"
PLACEHOLDER = re.compile(r"\bn/a\b|\bNone\b|\{[a-z_]+[^}]*\}")


def _cases() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(CASES_DIR.glob("GD*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for case in doc["cases"]:
            out.append((doc["rule"], case))
    return out


CASES = _cases()


def test_every_rule_has_a_firing_case_and_a_near_miss() -> None:
    codes = set(ALL_CODES)
    fire = {rule for rule, c in CASES if c["fire"]}
    miss = {rule for rule, c in CASES if not c["fire"]}
    assert codes == fire, f"rules without a firing case: {codes - fire}"
    assert codes == miss, f"rules without a near miss: {codes - miss}"


def test_every_firing_case_asserts_message_and_evidence() -> None:
    missing = [
        f"{rule}: {c['name']}"
        for rule, c in CASES
        if c["fire"] and not (c.get("message") and c.get("evidence"))
    ]
    assert not missing, missing


@pytest.mark.parametrize(("rule", "case"), CASES, ids=[f"{r}-{c['name']}" for r, c in CASES])
def test_rule_case(rule: str, case: dict[str, Any], tmp_path: Path) -> None:
    if "incident" in case:
        target = INCIDENTS / case["incident"]
        assert target.is_dir(), f"missing fixture incident {target}"
    else:
        target = tmp_path / "case.log"
        target.write_text(case["log"])
    rules_file = None
    if "rules" in case:  # threshold overrides, as --rules FILE gives them
        rules_file = tmp_path / "rules.yaml"
        rules_file.write_text(yaml.safe_dump(case["rules"]))
    report = analyze([str(target)], rules_file=rules_file, generated_at="fixed")
    for f in report.findings:
        for text in [f.message, *f.remediation]:
            assert not PLACEHOLDER.search(text), f"{f.code}: unfilled or empty value in {text!r}"
    fired = {f.code for f in report.findings}
    if not case["fire"]:
        assert rule not in fired, (
            f"{rule} fired on a near miss: {[f.message for f in report.findings]}"
        )
        for code in case.get("instead", []):
            assert code in fired, f"the near miss should be {code}; fired: {sorted(fired)}"
        return
    assert rule in fired, f"{rule} did not fire; fired: {sorted(fired)}"
    finding = next(f for f in report.findings if f.code == rule)
    for part in case.get("message", []):
        assert part in finding.message, f"{part!r} not in message {finding.message!r}"
    texts = [e.text for e in finding.evidence]
    assert texts and all(texts), "a finding points at log lines, with their text"
    for part in case.get("evidence", []):
        assert any(part in t for t in texts), f"{part!r} in no evidence line: {texts}"
    assert finding.remediation, "a finding carries remediation"
    remedies = " | ".join(finding.remediation)
    for part in case.get("remedy", []):
        assert part in remedies, f"{part!r} not in remedies {remedies!r}"
    for part in case.get("remedy_absent", []):
        assert part not in remedies, f"{part!r} offered: {remedies!r}"
    if "first_remedy" in case:
        assert case["first_remedy"] in finding.remediation[0], finding.remediation
    if "first_change" in case:
        first = first_change(report.findings)
        assert first is not None and first.code == case["first_change"], first
    if "class" in case:
        assert report.runs[0].record.to_json()["capture_error"]["class"] == case["class"]
