"""The rules as documentation: every rule's docstring examples run, the README's list is the
registry's, the catalogue is concrete text, and "first change" is the most severe, highest
impact finding."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from diag.api import analyze
from diag.model import Finding
from diag.rules.engine import RuleEngine, first_change
from diag.rules.registry import ALL_CODES, BY_CODE, RULES, readme_table
from tests.conftest import ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"
PLACEHOLDER = re.compile(r"\bn/a\b|\bNone\b|\{[a-z_]+[^}]*\}")
EXAMPLES = [(r, fires, title, block) for r in RULES for fires, title, block in r.examples()]


def test_every_rule_documents_a_firing_example_and_a_near_miss() -> None:
    for rule in RULES:
        kinds = {fires for fires, _, _ in rule.examples()}
        assert kinds == {True, False}, f"{rule.code}: docstring needs Fires:: and Near miss::"
        assert rule.__module__.split(".")[-1].startswith(rule.code.lower() + "_")


@pytest.mark.parametrize(
    ("rule", "fires", "title", "block"), EXAMPLES, ids=[f"{r.code}-{t}" for r, _, t, _ in EXAMPLES]
)
def test_docstring_example(rule: type, fires: bool, title: str, block: str, tmp_path: Path) -> None:
    if block.startswith("incident:"):
        target = INCIDENTS / block.split(":", 1)[1].strip()
        assert target.is_dir(), target
    else:
        target = tmp_path / "example.log"
        target.write_text(block)
    codes = {f.code for f in analyze([str(target)], generated_at="fixed").findings}
    assert (rule.code in codes) == fires, f"{rule.code} {title}: fired {sorted(codes)}"


def test_thresholds_are_typed_and_explained() -> None:
    for rule in RULES:
        for name, t in rule.thresholds.items():
            assert isinstance(t.value, int | float) and len(t.why) > 20, (rule.code, name)


def test_readme_lists_the_registry() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme_table() in text, (
        "README rule list drifted: python -m diag.rules.registry README.md"
    )


def test_catalogue_is_concrete_text() -> None:
    blob = json.dumps([r.catalogue() for r in RULES])
    for rule in RULES:
        for rem in rule.remedies:
            assert not PLACEHOLDER.search(rem.text), (rule.code, rem.text)
    assert "n/a" not in blob and [r["code"] for r in json.loads(blob)] == list(ALL_CODES)


def test_overrides_reach_the_rules(tmp_path: Path) -> None:
    f = tmp_path / "r.yaml"
    f.write_text(
        "thresholds: {GD140: {max_seconds: 5}}\nseverity: {GD112: warning}\ndisable: [GD170]\n"
    )
    engine = RuleEngine.load(f)
    by = {r.code: r for r in engine.rules}
    assert by["GD140"].t("max_seconds") == 5 and by["GD112"].active_severity == "warning"
    assert "GD170" not in by
    codes = {x.code for x in analyze([str(INCIDENTS / "sglang-healthy")], rules_file=f).findings}
    assert "GD140" in codes  # a 6 s capture is slow under a 5 s threshold


def test_first_change_is_most_severe_then_highest_impact() -> None:
    def f(code: str, sev: str) -> Finding:  # as the rule engine makes it: the rule's impact
        return Finding(code, code, sev, "m", [], ["do it"], impact=BY_CODE[code].impact)

    # a failure before a warning; a KV squeeze before padding; info last
    assert first_change([f("GD111", "warning"), f("GD100", "error")]).code == "GD100"
    assert first_change([f("GD111", "warning"), f("GD120", "warning")]).code == "GD120"
    assert first_change([f("GD112", "info"), f("GD111", "warning")]).code == "GD111"
    assert first_change([Finding("GD120", "x", "warning", "m", [], [])]) is None


def test_v0_kv_tokens_derived_from_gpu_blocks(tmp_path: Path) -> None:
    log = tmp_path / "v0.log"
    log.write_text(
        "INFO 10-18 10:03:11 llm_engine.py:237] Initializing an LLM engine (v0.6.3.post1) with "
        "config: model='m', enforce_eager=False, tensor_parallel_size=1\n"
        "INFO 10-18 10:03:15 gpu_executor.py:122] # GPU blocks: 2000, # CPU blocks: 512\n"
    )
    run = analyze([str(log)]).runs[0]
    assert run.record.to_json()["gpu_blocks"] == 2000 and run.record.to_json()["kv_tokens"] == 32000
    assert "derived" in run.to_dict()["kv_tokens_source"]


@pytest.mark.parametrize("name", sorted(p.name for p in INCIDENTS.iterdir() if p.is_dir()))
def test_remedies_name_only_flags_the_version_accepts(name: str) -> None:
    """Every --flag a rendered remedy names is in the engine's flag table (read from that
    engine's released source) and accepted by the run's version."""
    from diag.engines.flags import TABLES, accepts

    report = analyze([str(INCIDENTS / name)], generated_at="fixed")
    for run in report.runs:
        table = TABLES.get(run.facts.backend, {})
        for f in run.findings:
            for text in f.remediation:
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", text):
                    assert flag in table, f"{name} {f.code}: {flag} not in the flag table"
                    assert accepts(run.facts.backend, flag, run.facts.engine_version), (
                        f"{name} {f.code}: {flag} not accepted by {run.facts.engine_version}"
                    )
