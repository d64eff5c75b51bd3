"""Run verdicts (issue 24 point 1): OK only for a server the log shows capturing (or eager)
and serving; every other run says what was seen, in JSON, text, Markdown and HTML, and the
exit code follows. Most cases are transformations of the fixture incidents: cut the log,
append an error, and the verdict must move the way the change says.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from markupsafe import escape

from diag.api import analyze
from diag.cli import main
from diag.facts.verdict import FAILED, VERDICTS
from diag.render.html import render_html
from diag.render.mdtable import md_cell
from diag.render.serialize import to_yaml
from diag.render.text import render_markdown, render_text
from diag.report import Report
from diag.rules.gd100_capture_failed import GD100
from diag.rules.gd105_engine_error import GD105
from tests.conftest import ROOT, need_corpus

INCIDENTS = ROOT / "fixtures" / "incidents"
SGLANG_HEALTHY = INCIDENTS / "sglang-healthy" / "server.log"
VLLM_HEALTHY = INCIDENTS / "vllm-healthy" / "server.log"

VLLM_SERVING_CRASH = """\
(EngineCore_DP0 pid=2) ERROR 11-03 09:30:10 [core.py:710] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=2) ERROR 11-03 09:30:10 [core.py:710] Traceback (most recent call last):
(EngineCore_DP0 pid=2) ERROR 11-03 09:30:10 [core.py:710]   File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 754, in _process_engine_step
(EngineCore_DP0 pid=2) ERROR 11-03 09:30:10 [core.py:710]     outputs, model_executed = self.step_fn()
(EngineCore_DP0 pid=2) ERROR 11-03 09:30:10 [core.py:710] torch.AcceleratorError: CUDA error: an illegal memory access was encountered
"""
VLLM_PROFILE_OOM = """\
INFO 10-18 10:03:11 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: model='m', enforce_eager=False
INFO 10-18 10:03:20 [gpu_worker.py:298] Memory profiling takes 3.10 seconds
ERROR 10-18 10:03:21 [core.py:708] EngineCore failed to start.
ERROR 10-18 10:03:21 [core.py:708] Traceback (most recent call last):
ERROR 10-18 10:03:21 [core.py:708]   File "/usr/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 2521, in profile_run
ERROR 10-18 10:03:21 [core.py:708]     hidden_states = self._dummy_run(self.max_num_tokens)
ERROR 10-18 10:03:21 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.
"""
SGLANG_CAPTURE = """\
[2025-10-04 02:29:30 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=60.00 GB
[2025-10-04 02:29:36 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 380, in __init__
    self.capture()
Exception: Capture cuda graph failed: {error}
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
3. disable torch compile by not using --enable-torch-compile
4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)
"""
ILLEGAL = "Triton Error [CUDA]: an illegal memory access was encountered"
MISMATCH = "Detected mismatch between collectives on ranks. Rank 3 is running collective: CollectiveFingerPrint(SequenceNumber=10, OpType=ALLREDUCE)"
MEMORY_FLAGS = ("--mem-fraction-static", "--gpu-memory-utilization", "--kv-cache-memory-bytes")


def _one(path: Path):  # type: ignore[no-untyped-def]
    report = analyze([str(path)], generated_at="fixed")
    assert len(report.runs) == 1, [r.id for r in report.runs]
    return report, report.runs[0]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


SERVING = r"Decode batch|Engine 000:|fired up and ready|Application startup complete"


def _serving_at(lines: list[str]) -> int:
    """Index of the first line that shows the server up: ready, a batch or a stats line."""
    return next(i for i, ln in enumerate(lines) if re.search(SERVING, ln))


# ------------------------------------------------------------------ the verdict per state
@pytest.mark.parametrize("log", [SGLANG_HEALTHY, VLLM_HEALTHY], ids=["sglang", "vllm"])
def test_a_server_seen_capturing_and_serving_is_ok_and_says_so(log: Path) -> None:
    report, run = _one(log)
    assert run.verdict == "ok", run.verdict_reason
    assert "captured graphs" in run.verdict_reason and "served" in run.verdict_reason
    d = run.to_dict()
    assert d["verdict"] == "ok" and d["verdict_reason"] == run.verdict_reason
    assert render_text(report).startswith("No findings.")


@pytest.mark.parametrize("log", [SGLANG_HEALTHY, VLLM_HEALTHY], ids=["sglang", "vllm"])
def test_cutting_the_log_before_serving_makes_it_incomplete(log: Path, tmp_path: Path) -> None:
    lines = log.read_text().splitlines(keepends=True)
    cut = _write(tmp_path, "cut.log", "".join(lines[: _serving_at(lines)]))
    report, run = _one(cut)
    assert run.verdict == "incomplete"
    assert "ends before it served" in run.verdict_reason, run.verdict_reason
    text = render_text(report)
    assert "No findings." not in text and "incomplete" in text
    html = render_html(report)
    assert "sev-ok" not in re.search(r'<section id="verdict".*?</section>', html, re.S).group(0)


def test_cutting_the_log_inside_capture_says_capture_did_not_end(tmp_path: Path) -> None:
    lines = SGLANG_HEALTHY.read_text().splitlines(keepends=True)
    begin = next(i for i, ln in enumerate(lines) if "Capture cuda graph begin" in ln)
    _, run = _one(_write(tmp_path, "cut.log", "".join(lines[: begin + 1])))
    assert run.verdict == "incomplete"
    assert "ends during capture" in run.verdict_reason


def test_serving_lines_alone_do_not_show_capture(tmp_path: Path) -> None:
    """Decode lines without the engine's graph flag, and no start-up: not enough for OK."""
    lines = SGLANG_HEALTHY.read_text().splitlines(keepends=True)
    decode = [re.sub(r", cuda graph: \w+", "", ln) for ln in lines if "Decode batch" in ln]
    _, run = _one(_write(tmp_path, "decode.log", "".join(decode)))
    assert run.verdict == "incomplete"
    assert "too little to judge" in run.verdict_reason


def test_an_error_after_serving_is_serving_failed_and_exits_1(tmp_path: Path) -> None:
    log = _write(tmp_path, "crash.log", VLLM_HEALTHY.read_text() + VLLM_SERVING_CRASH)
    _, run = _one(log)
    assert run.verdict == "serving_failed"
    assert "illegal memory access" in run.verdict_reason
    assert [f.code for f in run.findings if f.severity == "error"] == ["GD105"]
    res = CliRunner().invoke(main, ["analyze", str(log), "--no-html", "-o", str(tmp_path)])
    assert res.exit_code == 1, res.output


def test_an_oom_in_profiling_is_startup_failed_and_exits_1(tmp_path: Path) -> None:
    log = _write(tmp_path, "oom.log", VLLM_PROFILE_OOM)
    report, run = _one(log)
    assert run.verdict == "startup_failed"
    # the error is at the line that reports it: "EngineCore failed to start." heads the
    # traceback its process prints under it (one error, not two)
    assert "memory profiling" in run.verdict_reason and "oom.log:3" in run.verdict_reason
    error = run.to_dict()["engine_error"]
    assert (error["phase"], error["placed_by"], error["line"]) == ("memory_profiling", "frames", 3)
    assert error["others"] == 0
    res = CliRunner().invoke(main, ["analyze", str(log), "--no-html", "-o", str(tmp_path)])
    assert res.exit_code == 1
    assert "FAIL" in render_text(report) and "startup_failed" in render_markdown(report)


def test_a_capture_error_is_capture_failed(tmp_path: Path) -> None:
    _, run = _one(INCIDENTS / "sglang-capture-oom")
    assert run.verdict == "capture_failed" and "(oom)" in run.verdict_reason


def test_findings_at_warning_turn_ok_into_warn_naming_them() -> None:
    _, run = _one(INCIDENTS / "sglang-padding-waste")
    assert run.verdict == "warn"
    assert "GD111" in run.verdict_reason
    assert run.facts.state.verdict == "ok"  # the evidence part: what the findings act on


def test_every_verdict_is_one_of_the_contract_and_failed_ones_never_read_ok() -> None:
    for folder in sorted(p for p in INCIDENTS.iterdir() if p.is_dir()):
        report = analyze([str(folder)], generated_at="fixed")
        for run in report.runs:
            assert run.verdict in VERDICTS
            assert run.verdict_reason and "None" not in run.verdict_reason
            if run.verdict in FAILED:
                assert run.worst() == "error", (folder.name, run.verdict, run.findings)
            head = render_text(report).split("Runs:\n", 1)[1].split(" ", 1)[0]
            assert (head == "OK") == (run.verdict == "ok"), (folder.name, head, run.verdict)


# ------------------------------------------------------------------ inputs that make no run
def test_a_log_that_makes_no_run_says_why_everywhere(tmp_path: Path) -> None:
    lines = SGLANG_HEALTHY.read_text().splitlines(keepends=True)
    good = _write(tmp_path, "good.log", "".join(lines))
    # the engine prefix sniffs as SGLang, but no line is one graphdiag reads
    empty = _write(tmp_path, "chatter.log", "[2025-11-03 09:00:00] hello\n" * 3)
    report = analyze([str(good), str(empty)], generated_at="fixed")
    row = next(i for i in report.to_dict()["inputs"] if i["path"] == str(empty))
    assert row["reason"] and "made no run" in row["reason"]
    assert "made no run" in " ".join(render_text(report).split())
    assert "made no run" in render_markdown(report)
    assert "made no run" in render_html(report)


# ------------------------------------------------------------------ remedies by cause
def test_every_gd100_and_gd105_remedy_states_the_causes_it_serves() -> None:
    for rule in (GD100, GD105):
        for remedy in rule.remedies:
            assert remedy.causes, f"{rule.code}: {remedy.text!r} serves no stated cause"
            if any(flag in remedy.text for flag in MEMORY_FLAGS) and "--cuda-graph" not in (
                remedy.text
            ):
                assert set(remedy.causes) <= {"oom", "other"}, (rule.code, remedy.text)


@pytest.mark.parametrize(
    ("error", "cause", "first"),
    [
        (ILLEGAL, "illegal_memory_access", "CUDA_LAUNCH_BLOCKING=1"),
        (MISMATCH, "collective_mismatch", "TORCH_DISTRIBUTED_DEBUG=DETAIL"),
        ("Error building extension 'batch_prefill_with_kv_cache'", "compile", "compile step"),
    ],
)
def test_capture_failures_of_class_other_get_their_own_first_step(
    tmp_path: Path, error: str, cause: str, first: str
) -> None:
    _, run = _one(_write(tmp_path, "c.log", SGLANG_CAPTURE.format(error=error)))
    gd100 = next(f for f in run.findings if f.code == "GD100")
    assert gd100.cause == cause
    assert first in gd100.remediation[0], gd100.remediation
    assert not any(flag in " ".join(gd100.remediation) for flag in MEMORY_FLAGS)


def test_an_unclassed_capture_failure_follows_the_printed_list_in_its_order(
    tmp_path: Path,
) -> None:
    _, run = _one(_write(tmp_path, "c.log", SGLANG_CAPTURE.format(error="")))
    rem = next(f for f in run.findings if f.code == "GD100").remediation
    at = [
        next(i for i, r in enumerate(rem) if flag in r)
        for flag in ("--mem-fraction-static", "--cuda-graph-max-bs", "--disable-cuda-graph")
    ]
    assert at == sorted(at), rem


def test_first_change_never_groups_runs_whose_causes_differ(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i, err in enumerate([ILLEGAL, ILLEGAL, MISMATCH, MISMATCH, "CUDA out of memory."]):
        _write(folder, f"node{i}.log", SGLANG_CAPTURE.format(error=err))
    report = analyze([str(folder)], generated_at="fixed")
    causes = {f.cause for f in report.findings if f.code == "GD100"}
    assert causes == {"illegal_memory_access", "collective_mismatch", "oom"}
    box = re.search(r'<section id="verdict".*?</section>', render_html(report), re.S).group(0)
    assert "CUDA_LAUNCH_BLOCKING" in box and "TORCH_DISTRIBUTED_DEBUG" in box
    assert "and 1 other run" in box  # the two illegal accesses do share one


# ------------------------------------------------------------------ the shared corpus
@pytest.mark.parametrize("sub", ["real", "real-2", "real-3"])
def test_no_real_error_excerpt_is_ok_or_silent(sub: str) -> None:
    folder = need_corpus(sub)
    labels = yaml.safe_load((folder / "labels.yaml").read_text())["cases"]
    errors = {
        c["file"]
        for c in labels
        if c.get("capture_error") or "capture_error" in (c.get("kind") or [])
    }
    report = analyze([str(folder)], generated_at="fixed")
    by_file: dict[str, list[str]] = {}
    for run in report.runs:
        for src in run.facts.run.sources:
            by_file.setdefault(Path(src).name, []).append(run.verdict)
        if not run.facts.tables["error"].empty:
            assert run.verdict != "ok" and run.findings, (run.id, run.verdict)
    doc = json.loads(json.dumps(report.to_dict()))
    for item in doc["inputs"]:
        name = Path(item["path"]).name
        if item["kind"] == "log" and name not in by_file:
            assert item["reason"], f"{name} made no run and says nothing"
    for name in errors & set(by_file):
        assert "ok" not in by_file[name], (name, by_file[name])
    _same_everywhere(report)


# ------------------------------------------------------------------ one verdict everywhere
def _same_everywhere(report: Report) -> None:
    doc = report.to_dict()
    text = " ".join(render_text(report).split())
    md = " ".join(render_markdown(report).split())
    html = render_html(report)
    for run, row in zip(report.runs, doc["runs"], strict=True):
        assert (row["verdict"], row["verdict_reason"]) == (run.verdict, run.verdict_reason)
        said = f"verdict {run.verdict}: {run.verdict_reason}"
        assert said in text and " ".join(md_cell(said).split()) in md
        assert str(escape(run.verdict_reason)) in html
    tickets = yaml.safe_load(to_yaml(report))["runs"]
    assert [(t["verdict"], t["verdict_reason"]) for t in tickets] == [
        (r.verdict, r.verdict_reason) for r in report.runs
    ]


def test_the_verdict_and_its_reason_read_the_same_in_every_surface(tmp_path: Path) -> None:
    """JSON, text, Markdown and HTML print the one verdict of each run, word for word: over a
    folder of several runs, and over every fixture incident on its own."""
    folder = tmp_path / "fleet"
    folder.mkdir()
    for name in ("sglang-healthy", "sglang-padding-waste", "sglang-capture-oom"):
        _write(folder, f"{name}.log", (INCIDENTS / name / "server.log").read_text())
    _write(folder, "oom.log", VLLM_PROFILE_OOM)
    report = analyze([str(folder)], generated_at="fixed")
    assert len(report.runs) == 4
    _same_everywhere(report)
    for incident in sorted(p for p in INCIDENTS.iterdir() if p.is_dir()):
        _same_everywhere(analyze([str(incident)], generated_at="fixed"))


def test_a_figure_in_the_reason_is_the_record_s_own(tmp_path: Path) -> None:
    """The capture time a reason quotes is the record's capture_time_s (decode graphs, rank
    0), not a sum over every capture, and it says so (GD140 names each capture apart): the
    healthy log with a draft capture added."""
    lines = SGLANG_HEALTHY.read_text().splitlines(keepends=True)
    end = next(i for i, ln in enumerate(lines) if "Capture cuda graph end" in ln)
    draft = (
        "[2025-11-03 09:00:11] Capture draft cuda graph end. Time elapsed: 62.67 s. "
        "mem usage=0.21 GB. avail mem=7.20 GB.\n"
    )
    log = _write(
        tmp_path, "draft.log", "".join(lines[: end + 1]) + draft + "".join(lines[end + 1 :])
    )
    _, run = _one(log)
    assert run.record.to_json()["capture_time_s"] == 6.2
    assert "captured decode graphs in 6.2 s" in run.verdict_reason, run.verdict_reason


SGLANG_SERVING_CRASH = """\
[2025-11-03 09:59:00] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 2400, in run_scheduler_process
    scheduler.event_loop_normal()
  File "/usr/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 700, in event_loop_normal
    result = self.run_batch(batch)
RuntimeError: CUDA error: an illegal memory access was encountered
"""


@pytest.mark.parametrize("incident", sorted(p.name for p in INCIDENTS.iterdir() if p.is_dir()))
def test_a_crash_appended_to_a_served_log_makes_it_serving_failed(
    incident: str, tmp_path: Path
) -> None:
    """Transformation over every fixture incident: a run seen serving (ok or warn) that gets
    a serving-time traceback appended to its last log becomes serving_failed with GD105 at
    error, whatever else it had; one whose capture failed stays capture_failed."""
    folder = INCIDENTS / incident
    report = analyze([str(folder)], generated_at="fixed")
    if len(report.runs) != 1:
        pytest.skip("one run per incident is transformed")
    before = report.runs[0]
    logs = sorted(folder.glob("*.log"))
    if not logs:
        pytest.skip("no plain log to append to")
    copy = tmp_path / incident
    copy.mkdir()
    for f in folder.iterdir():
        if f.is_file():
            (copy / f.name).write_bytes(f.read_bytes())
    crash = SGLANG_SERVING_CRASH if before.facts.backend == "sglang" else VLLM_SERVING_CRASH
    with (copy / logs[-1].name).open("a") as out:
        out.write(crash)
    after = analyze([str(copy)], generated_at="fixed").runs[0]
    if before.verdict in ("ok", "warn"):
        assert after.verdict == "serving_failed", (after.verdict, after.verdict_reason)
        assert "illegal memory access" in after.verdict_reason
        assert any(f.code == "GD105" and f.severity == "error" for f in after.findings)
    elif before.verdict == "capture_failed":
        assert after.verdict == "capture_failed"


def test_many_inputs_without_a_run_are_counted_not_listed_in_text(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    _write(folder, "server.log", SGLANG_HEALTHY.read_text())
    for i in range(15):
        _write(folder, f"chatter-{i:02}.log", "[2025-11-03 09:00:00] hello\n")
    report = analyze([str(folder)], generated_at="fixed")
    reasons = [i.reason for i in report.inputs if i.path != str(folder / "server.log")]
    assert len(reasons) == 15 and all(r and "made no run" in r for r in reasons)
    for text in (render_text(report), render_markdown(report)):
        assert text.count("made no run") == 10 and "... and 5 more" in text
    assert render_html(report).count("made no run") >= 15
