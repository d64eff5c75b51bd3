"""A server's life in the log: a draft runner's start is not a restart, an operator's stop is
not a failure.

- Every SGLang ModelRunner prints "Init torch distributed begin.", a speculative draft
  runner's too (sglang==0.5.3:srt/model_executor/model_runner.py:285,626): in a log with its
  launch line (``server_args=``) a second one on the same rank is the draft's, one run; in an
  excerpt without a launch line it is the only sign of a restart.
- SGLang's SIGTERM handler says "SIGTERM received ... Draining requests and shutting down"
  (sglang==0.5.23:srt/managers/tokenizer_manager.py:4068); the children it takes down and the
  clean-up's "SIGQUIT received ... It usually means one child failed" after it are the stop:
  the run stays ok, with the stop said. The same SIGQUIT with no stop asked is a failure.
"""

from __future__ import annotations

from pathlib import Path

from diag.api import analyze
from tests.conftest import ROOT
from tests.test_hotpath_oracle import assert_same_tables, both

HEALTHY = (ROOT / "fixtures" / "incidents" / "sglang-healthy" / "server.log").read_text(
    encoding="utf-8"
)
STOP = (
    "[2025-11-03 10:17:43] SIGTERM received. signum=None frame=None. Draining requests and "
    "shutting down...\n"
    "[2025-11-03 10:17:43] Subprocess detokenizer (pid=31379) crashed with exit code -15. "
    "Triggering SIGQUIT for cleanup...\n"
)
SIGQUIT = (
    "[2025-11-03 10:17:43] SIGQUIT received. signum=None, frame=None. It usually means one "
    "child failed.\n"
)
DRAFT_INIT = (
    "[2025-11-03 09:00:04] Init torch distributed begin.\n"
    "[2025-11-03 09:00:04] Init torch distributed ends. mem usage=0.00 GB\n"
    "[2025-11-03 09:00:04] Load weight begin. avail mem=60.00 GB\n"
    "[2025-11-03 09:00:04] Load weight end. type=LlamaForCausalLMEagle, dtype=torch.bfloat16, "
    "avail mem=59.10 GB, mem usage=0.90 GB.\n"
)


def _one(tmp: Path, text: str) -> tuple[list[str], list[str], list[str]]:
    log = tmp / "server.log"
    log.write_text(text, encoding="utf-8")
    report = analyze([str(log)], generated_at="fixed")
    return (
        [r.verdict for r in report.runs],
        [r.verdict_reason for r in report.runs],
        [f.code for r in report.runs for f in r.findings],
    )


def test_an_operators_stop_is_no_failure(tmp_path: Path) -> None:
    verdicts, reasons, codes = _one(tmp_path, HEALTHY + STOP + SIGQUIT)
    assert verdicts == ["ok"], reasons
    assert "stopped on request (SIGTERM)" in reasons[0] and "server.log:" in reasons[0]
    assert "GD105" not in codes


def test_sigquit_with_no_stop_asked_is_a_failure(tmp_path: Path) -> None:
    verdicts, reasons, codes = _one(tmp_path, HEALTHY + SIGQUIT)
    assert verdicts == ["serving_failed"], reasons
    assert "GD105" in codes


def test_a_draft_runners_start_is_not_a_restart(tmp_path: Path) -> None:
    lines = HEALTHY.splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if "Load weight end" in ln) + 1
    verdicts, reasons, _ = _one(tmp_path, "".join(lines[:cut]) + DRAFT_INIT + "".join(lines[cut:]))
    assert verdicts == ["ok"], reasons


def test_without_a_launch_line_a_second_start_is_a_restart(tmp_path: Path) -> None:
    body = "".join(ln for ln in HEALTHY.splitlines(keepends=True) if "server_args=" not in ln)
    verdicts, _, _ = _one(tmp_path, body + body)
    assert len(verdicts) == 2


def test_both_read_paths_see_the_stop(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(HEALTHY + STOP + SIGQUIT, encoding="utf-8")
    pure, hot = both([str(log)])
    assert_same_tables(pure, hot, "stop")
    assert "shutdown_requested" in set(hot["startup"]["marker"])
