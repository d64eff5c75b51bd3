"""The rule engine: rule packs are data (YAML), conditions are lark expressions.

A rule = code, name, severity, doc, thresholds (each with the reason for its value), a
condition over :func:`diag.rules.metrics.run_metrics`, a message template, an evidence
selector and an ordered remediation list in the engine's own flags (per engine, and for
GD100 per error class). Users override thresholds, severities or switch rules off with
``--rules FILE``:

    thresholds: {GD110: {min_eager_share: 0.2}}
    severity: {GD140: warning}
    disable: [GD112]
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from diag.advise.bucket_sets import Advice
from diag.facts.record import RunFacts
from diag.model import Finding, Snapshot
from diag.resources import package_file
from diag.rules.conditions import ConditionError, compile_condition, evaluate
from diag.rules.metrics import run_metrics
from diag.rules.selectors import SELECTORS

SEVERITIES = ("error", "warning", "info")
PACK = package_file("rules", "packs", "core.yaml")


class RulesError(ValueError):
    """A rule pack or override file that cannot be used (one-line message)."""


@dataclass
class Rule:
    code: str
    name: str
    severity: str
    doc: str
    when: str
    message: str
    evidence: str | None = None
    thresholds: dict[str, Any] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)
    remediation: Any = None  # list, or {engine: list}, or {engine: {cause: list}}
    remedy_by: str | None = None  # the metric whose value picks the cause's list

    def remedies(self, metrics: Mapping[str, Any]) -> list[str]:
        rem = self.remediation
        if isinstance(rem, dict):
            rem = rem.get(metrics.get("backend") or "", rem.get("default"))
        if isinstance(rem, dict):
            cause = metrics.get(self.remedy_by or "") or "other"
            rem = rem.get(cause, rem.get("other"))
        return [_fmt(r, metrics) for r in (rem or [])]

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity,
            "doc": self.doc.strip(),
            "when": self.when,
            "thresholds": self.thresholds,
            "threshold_reasons": self.why,
            "remediation": self.remediation,
            "remediation_by": self.remedy_by,
        }


class _SafeFormatter(string.Formatter):
    """str.format that prints missing values as 'n/a' instead of failing."""

    def get_value(self, key: Any, args: Any, kwargs: Mapping[str, Any]) -> Any:
        return kwargs.get(key) if isinstance(key, str) else super().get_value(key, args, kwargs)

    def get_field(self, field_name: str, args: Any, kwargs: Mapping[str, Any]) -> Any:
        first, *rest = field_name.split(".")
        value: Any = kwargs.get(first)
        for part in rest:
            value = value.get(part) if isinstance(value, Mapping) else None
        return value, first

    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None:
            return "n/a"
        try:
            return super().format_field(value, format_spec)
        except (ValueError, TypeError):
            return str(value)


def _fmt(template: str, values: Mapping[str, Any]) -> str:
    return _SafeFormatter().format(template, **values)


def load_pack(path: Path) -> list[Rule]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise RulesError(f"cannot read rule pack {path}: {exc}".splitlines()[0]) from None
    rules = []
    for entry in data.get("rules", []):
        thresholds = {
            k: v["value"] if isinstance(v, dict) else v
            for k, v in (entry.get("thresholds") or {}).items()
        }
        why = {
            k: v.get("why", "")
            for k, v in (entry.get("thresholds") or {}).items()
            if isinstance(v, dict)
        }
        rule = Rule(
            code=entry["code"],
            name=entry["name"],
            severity=entry["severity"],
            doc=entry.get("doc", ""),
            when=entry["when"],
            message=entry["message"],
            evidence=entry.get("evidence"),
            thresholds=thresholds,
            why=why,
            remediation=entry.get("remediation"),
            remedy_by=entry.get("remedy_by"),
        )
        _validate(rule)
        rules.append(rule)
    return rules


def _validate(rule: Rule) -> None:
    if rule.severity not in SEVERITIES:
        raise RulesError(f"{rule.code}: severity must be one of {', '.join(SEVERITIES)}")
    try:
        compile_condition(rule.when)
    except ConditionError as exc:
        raise RulesError(f"{rule.code}: {exc}") from None
    if rule.evidence and rule.evidence not in SELECTORS:
        raise RulesError(f"{rule.code}: unknown evidence selector {rule.evidence!r}")


@dataclass
class RuleEngine:
    rules: list[Rule]

    @classmethod
    def load(cls, overrides: str | os.PathLike[str] | None = None) -> RuleEngine:
        rules = load_pack(PACK)
        if overrides is not None:
            apply_overrides(rules, Path(overrides))
        return cls(rules)

    def evaluate(
        self,
        facts: RunFacts,
        snapshots: Sequence[Snapshot] | None = None,
        advice: Advice | None = None,
    ) -> list[Finding]:
        metrics = run_metrics(facts, snapshots, advice)
        findings = []
        for rule in self.rules:
            env = {**metrics, "threshold": rule.thresholds}
            try:
                fired = evaluate(rule.when, env)
            except ConditionError as exc:
                raise RulesError(f"{rule.code}: {exc}") from None
            if not fired:
                continue
            evidence = SELECTORS[rule.evidence](facts) if rule.evidence else []
            findings.append(
                Finding(
                    rule.code,
                    rule.name,
                    rule.severity,
                    _fmt(rule.message, env),
                    evidence,
                    rule.remedies(env),
                )
            )
        order = {s: i for i, s in enumerate(SEVERITIES)}
        findings.sort(key=lambda f: (order[f.severity], f.code))
        return findings


def apply_overrides(rules: list[Rule], path: Path) -> None:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise RulesError(f"cannot read rules file {path}: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise RulesError(f"rules file {path}: expected a mapping with thresholds/severity/disable")
    by_code = {r.code: r for r in rules}
    for code, values in (data.get("thresholds") or {}).items():
        rule = by_code.get(code)
        if rule is None:
            raise RulesError(f"rules file {path}: unknown rule {code}")
        for key, value in (values or {}).items():
            if key not in rule.thresholds:
                raise RulesError(
                    f"rules file {path}: {code} has no threshold {key!r} "
                    f"(it has: {', '.join(sorted(rule.thresholds)) or 'none'})"
                )
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise RulesError(f"rules file {path}: {code}.{key} must be a number, not {value!r}")
            rule.thresholds[key] = value
    for code, sev in (data.get("severity") or {}).items():
        if code not in by_code:
            raise RulesError(f"rules file {path}: unknown rule {code}")
        if sev not in SEVERITIES:
            raise RulesError(
                f"rules file {path}: severity of {code} must be one of {', '.join(SEVERITIES)}"
            )
        by_code[code].severity = sev
    disabled = set(data.get("disable") or [])
    unknown = disabled - set(by_code)
    if unknown:
        raise RulesError(f"rules file {path}: unknown rule(s) {', '.join(sorted(unknown))}")
    rules[:] = [r for r in rules if r.code not in disabled]
