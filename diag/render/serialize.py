"""JSON and YAML renderings of the report (machine-readable, deterministic), and the
ticket record as displayed in the HTML and Markdown reports.

- ``to_json``: the report contract, full lists.
- ``to_yaml`` (``--format yaml``): the ticket records, full lists, short scalar lists and
  histograms in flow style (one wrapped line, not one line per capture size).
- ``record_yaml``: the same records for people: a capture size list longer than
  :data:`COMPACT_FROM` is written as ``1, 2, 4, 8-256 step 8, ... (51 sizes)``.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from diag.render.fleet import fleet_json
from diag.render.sizes import compact_sizes
from diag.report import Report, clean_json

COMPACT_FROM = 17  # lists up to 16 sizes read fine as a list


def to_json(report: Report) -> str:
    doc = report.to_dict()
    fleet = report.fleet  # two runs or more: the fleet summary, an additive key
    if fleet is not None:
        doc["fleet"] = fleet_json(fleet)
    return json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def ticket_records(report: Report) -> list[dict[str, Any]]:
    """The ticket record of every run (the DOMAIN.md field set, INTERFACE.md names)."""
    out = []
    for run in report.runs:
        out.append(
            {
                "run": run.label,
                "backend": run.facts.backend,
                "engine_version": run.facts.engine_version,
                "verdict": run.verdict,
                "verdict_reason": run.verdict_reason,
                **clean_json(run.record.to_json()),
                "findings": [f"{f.code} {f.name} ({f.severity})" for f in run.findings],
            }
        )
    return out


class _FlowDumper(yaml.SafeDumper):
    """Flow style for lists and int-keyed maps of scalars (bucket lists, histograms)."""


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _repr_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(_is_scalar(v) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


def _repr_dict(dumper: yaml.SafeDumper, data: dict[Any, Any]) -> yaml.Node:
    flow = (
        bool(data)
        and all(_is_scalar(v) and not isinstance(v, str) for v in data.values())
        and all(str(k).lstrip("-").isdigit() for k in data)
    )
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=flow)


_FlowDumper.add_representer(list, _repr_list)
_FlowDumper.add_representer(dict, _repr_dict)


def _dump(doc: dict[str, Any]) -> str:
    return yaml.dump(doc, Dumper=_FlowDumper, sort_keys=False, allow_unicode=True, width=100)


def to_yaml(report: Report) -> str:
    return _dump({"schema": "graphdiag.ticket/1", "runs": ticket_records(report)})


def record_yaml(report: Report) -> str:
    """The ticket record for display: long capture size lists compacted (the JSON report
    and ``--format yaml`` keep them in full)."""
    runs = ticket_records(report)
    for rec in runs:
        sizes = rec.get("graph_capture_sizes")
        if isinstance(sizes, list) and len(sizes) >= COMPACT_FROM:
            rec["graph_capture_sizes"] = compact_sizes(sizes)
    return _dump({"schema": "graphdiag.ticket/1", "runs": runs})
