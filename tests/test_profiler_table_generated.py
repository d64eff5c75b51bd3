"""Profiler ``key_averages().table()`` parsing: generated CUDA tables, SGLang log blocks,
cuts and garbage, other layouts."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diag.artifacts.profiler_table import (
    ProfileTable,
    ProfileTableError,
    dominant_operators,
    find_tables,
    parse_table_block,
)
from fixtures.gen.profiler_tables import format_table, sglang_message, write_table
from tests.profiler_table_helpers import MS, US, approx, check_cuts

# --------------------------------------------------------------------------- generated tables

ROWS = [
    {
        "name": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
        "self_cpu_us": 0.0,
        "cpu_total_us": 0.0,
        "self_cuda_us": 1500.5,
        "cuda_total_us": 1500.5,
        "calls": 300,
        "input_shapes": "[]",
    },
    {
        "name": "aten::linear",
        "self_cpu_us": 120.0,
        "cpu_total_us": 3500.0,
        "self_cuda_us": 0.0,
        "cuda_total_us": 12400.0,
        "calls": 30,
        "input_shapes": "[[8, 4096], [12288, 4096], []]",
    },
    {
        "name": "aten::mm",
        "self_cpu_us": 2500.25,
        "cpu_total_us": 3000.0,
        "self_cuda_us": 0.0,
        "cuda_total_us": 12345.678,
        "calls": 30,
        "input_shapes": "[[8, 4096], [4096, 12288]]",
    },
    {
        "name": "Memcpy DtoD (Device -> Device)",
        "self_cpu_us": 0.0,
        "cpu_total_us": 0.0,
        "self_cuda_us": 812.0,
        "cuda_total_us": 812.0,
        "calls": 96,
        "input_shapes": "[]",
    },
    {
        "name": "cudaGraphInstantiate",
        "self_cpu_us": 1234567.0,
        "cpu_total_us": 1234567.0,
        "self_cuda_us": 0.0,
        "cuda_total_us": 0.0,
        "calls": 3,
        "input_shapes": "[]",
    },
]
PREFIX = "[2025-10-16 09:06:30 TP0] "
_PREFIX_RE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z]+\d+)*\] ")


def _check_rows(table: ProfileTable, rows: list[dict[str, Any]], cuda: bool = True) -> None:
    got = table.frame.set_index("name")
    assert len(got) == len(rows)
    for r in rows:
        name = str(r["name"])
        name = name[:52] + "..." if len(name) >= 52 else name
        g = got.loc[name]
        assert g["self_cpu_s"] == pytest.approx(float(r["self_cpu_us"]) * US, rel=5e-4, abs=6e-10)
        assert g["cpu_total_s"] == pytest.approx(float(r["cpu_total_us"]) * US, rel=5e-4, abs=6e-10)
        assert g["calls"] == r["calls"]
        if cuda:
            assert g["self_cuda_s"] == pytest.approx(
                float(r["self_cuda_us"]) * US, rel=5e-4, abs=6e-10
            )
            assert g["cuda_total_s"] == pytest.approx(
                float(r["cuda_total_us"]) * US, rel=5e-4, abs=6e-10
            )
        else:
            assert math.isnan(g["self_cuda_s"])


def test_generated_cuda_table_round_trips(tmp_path: Path) -> None:
    text = write_table(tmp_path / "t.txt", ROWS, layout="cuda", sort_by="cuda_time_total")
    lines = text.splitlines()
    # torch overflows the 12-wide column with the 13-char "CUDA time avg" title
    assert len(lines[1]) == len(lines[0]) + 1
    (table,) = find_tables((tmp_path / "t.txt").read_text().splitlines(), "t.txt")
    _check_rows(table, ROWS)
    assert table.complete and table.device == "CUDA"
    assert table.sort_by == "cuda_time_total"  # inferred: the CUDA total column descends
    assert table.frame["name"].tolist()[:3] == [
        "aten::linear",
        "aten::mm",
        "void at::native::vectorized_elementwise_kernel<4, at...",
    ]
    assert table.self_cpu_total_s == approx(1.237)  # "1.237s"
    assert table.self_cuda_total_s == approx(2.312 * MS)  # 2312.5us printed as "2.312ms"
    assert table.frame.set_index("name")["input_shapes"]["aten::mm"] == "[[8, 4096], [4096, 12288]]"
    assert dominant_operators(table, 2) == ["aten::linear", "aten::mm"]


def test_generated_cpu_table_round_trips(tmp_path: Path) -> None:
    cpu_rows = [{k: v for k, v in r.items() if "cuda" not in k} for r in ROWS]
    text = write_table(tmp_path / "t.txt", cpu_rows, layout="cpu", sort_by="cpu_time_total")
    assert "CUDA" not in text
    (table,) = find_tables(text.splitlines(), "t.txt")
    _check_rows(table, cpu_rows, cuda=False)
    assert table.self_cuda_total_s is None and table.complete
    assert table.sort_by == "cpu_time_total"


@pytest.mark.parametrize("style", ["2.7", "2.8"])
def test_generated_memory_columns_and_forced_unit(style: str) -> None:
    rows = [
        dict(
            ROWS[2],
            cpu_mem_bytes=5 * 1024**2,
            self_cpu_mem_bytes=-4520000,
            cuda_mem_bytes=3 * 1024**3,
            self_cuda_mem_bytes=-512,
        ),
        dict(
            ROWS[4],
            cpu_mem_bytes=0,
            self_cpu_mem_bytes=0,
            cuda_mem_bytes=1536,
            self_cuda_mem_bytes=1024**3,
        ),
    ]
    # time_unit="us" prints 13-char cells ("1234567.000us") that overflow their column
    text = format_table(rows, layout="cuda", memory=style, time_unit="us")
    (table,) = find_tables(text.splitlines(), "m.txt")
    _check_rows(table, rows)
    f = table.frame.set_index("name")
    assert f.loc["aten::mm", "cpu_mem_bytes"] == 5 * 1024**2
    assert f.loc["aten::mm", "self_cpu_mem_bytes"] == pytest.approx(-4520000, rel=1e-3)
    assert f.loc["aten::mm", "cuda_mem_bytes"] == 3 * 1024**3
    assert f.loc["aten::mm", "self_cuda_mem_bytes"] == -512
    assert f.loc["cudaGraphInstantiate", "cuda_mem_bytes"] == 1536
    assert f.loc["cudaGraphInstantiate", "self_cuda_mem_bytes"] == 1024**3


_NAME = (
    st.text(
        alphabet=st.characters(codec="ascii", categories=["L", "N", "P", "S"]),
        min_size=1,
        max_size=70,
    )
    .map(lambda s: s.replace("  ", " "))
    .filter(lambda s: s.strip() == s and not s.startswith("Self "))
)
_TIME = st.one_of(st.just(0.0), st.floats(min_value=0.001, max_value=5e7, allow_nan=False))
_SHAPES = st.lists(st.lists(st.integers(0, 70000), max_size=4), max_size=8).map(str)


@st.composite
def _rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(_NAME, min_size=1, max_size=8, unique_by=lambda s: s[:52]))
    rows = []
    for name in names:
        self_cpu = draw(_TIME)
        self_cuda = draw(_TIME)
        rows.append(
            {
                "name": name,
                "self_cpu_us": self_cpu,
                "cpu_total_us": self_cpu + draw(_TIME),
                "self_cuda_us": self_cuda,
                "cuda_total_us": self_cuda + draw(_TIME),
                "calls": draw(st.integers(1, 10**6)),
                "input_shapes": draw(_SHAPES),
            }
        )
    return rows


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_rows(), layout=st.sampled_from(["cuda", "cpu"]))
def test_generated_tables_round_trip_property(rows: list[dict[str, Any]], layout: str) -> None:
    text = format_table(rows, layout=layout, row_limit=-1)
    (table,) = find_tables(text.splitlines(), "p.txt")
    assert table.complete
    _check_rows(table, rows, cuda=layout == "cuda")
    shapes = table.frame.set_index("name")["input_shapes"]
    width = min(max(len(str(r["input_shapes"])) for r in rows) + 4, 80)
    for r in rows:
        name = str(r["name"])
        name = name[:52] + "..." if len(name) >= 52 else name
        assert shapes[name] == str(r["input_shapes"])[:width].strip()


# --------------------------------------------------------------------------- SGLang log blocks


def test_sglang_log_block_via_parse_table_block() -> None:
    lines = sglang_message(ROWS, prefix=PREFIX).splitlines()
    assert lines[0].startswith(PREFIX + "Sorted by CUDA Time:")
    first = [_PREFIX_RE.sub("", lines[0]), *lines[1:]]  # the caller strips the one prefix
    cuda = parse_table_block(first, "server.log", 120)
    assert (cuda.line, cuda.sort_by, cuda.complete, cuda.device) == (
        120,
        "cuda_time_total",
        True,
        "CUDA",
    )
    _check_rows(cuda, ROWS)
    assert cuda.frame["name"].iloc[0] == "aten::linear"  # largest CUDA total first
    assert cuda.frame["line"].iloc[0] == 124
    cpu_start = next(i for i, ln in enumerate(lines) if ln == "Sorted by CPU Time:")
    cpu = parse_table_block(lines[cpu_start:], "server.log", 120 + cpu_start)
    assert (cpu.line, cpu.sort_by, cpu.complete) == (120 + cpu_start, "cpu_time_total", True)
    assert cpu.frame["name"].iloc[0] == "cudaGraphInstantiate"
    _check_rows(cpu, ROWS)
    # a caller that forgot to strip the prefix still gets the table
    again = parse_table_block(lines, "server.log", 120)
    assert again.sort_by == "cuda_time_total" and len(again.frame) == len(ROWS)
    # an explicit sort_by wins over the header
    assert (
        parse_table_block(first, "s", 1, sort_by="self_cuda_time_total").sort_by
        == "self_cuda_time_total"
    )


def test_sglang_log_file_with_two_tables(tmp_path: Path) -> None:
    text = write_table(tmp_path / "server.log", ROWS, sglang_prefix=PREFIX)
    log = [
        "[2025-10-16 09:06:29 TP0] Capture cuda graph begin.",
        *text.splitlines(),
        "[2025-10-16 09:06:31 TP0] Capture cuda graph end. Time elapsed: 5.21 s.",
    ]
    tables = find_tables(log, "server.log")
    assert [(t.sort_by, t.complete, len(t.frame)) for t in tables] == [
        ("cuda_time_total", True, 5),
        ("cpu_time_total", True, 5),
    ]
    # the "Sorted by ..." lines: 1 + sep/header/sep + 5 rows + sep + 2 footers, 2 blank lines
    assert [t.line for t in tables] == [2, 2 + 12 + 2]


def test_table_followed_directly_by_log_lines() -> None:
    lines = format_table(ROWS).splitlines() + ["[2025-10-16 09:06:31 TP0] Capture cuda graph end."]
    table = parse_table_block(lines, "x", 1)
    assert table.complete and len(table.frame) == 5


# --------------------------------------------------------------------------- cut / garbage
@pytest.mark.slow
def test_generated_table_cut_at_every_character() -> None:
    check_cuts(format_table(ROWS[:3], layout="cuda"), 3)


def test_cut_row_followed_by_foreign_line() -> None:
    lines = format_table(ROWS).splitlines()
    broken = lines[:4] + [lines[4][:40], "[2025-10-16 09:06:31 TP0] Load weight end."] + lines[5:]
    table = parse_table_block(broken, "x", 1)
    assert len(table.frame) == 1 and not table.complete


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["hello", "world"],
        ["-------  -----"],
        ["Sorted by CUDA Time:", ""],
        ["=====", "just a banner", "no table"],
    ],
)
def test_nothing_table_like_raises(lines: list[str]) -> None:
    with pytest.raises(ProfileTableError):
        parse_table_block(lines, "x", 1)
    assert find_tables(lines, "x") == []


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    noise=st.lists(
        st.text(alphabet=" -=Sortedby:CUDA%.0123456789usm[],\t", max_size=40), max_size=12
    )
)
def test_garbage_never_raises_other_errors(noise: list[str]) -> None:
    lines = format_table(ROWS).splitlines()
    for block in (noise, lines[:3] + noise, lines[:6] + noise + lines[6:]):
        try:
            parse_table_block(block, "g", 1)
        except ProfileTableError:
            pass
        find_tables(block, "g")


def _torch_lines(widths: list[int], rows: list[list[str]], left_last: bool = False) -> list[str]:
    """Lines formatted like ``_build_table`` ("{: >W}  ", the last column "<" if asked)."""

    def fmt(values: list[str]) -> str:
        cells = [f"{v:>{w}}  " for v, w in zip(values[:-1], widths[:-1], strict=True)]
        last = f"{values[-1]:<{widths[-1]}}  " if left_last else f"{values[-1]:>{widths[-1]}}  "
        return "".join(cells) + last

    sep = "".join("-" * w + "  " for w in widths)
    return [sep, fmt(rows[0]), sep, *(fmt(r) for r in rows[1:]), sep]


def test_stack_node_id_and_other_device_layouts() -> None:
    """Source Location (left-aligned, multi-line), Node ID, Overload Name and an XPU block."""
    widths = [12, 13, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 30]
    header = [
        "Name",
        "Overload Name",
        "Self CPU %",
        "Self CPU",
        "CPU total %",
        "CPU total",
        "CPU time avg",
        "Self XPU",
        "Self XPU %",
        "XPU total",
        "XPU time avg",
        "# of Calls",
        "Node ID",
        "Source Location",
    ]
    row = [
        "aten::mm",
        "default",
        "60.00%",
        "3.000ms",
        "60.00%",
        "3.000ms",
        "1.000ms",
        "2.000ms",
        "100.00%",
        "2.000ms",
        "666.667us",
        "3",
        "1",
        "model.py(12): forward",
    ]
    cont = [""] * 13 + ["torch/nn/modules/module.py(1"]
    row2 = [
        "aten::add",
        "Tensor",
        "40.00%",
        "2.000ms",
        "40.00%",
        "2.000ms",
        "2.000ms",
        "0.000us",
        "0.00%",
        "0.000us",
        "0.000us",
        "1",
        "-1",
        "",
    ]
    lines = _torch_lines(widths, [header, row, cont, [""] * 14, row2, [""] * 14], left_last=True)
    lines += ["Self CPU time total: 5.000ms", "Self XPU time total: 2.000ms"]
    table = parse_table_block(lines, "stack.txt", 1)
    assert table.complete and table.device == "XPU"
    f = table.frame
    assert f["name"].tolist() == ["aten::mm", "aten::add"]
    assert f["overload_name"].tolist() == ["default", "Tensor"]
    assert f["node_id"].tolist() == [1, -1]
    assert f["source_location"].iloc[0] == "model.py(12): forward\ntorch/nn/modules/module.py(1"
    assert f["source_location"].iloc[1] is None
    assert f["self_cuda_s"].tolist() == [approx(2 * MS), 0.0]  # primary device -> *_cuda_*
    assert (table.self_cpu_total_s, table.self_cuda_total_s) == (approx(5 * MS), approx(2 * MS))
    assert table.footer_totals == {"CPU": approx(5 * MS), "XPU": approx(2 * MS)}
    # device columns are tried first; self == total there, so the total is reported
    assert table.sort_by == "cuda_time_total"
