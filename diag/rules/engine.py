"""Run the rules of :mod:`diag.rules.registry` over one run's typed metrics.

Users override thresholds, severities or switch rules off with ``--rules FILE``:

    thresholds: {GD110: {min_eager_share: 0.2}}
    severity: {GD140: warning}
    disable: [GD112]

Findings come back ordered so that the first is the first change: the most severe, then the
highest-impact (a failure before a warning, a KV squeeze before padding); see
:func:`diag.model.first_change`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from diag.facts.record import RunFacts
from diag.model import Finding, Snapshot
from diag.model import finding_key as finding_key  # re-exported
from diag.model import first_change as first_change  # re-exported
from diag.rules.base import SEVERITIES, Rule, Severity, acts
from diag.rules.errors import RulesError as RulesError  # re-exported
from diag.rules.metrics import RunMetrics, run_metrics
from diag.rules.registry import BY_CODE, RULES
from diag.rules.selectors import SELECTORS

# what a warning lowered to info says (no remedy of it changes anything on the server)
NOTHING_TO_CHANGE = "reported at info, not warning: nothing the log shows says what to change"

if TYPE_CHECKING:
    from diag.advise.bucket_sets import Advice


def _order_key(rule: Rule) -> tuple[int, int, str]:
    return (SEVERITIES.index(rule.active_severity), -rule.impact, rule.code)


@dataclass
class RuleEngine:
    rules: list[Rule]

    @classmethod
    def load(cls, overrides: str | os.PathLike[str] | None = None) -> RuleEngine:
        thresholds: dict[str, dict[str, float]] = {}
        severity: dict[str, Severity] = {}
        disabled: set[str] = set()
        if overrides is not None:
            thresholds, severity, disabled = read_overrides(Path(overrides))
        return cls(
            [
                r(thresholds.get(r.code), severity.get(r.code))
                for r in RULES
                if r.code not in disabled
            ]
        )

    def evaluate(
        self,
        facts: RunFacts,
        snapshots: Sequence[Snapshot] | None = None,
        advice: Advice | None = None,
    ) -> list[Finding]:
        return self.judge(facts, snapshots, advice)[0]

    def judge(
        self,
        facts: RunFacts,
        snapshots: Sequence[Snapshot] | None = None,
        advice: Advice | None = None,
    ) -> tuple[list[Finding], tuple[str, ...]]:
        """The findings, and the notes of rules held back (a signal no rule could report,
        said rather than dropped; those the facts already note left out)."""
        m = run_metrics(facts, snapshots, advice)
        fired = [r for r in sorted(self.rules, key=_order_key) if r.fires(m)]
        notes: list[str] = []
        for rule in self.rules:
            note = None if rule in fired else rule.held_back(m)
            if note is not None and note not in facts.notes and note not in notes:
                notes.append(note)
        return self.evaluate_metrics(m, facts, fired), tuple(notes)

    def evaluate_metrics(
        self, m: RunMetrics, facts: RunFacts, fired: list[Rule] | None = None
    ) -> list[Finding]:
        if fired is None:
            fired = [r for r in sorted(self.rules, key=_order_key) if r.fires(m)]
        findings: dict[str, Finding] = {}
        for rule in fired:
            findings[rule.code] = Finding(
                rule.code,
                rule.name,
                rule.active_severity,
                rule.message(m),
                SELECTORS[rule.evidence](facts),
                rule.remediation(m),
                rule.cause(m),
                rule.impact,
            )
        for rule in fired:
            f = findings[rule.code]
            f.remediation = rule.adjust(m, findings, f.remediation)
        for f in findings.values():
            if f.severity == "warning" and not any(acts(r) for r in f.remediation):
                f.severity = "info"
                f.message += f"; {NOTHING_TO_CHANGE}"
        return list(findings.values())


def read_overrides(
    path: Path,
) -> tuple[dict[str, dict[str, float]], dict[str, Severity], set[str]]:
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise RulesError(f"cannot read rules file {path}: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise RulesError(f"rules file {path}: expected a mapping with thresholds/severity/disable")
    unknown_keys = set(data) - {"thresholds", "severity", "disable"}
    if unknown_keys:
        raise RulesError(
            f"rules file {path}: unknown section(s) {', '.join(sorted(map(str, unknown_keys)))} "
            "(it may have: thresholds, severity, disable)"
        )
    thresholds: dict[str, dict[str, float]] = {}
    for code, values in _mapping(data.get("thresholds"), path, "thresholds").items():
        rule = _rule(code, path)
        for key, value in _mapping(values, path, f"thresholds of {code}").items():
            if key not in rule.thresholds:
                raise RulesError(
                    f"rules file {path}: {code} has no threshold {key!r} "
                    f"(it has: {', '.join(sorted(rule.thresholds)) or 'none'})"
                )
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise RulesError(f"rules file {path}: {code}.{key} must be a number, not {value!r}")
            thresholds.setdefault(code, {})[key] = float(value)
    severity: dict[str, Severity] = {}
    for code, sev in _mapping(data.get("severity"), path, "severity").items():
        _rule(code, path)
        if sev not in SEVERITIES:
            raise RulesError(
                f"rules file {path}: severity of {code} must be one of {', '.join(SEVERITIES)}"
            )
        severity[code] = sev
    disable = data.get("disable") or []
    if not isinstance(disable, list):
        raise RulesError(f"rules file {path}: disable must be a list of rule codes")
    for code in disable:
        _rule(code, path)
    return thresholds, severity, set(disable)


def _mapping(value: Any, path: Path, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RulesError(f"rules file {path}: {what} must be a mapping")
    return value


def _rule(code: Any, path: Path) -> type[Rule]:
    rule = BY_CODE.get(str(code))
    if rule is None:
        raise RulesError(f"rules file {path}: unknown rule {code}")
    return rule
