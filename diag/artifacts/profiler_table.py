"""Parse torch.profiler ``key_averages().table()`` text, standalone or logged by SGLang.

SGLang's ``--enable-profile-cuda-graph`` logs two such tables ("Sorted by CUDA Time:" /
"Sorted by CPU Time:"); users also paste them into files. The block structure and every
cell are parsed by ``grammars/profiler_table.lark``. Column boundaries come from the dash
runs of the separator line, not from whitespace, because names contain spaces and shapes
contain ", " (torch-artifacts.md B1). Parsing never raises on cut or garbled tables: it
keeps the rows that are whole and sets ``complete=False``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from lark import Token, Tree
from lark.exceptions import LarkError, UnexpectedInput

from diag.artifacts.table_columns import (
    BASE_COLUMNS,
    CELL_VALUES,
    EXTRA_ORDER,
    BadCell,
    Column,
    cell_value,
    columns_of,
    slice_row,
    table_parser,
)
from diag.engines.config import COUNT_LIMIT

__all__ = [
    "ProfileTable",
    "ProfileTableError",
    "dominant_operators",
    "find_tables",
    "parse_table_block",
]


class ProfileTableError(ValueError):
    """Raised only when the lines hold nothing that looks like a profiler table."""


# --------------------------------------------------------------------------- the table

_SEP_RE = re.compile(r"^-+(?:  -+)*[ \t]*$")
_RULE_RE = re.compile(r"^=+[ \t]*$")
_SORTED_RE = re.compile(r"Sorted by (?P<what>[^\n]*?):[ \t]*$")
_SORTED_TIME_RE = re.compile(r"^(?P<dev>[A-Za-z0-9_]+) Time$")


@dataclass(eq=False)
class ProfileTable:
    """One parsed ``key_averages().table()``; times in seconds, memory in bytes."""

    path: str
    line: int
    sort_by: str | None
    self_cpu_total_s: float | None
    self_cuda_total_s: float | None
    frame: pd.DataFrame = field(repr=False)
    complete: bool = True
    device: str | None = None  # "CUDA", "XPU", ... when the table has device columns
    titles: list[str] = field(default_factory=list)  # header titles as printed
    footer_totals: dict[str, float] = field(default_factory=dict)  # "CPU"/"CUDA"/... -> seconds
    banner: list[str] = field(default_factory=list)  # table(header=...) lines

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: plain floats/ints/None, NaN as None."""
        rows = []
        for rec in self.frame.loc[:, list(BASE_COLUMNS)].to_dict("records"):
            rows.append(
                {
                    "name": _plain_str(rec["name"]),
                    "input_shapes": _plain_str(rec["input_shapes"]),
                    "self_cpu_s": _plain_float(rec["self_cpu_s"]),
                    "cpu_total_s": _plain_float(rec["cpu_total_s"]),
                    "self_cuda_s": _plain_float(rec["self_cuda_s"]),
                    "cuda_total_s": _plain_float(rec["cuda_total_s"]),
                    "calls": _plain_int(rec["calls"]),
                }
            )
        return {
            "path": self.path,
            "line": self.line,
            "sort_by": self.sort_by,
            "self_cpu_total_s": _plain_float(self.self_cpu_total_s),
            "self_cuda_total_s": _plain_float(self.self_cuda_total_s),
            "dominant": dominant_operators(self),
            "rows": rows,
        }


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _plain_float(v: Any) -> float | None:
    return None if _missing(v) else float(v)


def _plain_int(v: Any) -> int | None:
    return None if _missing(v) else int(v)


def _plain_str(v: Any) -> str | None:
    return None if _missing(v) else str(v)


def parse_table_block(
    lines: list[str], path: str, first_line: int, sort_by: str | None = None
) -> ProfileTable:
    """Parse one table; ``first_line`` is the 1-based source line of ``lines[0]``.

    ``lines[0]`` may be the "Sorted by X Time:" line (a leftover log prefix is tolerated).
    Text after the table is ignored. Raises :class:`ProfileTableError` only when no
    separator/header pair is found.
    """
    table, _ = _parse_block(lines, path, first_line, sort_by)
    return table


def _parse_block(
    lines: Sequence[str], path: str, first_line: int, sort_by: str | None
) -> tuple[ProfileTable, int]:
    """The table and the index (into ``lines``) of its last line."""
    clean = [ln.rstrip("\r\n") for ln in lines]
    start = next((i for i, ln in enumerate(clean) if _SEP_RE.match(ln)), None)
    if start is None:
        raise ProfileTableError(
            f"{path}:{first_line}: no profiler table (no dashed separator line)"
        )
    while start >= 2 and _RULE_RE.match(clean[start - 2]) and clean[start - 1].strip():
        start -= 2
    header_sort: str | None = None
    if start >= 1 and (m := _SORTED_RE.search(clean[start - 1])):
        start -= 1
        header_sort = _sort_key_from_header(m.group("what"))
        clean[start] = clean[start][m.start() :]
    block = clean[start:]

    tree = _parse_structure(block, path, first_line + start)
    parts = _collect(tree)
    seps: list[Token] = parts["sep"]
    headers: list[Token] = parts["header"]
    if not headers:
        raise ProfileTableError(f"{path}:{first_line + start}: dashed line without a table header")
    sep_line = str(seps[0]).rstrip()
    columns, device = columns_of(sep_line, str(headers[0]))
    if not any(c.field == "name" for c in columns):
        raise ProfileTableError(f"{path}:{first_line + start}: header has no 'Name' column")

    last = _line_of(headers[0])
    if len(seps) >= 2:
        last = _line_of(seps[1])
    records, rows_ok, last_row = _rows(parts["row"], columns, first_line + start)
    last = max(last, last_row)
    footer_totals: dict[str, float] = {}
    closed = len(seps) >= 3 and rows_ok
    if closed:
        last = _line_of(seps[2])
        for dev, seconds, tok_line in parts["footer"]:
            footer_totals[dev] = seconds
            last = max(last, tok_line)
    complete = closed and "CPU" in footer_totals and (device is None or device in footer_totals)

    frame = _frame(records, columns)
    if sort_by is None:
        sort_by = header_sort if header_sort is not None else _infer_sort(frame)
    dev_total = footer_totals.get(device) if device else None
    if dev_total is None:
        dev_total = next((v for k, v in footer_totals.items() if k != "CPU"), None)
    table = ProfileTable(
        path=path,
        line=first_line + start,
        sort_by=sort_by,
        self_cpu_total_s=footer_totals.get("CPU"),
        self_cuda_total_s=dev_total,
        frame=frame,
        complete=complete,
        device=device,
        titles=[c.title for c in columns],
        footer_totals=footer_totals,
        banner=parts["banner"],
    )
    return table, start + last - 1


def _line_of(tok: Token) -> int:
    return int(tok.line or 0)


def _parse_structure(block: list[str], path: str, line0: int) -> Tree[Token]:
    """Lark parse of the block; on a parse error keep the longest accepted line-prefix."""
    parser = table_parser()
    try:
        return parser.parse("\n".join(block) + "\n", start="table")
    except UnexpectedInput as exc:
        bad = exc.line if isinstance(exc.line, int) else -1
    except LarkError:
        bad = -1
    if bad > 1:
        try:
            return parser.parse("\n".join(block[: bad - 1]) + "\n", start="table")
        except LarkError:
            pass
    raise ProfileTableError(f"{path}:{line0}: not a profiler table")


def _collect(tree: Tree[Token]) -> dict[str, Any]:
    """Pull the line tokens out of the parse tree, grouped by role, in order."""
    parts: dict[str, Any] = {"sep": [], "header": [], "row": [], "footer": [], "banner": []}
    for sub in tree.iter_subtrees_topdown():
        kind = str(sub.data)
        if kind in ("sep", "header", "row"):
            parts[kind].append(sub.children[0])
        elif kind == "banner":
            parts["banner"].append(str(sub.children[1]))
        elif kind == "footer":
            dev_tok = sub.children[0]
            value = sub.children[1]
            assert isinstance(dev_tok, Token) and isinstance(value, Tree)
            seconds = CELL_VALUES.transform(value)
            parts["footer"].append((str(dev_tok), float(seconds), _line_of(dev_tok)))
    return parts


def _rows(
    row_tokens: list[Token], columns: list[Column], line0: int
) -> tuple[list[dict[str, Any]], bool, int]:
    """Row records, whether every row line was a whole row, and the last good line number.

    A row is whole when it reaches the end of its last right-aligned column, keeps the
    two-space gaps blank, has nothing after its last column and every value cell parses.
    The first line failing that ends the table (cut mid-row, or foreign text).
    """
    records: list[dict[str, Any]] = []
    spans = [(c.start, c.end, c.left) for c in columns]
    has_left = columns[-1].left
    last_good = 0
    for tok in row_tokens:
        text = str(tok)
        stripped = text.rstrip()
        if not stripped:  # blank line after each stack group (group_by_stack_n)
            last_good = _line_of(tok)
            continue
        values, end, gaps_ok = slice_row(text, spans)
        values += [""] * (len(columns) - len(values))
        cells = {c.field: v for c, v in zip(columns, values, strict=True)}
        if has_left and not any(v for c, v in zip(columns, values, strict=True) if not c.left):
            # continuation line of a multi-frame Source Location
            if records and cells["source_location"]:
                prev = records[-1].get("source_location") or ""
                records[-1]["source_location"] = f"{prev}\n{cells['source_location']}".strip()
            last_good = _line_of(tok)
            continue
        whole = len(stripped) == end or (has_left and len(stripped) > end)
        if not whole and columns[-1].kind == "shapes":
            # shapes are cut to the width with no ellipsis, possibly right after ", "
            whole = len(stripped) == end - 1 and stripped.endswith(",")
        if not whole or not gaps_ok:
            return records, False, last_good
        try:
            rec = _row_record(cells, columns)
        except BadCell:
            return records, False, last_good
        rec["line"] = line0 + _line_of(tok) - 1
        records.append(rec)
        last_good = _line_of(tok)
    return records, True, last_good


def _row_record(cells: dict[str, str], columns: list[Column]) -> dict[str, Any]:
    rec: dict[str, Any] = {}
    for col in columns:
        raw = cells[col.field]
        if col.kind in ("text", "shapes"):
            rec[col.field] = raw if raw or col.field == "name" else None
            continue
        if not raw:
            raise BadCell(f"empty {col.kind} cell")
        value = cell_value(col.kind, raw)
        limit = COUNT_LIMIT if col.kind == "int" else math.inf
        if isinstance(value, (int, float)) and abs(value) >= limit:
            # past a float64-exact count, or an infinite number (NaN is a cell)
            raise BadCell(f"{col.kind} cell of {len(raw)} characters past the column's range")
        rec[col.field] = value * col.scale if col.kind == "flops" else value
    name = rec.get("name") or ""
    rec["truncated"] = name.endswith("...") and len(name) >= 55
    return rec


_INT_COLUMNS = frozenset({"line", "calls", "node_id"})
_TEXT_COLUMNS = frozenset({"name", "input_shapes", "source_location", "overload_name"})


def _frame(records: list[dict[str, Any]], columns: list[Column]) -> pd.DataFrame:
    """One row per operator; built column-wise because per-column astype is slow."""
    present = [c.field for c in columns]
    extras = [f for f in EXTRA_ORDER if f in present]
    others = [f for f in present if f not in BASE_COLUMNS and f not in extras]
    data: dict[str, Any] = {}
    for col in ["line", *BASE_COLUMNS, *extras, *others, "truncated"]:
        values = [rec.get(col) for rec in records]
        if col in _INT_COLUMNS:
            data[col] = pd.array(values, dtype="Int64")
        elif col in _TEXT_COLUMNS or col in others:
            data[col] = pd.Series(values, dtype=object)
        elif col == "truncated":
            data[col] = pd.Series([bool(v) for v in values], dtype=bool)
        else:
            data[col] = pd.Series(
                [math.nan if v is None else float(v) for v in values], dtype="float64"
            )
    return pd.DataFrame(data)


# --------------------------------------------------------------------------- sort order

# sort_by key (torch names; 2.4+ maps cuda/xpu/privateuse1 to device) -> frame column
_SORT_COLUMNS: dict[str, str] = {
    "cpu_time_total": "cpu_total_s",
    "self_cpu_time_total": "self_cpu_s",
    "cpu_time": "cpu_avg_s",
    "cuda_time_total": "cuda_total_s",
    "self_cuda_time_total": "self_cuda_s",
    "cuda_time": "cuda_avg_s",
    "cpu_memory_usage": "cpu_mem_bytes",
    "self_cpu_memory_usage": "self_cpu_mem_bytes",
    "cuda_memory_usage": "cuda_mem_bytes",
    "self_cuda_memory_usage": "self_cuda_mem_bytes",
    "count": "calls",
    "flops": "flops",
}
# When several columns are descending, self times win over totals: in a table sorted by
# self time the totals of leaf ops often descend too, while the reverse is rare.
_INFER_ORDER: tuple[str, ...] = (
    "self_cuda_time_total",
    "self_cpu_time_total",
    "cuda_time_total",
    "cpu_time_total",
    "self_cuda_memory_usage",
    "self_cpu_memory_usage",
    "cuda_memory_usage",
    "cpu_memory_usage",
    "cuda_time",
    "cpu_time",
    "count",
    "flops",
)
_DEVICE_WORD = re.compile(r"(?:cuda|xpu|npu|mtia|hpu|privateuse1|device)")


def _sort_column(sort_by: str) -> str | None:
    key = _DEVICE_WORD.sub("cuda", sort_by.lower())
    return _SORT_COLUMNS.get(key)


def _sort_key_from_header(what: str) -> str | None:
    m = _SORTED_TIME_RE.match(what.strip())
    return f"{m.group('dev').lower()}_time_total" if m else None


def _descending(values: pd.Series) -> bool:
    vals = values.dropna().tolist()
    if len(vals) != len(values) or len(set(vals)) < 2:
        return False
    return all(a >= b for a, b in zip(vals, vals[1:], strict=False))


def _infer_sort(frame: pd.DataFrame) -> str | None:
    """The sort key whose column descends over the rows, or None when none does."""
    if len(frame) < 2:
        return None
    for key in _INFER_ORDER:
        col = _SORT_COLUMNS[key]
        if col not in frame or not _descending(frame[col]):
            continue
        if key.startswith("self_") and key.endswith("_total"):
            total = _SORT_COLUMNS[key[len("self_") :]]
            if total in frame and frame[total].equals(frame[col]):
                return key[len("self_") :]  # identical columns: report the total
        return key
    return None


def dominant_operators(table: ProfileTable, n: int = 3) -> list[str]:
    """Up to ``n`` distinct operator names with the largest value in the table's sort column.

    Falls back to device total, then CPU total, when the sort column is absent or all zero
    (e.g. "Sorted by CUDA Time" on a CPU-only profile is registration order, B4).
    """
    frame = table.frame
    candidates = []
    if table.sort_by and (col := _sort_column(table.sort_by)):
        candidates.append(col)
    candidates += ["cuda_total_s", "cpu_total_s"]
    for col in candidates:
        if col not in frame:
            continue
        values = pd.to_numeric(frame[col], errors="coerce")
        if not (values.fillna(0) != 0).any():
            continue
        ranked = frame.assign(_v=values).sort_values("_v", ascending=False, kind="stable")
        names: list[str] = []
        for name in ranked["name"]:
            if name and name not in names:
                names.append(str(name))
            if len(names) >= n:
                break
        return names
    return []


# --------------------------------------------------------------------------- scanning

_MAX_BLOCK_LINES = 200_000


def find_tables(lines: Iterable[str], path: str) -> list[ProfileTable]:
    """Every table in a text file, each optionally preceded by "Sorted by X Time:".

    A table starts at a separator / header / identical separator triple; it ends at the
    first empty line, the next "Sorted by" line or the first line that is not part of it.
    """
    buf = [ln.rstrip("\r\n") for ln in lines]
    tables: list[ProfileTable] = []
    i = 0
    while i + 2 < len(buf):
        if not (
            _SEP_RE.match(buf[i]) and buf[i + 1].strip() and buf[i + 2].rstrip() == buf[i].rstrip()
        ):
            i += 1
            continue
        begin = i
        while begin >= 2 and _RULE_RE.match(buf[begin - 2]) and buf[begin - 1].strip():
            begin -= 2
        if begin >= 1 and _SORTED_RE.search(buf[begin - 1]):
            begin -= 1
        end = i + 3
        while end < len(buf) and end - begin < _MAX_BLOCK_LINES:
            if buf[end] == "" or _SORTED_RE.search(buf[end]):
                break
            end += 1
        try:
            table, last = _parse_block(buf[begin:end], path, begin + 1, None)
        except ProfileTableError:
            i += 1
            continue
        tables.append(table)
        i = max(begin + last + 1, i + 1)
    return tables
