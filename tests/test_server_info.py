"""Saved ``GET /server_info`` documents as inputs (issue 35 point 6): found by content, read
into the events their log lines give, joined to the run of a log beside them."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from diag.api import analyze
from diag.ingest import ingest
from diag.parsers.server_info import SGLANG_INFO_PHASES, SGLANG_MEMORY_KEYS
from diag.sources.info_sniff import sniff_server_info

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from gen import server_info as si  # noqa: E402
from gen.incidents_info import _ARGS_2026  # noqa: E402

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"
EVERY_RUNNER = INCIDENTS / "sglang-2026-every-runner" / "server.log"
VLLM_HEALTHY = INCIDENTS / "vllm-healthy" / "server.log"


def _graphs(run: Any) -> list[tuple[Any, ...]]:
    return [
        (g["runner"], g["model"], g["capture_time_s"], g["capture_mem_gib"], g["status"])
        for g in run.record.to_json()["graphs"]
    ]


def _doc(**kw: Any) -> str:
    return si.sglang_2026(
        _ARGS_2026, graph_gib={"decode": 0.5, "prefill": 2.0}, graph_s={"decode": 3.0}, **kw
    )


def test_a_document_beside_a_log_joins_its_run_and_adds_what_the_log_lacks(
    tmp_path: Path,
) -> None:
    alone = analyze([str(EVERY_RUNNER)], generated_at="fixed")
    shutil.copy(EVERY_RUNNER, tmp_path / "server.log")
    (tmp_path / "server_info.json").write_text(_doc())
    both = analyze([str(tmp_path)], generated_at="fixed")
    kinds = {Path(i.path).name: i.kind for i in both.inputs}
    assert kinds == {"server.log": "log", "server_info.json": "server_info"}
    assert len(both.runs) == 1
    run = both.runs[0]
    assert sorted(Path(s).name for s in run.sources) == ["server.log", "server_info.json"]
    # the log's capture lines stand: the document's figures are not added twice
    assert _graphs(run) == _graphs(alone.runs[0])
    # what the log does not say (SGLang logs no version line) comes from the document
    assert alone.runs[0].engine_version is None
    assert run.engine_version == "0.5.23"
    assert run.verdict == alone.runs[0].verdict


def test_a_2025_document_has_one_graph_figure_the_decode_runners(tmp_path: Path) -> None:
    args = {"model_path": "m", "tp_size": 2, "cuda_graph_max_bs": 160, "disable_cuda_graph": False}
    (tmp_path / "info.json").write_text(si.sglang_2025(args, graph_gib=1.37, tokens=90_000))
    report = analyze([str(tmp_path / "info.json")], generated_at="fixed")
    run = report.runs[0]
    assert run.engine_version == "0.5.6"
    assert _graphs(run) == [("decode", "target", None, 1.37, "captured")]
    assert run.record.to_json()["kv_tokens"] == 90_000
    assert run.verdict == "incomplete"
    assert "server info" in run.verdict_reason


def test_a_pd_decode_server_gives_its_captured_list() -> None:
    text = si.sglang_2026(
        _ARGS_2026, graph_gib={"decode": 0.4}, graph_s={"decode": 2.0}, decode_bs=[1, 2, 4, 8]
    )
    report = _analyze_text(text)
    (decode,) = report.runs[0].record.to_json()["graphs"]
    assert decode["sizes"] == [1, 2, 4, 8] and decode["unit"] == "requests"


def test_vllm_text_and_json_forms_give_the_logs_graph_settings(tmp_path: Path) -> None:
    echo_line = next(ln for ln in VLLM_HEALTHY.read_text().splitlines() if "with config: " in ln)
    echo = echo_line.split("with config: ", 1)[1]
    log = analyze([str(VLLM_HEALTHY)], generated_at="fixed").runs[0].record.to_json()
    text = _analyze_text(si.vllm_text(echo, "0.13.0")).runs[0]
    rec = text.record.to_json()
    assert text.engine_version == "0.13.0"
    assert rec["cudagraph_mode"] == log["cudagraph_mode"]
    mixed = [g for g in log["graphs"] if g["runner"] == "mixed"]
    assert [g["sizes"] for g in rec["graphs"]] == [g["sizes"] for g in mixed]
    config = {
        "model_config": {"model": "m", "enforce_eager": True},
        "compilation_config": {"cudagraph_mode": "FULL_AND_PIECEWISE"},
    }
    eager = _analyze_text(si.vllm_json(config, "0.34.0 (git sha: 1a2b3c)")).runs[0]
    assert eager.engine_version == "0.34.0"
    assert eager.record.to_json()["graph_mode"] == "disabled"
    # the config saved alone (``jq .vllm_config``): the same settings, no version
    alone = _analyze_text(json.dumps(config, indent=2)).runs[0]
    assert alone.backend == "vllm" and alone.engine_version is None
    assert alone.record.to_json()["graph_mode"] == "disabled"


def test_evidence_points_at_the_keys_line(tmp_path: Path) -> None:
    text = _doc(pretty=True)
    path = tmp_path / "server_info.json"
    path.write_text(text)
    lines = text.splitlines()
    frame = ingest([str(path)]).tables["config"]
    assert len(frame) > 10
    for key, line in zip(frame["key"], frame["line"], strict=True):
        assert f'"{key}"' in lines[int(line) - 1], key


def test_a_cut_document_is_skipped_with_its_reason_and_the_log_is_read(tmp_path: Path) -> None:
    shutil.copy(EVERY_RUNNER, tmp_path / "server.log")
    text = _doc()
    (tmp_path / "server_info.json").write_text(text[: len(text) // 2])
    report = analyze([str(tmp_path)], generated_at="fixed")
    status = {Path(i.path).name: i for i in report.inputs}
    assert status["server_info.json"].status == "skipped"
    assert status["server_info.json"].reason.startswith("server info is not valid JSON")
    assert status["server.log"].status == "ok" and len(report.runs) == 1


def test_other_json_in_a_folder_is_still_not_a_log(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_path": "m", "tp_size": 1}))
    assert sniff_server_info(b'{"model_path": "m", "tp_size": 1}') is None
    assert sniff_server_info(b'[{"internal_states": []}]') is None
    assert sniff_server_info(_doc().encode()) == "sglang"
    report = analyze([str(tmp_path)], generated_at="fixed")
    (status,) = report.inputs
    assert status.status == "skipped" and status.reason == "not a log (.json file in a folder)"


def _analyze_text(text: str) -> Any:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "server_info.json"
        path.write_text(text)
        return analyze([str(path)], generated_at="fixed")


WHEELS = os.environ.get("GRAPHDIAG_WHEELS")


@pytest.mark.skipif(not WHEELS, reason="GRAPHDIAG_WHEELS (unzipped wheels) not set")
def test_the_keys_read_are_the_wheels() -> None:
    """The phase and memory keys as sglang==0.5.23 writes them (graph_memory_usage.py:5-12,
    memory_usage.py:15-40)."""
    root = Path(str(WHEELS)) / "sglang-0.5.23" / "sglang" / "srt"
    phases = (root / "model_executor" / "graph_memory_usage.py").read_text()
    declared = re.search(r"GRAPH_MEMORY_USAGE_KEYS = \(([^)]*)\)", phases)
    assert declared is not None
    assert set(re.findall(r'"(\w+)"', declared.group(1))) == set(SGLANG_INFO_PHASES)
    memory = (root / "managers" / "scheduler_components" / "memory_usage.py").read_text()
    for key in SGLANG_MEMORY_KEYS:
        assert f'"{key}":' in memory, key
