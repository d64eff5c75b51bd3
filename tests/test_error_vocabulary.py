"""The runtimes' error vocabulary, row by row: every code of ``runtime_codes.json`` in every form
its runtime prints it, judged as its row (class, capture mark), and the precedence rules."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from diag.api import analyze
from diag.engines import errors as sigs

# who printed the line decides the class, whatever code it quotes (bar an OOM): NCCL's
# CUDACHECK and the custom all-reduce's are collectives failing
_DISTRIBUTED_PRINTERS = ("Cuda failure ",)


def _want(code: sigs.RuntimeCode, line: str) -> str:
    if code.error_class != "oom" and line.startswith(_DISTRIBUTED_PRINTERS):
        return "distributed"
    return code.error_class


def _cases() -> list[object]:
    return [
        pytest.param(c, line, id=f"{c.id}-{line[:50]}")
        for c in sigs.runtime_codes()
        for line in c.printed()
    ]


def test_every_code_is_printed_and_the_table_is_complete() -> None:
    codes = sigs.runtime_codes()
    by_rt = {rt: [c for c in codes if c.runtime == rt] for rt in sigs.RUNTIMES}
    assert len(by_rt["cuda"]) >= 120 and len(by_rt["hip"]) >= 60 and len(by_rt["nccl"]) >= 8
    assert len(by_rt["acl"]) >= 150 and len(by_rt["cu"]) >= 90
    for c in codes:
        assert c.printed(), c.id
        assert c.source, c.id
    capture = {c.code for c in by_rt["cuda"] if c.capture}
    assert capture == set(range(900, 909))
    assert {c.code for c in by_rt["hip"] if c.capture} == capture


@pytest.mark.parametrize("code,line", _cases())
def test_every_printed_code_is_judged_as_its_row(code: sigs.RuntimeCode, line: str) -> None:
    v = sigs.judge(line)
    hit = {c.id: c for c in sigs.runtime_codes()}.get(str(v.code))
    assert hit is not None, line
    assert hit.id == code.id or hit.message == code.message, line  # two codes may share a text
    assert (v.error_class, v.capture) == (_want(code, line), code.capture), line
    assert sigs.recognised(line)


@pytest.mark.parametrize(
    "text,cls,capture",
    [
        # an OOM surfaced through NCCL is an OOM
        ("NCCL WARN Cuda failure 2 'out of memory'", "oom", False),
        ("NCCL error in: /x/ProcessGroupNCCL.cpp:1, Cuda failure 'out of memory'", "oom", False),
        # NCCL quoting a capture code: distributed, and raised only while capturing
        ("NCCL WARN Cuda failure 'capturing stream has unjoined work'", "distributed", True),
        # a collective mismatch inside capture is distributed
        (
            "Capture cuda graph failed: Detected mismatch between collectives on ranks. Rank 13 is"
            " running collective: CollectiveFingerPrint(SequenceNumber=17OpType=BARRIER)",
            "distributed",
            True,
        ),
        # the capture wrapper leaves the class to what it wraps
        ("Capture cuda graph failed: CUDA out of memory. Tried to allocate 2 GiB", "oom", True),
        # custom all-reduce CUDACHECK, with and without 'Cuda error': lines 432 and 368 are
        # graph-buffer registration checks in every release with a check there
        # (native_sites.json), so capture; the all-reduce's own check is not
        (
            "Failed: Cuda error /w/csrc/custom_all_reduce.cuh:432 'invalid argument'",
            "distributed",
            True,
        ),
        (
            "Failed: Cuda error /w/csrc/custom_all_reduce.cuh:543 'invalid argument'",
            "distributed",
            False,
        ),
        (
            "VLLM: Failed: /w/csrc/custom_all_reduce.cuh:368 'invalid argument'",
            "distributed",
            True,
        ),
        # 800 is not 900
        ("CUDA error: operation not permitted", "other", False),
        (
            "torch_npu: NPU function error: aclmdlRICaptureEnd, error code is 107027",
            "stream_capture_invalid",
            True,
        ),
    ],
)
def test_precedence(text: str, cls: str, capture: bool) -> None:
    v = sigs.judge(text)
    assert (v.error_class, v.capture) == (cls, capture), v


@pytest.mark.parametrize("text", ["invalid argument", "no error", "timeout", "error code is 0"])
def test_a_bare_text_is_no_code(text: str) -> None:
    assert not sigs.recognised(text)


def _traceback(prefix: str, frame: str) -> Callable[[str], list[str]]:
    def wrap(line: str) -> list[str]:
        body = ["Traceback (most recent call last):", frame, f"RuntimeError: {line}"]
        return [prefix + b for b in body]

    return wrap


_VLLM_FRAME = '  File "/x/vllm/v1/worker/gpu_worker.py", line 1, in execute_model'
_SGLANG_FRAME = '  File "/x/sglang/srt/managers/scheduler.py", line 1, in event_loop_normal'
_VLLM_INFO = "INFO 01-01 12:00:00 [core.py:1] Added request 1."


def _sglang(line: str) -> list[str]:
    head = "[2025-01-01 12:00:00 TP0] Scheduler hit an exception: "
    return [head + "Traceback (most recent call last):", _SGLANG_FRAME, f"RuntimeError: {line}"]


# family -> (how one error is printed in it, the engine line printed between two errors)
FAMILIES: dict[str, tuple[Callable[[str], list[str]], str]] = {
    "plain": (_traceback("", _VLLM_FRAME), _VLLM_INFO),
    "vllm": (_traceback("ERROR 01-01 12:00:00 [core.py:1] ", _VLLM_FRAME), _VLLM_INFO),
    "sglang": (_sglang, "[2025-01-01 12:00:00 TP0] Decode batch. #running-req: 1"),
    "vllm-worker": (
        _traceback("(VllmWorker rank=1 pid=1) ERROR 01-01 12:00:00 [core.py:1] ", _VLLM_FRAME),
        "(VllmWorker rank=1 pid=1) " + _VLLM_INFO,
    ),
    "torchrun": (_traceback("[rank0]: ", _VLLM_FRAME), _VLLM_INFO),
    "docker": (
        _traceback("2025-01-01T12:00:00.123456789Z ", _VLLM_FRAME),
        "2025-01-01T12:00:00.123456789Z " + _VLLM_INFO,
    ),
    "compose": (_traceback("svc-1  | ", _VLLM_FRAME), "svc-1  | " + _VLLM_INFO),
    # the C++ and runtime lines themselves, with no log header (custom all-reduce, NCCL)
    "no-header": (lambda line: [line], _VLLM_INFO),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_printed_code_in_every_prefix_family_is_an_error_event(
    tmp_path: Path, family: str
) -> None:
    wrap, between = FAMILIES[family]
    cases = [(c, line) for c in sigs.runtime_codes() for line in c.printed()]
    lines: list[str] = []
    where: list[int] = []
    for _, line in cases:
        lines += [between, *wrap(line)]
        where.append(len(lines))  # the error is the block's last line (1-based number)
    path = tmp_path / f"{family}.log"
    path.write_text("\n".join(lines) + "\n")
    report = analyze([str(path)], generated_at="fixed")
    events: dict[int, dict[str, object]] = {}
    for run in report.runs:
        for row in run.facts.tables["error"].to_dict("records"):
            events.setdefault(int(row["line"]), row)
    missed, wrong = [], []
    for (code, line), last in zip(cases, where, strict=True):
        first = last - len(wrap(line)) + 1  # a traceback's event is on its first line
        row = events.get(first) or events.get(last)
        if row is None:
            missed.append(line)
        elif (row["error_class"], bool(row["explicit_capture"])) != (
            _want(code, line),
            code.capture,
        ):
            wrong.append((line, row["error_class"], row["explicit_capture"]))
    assert not missed, f"{family}: {len(missed)} of {len(cases)} not an error event: {missed[:5]}"
    assert not wrong, f"{family}: {len(wrong)} of {len(cases)} judged otherwise: {wrong[:5]}"


def _said() -> list[object]:
    return [
        pytest.param(s, text, id=f"{s.id}-{text[:40]}")
        for s in sigs.signatures()
        if s.code is None
        for text in s.says
    ]


def test_every_hand_row_names_what_its_source_says() -> None:
    rows = [s for s in sigs.signatures() if s.code is None]
    assert rows and all(s.says for s in rows), [s.id for s in rows if not s.says]


@pytest.mark.parametrize("sig,text", _said())
def test_every_hand_row_is_judged_by_its_own_text(sig: sigs.Signature, text: str) -> None:
    assert sig.regex.search(text), text
    v = sigs.judge(text)
    if sig.error_class is None and sig.failure:  # a process saying it failed: no class
        assert v.failure and not v.capture and v.error_class == "other", v
    elif sig.error_class is None:  # a capture wrapper: the class is what it wraps
        assert v.capture and v.error_class == "other", v
    else:  # no row above it takes its text
        assert (v.signature, v.error_class) == (sig.id, sig.error_class), v
        assert v.capture == sig.capture or v.capture, v


_CAPTURE_FRAME = '  File "/x/vllm/v1/worker/gpu_model_runner.py", line 1, in capture_model'


@pytest.mark.parametrize(
    "exception,cls",
    [
        (
            "torch.distributed.DistBackendError: NCCL error in: /x/ProcessGroupNCCL.cpp:1, "
            "unhandled cuda error, NCCL version 2.21.5 Last error: Cuda failure 'out of memory'",
            "oom",
        ),
        (
            "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running "
            "collective: CollectiveFingerPrint(SequenceNumber=3OpType=BARRIER)",
            "distributed",
        ),
        (
            "RuntimeError: NCCL WARN Cuda failure 'capturing stream has unjoined work'",
            "distributed",
        ),
        (
            "RuntimeError: CUDA error: operation not permitted when stream is capturing",
            "stream_capture_invalid",
        ),
        ("RuntimeError: CUDA error: operation not supported", "unsupported_op"),
    ],
)
def test_precedence_through_analyze(tmp_path: Path, exception: str, cls: str) -> None:
    head = "(VllmWorker rank=1 pid=7) ERROR 01-01 12:00:00 [multiproc_executor.py:1] "
    lines = ["Traceback (most recent call last):", _CAPTURE_FRAME, exception]
    path = tmp_path / "x.log"
    path.write_text("\n".join(head + line for line in lines) + "\n")
    err = analyze([str(path)], generated_at="fixed").runs[0].record.to_json()["capture_error"]
    assert err is not None and (err["class"], err["phase"]) == (cls, "capture_decode"), err


def test_a_collective_mismatch_in_sglang_capture_is_distributed(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_text(
        "[2025-01-01 12:00:00 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
        "[2025-01-01 12:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/model_executor/model_runner.py", line 1, in init_device_graphs\n'
        "Exception: Capture cuda graph failed: Detected mismatch between collectives on ranks. "
        "Rank 13 is running collective: CollectiveFingerPrint(SequenceNumber=17OpType=BARRIER)\n"
    )
    err = analyze([str(path)], generated_at="fixed").runs[0].record.to_json()["capture_error"]
    assert err is not None and err["class"] == "distributed", err
