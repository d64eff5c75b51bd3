"""The runners' capture vocabulary, row by row: every frame row of ``phases.yaml`` places a frame
of its own file and function in its phase (no row is shadowed by another), through ``place`` and
through ``diag.api.analyze`` on a generated traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from diag.api import analyze
from diag.engines.phases import (
    CAPTURE_PHASES,
    DATA,
    LogMarker,
    engine_of_frames,
    phase_table,
    place,
)
from diag.parsers.traceback import _markers

RAW = yaml.safe_load((DATA / "phases.yaml").read_text())


def _package(engine: str, row: dict[str, str]) -> str:
    """The installed package a row's file lives in, as its source names it."""
    src = row["source"]
    if row["file"].startswith("torch/"):
        return ""
    for name, pkg in (("vllm-ascend", "vllm_ascend"), ("vllm-gaudi", "vllm_gaudi")):
        if name in src.split(":", 1)[0] or src.startswith(f"github:vllm-project/{name}"):
            return pkg + "/"
    if src.startswith("torch-npu"):
        return "torch_npu/"
    return engine + "/"


def _funcs(func: str) -> list[str]:
    """A concrete name for each alternative of a row's function regex."""
    return [re.sub(r"\\w\+", "x", f).replace(".*", "any_function") for f in func.split("|")]


def _cases() -> list[object]:
    out: list[object] = []
    for engine in ("vllm", "sglang"):
        for row in RAW[engine]["frames"]:
            path = "/usr/lib/python3/site-packages/" + _package(engine, row)
            path += row["file"].replace("**/", "").replace("*", "")
            for func in _funcs(row["func"]):
                frame = f'File "{path}", line 7, in {func}'
                if "code" in row:  # a capture-branch row: one frame per source line it names
                    for k, code in enumerate(row["says"]):
                        out.append(
                            pytest.param(
                                engine,
                                row,
                                f"{frame} {code}",
                                id=f"{engine}:{row['file']}:{func}:code{k}",
                            )
                        )
                    continue
                out.append(pytest.param(engine, row, frame, id=f"{engine}:{row['file']}:{func}"))
    return out


@pytest.mark.parametrize("engine,row,frame", _cases())
def test_every_frame_row_places_its_own_frame(engine: str, row: dict[str, str], frame: str) -> None:
    want = row["phase"] if row["role"] == "decisive" else None
    assert place([frame]) == want, row["source"]
    if _package(engine, row).rstrip("/") in RAW["packages"][engine]:
        assert engine_of_frames([frame]) == engine  # its package (or plugin package) names it


def _capture_rows() -> list[object]:
    return [
        p
        for p in _cases()
        if p.values[1]["role"] == "decisive" and p.values[1]["phase"] in CAPTURE_PHASES  # type: ignore[attr-defined]
    ]


@pytest.mark.parametrize("engine,row,frame", _capture_rows())
def test_an_oom_under_a_capture_frame_is_a_capture_error_of_its_phase(
    tmp_path: Path, engine: str, row: dict[str, str], frame: str
) -> None:
    head = (
        "ERROR 01-01 12:00:00 [core.py:1] "
        if engine == "vllm"
        else "[2025-01-01 12:00:00 TP0] Scheduler hit an exception: "
    )
    lines = [head + "Traceback (most recent call last):", "  " + frame]
    lines.append("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    if engine == "vllm":
        lines = [lines[0]] + [head + line for line in lines[1:]]
    path = tmp_path / "x.log"
    path.write_text("\n".join(lines) + "\n")
    run = analyze([str(path)], generated_at="fixed").runs[0]
    err = run.record.to_json()["capture_error"]
    assert err is not None and err["class"] == "oom", (row["source"], err)
    assert err["phase"] == row["phase"]


def _marker_lines() -> list[object]:
    return [
        pytest.param(engine, m, line, id=f"{engine}:{m.phase}:{line[:40]}")
        for engine in ("vllm", "sglang")
        for m in phase_table(engine).markers
        for line in m.says
    ]


def test_every_marker_row_names_what_its_source_prints() -> None:
    for engine in ("vllm", "sglang"):
        assert all(m.says for m in phase_table(engine).markers), engine


@pytest.mark.parametrize("engine,marker,line", _marker_lines())
def test_every_marker_opens_its_phase_on_its_own_line(
    engine: str, marker: LogMarker, line: str
) -> None:
    assert any(a in line for a in marker.anchors), line  # the prefilter lets it through
    anchors, rx, phases = _markers((engine,))
    m = rx.search(line)
    assert m is not None and m.lastindex is not None, line
    assert phases[m.lastindex - 1] == marker.phase, line  # no row above takes it
