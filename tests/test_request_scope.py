"""Issue 34 point 1: one request's error is no outage. A request rejected or failed in the
HTTP / ASGI / serving / tokenizer layer while the server goes on serving is counted and shown
(JSON, text, HTML) as an info finding (GD106); the engine failing (a CUDA error in the forward,
a dead engine core re-raised in a handler) stays ``serving_failed`` with GD105."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from diag.api import analyze
from diag.render.html import render_html
from diag.render.text import render_text
from tests.conftest import ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"

CASES = [
    # (incident, verdict, request errors, request kinds)
    ("sglang-request-too-long", "ok", 1, {"context_length": 1}),
    ("sglang-asgi-exception", "ok", 2, {"KeyError": 1, "context_length": 1}),
    ("vllm-request-too-long", "ok", 1, {"context_length": 1}),
    ("sglang-serving-cuda-error", "serving_failed", 1, {"context_length": 1}),
    ("vllm-engine-dead-in-handler", "serving_failed", 0, {}),
]


@pytest.mark.parametrize(("name", "verdict", "count", "kinds"), CASES, ids=[c[0] for c in CASES])
def test_request_errors_are_counted_not_outages(
    name: str, verdict: str, count: int, kinds: dict[str, int]
) -> None:
    report = analyze([str(INCIDENTS / name)], generated_at="fixed")
    (run,) = report.runs
    assert run.verdict == verdict, run.verdict_reason
    doc = run.to_dict()
    got = doc["request_errors"]
    if not count:
        assert got is None
        return
    assert got["count"] == count and got["kinds"] == kinds
    assert got["first"]["at"].endswith(f"server.log:{got['first']['at'].rsplit(':', 1)[1]}")
    assert got["served_after"] is True
    gd105 = [f for f in run.findings if f.code == "GD105"]
    if verdict == "ok":
        assert not gd105 and f"{count} request" in run.verdict_reason
        assert all(f.severity != "error" for f in run.findings)
    else:
        assert gd105 and gd105[0].severity == "error"
        assert "request" not in gd105[0].message.lower() or "CUDA" in gd105[0].message
    (info,) = [f for f in run.findings if f.code == "GD106"]
    assert info.severity == "info"
    text = render_text(report)
    assert "GD106 request-errors" in text and f"{count} request" in text
    html = render_html(report)
    assert "GD106" in html and "request" in html


def test_first_and_last_point_at_their_own_lines() -> None:
    report = analyze([str(INCIDENTS / "sglang-asgi-exception")], generated_at="fixed")
    got = report.runs[0].to_dict()["request_errors"]
    lines = (INCIDENTS / "sglang-asgi-exception" / "server.log").read_text().splitlines()
    first = int(got["first"]["at"].rsplit(":", 1)[1])
    last = int(got["last"]["at"].rsplit(":", 1)[1])
    assert "Exception in ASGI application" in " ".join(lines[first - 2 : first])
    assert "KeyError: 'content'" in "\n".join(lines[first - 1 : first + 25])
    assert "Error in request handler" in " ".join(lines[last - 2 : last])
    assert first < last


def test_a_request_frame_before_serving_is_no_request_error(tmp_path: Path) -> None:
    """A handler's class failing in start-up (no serving line before it) is a start-up error."""
    log = tmp_path / "x.log"
    log.write_text(
        "[2025-06-10 08:00:00] server_args=ServerArgs(model_path='m', tp_size=1)\n"
        "[2025-06-10 08:00:01] Load weight begin. avail mem=78.50 GB\n"
        "Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/entrypoints/openai/serving_chat.py", line 60, in __init__\n'
        "ValueError: bad chat template\n"
    )
    (run,) = analyze([str(log)], generated_at="fixed").runs
    assert run.verdict == "startup_failed", run.verdict_reason
    assert run.to_dict()["request_errors"] is None


@pytest.mark.parametrize("kind", ["sglang-real", "vllm-real"])
def test_the_bench_logs_are_ok_with_their_request_errors_counted(kind: str, tmp_path: Path) -> None:
    """bench/gen_logs.py's real-shape logs: one request rejected for its length in each."""
    log = tmp_path / f"{kind}.log"
    gen = [sys.executable, str(ROOT / "bench" / "gen_logs.py"), kind, "2e6", str(log)]
    subprocess.run(gen, check=True, capture_output=True, cwd=ROOT)
    report = analyze([str(log)], generated_at="fixed")
    assert report.runs
    for run in report.runs:
        assert run.verdict in ("ok", "warn"), run.verdict_reason
        assert not [f for f in run.findings if f.severity == "error"]
    counted = [r.to_dict()["request_errors"] for r in report.runs]
    assert any(c and c["kinds"].get("context_length") for c in counted), counted
    assert json.dumps(report.to_dict())  # the JSON carries it
