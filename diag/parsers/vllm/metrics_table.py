"""vLLM's R-3 CUDA-graph metrics table (``| num_tokens | ... |``), read with a lark grammar."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from lark import Lark, Token, Transformer, UnexpectedInput, v_args

from diag.lines import periodic
from diag.lines.spec import digits_int
from diag.normalize.prefix import LogLine
from diag.parsers.base import Block, BulkRows, Context, parse_int_list
from diag.parsers.vllm.patterns import ENGINE, first_time, mode_name
from diag.resources import grammar_text


@lru_cache(maxsize=1)
def _metrics_parser() -> Lark:
    return Lark(grammar_text("cudagraph_metrics.lark"), parser="lalr", propagate_positions=True)


@dataclass
class MetricsItem:
    """One parsed table line: kind "title" | "setting" | "row" | "rule", 1-based line in the text."""

    kind: str
    line: int
    values: list[Any]


@v_args(meta=True)
class _MetricsTransformer(Transformer):
    def start(self, meta: Any, items: list[MetricsItem]) -> list[MetricsItem]:
        return items

    def title(self, meta: Any, children: list[Token]) -> MetricsItem:
        return MetricsItem("title", meta.line, [str(children[0]).strip("*: ")])

    def setting(self, meta: Any, children: list[Token]) -> MetricsItem:
        key = str(children[0]).strip()
        value = str(children[1]).strip() if len(children) > 1 else ""
        return MetricsItem("setting", meta.line, [key, value])

    def row(self, meta: Any, children: list[Any]) -> MetricsItem:
        return MetricsItem("row", meta.line, list(children))

    def rule(self, meta: Any, children: list[Token]) -> MetricsItem:
        return MetricsItem("rule", meta.line, [])

    def int_cell(self, meta: Any, children: list[Token]) -> int:
        return digits_int(str(children[0]))

    def word_cell(self, meta: Any, children: list[Token]) -> str:
        return str(children[0]).strip()


# The grammar's lines are independent (no token spans a newline), so the text parses as its
# lines do one by one. Table rows and rules, most of a table, are read here by the grammar's
# own terminals (INT, WORDS, RULE; ASCII digits only); any other line goes to lark (LALR in
# Python: ~0.5 ms a line, 37 ms for a 70-row table of vllm==0.33's real shape).
_INT_CELL = re.compile(r"-?[0-9]+")
_WORDS_CELL = re.compile(r"[A-Za-z_][A-Za-z_ ]*[A-Za-z_]|[A-Za-z_]")
_RULE_LINE = re.compile(r"\|(?:[ \t]*:?-+:?[ \t]*\|)+")


def _fast_line(part: str, line: int) -> MetricsItem | None:
    """A rule or a row of INT / WORDS cells, as the grammar reads it; None: ask lark."""
    if _RULE_LINE.fullmatch(part):
        return MetricsItem("rule", line, [])
    if len(part) < 2 or part[0] != "|" or part[-1] != "|":
        return None
    cells: list[Any] = []
    for cell in part[1:-1].split("|"):
        cell = cell.strip(" \t")
        if _INT_CELL.fullmatch(cell):
            cells.append(digits_int(cell))
        elif _WORDS_CELL.fullmatch(cell):
            cells.append(cell)
        else:
            return None
    return MetricsItem("row", line, cells)


def parse_metrics_table(lines: list[str]) -> list[MetricsItem]:
    """Parse table message lines (headers stripped); a line the grammar rejects is skipped."""
    items: list[MetricsItem] = []
    for i, raw in enumerate(lines, 1):
        part = raw.strip()
        if not part:
            continue
        fast = _fast_line(part, i)
        if fast is not None:
            items.append(fast)
            continue
        for kind, values in _grammar_line(part):
            items.append(MetricsItem(kind, i, list(values)))
    return items


@lru_cache(maxsize=512)
def _grammar_line(part: str) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """What lark reads in one line (nothing where it rejects it), as (kind, values). Kept
    for the lines read last: a table's title and settings lines repeat on every start of
    every pod of a deployment, and each costs lark ~0.5 ms."""
    try:
        one: list[MetricsItem] = _MetricsTransformer().transform(
            _metrics_parser().parse(part + "\n")
        )
    except UnexpectedInput:
        return ()
    return tuple((item.kind, tuple(item.values)) for item in one)


_COLUMNS = (
    ("unpadded", "num_tokens"),
    ("padded", "padded_tokens"),
    ("mode", "mode"),
    ("count", "count"),
)


def _column_map(labels: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for idx, label in enumerate(labels):
        low = str(label).lower()
        for needle, field_name in _COLUMNS:
            if needle in low and field_name not in out:
                out[field_name] = idx
                break
    return out


_DEFAULT_COLUMNS = {"num_tokens": 0, "padded_tokens": 1, "mode": 3, "count": 4}
#: the cells' order under which a row is read as declared (periodic.VL_METRICS_ROW)
_DECLARED_COLUMNS = periodic.VL_METRICS_ROW.cell_order()
#: a row outside any table block (past ``MAX_LINES``, or alone) is a one-row table read in
#: the default order: the declared one, so the hot path may read such rows in bulk
LOOSE_ROWS = (periodic.VL_METRICS_ROW.name,) if _DEFAULT_COLUMNS == _DECLARED_COLUMNS else ()


def _header_columns(cells: list[Any], columns: dict[str, int]) -> dict[str, int]:
    """The columns after a row: a header row (every cell a word) sets them, a data row not."""
    if all(isinstance(c, str) for c in cells):
        return {**_DEFAULT_COLUMNS, **_column_map(cells)}
    return columns


class MetricsTableBlock(Block, BulkRows):
    """R-3: the ``--cudagraph-metrics`` table, one logged line per table line. Under a
    header row in the declared order its data rows may come read in bulk (``BulkRows``)."""

    MAX_LINES = 600
    MAX_FOREIGN = 40
    row = periodic.VL_METRICS_ROW.name

    def __init__(self, first: LogLine) -> None:
        self.lines: list[LogLine] = [first]
        self.key = first.key
        self.foreign = 0
        self.done = False
        self.bulk: list[dict[str, Any]] = []  # rows read in bulk, placed at finish
        self.n_bulk = 0
        self._columns: dict[str, int] | None = None  # after the lines looked at; None: no header
        self._looked = 0

    def bulk_room(self) -> int:
        for seen in self.lines[self._looked :]:  # header rows only ever start with "|"
            msg = seen.msg.strip()
            if msg.startswith("|"):
                for item in parse_metrics_table([msg]):
                    if item.kind == "row" and all(isinstance(c, str) for c in item.values):
                        self._columns = _header_columns(item.values, _DEFAULT_COLUMNS)
        self._looked = len(self.lines)
        if self.done or self._columns != _DECLARED_COLUMNS:
            return 0
        return self.MAX_LINES - len(self.lines) - self.n_bulk

    def take_bulk(self, columns: dict[str, Any], n: int) -> None:
        self.bulk.append(columns)
        self.n_bulk += n

    def offer(self, line: LogLine) -> bool:
        if len(self.lines) + self.n_bulk >= self.MAX_LINES:
            self.done = True
            return False
        if line.key != self.key:  # another process interleaved: let it through
            self.foreign += 1
            if self.foreign > self.MAX_FOREIGN:
                self.done = True
            return False
        msg = line.msg.strip()
        if not msg or msg.startswith(("**CUDAGraph", "- ", "|")):
            if msg.startswith("**CUDAGraph Config") and (
                self.n_bulk or any("|" in seen.msg for seen in self.lines)
            ):
                self.done = True  # the next interval's table
                return False
            self.lines.append(line)
            return True
        self.done = True
        return False

    def finish(self, ctx: Context) -> None:
        items = parse_metrics_table([seen.msg for seen in self.lines])
        columns = dict(_DEFAULT_COLUMNS)
        mode_setting: str | None = None
        first_row = ctx.sink.lines_emitted("graph_step")
        row_lines: list[int] = []  # of the rows emitted here, for the rows read in bulk
        for item in items:
            src = self.lines[min(item.line, len(self.lines)) - 1]
            if item.kind == "setting":
                key, value = item.values
                if key.lower() == "mode":
                    mode_setting = mode_name(value) or value
                    if mode_setting and first_time(ctx, "metrics_mode", mode_setting):
                        ctx.emit(
                            "graph_mode",
                            src,
                            engine=ENGINE,
                            mode=mode_setting,
                            origin="metrics",
                            downgraded=False,
                            text=src.msg.strip()[:300],
                        )
                elif "capture sizes" in key.lower():
                    sizes = sorted(set(parse_int_list(value) or []))
                    if first_time(ctx, "metrics_sizes", tuple(sizes)):
                        ctx.emit(
                            "capture_sizes",
                            src,
                            engine=ENGINE,
                            phase="metrics",
                            mode=mode_setting,
                            sizes=sizes,
                            count=len(sizes),
                            largest=max(sizes) if sizes else None,
                        )
            elif item.kind == "row":
                cells = item.values
                if all(isinstance(c, str) for c in cells):
                    columns = _header_columns(cells, columns)
                    continue
                row = {k: cells[i] if i < len(cells) else None for k, i in columns.items()}
                if not all(
                    isinstance(row[k], int) for k in ("num_tokens", "padded_tokens", "count")
                ):
                    continue
                ctx.emit(
                    "graph_step",
                    src,
                    engine=ENGINE,
                    mode=str(row["mode"]) if row["mode"] is not None else None,
                    num_tokens=row["num_tokens"],
                    padded_tokens=row["padded_tokens"],
                    num_reqs=None,
                    uniform=None,
                    count=row["count"],
                    origin="metrics_table",
                )
                row_lines.append(src.lineno)
        for part in self.bulk:  # each before the first row emitted here of a later line
            at = np.searchsorted(row_lines, part["line"].to_numpy(), side="right")
            ctx.add_bulk("graph_step", part, first_row + at.astype(np.int64))
