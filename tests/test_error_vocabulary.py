"""The runtimes' error vocabulary, row by row: every code of ``runtime_codes.yaml`` in every form
its runtime prints it, judged as its row (class, capture mark), and the precedence rules."""

from __future__ import annotations

import pytest

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
        # custom all-reduce CUDACHECK, with and without 'Cuda error'
        (
            "Failed: Cuda error /w/csrc/custom_all_reduce.cuh:432 'invalid argument'",
            "distributed",
            False,
        ),
        (
            "VLLM: Failed: /w/csrc/custom_all_reduce.cuh:368 'invalid argument'",
            "distributed",
            False,
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
