"""A log that ends inside a capture is never a silent "No findings": the run says so in a
note, unless something after the capture's last line shows it ended (an end line, a full
progress bar, serving lines) or a capture error was placed (GD100 then speaks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.api import analyze
from tests.conftest import ROOT

HEALTHY = (ROOT / "fixtures" / "incidents" / "vllm-healthy" / "server.log").read_text()
BEGIN = (
    "INFO 03-27 10:29:03 [model_runner.py:1442] Capturing cudagraphs for decoding. This may "
    "lead to unexpected consequences if the model is not static."
)
CUT_ERROR = "ERROR 03-27 10:29:13 [worker_base.py:620] Error executing metho"


def _notes(tmp_path: Path, text: str) -> list[str]:
    log = tmp_path / "server.log"
    log.write_text(text)
    report = analyze([str(log)])
    assert len(report.runs) == 1
    return [n for n in report.runs[0].facts.notes if "log ends before it finished" in n]


def test_a_capture_cut_by_an_unreadable_error_is_noted(tmp_path: Path) -> None:
    notes = _notes(tmp_path, f"{BEGIN}\n{CUT_ERROR}\n")
    assert notes == [
        f"decode capture began (line 1 of {tmp_path / 'server.log'}) and the log ends before it "
        "finished: no end of capture, no serving line and no error graphdiag can place after it "
        "(a capture that stopped without a readable error, or a log cut during capture)"
    ]


def test_a_progress_bar_cut_short_is_noted(tmp_path: Path) -> None:
    bar = "Capturing CUDA graphs (decode, FULL):  42%|████▏     | 8/19 [00:03<00:04,  2.71it/s]"
    assert len(_notes(tmp_path, f"{bar}\n")) == 1


@pytest.mark.parametrize(
    "after",
    [
        "INFO 03-27 10:29:20 [model_runner.py:1563] Graph capturing finished in 17 secs, took 0.52 GiB",
        "Capturing CUDA graphs (decode, FULL): 100%|██████████| 19/19 [00:07<00:00,  2.71it/s]",
        "INFO 03-27 10:30:01 [metrics.py:455] Avg prompt throughput: 120.0 tokens/s, Avg "
        "generation throughput: 800.5 tokens/s, Running: 12 reqs, Swapped: 0 reqs, Pending: 0 "
        "reqs, GPU KV cache usage: 10.2%, CPU KV cache usage: 0.0%.",
    ],
    ids=["end line", "full bar", "serving"],
)
def test_a_capture_shown_to_end_is_not_noted(tmp_path: Path, after: str) -> None:
    assert _notes(tmp_path, f"{BEGIN}\n{after}\n") == []


def test_a_whole_healthy_log_is_not_noted(tmp_path: Path) -> None:
    assert _notes(tmp_path, HEALTHY) == []


def test_redraws_glued_on_one_line_are_read_to_their_last(tmp_path: Path) -> None:
    """tqdm redraws glued into one physical line: the last one (100%) decides, not the first."""
    redraws = [ln for ln in HEALTHY.splitlines() if ln.startswith("Capturing CUDA graphs (decode")]
    glued = "\r".join(redraws)  # as tqdm leaves them in a file: one line, CR between redraws
    assert "100%" in glued
    assert _notes(tmp_path, f"{BEGIN}\n{glued}\n") == []
    cut = "\r".join(redraws[:-1])  # the same bar, last redrawn at 78% when the log ends
    assert len(_notes(tmp_path, f"{BEGIN}\n{cut}\n")) == 1


def test_an_error_outside_capture_is_noted_on_a_run_without_capture_error(tmp_path: Path) -> None:
    """A traceback of the forward pass (no capture frame, its exception line cut off) is no
    capture error, and the run says that it saw it and why it is not one."""
    fragment = (
        "Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/models/qwen2.py", line 371, in forward\n'
        "    return self.logits_processor(\n"
        '  File "/usr/local/lib/python3.11/dist-packages/vllm/distributed/parallel_state.py", '
        "line 420, in all_gather\n"
    )
    log = tmp_path / "server.log"
    log.write_text(fragment)
    run = analyze([str(log)]).runs[0]
    assert run.record.to_json()["capture_error"] is None
    (note,) = [n for n in run.facts.notes if "not read as a capture error" in n]
    assert note.startswith(f"an error at line 1 of {log} is not read as a capture error, ")
