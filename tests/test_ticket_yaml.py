"""The ticket records' YAML is libyaml's where PyYAML has it, dumped run by run: the same
text as PyYAML's own emitter dumping the document whole, on every fixture incident (a
fleet's records took seconds in pure Python, and hundreds of MB as one node tree)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from diag.api import analyze
from diag.render import serialize
from tests.conftest import ROOT

INCIDENTS = sorted(p for p in (ROOT / "fixtures" / "incidents").iterdir() if p.is_dir())


class _PyFlowDumper(yaml.SafeDumper):
    """The report's dumper on PyYAML's pure-Python emitter."""


_PyFlowDumper.add_representer(list, serialize._repr_list)
_PyFlowDumper.add_representer(dict, serialize._repr_dict)


@pytest.mark.skipif(not getattr(yaml, "__with_libyaml__", False), reason="PyYAML without libyaml")
def test_the_report_dumps_with_libyaml() -> None:
    assert issubclass(serialize._FlowDumper, yaml.CSafeDumper)


@pytest.mark.parametrize("incident", INCIDENTS, ids=[p.name for p in INCIDENTS])
def test_ticket_yaml_is_the_pure_python_text(incident: Path) -> None:
    report = analyze([str(incident)], generated_at="fixed")
    doc = {"schema": "graphdiag.ticket/1", "runs": list(serialize.ticket_records(report))}
    pure = yaml.dump(doc, Dumper=_PyFlowDumper, sort_keys=False, allow_unicode=True, width=100)
    assert serialize.to_yaml(report) == pure
    assert yaml.safe_load(pure)["runs"]  # a document with its runs, not an empty one
