"""JSON and YAML renderings of the report (machine-readable, deterministic)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from diag.report import Report, clean_json


def to_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def ticket_records(report: Report) -> list[dict[str, Any]]:
    """The ticket record of every run (the DOMAIN.md field set, INTERFACE.md names)."""
    out = []
    for run in report.runs:
        out.append(
            {
                "run": run.id,
                "backend": run.facts.backend,
                "engine_version": run.facts.engine_version,
                **clean_json(run.record),
                "findings": [f"{f.code} {f.name} ({f.severity})" for f in run.findings],
            }
        )
    return out


def to_yaml(report: Report) -> str:
    return yaml.safe_dump(
        {"schema": "graphdiag.ticket/1", "runs": ticket_records(report)},
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )
