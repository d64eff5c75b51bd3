"""Capture-failure detection: signatures, phase placement, reassembly, error-only runs, inputs."""

from __future__ import annotations

import gzip
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from diag.api import analyze
from diag.cli import main
from diag.engines import errors as sigs
from diag.engines import native_sites
from diag.engines.phases import CAPTURE_PHASES, place

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "errors"
EXPECT = yaml.safe_load((FIXTURES / "expectations.yaml").read_text())


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_fixture_class_phase_and_gd100(name: str) -> None:
    want = EXPECT[name]
    report = analyze([str(FIXTURES / name)], generated_at="fixed")
    assert report.runs, f"{name}: an error-only log is a run"
    run = report.runs[0]
    err = run.record.to_json()["capture_error"]
    codes = [f.code for f in run.findings]
    if want["phase"] not in ("unknown", "none"):
        assert run.facts.startup_phase == want["phase"]
        assert run.to_dict()["startup_phase"] == want["phase"]
    if want["gd100"] in (True, "yes"):
        assert err is not None and err["class"] == want["class"], err
        assert err["phase"] == want["phase"], err
        assert "GD100" in codes
        if "reason" in want:
            assert want["reason"] in err["reason"]
        for key in ("confidence", "placed_by"):
            if key in want:
                assert err[key] == want[key], err
        gd100 = next(f for f in run.findings if f.code == "GD100")
        assert err["evidence"] and err["evidence"] in gd100.message  # every GD100 says it
        if "conflict" in want:
            assert want["conflict"] in err["conflict"] and err["conflict"] in gd100.message
        else:
            assert "conflict" not in err, err
    else:
        assert err is None and "GD100" not in codes
        errors = run.facts.tables["error"]
        if want["phase"] != "none":
            assert want["phase"] in set(errors["phase"].dropna())
        if "conflict" in want:  # the overruled evidence is said in the run's notes
            assert any(want["conflict"] in n for n in run.facts.notes), run.facts.notes


def test_every_signature_hits_its_own_message() -> None:
    rows = [
        s
        for s in sigs.signatures()
        if s.message and s.capture and (s.code is None or s.code.runtime in ("cuda", "hip"))
    ]
    assert len(rows) >= 18
    for sig in rows:
        assert sig.message is not None
        v = sigs.judge(f"RuntimeError: CUDA error: {sig.message}")
        assert v.error_class == sig.error_class and v.capture, sig.id
    assert sigs.judge(
        "CUDA error: operation failed due to a previous error during capture"
    ).secondary
    assert sigs.judge("CUDA error: operation not permitted").error_class == "other"  # 800, not 900
    nccl = "NCCL WARN Cuda failure 'dependency created on uncaptured work in another stream'"
    assert sigs.judge(nccl).error_class == "distributed"
    assert (
        sigs.judge("Capture cuda graph failed: CUDA out of memory. Tried to allocate").error_class
        == "oom"
    )


def test_wrapper_frames_never_decide() -> None:
    frame = 'File "/x/vllm/{}", line 1, in {}'
    wrapper = frame.format("compilation/cuda_graph.py", "__call__")
    prof = [frame.format("v1/worker/gpu_worker.py", "determine_available_memory"), wrapper]
    cap = [frame.format("v1/worker/gpu_model_runner.py", "_capture_cudagraphs"), wrapper]
    assert place(prof) == "memory_profiling"
    assert place(cap) == "capture_decode"
    assert place([wrapper]) is None


@pytest.mark.parametrize(
    "wrap",
    [
        lambda s: s,
        lambda s: "> " + s,
        lambda s: "(RayWorkerVllm pid=77) " + s,
        lambda s: "svc-1  | " + s,
        lambda s: "model-server  | " + s,
        lambda s: "<pre>" + html.escape(s) + "</pre>",
    ],
)
def test_reassembled_whatever_wraps_it(tmp_path: Path, wrap) -> None:  # type: ignore[no-untyped-def]
    lines = [
        "Traceback (most recent call last):",
        '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 9, in capture',
        "RuntimeError: CUDA error: capturing stream has unjoined work",
    ]
    path = tmp_path / "paste.log"
    path.write_text("```\r\n" + "\r\n".join(wrap(x) for x in lines) + "\n```\n")
    err = analyze([str(path)], generated_at="x").runs[0].record.to_json()["capture_error"]
    assert err["class"] == "stream_capture_invalid" and err["phase"] == "capture_decode"


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "diag", "analyze", *args],
        input=stdin,
        capture_output=True,
        check=False,
    )


def test_unrelated_folder_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("shopping list\n- eggs\nthe server said no\n")
    (tmp_path / "b.md").write_text("# notes\nnothing here\n")
    res = CliRunner().invoke(
        main, ["analyze", str(tmp_path), "--no-html", "-o", str(tmp_path / "o")]
    )
    assert res.exit_code == 2
    # each file with its reason, then one line saying why (issue 38: every input accounted for)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 3 and "nothing recognised" in lines[-1]
    assert "a.txt: read, but made no run" in res.stderr and "b.md: not a log" in res.stderr


def test_an_exception_line_anywhere_is_an_engine_error_run(tmp_path: Path) -> None:
    """Issue 32 item 1: an error text is never "nothing recognised", whatever else the input
    holds: a run with an engine error (GD105) whose engine and phase say they are unknown."""
    (tmp_path / "a.txt").write_text("shopping list\n- eggs\nValueError: not a server\n")
    res = CliRunner().invoke(
        main,
        ["analyze", str(tmp_path), "--no-html", "-o", str(tmp_path / "o"), "--fail-on", "never"],
    )
    assert res.exit_code == 0, res.stderr
    assert "GD105" in res.stdout and "ValueError: not a server" in res.stdout
    assert "unknown" in res.stdout


def test_stdin_gzip_is_read_by_magic_bytes(tmp_path: Path) -> None:
    data = gzip.compress((FIXTURES / "vllm-v1-enginecore-triton-capture.log").read_bytes())
    res = _cli("-", "--no-html", "-o", str(tmp_path), "--format", "json", stdin=data)
    doc = yaml.safe_load(res.stdout)
    assert doc["runs"][0]["record"]["capture_error"]["class"] == "stream_capture_invalid"
    assert doc["runs"][0]["year_source"] == "unknown"


def test_inputs_say_what_was_altered(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "nul.log").write_bytes(
        b"INFO 04-28 20:50:23 model_runner.py:1402] Capturing the model for CUDA graphs.\n"
        b"\0\0\0INFO 04-28 20:50:29 model_runner.py:1530] Graph capturing finished in 5 secs.\n"
    )
    (folder / "cut.log").write_bytes((FIXTURES / "vllm-v1-capture-traceback-cut.log").read_bytes())
    other = tmp_path / "elsewhere"
    other.mkdir()
    os.symlink(other, folder / "linked")
    os.utime(folder / "nul.log", (1700000000, 1700000000))  # 2023-11-14
    report = analyze([str(folder)], generated_at="x")
    by = {Path(i.path).name: i for i in report.inputs}
    assert by["nul.log"].notes == ["3 NUL byte(s) dropped, the first on line 2"]
    assert by["cut.log"].notes == ["cut inside a traceback at line 4"]
    assert by["linked"].status == "skipped" and "not followed" in str(by["linked"].reason)
    nul_run = next(r for r in report.runs if r.facts.run.sources[0].endswith("nul.log"))
    assert nul_run.facts.year_source == "mtime"
    ts = nul_run.facts.tables["capture_end"]["ts"].dropna()
    assert not ts.empty and all(1672531200 <= t < 1704067200 for t in ts)  # within 2023


def test_year_from_a_dated_line_of_the_stream(tmp_path: Path) -> None:
    path = tmp_path / "docker.log"
    path.write_text(
        "2025-03-10T14:43:40.000000000Z INFO 03-10 14:43:40 [gpu_model_runner.py:1] Model loading took 5 GiB\n"
        "INFO 03-10 14:43:46 model_runner.py:1530] Graph capturing finished in 5 secs.\n"
    )
    run = analyze([str(path)], generated_at="x").runs[0]
    assert run.facts.year_source == "log"
    ts = run.facts.tables["capture_end"]["ts"].dropna()
    assert all(1735689600 <= t < 1767225600 for t in ts)  # 2025


def test_interleaved_per_line_tracebacks_stay_apart(tmp_path: Path) -> None:
    head = "ERROR 05-08 19:06:38 [multiproc_executor.py:962] "
    tp0, tp1 = f"(Worker_TP0 pid=11) {head}", f"(Worker_TP1 pid=12) {head}"
    lines = [
        tp0 + "Traceback (most recent call last):",
        tp1 + "Traceback (most recent call last):",
        tp0 + '  File "/x/vllm/v1/worker/gpu_model_runner.py", line 1, in _capture_cudagraphs',
        tp1 + '  File "/x/vllm/v1/worker/gpu_worker.py", line 1, in determine_available_memory',
        tp0 + "RuntimeError: CUDA error: capturing stream has unjoined work",
        tp1 + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    ]
    path = tmp_path / "two-ranks.log"
    path.write_text("\n".join(lines) + "\n")
    run = analyze([str(path)], generated_at="x").runs[0]
    errors = run.facts.tables["error"]
    placed = dict(
        zip(errors["rank"], zip(errors["error_class"], errors["phase"], strict=True), strict=True)
    )
    assert placed == {
        "TP0": ("stream_capture_invalid", "capture_decode"),
        "TP1": ("oom", "memory_profiling"),
    }
    assert run.record.to_json()["capture_error"]["class"] == "stream_capture_invalid"


def test_nul_note_is_the_same_on_the_parallel_path(tmp_path: Path) -> None:
    from diag.ingest import ingest

    line = b"INFO 04-28 20:50:23 model_runner.py:1402] Capturing the model for CUDA graphs.\n"
    path = tmp_path / "big.log"
    path.write_bytes(line * 3000 + b"\0\0" + line * 3000 + b"\0" + line)
    here = ingest([str(path)], jobs=1).inputs[0].notes
    there = ingest([str(path)], jobs=2, chunk_bytes=64 * 1024).inputs[0].notes
    assert here == there == ["3 NUL byte(s) dropped, the first on line 3001"]


def test_line_prefilter_words_cover_the_line_signatures() -> None:
    from diag.parsers.traceback import _LINE_OOM, _SIGNATURE_WORDS

    for sig in sigs.signatures():
        if sig.capture or sig.id in _LINE_OOM:
            assert any(w in sig.regex.pattern for w in _SIGNATURE_WORDS), sig.id
        if sig.message:
            assert any(w in f"CUDA error: {sig.message}" for w in _SIGNATURE_WORDS), sig.id


@pytest.mark.parametrize("quote", ["`{}`", '"{}"', "\u201c{}\u201d", "> {}"])
def test_one_quoted_exception_line_is_a_run_with_gd100(tmp_path: Path, quote: str) -> None:
    path = tmp_path / "issue.txt"
    path.write_text(
        quote.format("torch.AcceleratorError: CUDA error: capturing stream has unjoined work")
        + "\n"
    )
    run = analyze([str(path)], generated_at="x").runs[0]
    assert run.record.to_json()["capture_error"]["class"] == "stream_capture_invalid"
    assert "GD100" in [f.code for f in run.findings]


# ------------------------------------------------------------------ issue 21: structure
def _verdict(path: Path) -> tuple[object, ...]:
    report = analyze([str(path)], generated_at="x")
    assert report.runs, f"{path.name}: no run"
    err = report.runs[0].record.to_json()["capture_error"]
    return (err["class"], err["phase"]) if err else (None, None)


# launchers no prefix row names: journald, Rust tracing relaying a child (Dynamo), a made-up
# CI tag, and two nested; each applied to every line as the launcher writes it
_UNLISTED = {
    "journal": lambda i: f"Dec 01 10:00:{i % 60:02d} gpu-node-7 python3[4242]: ",
    "rust tracing": lambda i: (
        f"2025-04-23T03:35:{i % 60:02d}.390Z  INFO dynamo_run::worker: VLLM: "
    ),
    "made-up tag": lambda i: "job-17/node-3 >> ",
    "journal in compose": lambda i: f"infer-1  | Dec 01 10:00:{i % 60:02d} h python3[7]: ",
}
_BASES = (
    "sglang-bare-capture-traceback.log",
    "vllm-v0-worker-capture-oom.log",
    "custom-allreduce-cudacheck-no-header.log",
    "sglang-serving-error-graph-replay.log",
)


@pytest.mark.parametrize("launcher", sorted(_UNLISTED))
@pytest.mark.parametrize("base", _BASES)
def test_unlisted_launcher_prefix_keeps_the_verdict(
    tmp_path: Path, base: str, launcher: str
) -> None:
    """The per-line prefix is found from the structure (an engine header or a traceback frame
    after it), so a launcher nobody listed changes nothing (issue 21, point 1)."""
    lines = (FIXTURES / base).read_text().splitlines()
    path = tmp_path / base
    path.write_text("".join(_UNLISTED[launcher](i) + ln + "\n" for i, ln in enumerate(lines)))
    assert _verdict(path) == _verdict(FIXTURES / base)


def _cut(tmp_path: Path, lines: list[str], start: int, end: int) -> Path:
    path = tmp_path / "fragment.log"
    path.write_text("\n".join(lines[start:end]) + "\n")
    return path


@pytest.mark.parametrize("at", ["frame", "code", "caret", "exception"])
def test_fragment_from_any_point_is_a_traceback(tmp_path: Path, at: str) -> None:
    """A paste that starts at a frame, a code line, a caret line or the exception line (the
    header fell outside the window) keeps the class; the capture frames or the capture-only
    message still place it (issue 21, point 2)."""
    lines = (FIXTURES / "sglang-bare-capture-traceback.log").read_text().splitlines()
    starts = {
        "frame": next(i for i, ln in enumerate(lines) if ln.startswith('  File "')),
        "code": next(i for i, ln in enumerate(lines) if ln.startswith("    self.")),
        "caret": next(i for i, ln in enumerate(lines) if ln.strip().startswith("^")),
        "exception": len(lines) - 1,
    }
    whole = _verdict(FIXTURES / "sglang-bare-capture-traceback.log")
    assert whole == ("stream_capture_invalid", "capture_decode")
    got = _verdict(_cut(tmp_path, lines, starts[at], len(lines)))
    assert got[0] == whole[0]
    if at != "exception":  # frames kept: they place it, as in the whole log
        assert got == whole


def test_fragment_ending_before_its_exception_is_class_other_with_the_reason(
    tmp_path: Path,
) -> None:
    lines = (FIXTURES / "sglang-bare-capture-traceback.log").read_text().splitlines()
    for end in range(len(lines) - 1, 2, -1):
        frames = [ln for ln in lines[:end] if ln.startswith('  File "')]
        if place(frames) not in ("capture_decode",):
            break
        err = (
            analyze([str(_cut(tmp_path, lines, 0, end))], generated_at="x")
            .runs[0]
            .record.to_json()["capture_error"]
        )
        assert err["class"] == "other" and err["phase"] == "capture_decode", end
        assert "exception line" in err["reason"] or "ends inside" in err["reason"], err


def test_an_error_takes_the_phase_of_the_process_that_raised_it(tmp_path: Path) -> None:
    """TP1 began capture; TP0 ran out of memory in its own earlier phase (weights):
    not a capture error. The same lines raised by TP1 are one (issue 21, point 5)."""
    name = "vllm-tp0-init-oom-while-tp1-captures.log"
    run = analyze([str(FIXTURES / name)], generated_at="x").runs[0]
    assert run.record.to_json()["capture_error"] is None
    assert any("not read as a capture error" in n for n in run.facts.notes)
    text = (FIXTURES / name).read_text()
    raised_by_tp1 = "\n".join(
        ln.replace("(Worker_TP0 pid=4101) ERROR", "(Worker_TP1 pid=4102) ERROR")
        for ln in text.splitlines()
    )
    path = tmp_path / name
    path.write_text(raised_by_tp1 + "\n")
    err = analyze([str(path)], generated_at="x").runs[0].record.to_json()["capture_error"]
    assert err is not None and err["class"] == "oom" and err["phase"] in CAPTURE_PHASES


def _either_check_line() -> int:
    """The first line of a CUDACHECK every all-reduce runs (cudaStreamIsCapturing)."""
    sites = json.loads(native_sites.DATA.read_text(encoding="utf-8"))["sites"]
    return int(next(s["lines"][0] for s in sites if s["call"] == "cudaStreamIsCapturing"))


def test_header_less_error_print_is_placed_by_the_log(tmp_path: Path) -> None:
    """custom all-reduce's CUDACHECK line has no header: inside a capture it is the capture
    error; moved before the capture began it is an error outside capture, noted, and the run
    stays a run (never "nothing recognised"). The check is the one every all-reduce runs,
    captured or not (its line read from native_sites.json: a graph-registration check's line
    would be capture wherever it stands, test_native_sites)."""
    name = "custom-allreduce-cudacheck-no-header.log"
    lines = (FIXTURES / name).read_text().splitlines()
    failed = next(i for i, ln in enumerate(lines) if ln.startswith("Failed: "))
    either = _either_check_line()
    lines[failed] = re.sub(
        r"custom_all_reduce\.cuh:\d+", f"custom_all_reduce.cuh:{either}", lines[failed]
    )
    before = [lines[failed], *lines[:failed], *lines[failed + 1 :]]
    path = tmp_path / name
    path.write_text("\n".join(before) + "\n")
    run = analyze([str(path)], generated_at="x").runs[0]
    assert run.record.to_json()["capture_error"] is None
    assert any(f"custom_all_reduce.cuh:{either}" in n for n in run.facts.notes), run.facts.notes
    alone = tmp_path / "alone.log"
    alone.write_text(lines[failed] + "\n")
    report = analyze([str(alone)], generated_at="x")
    assert report.runs and report.runs[0].facts.tables["error"]["error_class"].tolist() == [
        "distributed"
    ]
