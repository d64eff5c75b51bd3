"""The metrics table's fast line reader reads as the lark grammar does.

``parse_metrics_table`` reads rows and rules with the grammar's terminals and hands every
other line to lark; the reference here is lark alone on the whole text (falling back line by
line), the grammar's own reading, on tables of vllm's shape and on lines built from the
characters the grammar cares about."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from lark import UnexpectedInput

from diag.parsers.vllm.metrics_table import (
    MetricsItem,
    _metrics_parser,
    _MetricsTransformer,
    parse_metrics_table,
)


def _lark_only(lines: list[str]) -> list[tuple[str, int, list[object]]]:
    text = "\n".join(part.strip() for part in lines) + "\n"
    try:
        items: list[MetricsItem] = _MetricsTransformer().transform(_metrics_parser().parse(text))
    except UnexpectedInput:
        items = []
        for i, part in enumerate(lines, 1):
            try:
                one = _MetricsTransformer().transform(_metrics_parser().parse(part.strip() + "\n"))
            except UnexpectedInput:
                continue
            for item in one:
                item.line = i
                items.append(item)
    return [(i.kind, i.line, i.values) for i in items]


def _fast(lines: list[str]) -> list[tuple[str, int, list[object]]]:
    return [(i.kind, i.line, i.values) for i in parse_metrics_table(lines)]


REAL = [
    "**CUDAGraph Config Settings:**",
    "",
    "- Mode: FULL_AND_PIECEWISE",
    "- Capture sizes: [1, 2, 4, 8, 16]",
    "",
    "**CUDAGraph Stats:**",
    "",
    "| Unpadded Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count |",
    "|-----------------|---------------|--------------|--------------|-------|",
    "| 37              | 40            | 3            | FULL         | 512   |",
    "| 2048            | 2048          | 0            | NONE         | 12    |",
    "",
]


def test_real_table_reads_as_lark() -> None:
    assert _fast(REAL) == _lark_only(REAL)
    rows = [i for i in _fast(REAL) if i[0] == "row"]
    assert rows[1][2] == [37, 40, 3, "FULL", 512]


_GOOD = ["FULL", "NONE", "Runtime Mode", "a", "_x_", "0", "-12", "512", "9" * 40]
_ODD = ["", "-", "1a", "a1", "1 a", "\u0663", "A\tB", ":-:", "*", "a  b "]
# mostly cells the grammar reads, now and then one it does not: a row reads or fails whole
_CELL = st.one_of(
    st.sampled_from(_GOOD * 4 + _ODD),
    st.integers(-5, 10**20).map(str),
    st.text(alphabet="|-: \t*ab1_", max_size=6),
)
_LINE = st.one_of(
    st.lists(_CELL, min_size=1, max_size=5).map(lambda cs: "| " + " | ".join(cs) + " |"),
    st.lists(st.sampled_from(["---", ":--", "--:", " - ", ""]), min_size=1, max_size=5).map(
        lambda cs: "|" + "|".join(cs) + "|"
    ),
    st.text(alphabet="|-: \t*ab1_\r٣", max_size=20),
    st.sampled_from(REAL),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, max_size=12))
def test_any_lines_read_as_lark(lines: list[str]) -> None:
    assert _fast(lines) == _lark_only(lines)
