"""The cells and columns of a torch.profiler table: the column boundaries come from the
dash runs of the separator line, each cell is parsed by ``grammars/profiler_table.lark``."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import LarkError

from diag.resources import grammar_text

CELL_STARTS = (
    "time_cell",
    "percent_cell",
    "memory_cell",
    "int_cell",
    "flops_cell",
    "shapes_cell",
)


@lru_cache(maxsize=1)
def table_parser() -> Lark:
    """The grammar is compiled once per process; LALR keeps cell parsing cheap."""
    return Lark(
        grammar_text("profiler_table.lark"),
        parser="lalr",
        lexer="contextual",
        start=["table", "column_title", *CELL_STARTS],
    )


# --------------------------------------------------------------------------- cells

# divisors rather than factors: 299.521 / 1e3 prints as 0.299521, 299.521 * 1e-3 does not
TIME_DIV = {"us": 1e6, "ms": 1e3, "s": 1.0}
# _format_memory uses binary units in every version; only the spelling changed in 2.8
MEM_SCALE = {
    "b": 1,
    "B": 1,
    "Kb": 1024,
    "KB": 1024,
    "Mb": 1024**2,
    "MB": 1024**2,
    "Gb": 1024**3,
    "GB": 1024**3,
    "Tb": 1024**4,
    "TB": 1024**4,
    "Pb": 1024**5,
    "PB": 1024**5,
}
# auto_scale_flops steps by 1000
FLOPS_SCALE = {
    "FLOPs": 1.0,
    "KFLOPs": 1e3,
    "MFLOPs": 1e6,
    "GFLOPs": 1e9,
    "TFLOPs": 1e12,
    "PFLOPs": 1e15,
}


class CellValues(Transformer[Token, Any]):
    """Turns a parsed value cell into a plain Python value (seconds, bytes, counts)."""

    def time_value(self, items: list[Token]) -> float:
        number, unit = items
        return float(number) / TIME_DIV[str(unit)]

    def time_cell(self, items: list[Any]) -> float:
        item = items[0]
        return math.nan if isinstance(item, Token) else float(item)

    def percent_cell(self, items: list[Token]) -> float:
        item = items[0]
        return math.nan if item.type == "NAN" else float(item)

    def memory_cell(self, items: list[Token]) -> float:
        number, unit = items
        return float(round(float(number) * MEM_SCALE[str(unit)]))

    def int_cell(self, items: list[Token]) -> int:
        return int(items[0])

    def flops_cell(self, items: list[Token]) -> float:
        item = items[0]
        return math.nan if item.type == "NO_FLOPS" else float(item)

    def shapes_cell(self, items: list[Token]) -> str:
        return str(items[0])


CELL_VALUES = CellValues()


class BadCell(ValueError):
    """A cell that does not parse as its column's kind: the line is not a table row."""


@lru_cache(maxsize=1 << 16)
def cell_value(kind: str, text: str) -> Any:
    """Value of one stripped cell; the same strings repeat a lot, hence the cache."""
    try:
        return CELL_VALUES.transform(table_parser().parse(text, start=f"{kind}_cell"))
    except LarkError as exc:
        raise BadCell(f"{kind} cell {text!r}") from exc


# --------------------------------------------------------------------------- columns


@dataclass(frozen=True)
class Column:
    field: str
    kind: str  # "text" | "time" | "percent" | "memory" | "int" | "flops" | "shapes"
    start: int
    end: int
    title: str
    scale: float = 1.0
    left: bool = False  # Source Location is the only left-aligned column


# column_title alias -> (frame field, cell kind); "{dev}" is the device prefix
_TITLE_FIELDS: dict[str, tuple[str, str]] = {
    "name": ("name", "text"),
    "overload_name": ("overload_name", "text"),
    "self_cpu_pct": ("self_cpu_pct", "percent"),
    "self_cpu": ("self_cpu_s", "time"),
    "cpu_total_pct": ("cpu_total_pct", "percent"),
    "cpu_total": ("cpu_total_s", "time"),
    "cpu_avg": ("cpu_avg_s", "time"),
    "cpu_mem": ("cpu_mem_bytes", "memory"),
    "self_cpu_mem": ("self_cpu_mem_bytes", "memory"),
    "self_dev": ("self_{dev}_s", "time"),
    "self_dev_pct": ("self_{dev}_pct", "percent"),
    "dev_total": ("{dev}_total_s", "time"),
    "dev_total_pct": ("{dev}_total_pct", "percent"),
    "dev_avg": ("{dev}_avg_s", "time"),
    "dev_mem": ("{dev}_mem_bytes", "memory"),
    "self_dev_mem": ("self_{dev}_mem_bytes", "memory"),
    "calls": ("calls", "int"),
    "node_id": ("node_id", "int"),
    "input_shapes": ("input_shapes", "shapes"),
    "source_location": ("source_location", "text"),
    "flops": ("flops", "flops"),
}

#: columns every frame has, in this order (NaN/None where the table lacks them)
BASE_COLUMNS: tuple[str, ...] = (
    "name",
    "input_shapes",
    "self_cpu_s",
    "cpu_total_s",
    "self_cuda_s",
    "cuda_total_s",
    "calls",
)
EXTRA_ORDER: tuple[str, ...] = (
    "overload_name",
    "self_cpu_pct",
    "cpu_total_pct",
    "cpu_avg_s",
    "self_cuda_pct",
    "cuda_total_pct",
    "cuda_avg_s",
    "cpu_mem_bytes",
    "self_cpu_mem_bytes",
    "cuda_mem_bytes",
    "self_cuda_mem_bytes",
    "node_id",
    "flops",
    "source_location",
)


def slice_row(text: str, spans: Sequence[tuple[int, int, bool]]) -> tuple[list[str], int, bool]:
    """Cells of one line, the end of its last right-aligned cell, and whether gaps are blank.

    Cells are cut at the separator's dash runs, but a value wider than its column (torch
    prints "CUDA time avg" / "Self CUDA Mem" titles and forced-unit times in 12-wide
    columns) pushes everything after it to the right; the slice follows that shift.
    """
    cells: list[str] = []
    shift = 0
    last_end = 0
    gaps_ok = True
    n = len(text)
    for i, (start, end, left) in enumerate(spans):
        s, e = start + shift, end + shift
        if left:  # Source Location: left-aligned, trimmed to width, always last
            cells.append(text[s:].strip())
            break
        while e < n and text[e] != " ":
            e += 1
        shift = e - end
        cells.append(text[s:e].strip())
        last_end = e
        if i + 1 < len(spans) and text[e : e + 2].strip():
            gaps_ok = False
    return cells, last_end, gaps_ok


def columns_of(sep: str, header: str) -> tuple[list[Column], str | None]:
    """Columns from the separator's dash runs and the header titles; primary device name.

    The first device block (CUDA, XPU, NPU, ...) lands in the ``*_cuda_*`` fields so that
    callers need not care which accelerator produced the table; torch 2.1-2.3 may print a
    second PrivateUse1 block, which gets fields named after that device.
    """
    runs = [(m.start(), m.end(), False) for m in re.finditer(r"-+", sep)]
    titles, _, _ = slice_row(header, runs)
    titles += [""] * (len(runs) - len(titles))
    columns: list[Column] = []
    primary: str | None = None
    for i, ((start, end, _), title) in enumerate(zip(runs, titles, strict=True)):
        try:
            tree = table_parser().parse(title, start="column_title")
        except LarkError:
            columns.append(Column(f"col{i}", "text", start, end, title))
            continue
        alias = str(tree.data)
        fname, kind = _TITLE_FIELDS[alias]
        scale = 1.0
        args = [str(t) for t in tree.children if isinstance(t, Token)]
        if "{dev}" in fname:
            dev = args[0]
            primary = primary or dev
            fname = fname.replace("{dev}", "cuda" if dev == primary else dev.lower())
        elif alias == "flops":
            scale = FLOPS_SCALE.get(args[0], 1.0)
        columns.append(Column(fname, kind, start, end, title, scale, alias == "source_location"))
    return columns, primary
