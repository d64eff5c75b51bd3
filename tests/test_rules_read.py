"""Each rule declares the facts it reads (issue 33 item 3): its ``reads`` is the set of
:class:`~diag.rules.metrics.RunMetrics` fields its module uses ("graph_mode" for a field of
the run, "memory.kv_peak_usage" for one of a concern's group), no more and no fewer."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys

import pytest

from diag.rules import metrics
from diag.rules.base import Rule
from diag.rules.registry import RULES

GROUPS = {
    f.name: frozenset(g.name for g in dataclasses.fields(getattr(metrics, str(f.type))))
    for f in dataclasses.fields(metrics.RunMetrics)
    if dataclasses.is_dataclass(getattr(metrics, str(f.type), None))
}
TOP = frozenset(f.name for f in dataclasses.fields(metrics.RunMetrics)) - set(GROUPS)
FIELDS = TOP | {f"{g}.{name}" for g, names in GROUPS.items() for name in names}


def used_fields(source: str) -> set[str]:
    """``m.<field>`` and ``m.<group>.<field>`` (or ``metrics.``) in a module's source."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        if isinstance(v, ast.Name) and v.id in ("m", "metrics") and node.attr in TOP:
            out.add(node.attr)
        elif (
            isinstance(v, ast.Attribute)
            and isinstance(v.value, ast.Name)
            and v.value.id in ("m", "metrics")
            and node.attr in GROUPS.get(v.attr, ())
        ):
            out.add(f"{v.attr}.{node.attr}")
    return out


def test_the_metrics_are_grouped_by_concern() -> None:
    assert set(GROUPS) == {"capture", "window", "memory", "settings", "flags", "errors", "trace"}
    assert len(TOP) <= 6  # the run's engine and graph mode; everything else in a group


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_a_rule_reads_what_it_declares(rule: type[Rule]) -> None:
    assert set(rule.reads) <= FIELDS, set(rule.reads) - FIELDS
    source = inspect.getsource(sys.modules[rule.__module__])
    assert sorted(rule.reads) == sorted(used_fields(source))


def test_the_check_sees_an_undeclared_read() -> None:
    rule = RULES[0]
    source = inspect.getsource(sys.modules[rule.__module__]) + "\n_ = m.memory.kv_peak_usage\n"
    assert "memory.kv_peak_usage" not in rule.reads
    assert "memory.kv_peak_usage" in used_fields(source)
