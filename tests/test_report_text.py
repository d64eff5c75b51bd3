"""Ticket text and display helpers: compact size lists, Markdown cells and tables parsed
by a real Markdown parser (markdown-it, GFM tables), the display YAML, axis rules, the
run's shared time axis and its load (KV / queue) frame."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
import yaml
from markdown_it import MarkdownIt

from diag.api import analyze
from diag.engines.vllm import default_capture_sizes
from diag.facts.load import has_load, load_frame
from diag.render.axes import NO_YEAR, finish_axes, time_axis
from diag.render.mdtable import md_cell, md_table
from diag.render.serialize import record_yaml, to_json, to_yaml
from diag.render.sizes import compact_sizes, expand_sizes
from diag.render.text import render_markdown, render_text
from tests.conftest import ROOT

INCIDENTS = sorted(p for p in (ROOT / "fixtures" / "incidents").iterdir() if p.is_dir())


# ------------------------------------------------------------------ sizes
def test_vllm_default_sizes_compact_and_round_trip() -> None:
    sizes = [1, 2, 4] + list(range(8, 257, 8)) + list(range(272, 513, 16))
    text = compact_sizes(sizes)
    assert text == "1, 2, 4, 8-256 step 8, 272-512 step 16 (51 sizes)"
    assert expand_sizes(text) == sizes


def test_engine_default_list_round_trips() -> None:
    sizes = default_capture_sizes("0.10.1", 256)
    assert len(sizes) > 16
    assert expand_sizes(compact_sizes(sizes) or "") == sorted(set(sizes))


def test_short_and_irregular_lists_stay_lists() -> None:
    assert compact_sizes([1, 2, 4]) == "1, 2, 4"
    assert compact_sizes([8, 16, 24]) == "8, 16, 24"
    assert compact_sizes([1, 3, 7, 20, 33]) == "1, 3, 7, 20, 33"
    assert compact_sizes([4, 2, 1, 2, 3]) == "1-4"
    assert compact_sizes([]) is None and compact_sizes(None) is None


@pytest.mark.parametrize("seed", range(25))
def test_round_trip_random_lists(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = sorted(set(rng.integers(1, 600, rng.integers(1, 80)).tolist()))
    assert expand_sizes(compact_sizes(sizes) or "") == sizes


# ------------------------------------------------------------------ markdown
def tables(md: str) -> list[list[list[str]]]:
    """Every table as rows of cell texts, as markdown-it (GFM tables) parses them."""
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    out: list[list[list[str]]] = []
    for i, t in enumerate(tokens):
        if t.type == "table_open":
            out.append([])
        elif t.type == "tr_open":
            out[-1].append([])
        elif t.type == "inline" and tokens[i - 1].type in ("td_open", "th_open"):
            out[-1][-1].append(t.content)
    return out


def test_cells_survive_newlines_pipes_and_markup() -> None:
    nasty = [
        "Capture memory 1.3 GiB against a KV pool of 6.0 GiB\n",
        "deepseek | Exception: Capture cuda graph failed:\n  File x.py",
        "<script>alert(1)</script> & `code | pipe`",
        "",
        "back\\slash |",
    ]
    md = "\n".join(md_table(["severity", "message", "remedy"], [["w", m, m] for m in nasty]))
    (rows,) = tables(md + "\n")
    assert len(rows) == 1 + len(nasty)
    assert all(len(r) == 3 for r in rows), rows
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert rows[2][1].startswith("deepseek") and "Exception" in rows[2][1]
    assert md_cell("") == " " and "\n" not in md_cell(nasty[0])


@pytest.mark.parametrize("incident", INCIDENTS, ids=lambda p: p.name)
def test_markdown_of_every_fixture_incident_is_valid(incident: Path) -> None:
    report = analyze([str(incident)])
    md = render_markdown(report)
    found = tables(md)
    findings = report.findings
    if findings:
        head, *rows = found[-1]
        assert head[:2] == ["severity", "code"]
        assert len(rows) == len(findings)  # one row per finding, none split by a newline
        for row, (f, _run) in zip(
            rows,
            sorted(
                ((f, r) for r in report.runs for f in r.findings),
                key=lambda fr: ({"error": 0, "warning": 1, "info": 2}[fr[0].severity], fr[0].code),
            ),
            strict=True,
        ):
            assert row[1] == f"{f.code} {f.name}"
            said, cell = " ".join(f.message.split()).replace("|", ""), row[3].replace("\\|", "")
            if cell.endswith("…"):  # a long message is cut to MAX_CELL (render/mdtable.py)
                assert said.startswith(cell[:-1].rstrip()) and len(cell) >= 300, cell
            else:
                assert said in cell
    for table in found:
        assert all(len(r) == len(table[0]) for r in table)
    # the display YAML in the ticket parses and matches the report's records
    block = re.search(r"```yaml\n(.*?)```", md, re.S)
    assert block is not None
    shown = yaml.safe_load(block.group(1))
    assert len(shown["runs"]) == len(report.runs)
    # render's own text never says n/a (rule messages are the rule pack's)
    for line in render_text(report)[render_text(report).index("Runs:") :].splitlines():
        assert "n/a" not in line and "None" not in line, line


def test_ticket_yaml_display_compacts_long_lists_json_keeps_them(tmp_path: Path) -> None:
    report = analyze([str(ROOT / "fixtures" / "incidents" / "vllm-kv-squeeze")])
    sizes = report.runs[0].record.to_json()["graph_capture_sizes"]
    assert len(sizes) > 16
    shown = yaml.safe_load(record_yaml(report))["runs"][0]["graph_capture_sizes"]
    assert isinstance(shown, str) and expand_sizes(shown) == sizes
    machine = to_yaml(report)
    assert yaml.safe_load(machine)["runs"][0]["graph_capture_sizes"] == sizes
    assert "graph_capture_sizes: [1, 2, 4, 8" in machine  # flow style, not 51 lines
    # the JSON contract unchanged: the whole list (written on one line since scalar lists are)
    assert json.loads(to_json(report))["runs"][0]["record"]["graph_capture_sizes"] == sizes


# ------------------------------------------------------------------ axes
def test_every_labelled_axis_needs_a_title() -> None:
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    with pytest.raises(ValueError, match="no title"):
        finish_axes(fig)
    fig.update_xaxes(title_text="x (s)")
    fig.update_yaxes(title_text="y (requests)")
    finish_axes(fig)
    assert fig.layout.xaxis.ticks == "outside" and fig.layout.yaxis.showticklabels


def test_time_axis_without_year_is_time_since_start() -> None:
    from datetime import datetime, timezone

    t0 = datetime(NO_YEAR, 3, 14, 9, 27, 0, tzinfo=timezone.utc).timestamp()
    axis = time_axis([np.array([t0, t0 + 40.0])])
    assert axis.kind == "elapsed" and axis.unit == "s"
    fig = go.Figure(go.Scatter(x=axis.x(np.array([t0, t0 + 40.0])), y=[1, 2]))
    axis.apply(fig)
    title = fig.layout.xaxis.title.text
    assert "time since 03-14 09:27:00" in title and "no year" in title and "2000" not in title
    assert axis.label(t0 + 10) == "+10.0 s"
    # the same stamps with a year the log printed: wall clock, date in the title
    real = datetime(2025, 11, 3, 9, 0, 0, tzinfo=timezone.utc).timestamp()
    wall = time_axis([np.array([real, real + 0.0005])])
    assert wall.kind == "wall"
    fig = go.Figure(go.Scatter(x=wall.x(np.array([real])), y=[1]))
    wall.apply(fig)
    assert fig.layout.xaxis.title.text == "time as logged, 2025-11-03"
    lo, hi = (np.datetime64(v) for v in fig.layout.xaxis.range)
    assert (hi - lo) / np.timedelta64(1, "s") >= 10  # a 0.5 ms span is widened
    # an explicit fact wins over the stamps
    assert time_axis([np.array([real, real + 5])], "unknown").kind == "elapsed"
    assert time_axis([np.array([t0, t0 + 5])], "log").kind == "wall"
    assert time_axis([np.array([real, real + 5])], "mtime").kind == "elapsed"  # a guessed year


# ------------------------------------------------------------------ load frame
@pytest.mark.parametrize(
    ("incident", "evictions"), [("vllm-kv-squeeze", 0), ("sglang-kv-squeeze", 34)]
)
def test_load_frame_from_the_engines_own_lines(incident: str, evictions: int) -> None:
    report = analyze([str(ROOT / "fixtures" / "incidents" / incident)])
    tables = report.runs[0].facts.tables
    frame = load_frame(tables)
    assert has_load(frame)
    usage = frame["kv_usage"].dropna()
    assert ((usage >= 0) & (usage <= 1)).all()  # vLLM percent and SGLang fraction alike
    assert int(frame["evicted"].sum()) == evictions
    stats = tables["stats"]
    if not stats.empty:
        assert len(usage) == len(stats)
        assert usage.max() == pytest.approx(stats["kv_usage"].max() / 100)


def test_data_parallel_stats_keep_one_engine() -> None:
    """Two vLLM DP engines interleave their stats lines: the timeline follows engine 0."""
    import pandas as pd

    from diag.facts.load import first_rank

    stats = pd.DataFrame(
        {
            "ts": [1.0, 1.0, 2.0, 2.0],
            "rank": [None] * 4,
            "source": ["a.log"] * 4,
            "line": [1, 2, 3, 4],
            "kv_usage": [10.0, 90.0, 12.0, 95.0],
            "running": [1, 9, 2, 9],
            "waiting": [0, 5, 0, 6],
            "preemptions": [None] * 4,
            "engine_index": [0, 1, 0, 1],
        }
    )
    frame = first_rank(load_frame({"stats": stats}))
    assert list(frame["kv_usage"]) == [0.10, 0.12]
    assert set(frame["rank"]) == {"engine 0"}
