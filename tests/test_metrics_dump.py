"""/metrics dumps as inputs: found by content, read into runs (alone, or joining the log
beside them), counters giving batches per mode with ``source: metrics``."""

from __future__ import annotations

import shutil
from pathlib import Path

from diag.api import analyze
from diag.sources.readers import sniff
from gen import logs2026 as lg
from tests.conftest import ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"


def test_a_dump_is_found_by_content_not_name() -> None:
    dump = "\n".join(lg.sglang_metrics([{"decode_cuda_graph": 3}])).encode()
    assert sniff(dump, compressed=False).kind == "metrics"
    assert sniff(dump, compressed=False).backend == "sglang"
    log = b"[2026-08-01 10:00:00] sglang:cuda_graph_passes_total is exported on /metrics\n"
    assert sniff(log, compressed=False).kind == "log"


def test_a_dump_beside_a_log_joins_its_run(tmp_path: Path) -> None:
    shutil.copy(INCIDENTS / "sglang-2026-every-runner" / "server.log", tmp_path / "server.log")
    scrapes = [
        {"decode_cuda_graph": 10, "decode_none": 2},
        {"decode_cuda_graph": 25, "decode_none": 9},
    ]
    (tmp_path / "scrape.txt").write_text("\n".join(lg.sglang_metrics(scrapes)) + "\n")
    report = analyze([str(tmp_path)], generated_at="fixed")
    assert len(report.runs) == 1
    run = report.runs[0]
    assert str(tmp_path / "scrape.txt") in run.facts.run.sources
    kinds = {Path(i.path).name: i.kind for i in report.inputs}
    assert kinds == {"server.log": "log", "scrape.txt": "metrics"}
    assert run.record.batches.source == "logged"  # the log's own per-batch flags stay first
    counted = run.to_dict()["metrics"]
    assert counted["totals"]["decode_graph"] == 25 and counted["totals"]["decode_eager"] == 9
    assert counted["windows"] == [
        {"scrape": 1, "decode_graph": 15, "decode_eager": 7, "prefill_graph": 0, "prefill_eager": 0}
    ]


def test_vllm_cudagraph_iterations_when_present(tmp_path: Path) -> None:
    lines = [
        "# HELP vllm:cudagraph_iterations_total Iterations by CUDA graph runtime mode.",
        "# TYPE vllm:cudagraph_iterations_total counter",
        'vllm:cudagraph_iterations_total{engine="0",model_name="m",runtime_mode="FULL"} 700.0',
        'vllm:cudagraph_iterations_total{engine="0",model_name="m",runtime_mode="PIECEWISE"} 200.0',
        'vllm:cudagraph_iterations_total{engine="0",model_name="m",runtime_mode="NONE"} 100.0',
    ]
    (tmp_path / "metrics.txt").write_text("\n".join(lines) + "\n")
    report = analyze([str(tmp_path)], generated_at="fixed")
    (run,) = report.runs
    assert run.facts.backend == "vllm"
    b = run.record.batches
    assert (b.graph, b.eager, b.source) == (900, 100, "metrics")
