"""Each rule declares the facts it reads (issue 33 item 3): its ``reads`` is the set of
:class:`~diag.rules.metrics.RunMetrics` fields its module uses, no more and no fewer."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys

import pytest

from diag.rules.base import Rule
from diag.rules.metrics import RunMetrics
from diag.rules.registry import RULES

FIELDS = frozenset(f.name for f in dataclasses.fields(RunMetrics))


def used_fields(source: str) -> set[str]:
    """``m.<field>`` / ``metrics.<field>`` in a module's source, for RunMetrics fields."""
    return {
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("m", "metrics")
        and node.attr in FIELDS
    }


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_a_rule_reads_what_it_declares(rule: type[Rule]) -> None:
    assert set(rule.reads) <= FIELDS, set(rule.reads) - FIELDS
    source = inspect.getsource(sys.modules[rule.__module__])
    assert sorted(rule.reads) == sorted(used_fields(source))


def test_the_check_sees_an_undeclared_read() -> None:
    rule = RULES[0]
    source = inspect.getsource(sys.modules[rule.__module__]) + "\n_ = m.kv_peak_usage\n"
    assert "kv_peak_usage" not in rule.reads and "kv_peak_usage" in used_fields(source)
