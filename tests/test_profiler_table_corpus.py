"""Profiler ``key_averages().table()`` parsing: the real torch tables of the corpus."""

from __future__ import annotations

import json
import math

import pytest

from diag.artifacts.profiler_table import (
    ProfileTable,
    dominant_operators,
    find_tables,
    parse_table_block,
)
from tests.profiler_table_helpers import CORPUS, MS, US, approx, check_cuts, needs_corpus

LONG = "sglang::cuda_graph_runner::capture_one_batch_size::f..."

# Values read off the files by hand: per table (row count, first row (name, self CPU s,
# CPU total s, calls), last row name, "Self CPU time total" in s, sort_by, source line).
Expect = tuple[int, tuple[str, float, float, int], str, float, "str | None", int]
EXPECTED: dict[str, list[Expect]] = {
    "torch-2.7.0/cpu_time_total_basic.txt": [
        (
            10,
            ("aten::_native_multi_head_attention", 1.964 * MS, 44.860 * MS, 18),
            "aten::addmm",
            135.834 * MS,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.7.0/cpu_time_total_with_header.txt": [
        (
            5,
            ("aten::_native_multi_head_attention", 1.964 * MS, 44.860 * MS, 18),
            "aten::native_layer_norm",
            135.834 * MS,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.7.0/cuda_time_total_on_cpu_only_profile.txt": [
        (
            10,
            ("aten::embedding", 134.181 * US, 657.859 * US, 9),
            "aten::_native_multi_head_attention",
            135.834 * MS,
            None,
            1,
        )
    ],
    "torch-2.7.0/group_by_input_shape_cpu_time_total.txt": [
        (
            10,
            ("aten::layer_norm", 49.210 * US, 8.404 * MS, 12),
            "aten::mm",
            63.033 * MS,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.7.0/long_names_cpu_time_total.txt": [
        (10, (LONG, 2.304 * MS, 16.156 * MS, 3), "aten::softmax", 32.366 * MS, "cpu_time_total", 1)
    ],
    "torch-2.7.0/long_names_group_by_input_shape.txt": [
        (
            10,
            (LONG, 2.304 * MS, 16.156 * MS, 3),
            "aten::_native_multi_head_attention",
            32.366 * MS,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.7.0/profile_memory_cpu_time_total.txt": [
        (
            10,
            ("aten::_native_multi_head_attention", 19.227 * MS, 147.115 * MS, 18),
            "aten::mkldnn_convolution",
            299.521 * MS,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.7.0/profile_memory_sort_self_cpu_memory_usage.txt": [
        (
            10,
            ("aten::mm", 71.991 * MS, 72.010 * MS, 27),
            "aten::embedding",
            299.521 * MS,
            "self_cpu_memory_usage",
            1,
        )
    ],
    "torch-2.7.0/sglang_style_group_by_input_shape.txt": [
        (
            10,
            ("aten::embedding", 61.985 * US, 185.456 * US, 3),
            "aten::view",
            63.033 * MS,
            "cuda_time_total",
            1,
        ),
        (
            10,
            ("aten::layer_norm", 49.210 * US, 8.404 * MS, 12),
            "aten::mm",
            63.033 * MS,
            "cpu_time_total",
            19,
        ),
    ],
    "torch-2.7.0/with_flops_cpu_time_total.txt": [
        (
            10,
            ("aten::linear", 617.456 * US, 8.822 * MS, 45),
            "aten::_convolution",
            23.314 * MS,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.7.0/with_stack_group_by_stack_n5.txt": [
        (
            4,
            ("aten::mm", 802.999 * US, 805.403 * US, 9),
            "aten::gelu",
            4.547 * MS,
            "self_cpu_time_total",
            1,
        )
    ],
    "torch-2.13.0+cpu/cpu_time_total_basic.txt": [
        (
            10,
            ("aten::_native_multi_head_attention", 1.628 * MS, 814.424 * MS, 18),
            "aten::conv1d",
            2.140,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.13.0+cpu/cpu_time_total_with_header.txt": [
        (
            5,
            ("aten::_native_multi_head_attention", 1.628 * MS, 814.424 * MS, 18),
            "aten::layer_norm",
            2.140,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.13.0+cpu/cuda_time_total_on_cpu_only_profile.txt": [
        (
            10,
            ("aten::embedding", 541.982 * US, 1.198 * MS, 9),
            "aten::_native_multi_head_attention",
            2.140,
            None,
            1,
        )
    ],
    "torch-2.13.0+cpu/group_by_input_shape_cpu_time_total.txt": [
        (
            10,
            ("aten::_native_multi_head_attention", 588.068 * US, 172.081 * MS, 6),
            "aten::mkldnn_convolution",
            838.068 * MS,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.13.0+cpu/long_names_cpu_time_total.txt": [
        (
            10,
            (LONG, 62.304 * MS, 382.824 * MS, 3),
            "aten::mkldnn_convolution",
            638.929 * MS,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.13.0+cpu/long_names_group_by_input_shape.txt": [
        (
            10,
            (LONG, 62.304 * MS, 382.824 * MS, 3),
            "aten::_native_multi_head_attention",
            638.929 * MS,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.13.0+cpu/profile_memory_cpu_time_total.txt": [
        (
            10,
            ("aten::_native_multi_head_attention", 4.489 * MS, 2.020, 18),
            "aten::_convolution",
            4.512,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.13.0+cpu/profile_memory_sort_self_cpu_memory_usage.txt": [
        (
            10,
            ("aten::mm", 917.498 * MS, 917.535 * MS, 27),
            "aten::embedding",
            4.512,
            "self_cpu_memory_usage",
            1,
        )
    ],
    "torch-2.13.0+cpu/self_cpu_time_total_time_unit_ms.txt": [
        (
            10,
            ("aten::addmm", 484.791 * MS, 542.817 * MS, 54),
            "aten::_slow_conv2d_forward",
            2139.660 * MS,
            "self_cpu_time_total",
            1,
        )
    ],
    "torch-2.13.0+cpu/sglang_style_group_by_input_shape.txt": [
        (
            10,
            ("aten::embedding", 4.818 * MS, 5.026 * MS, 3),
            "aten::view",
            838.068 * MS,
            "cuda_time_total",
            1,
        ),
        (
            10,
            ("aten::_native_multi_head_attention", 588.068 * US, 172.081 * MS, 6),
            "aten::mkldnn_convolution",
            838.068 * MS,
            "cpu_time_total",
            19,
        ),
    ],
    "torch-2.13.0+cpu/with_flops_cpu_time_total.txt": [
        (
            10,
            ("aten::_native_multi_head_attention", 2.951 * MS, 733.425 * MS, 18),
            "aten::gelu",
            1.550,
            "cpu_time_total",
            1,
        )
    ],
    "torch-2.13.0+cpu/with_stack_group_by_stack_n5.txt": [
        (
            4,
            ("aten::addmm", 277.448 * MS, 309.046 * MS, 18),
            "aten::bmm",
            1.428,
            "self_cpu_time_total",
            1,
        )
    ],
}


def _tables(rel: str) -> list[ProfileTable]:
    path = CORPUS / rel
    return find_tables(path.read_text(encoding="utf-8").splitlines(), str(path))


# --------------------------------------------------------------------------- real tables


@needs_corpus
def test_every_corpus_table_is_covered() -> None:
    files = sorted(str(p.relative_to(CORPUS)) for p in CORPUS.glob("*/*.txt"))
    assert files == sorted(EXPECTED)


@needs_corpus
@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_corpus_table_values(rel: str) -> None:
    tables = _tables(rel)
    assert len(tables) == len(EXPECTED[rel])
    for table, (n_rows, first, last_name, cpu_total, sort_by, line) in zip(
        tables, EXPECTED[rel], strict=True
    ):
        frame = table.frame
        assert table.complete
        assert table.line == line
        assert len(frame) == n_rows
        name, self_cpu, cpu_total_s, calls = first
        row = frame.iloc[0]
        assert (row["name"], row["self_cpu_s"], row["cpu_total_s"], row["calls"]) == (
            name,
            approx(self_cpu),
            approx(cpu_total_s),
            calls,
        )
        assert frame["name"].iloc[-1] == last_name
        assert table.self_cpu_total_s == approx(cpu_total)
        assert table.sort_by == sort_by
        # CPU-only profiles: no device columns, no device footer
        assert table.self_cuda_total_s is None and table.device is None
        assert frame["self_cuda_s"].isna().all() and frame["cuda_total_s"].isna().all()


@needs_corpus
@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_corpus_columns_are_aligned(rel: str) -> None:
    """Cross-column identities that only hold when every cell landed in its column."""
    for table in _tables(rel):
        f = table.frame
        total = table.self_cpu_total_s
        assert total

        def rounding(v: float) -> float:
            """Relative error of a time printed with 3 decimals in its unit (us/ms/s)."""
            return 0.0005 * (1.0 if v >= 1 else MS if v >= MS else US) / v if v else 0.0

        for _, r in f.iterrows():
            # "CPU time avg" = CPU total / calls, each printed with 3 decimals in its unit
            assert r["cpu_avg_s"] == pytest.approx(
                r["cpu_total_s"] / r["calls"], rel=2e-3, abs=2e-6
            )
            # percentages ("{:.2f}%") are of the footer's sum of self CPU time
            for pct, value in (("self_cpu_pct", "self_cpu_s"), ("cpu_total_pct", "cpu_total_s")):
                expected = 100 * r[value] / total
                slack = expected * (rounding(total) + rounding(r[value])) * 1.01
                assert abs(r[pct] - expected) <= 0.0051 + slack
            assert r["cpu_total_s"] >= r["self_cpu_s"] - 1e-6


@needs_corpus
def test_corpus_special_cells() -> None:
    old = _tables("torch-2.7.0/profile_memory_cpu_time_total.txt")[0].frame
    assert old["cpu_mem_bytes"].iloc[0] == 504 * 1024  # "504.00 Kb"
    assert old["self_cpu_mem_bytes"].iloc[0] == round(-4.31 * 1024**2)  # "-4.31 Mb"
    assert old["self_cpu_mem_bytes"].iloc[3] == 0  # "0 b"
    new = _tables("torch-2.13.0+cpu/profile_memory_cpu_time_total.txt")[0].frame
    assert new["cpu_mem_bytes"].iloc[0] == 504 * 1024  # "504.00 KB"
    assert new["cpu_total_s"].iloc[0] == 2.020  # "2.020s"
    flops = _tables("torch-2.7.0/with_flops_cpu_time_total.txt")[0].frame.set_index("name")["flops"]
    assert flops["aten::mm"] == pytest.approx(178569.216e3)  # Total KFLOPs
    assert math.isnan(flops["aten::linear"])  # "--"
    shapes = _tables("torch-2.7.0/group_by_input_shape_cpu_time_total.txt")[0].frame["input_shapes"]
    assert shapes.iloc[0] == "[[1, 16, 64], [], [64], [64], [], []]"
    # cut to the 80-char column without an ellipsis
    assert (
        shapes.iloc[2]
        == "[[1, 16, 64], [1, 16, 64], [1, 16, 64], [], [], [192, 64], [192], [64, 64], [64]"
    )
    long = _tables("torch-2.13.0+cpu/long_names_group_by_input_shape.txt")[0].frame
    assert long["truncated"].iloc[0] and not long["truncated"].iloc[2]
    assert long["input_shapes"].iloc[0] == "[]"
    ms = _tables("torch-2.13.0+cpu/self_cpu_time_total_time_unit_ms.txt")[0].frame
    assert ms.set_index("name")["cpu_avg_s"]["aten::copy_"] == approx(0.649 * MS)
    header = _tables("torch-2.7.0/cpu_time_total_with_header.txt")[0]
    assert header.banner == ["MY HEADER"]


@needs_corpus
def test_dominant_operators_on_corpus() -> None:
    basic = _tables("torch-2.7.0/cpu_time_total_basic.txt")[0]
    assert dominant_operators(basic) == [
        "aten::_native_multi_head_attention",
        "aten::mm",
        "aten::gelu",
    ]
    mem = _tables("torch-2.7.0/profile_memory_sort_self_cpu_memory_usage.txt")[0]
    assert dominant_operators(mem, 2) == ["aten::mm", "aten::_softmax"]
    # grouped by shape: names repeat, the helper returns distinct names
    grouped = _tables("torch-2.7.0/sglang_style_group_by_input_shape.txt")[1]
    assert dominant_operators(grouped, 4) == [
        "aten::layer_norm",
        "aten::native_layer_norm",
        "aten::_native_multi_head_attention",
        "aten::linear",
    ]


@needs_corpus
def test_corpus_to_dict_is_plain_json() -> None:
    table = _tables("torch-2.13.0+cpu/sglang_style_group_by_input_shape.txt")[0]
    d = json.loads(json.dumps(table.to_dict(), allow_nan=False))
    assert set(d) == {
        "path",
        "line",
        "sort_by",
        "self_cpu_total_s",
        "self_cuda_total_s",
        "dominant",
        "rows",
    }
    assert (
        d["dominant"] and d["dominant"][0] == d["rows"][0]["name"]
    )  # sorted by CPU time: the top row leads
    assert set(d["rows"][0]) == {
        "name",
        "input_shapes",
        "self_cpu_s",
        "cpu_total_s",
        "self_cuda_s",
        "cuda_total_s",
        "calls",
    }
    assert d["self_cuda_total_s"] is None and d["rows"][0]["self_cuda_s"] is None
    assert d["rows"][0]["calls"] == 3 and isinstance(d["rows"][0]["calls"], int)
    assert d["rows"][0]["input_shapes"] == "[[1000, 64], [1, 16], [], [], []]"


@needs_corpus
def test_corpus_sglang_file_inside_a_log() -> None:
    """The real SGLang-style message, with its log prefix and surrounding log lines."""
    body = (
        (CORPUS / "torch-2.13.0+cpu/sglang_style_group_by_input_shape.txt").read_text().splitlines()
    )
    log = [
        "[2025-10-16 09:06:29 TP0] Capture cuda graph begin. This can take up to several minutes.",
        "[2025-10-16 09:06:30 TP0] " + body[0],
        *body[1:],
        "[2025-10-16 09:06:31 TP0] Capture cuda graph end. Time elapsed: 5.21 s.",
    ]
    tables = find_tables(log, "server.log")
    assert [(t.line, t.sort_by, len(t.frame), t.complete) for t in tables] == [
        (2, "cuda_time_total", 10, True),
        (20, "cpu_time_total", 10, True),
    ]
    assert tables[1].frame["line"].iloc[0] == 24  # 20 + sep, header, sep


@needs_corpus
def test_corpus_table_cut_mid_row() -> None:
    text = (CORPUS / "torch-2.7.0/profile_memory_cpu_time_total.txt").read_text()
    check_cuts(text, 10, stride=7)
    lines = text.splitlines()
    cut = lines[:7] + [lines[7][:60]]  # cut inside the 5th row
    table = parse_table_block(cut, "cut.txt", 1)
    assert len(table.frame) == 4 and not table.complete
    assert table.frame["name"].iloc[-1] == "aten::linear"
