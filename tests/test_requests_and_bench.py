"""Per-request window shares and benchmark summary figures."""

from __future__ import annotations

from pathlib import Path

from diag.api import analyze

DATA = Path(__file__).parent / "data"


def test_request_lifetimes_over_classified_batches() -> None:
    report = analyze([str(DATA / "sglang_requests_bench.log")], generated_at="fixed")
    run = report.runs[0]
    req = run.facts.requests.set_index("request_id")
    # a1 lives 09:01:00-09:01:04: one graph batch (09:01:01) and one eager batch (09:01:03)
    assert req.loc["a1", "steps_graph"] == 1 and req.loc["a1", "steps_eager"] == 1
    assert req.loc["a1", "in_window_share"] == 0.5
    assert not req.loc["a1", "prefill_dominated"]
    # b2: 9000 prompt tokens for 8 generated ones is prefill-dominated
    assert req.loc["b2", "prefill_dominated"]
    summary = run.to_dict()["requests"]
    assert summary["count"] == 2 and summary["prefill_dominated"] == 1


def test_benchmark_summary_fills_perf() -> None:
    report = analyze([str(DATA / "sglang_requests_bench.log")], generated_at="fixed")
    perf = report.runs[0].record.to_json()["perf"]
    assert perf["ttft_s_p50"] == 0.1
    assert perf["ttft_s_p95"] == 0.45678
    assert perf["itl_s_p95"] == 0.04567
    assert perf["throughput_in_window"] == 650.0 and perf["throughput_out_window"] == 1200.0
