"""torch's and the runtimes' capture-only messages, pasted the ways users bring them.

The texts are the signature table's own (``errors.yaml``: every capture row's ``says``, cited
there from torch's / torch-npu's / NCCL's binaries and source) and the runtimes' capture codes
(``runtime_codes.json``: cudaGetErrorString / hipGetErrorString 900-908 and the ACL capture
codes, in torch's ``CUDA error: ...`` form). Each is pasted bare, hard-wrapped at 40 columns (a
terminal or a forum reply), behind a process prefix, and hard-wrapped behind the prefix on
every line: each must be a capture failure (GD100) of the row's class. The negative: engine
messages raised outside capture code (the atlas's ``outside`` sites), hard-wrapped the same
way, must not become capture failures by the joining of their lines.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from diag.api import analyze
from diag.engines import atlas
from tests.test_hotpath_oracle import assert_same_tables, both
from tests.test_raise_atlas import VALUES, _run

DATA = Path(__file__).resolve().parent.parent / "diag" / "engines" / "data"
PREFIX = "(RayWorkerWrapper pid=4242) "
FORMS = ("bare", "wrapped", "prefixed", "wrapped_prefixed")


def _texts() -> list[tuple[str, str, str | None]]:
    """(id, exception line, class) of every capture-only text the tables hold."""
    rows = yaml.safe_load((DATA / "errors.yaml").read_text(encoding="utf-8"))["signatures"]
    out = []
    for r in rows:
        if not r.get("capture"):
            continue
        for j, say in enumerate(r.get("says", ())):
            if len(say.strip()) >= 20:  # a fragment ("during capturing stage") is no message
                out.append((f"{r['id']}-{j}", f"RuntimeError: {say.strip()}", r.get("class")))
    codes = json.loads((DATA / "runtime_codes.json").read_text(encoding="utf-8"))["codes"]
    for c in codes:
        if c["capture"] and c["runtime"] == "cuda":
            out.append((c["name"], f"RuntimeError: CUDA error: {c['message']}", c["class"]))
        if c["capture"] and c["runtime"] == "acl":  # CANN's ACL_LOG_CALL_ERROR form
            text = f"RuntimeError: synchronize stream failed, runtime result = {c['code']}"
            out.append((c["name"], text, c["class"]))
            # the CANN runtime's own error line (errcode_manage.cc GetErrorDesc)
            text = f"rtStreamSynchronize: ErrCode={c['code']}, desc=[stream is captured]"
            out.append((f"{c['name']}-errcode", text, c["class"]))
    return out


def paste(head: str, form: str) -> str:
    lines = textwrap.wrap(head, 40) if form.startswith("wrapped") else [head]
    pre = PREFIX if form.endswith("prefixed") else ""
    return "".join(pre + ln + "\n" for ln in lines)


TEXTS = _texts()


def test_the_tables_hold_the_capture_texts() -> None:
    """The texts the brief names are there, so the paste test below covers them."""
    joined = "\n".join(h for _, h, _ in TEXTS)
    for words in (
        "Cannot copy between CPU and CUDA tensors during CUDA graph capture",
        "operation not permitted when stream is capturing",
        "operation failed due to a previous error during capture",
        "CUDA graphs must be captured on a non-default stream",
        "Capture must end on the same stream it began on",
        "Attempting uncaptured free of a captured allocation",
    ):
        assert words in joined, words
    assert len(TEXTS) >= 30


@pytest.mark.parametrize("form", FORMS)
def test_capture_texts_are_capture_failures_of_their_class(form: str, tmp_path: Path) -> None:
    got = _run(tmp_path, {name: paste(head, form) for name, head, _ in TEXTS})
    bad = []
    for name, _, cls in TEXTS:
        err_cls, gd100, runs = got[name]
        if runs != 1 or not gd100 or (cls is not None and err_cls != cls):
            bad.append((name, cls, got[name]))
    assert not bad, bad


@pytest.mark.parametrize("form", ("wrapped", "wrapped_prefixed"))
def test_wrapped_outside_sites_stay_outside(form: str, tmp_path: Path) -> None:
    outside = [
        s
        for s in atlas.sites()
        if s.scope == "outside" and s.level == "raise" and len(s.render(VALUES)) >= 60
    ][:60]
    assert len(outside) >= 30
    texts = {
        f"o{i}": paste(f"{s.exc_type}: {s.render(VALUES)}", form) for i, s in enumerate(outside)
    }
    got = _run(tmp_path, texts)
    wrong = [outside[int(n[1:])].source for n, (_, gd100, _) in got.items() if gd100]
    assert not wrong, wrong


# ---------------------------------------------------------------- plugins' "not supported" texts
# The kernels' own refusals (flashinfer's DISPATCH defaults, torch-npu's missing aclnn kernel;
# rows flashinfer_unsupported_dispatch / npu_op_api_missing of errors.yaml) and a bare
# NotImplementedError: class unsupported_op wherever they are, a capture failure only where the
# evidence places them in capture (the engine's capture wrapper, a capture frame).
PLUGIN_TEXTS = {
    "flashinfer_head_dim": "Error in function 'VariableLengthMergeStates' at /usr/local/lib/"
    "python3.12/site-packages/flashinfer/data/include/flashinfer/attention/cascade.cuh:697: "
    "Unsupported head_dim: 106",
    "flashinfer_group_size": "Error in function 'BatchDecodeWithPagedKVCacheDispatched' at "
    "/opt/venv/lib/python3.11/site-packages/flashinfer/data/include/flashinfer/utils.cuh:166: "
    "Unsupported group_size: 5",
    "npu_op_api": "aclnnLightningIndexer or aclnnLightningIndexerGetWorkspaceSize not in "
    "libopapi.so, or libopapi.so not found.",
}
CAPTURE_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/site-packages/sglang/srt/model_executor/'
    'cuda_graph_runner.py", line 480, in capture\n'
    "    graph, output_buffers = self.capture_one_batch_size(bs, forward)\n"
)
SERVING_FRAMES = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", '
    "line 1021, in event_loop_normal\n"
    "    result = self.run_batch(batch)\n"
)


def _plugin_pastes(inside: bool) -> dict[str, str]:
    out = {}
    for name, msg in PLUGIN_TEXTS.items():
        head = f"Exception: Capture cuda graph failed: {msg}" if inside else f"RuntimeError: {msg}"
        for form in FORMS:
            out[f"{name}-{form}"] = paste(head, form)
        frames = CAPTURE_FRAMES if inside else SERVING_FRAMES
        out[f"{name}-frames"] = frames + f"RuntimeError: {msg}\n"
    frames = CAPTURE_FRAMES if inside else SERVING_FRAMES
    out["notimplemented-frames"] = (
        frames + '  File "/usr/local/lib/python3.12/site-packages/vllm/model_executor/'
        'custom_op.py", line 23, in forward_native\n    raise NotImplementedError\n'
        "NotImplementedError\n"
    )
    return out


def test_plugin_refusals_in_capture_are_unsupported_op_capture_failures(tmp_path: Path) -> None:
    got = _run(tmp_path, _plugin_pastes(inside=True))
    bad = {n: g for n, g in got.items() if g[:2] != ("unsupported_op", True) or g[2] != 1}
    assert not bad, bad


def test_plugin_refusals_outside_capture_are_not_capture_failures(tmp_path: Path) -> None:
    got = _run(tmp_path, _plugin_pastes(inside=False))
    bad = {n: g for n, g in got.items() if g[1] or g[2] != 1}
    assert not bad, bad


# ---------------------------------------------------------------- un-prefixed custom all-reduce
# vLLM's C++ CUDACHECK prints ``Failed: Cuda error <file>:<line> '<text>'`` with no process
# prefix (errors.yaml custom_ar_cudacheck): its process is unknown, so where the check itself
# runs both in capture and serving (every all-reduce's cudaStreamIsCapturing; a line that is
# only capture is test_native_sites'), the ranks' own lines just before it decide. Ranks
# capturing -> a likely capture failure of class distributed; ranks loading weights (no capture
# begun) -> not a capture failure.
AR_CHECK = next(
    s
    for s in json.loads((DATA / "native_sites.json").read_text(encoding="utf-8"))["sites"]
    if s["func"] == "allreduce" and s["call"] == "cudaStreamIsCapturing"
)
AR_LINE = (
    f"Failed: Cuda error /workspace/{AR_CHECK['file']}:{AR_CHECK['lines'][0]} 'invalid argument'"
)
SGLANG_LOAD = (
    "[2026-06-01 12:00:01 TP{r}] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
    "avail mem=60.10 GB, mem usage=14.96 GB."
)
SGLANG_BEGIN = (
    "[2026-06-01 12:00:05 TP{r}] Capture cuda graph begin. This can take up to several minutes. "
    "avail mem=50.12 GB"
)
VLLM_LOAD = (
    "(VllmWorker TP{r} pid=220{r}) INFO 06-01 12:00:01 [gpu_model_runner.py:2007] Model loading "
    "took 7.12 GiB and 5.40 seconds"
)
VLLM_BEGIN = (
    "(VllmWorker TP{r} pid=220{r}) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):   "
    "0%|          | 0/67 [00:00<?, ?it/s]"
)
AR_FORMS = {"bare": "{}", "quoted": "> {}", "kubectl": "2026-06-01T12:00:06.123456789Z {}"}


def _ar_pastes(capturing: bool) -> dict[str, str]:
    out = {}
    for engine, (load, begin) in {
        "sglang": (SGLANG_LOAD, SGLANG_BEGIN),
        "vllm": (VLLM_LOAD, VLLM_BEGIN),
    }.items():
        lines = [load.format(r=r) for r in (0, 1)]
        if capturing:
            lines += [begin.format(r=r) for r in (0, 1)]
        lines += [AR_LINE, AR_LINE]
        for form, wrap in AR_FORMS.items():
            out[f"{engine}-{form}"] = "".join(wrap.format(ln) + "\n" for ln in lines)
    return out


def test_unprefixed_custom_ar_error_while_ranks_capture_is_a_capture_failure(
    tmp_path: Path,
) -> None:
    got = _run(tmp_path, _ar_pastes(capturing=True))
    bad = {n: g for n, g in got.items() if g != ("distributed", True, 1)}
    assert not bad, bad


def test_unprefixed_custom_ar_error_while_ranks_load_is_not(tmp_path: Path) -> None:
    got = _run(tmp_path, _ar_pastes(capturing=False))
    bad = {n: g for n, g in got.items() if g[1] or g[2] != 1}
    assert not bad, bad


# ---------------------------------------------------------------- evidence per rank
# TP1 begins capture while TP0 fails building its attention backend (an OOM in the backend's
# workspace, before TP0 captured anything): TP0's own frames place its error before capture,
# so it is no capture failure whatever TP1 was doing. The same OOM under TP0's capture frames is.
TP_LINES = (
    "[2026-06-11 05:11:58 TP1] Memory pool end. avail mem=0.49 GB",
    "[2026-06-11 05:11:58 TP1] Capture cuda graph begin. This can take up to several minutes. "
    "avail mem=0.08 GB",
)
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 384.00 MiB. GPU 0 has a total "
    "capacity of 23.56 GiB of which 338.75 MiB is free."
)
_SG = "/usr/local/lib/python3.12/site-packages/sglang/srt"
INIT_FRAMES = (
    f'  File "{_SG}/model_executor/model_runner.py", line 766, in initialize\n'
    "    self.init_attention_backend()\n"
    f'  File "{_SG}/model_executor/model_runner.py", line 2408, in init_attention_backend\n'
    "    self.attn_backend = self._get_attention_backend()\n"
    f'  File "{_SG}/layers/attention/flashinfer_backend.py", line 202, in __init__\n'
    "    global_workspace_buffer = torch.empty(\n"
)
CAPTURE_OOM_FRAMES = (
    f'  File "{_SG}/model_executor/cuda_graph_runner.py", line 480, in capture\n'
    "    graph, output_buffers = self.capture_one_batch_size(bs, forward)\n"
)


def _tp_pastes(frames: str) -> dict[str, str]:
    lines = [
        *TP_LINES,
        "[2026-06-11 05:11:58 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        *frames.rstrip("\n").split("\n"),
        OOM,
    ]
    return {
        form: "".join(wrap.format(ln) + "\n" for ln in lines)
        for form, wrap in (("bare", "{}"), ("kubectl", "2026-06-11T05:11:58.5Z {}"))
    }


def test_an_oom_in_tp0s_backend_init_while_tp1_captures_is_not_a_capture_failure(
    tmp_path: Path,
) -> None:
    got = _run(tmp_path, _tp_pastes(INIT_FRAMES))
    bad = {n: g for n, g in got.items() if g[1] or g[2] != 1}
    assert not bad, bad


def test_the_same_oom_under_tp0s_capture_frames_is(tmp_path: Path) -> None:
    got = _run(tmp_path, _tp_pastes(CAPTURE_OOM_FRAMES))
    bad = {n: g for n, g in got.items() if g != ("oom", True, 1)}
    assert not bad, bad


# ---------------------------------------------------------------- CANN's error-report lines
CANN = (
    "        TraceBack (most recent call last):",
    "        Stream sync failed, stream_id=12.[FUNC:StreamSynchronize][FILE:api_impl.cc][LINE:1701]",
    "        rtStreamSynchronize execution failed, reason=driver error:resource alloc fail"
    "[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:61]",
)


def test_cann_error_report_lines_make_an_engine_error_run(tmp_path: Path) -> None:
    """A vLLM worker's ERROR lines holding only CANN's report lines (the exception cut off) are
    an engine error, on both read paths: never "nothing recognised"."""
    head = "(Worker_TP3 pid=78100) ERROR 04-20 21:27:00 [multiproc_executor.py:932] "
    path = tmp_path / "cann.log"
    path.write_text("".join(head + ln + "\n" for ln in CANN), encoding="utf-8")
    report = analyze([str(path)], generated_at="fixed")
    assert len(report.runs) == 1
    assert any(f.code == "GD105" for f in report.runs[0].findings)
    assert not any(f.code == "GD100" for f in report.runs[0].findings)  # no capture function
    pure, hot = both([str(path)])
    assert_same_tables(pure, hot, "cann")


def test_acl_codes_outside_capture_in_canns_form_are_not_capture_failures(tmp_path: Path) -> None:
    """The negative of the ``runtime result = N`` rows above: the same form quoting an ACL code
    that is not a capture code (a memory or stream error) is an engine error, no GD100."""
    codes = json.loads((DATA / "runtime_codes.json").read_text(encoding="utf-8"))["codes"]
    acl = [c for c in codes if c["runtime"] == "acl" and not c["capture"]][:12]
    assert len(acl) >= 10
    texts = {
        f"{c['name']}-{form}": paste(
            f"RuntimeError: synchronize stream failed, runtime result = {c['code']}", form
        )
        for c in acl
        for form in FORMS
    }
    got = _run(tmp_path, texts)
    bad = {n: g for n, g in got.items() if g[1] or g[2] != 1}
    assert not bad, bad


def test_aiters_workspace_check_outside_capture_is_not_a_capture_failure(tmp_path: Path) -> None:
    """aiter's opus_splitk_ws_sync_to_device raises the same first sentence with no capture
    advice (any stream, any time): an engine error, not GD100 (the row needs the capture half)."""
    head = (
        "RuntimeError: [AITER] /workspace/aiter/csrc/opus_gemm/opus_gemm.cu:598 "
        "splitk workspace not initialized for the current CUDA stream."
    )
    got = _run(tmp_path, {form: paste(head, form) for form in FORMS})
    bad = {n: g for n, g in got.items() if g[1] or g[2] != 1}
    assert not bad, bad


# ---------------------------------------------------------------- graph-mode resolution frames
# vLLM 0.11's initialize_cudagraph_capture (called from capture_model) and vllm-ascend 0.11's
# initialize_aclgraph_capture (from _capture_model) run inside capture (phases.yaml): any error
# under them is a capture failure; the same error under initialize_kv_cache is not.
GRAPH_INIT = {
    "vllm": (
        "/usr/local/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py",
        "initialize_cudagraph_capture",
    ),
    "ascend": (
        "/vllm-workspace/vllm-ascend/vllm_ascend/worker/model_runner_v1.py",
        "initialize_aclgraph_capture",
    ),
}
WORKER = "(Worker_TP1 pid=4367) ERROR 06-17 11:49:59 [multiproc_executor.py:671] "


def _graph_init_pastes(inside: bool) -> dict[str, str]:
    out = {}
    for name, (path, func) in GRAPH_INIT.items():
        tb = [
            "Traceback (most recent call last):",
            f'  File "{path}", line 3423, in {func if inside else "initialize_kv_cache"}',
            "    if builder.cudagraph_support.value < min_cg_support.value:",
            "AttributeError: 'GDNAttentionMetadataBuilder' object has no attribute "
            "'cudagraph_support'",
        ]
        for form, pre in (("bare", ""), ("prefixed", WORKER)):
            out[f"{name}-{form}"] = "".join(pre + ln + "\n" for ln in tb)
    return out


def test_an_error_under_graph_mode_resolution_is_a_capture_failure(tmp_path: Path) -> None:
    got = _run(tmp_path, _graph_init_pastes(inside=True))
    bad = {n: g for n, g in got.items() if g != ("other", True, 1)}
    assert not bad, bad


def test_the_same_error_under_kv_cache_init_is_not(tmp_path: Path) -> None:
    got = _run(tmp_path, _graph_init_pastes(inside=False))
    bad = {n: g for n, g in got.items() if g[1] or g[2] != 1}
    assert not bad, bad


# ---------------------------------------------------------------- replay frames after capture
# sglang.bench_one_batch's decode/extend steps run after load_model built the runner and
# captured its graphs: an error under them, even right after every rank's capture lines, is no
# capture failure; the same error under the capture runner's frame is.
BENCH_FRAMES = (
    '  File "/sgl-workspace/sglang/python/sglang/bench_one_batch.py", line 281, in decode\n'
    "    logits_output, _ = model_runner.forward(forward_batch)\n"
)


def _bench_pastes(frames: str) -> dict[str, str]:
    ranks = [f"[2025-03-27 01:05:13 TP{r}] Registering 3936 cuda graph addresses" for r in (0, 1)]
    tb = ["Traceback (most recent call last):", *frames.rstrip("\n").split("\n")]
    exc = "RuntimeError: CUDA error: an illegal memory access was encountered"
    return {
        "bare": "\n".join([*ranks, *tb, exc]) + "\n",
        "cut": "\n".join([*ranks, *tb]) + "\n",  # the exception line not pasted
    }


def test_an_error_under_bench_one_batch_replay_is_not_a_capture_failure(tmp_path: Path) -> None:
    got = _run(tmp_path, _bench_pastes(BENCH_FRAMES))
    bad = {n: g for n, g in got.items() if g[1] or g[2] != 1}
    assert not bad, bad


def test_the_same_error_under_the_capture_runner_is(tmp_path: Path) -> None:
    got = _run(tmp_path, _bench_pastes(CAPTURE_FRAMES.split("\n", 1)[1]))
    bad = {n: g for n, g in got.items() if not g[1] or g[2] != 1}
    assert not bad, bad


# ---------------------------------------------------------------- torch's OOM text, second half
# torch's allocator message "CUDA out of memory. Tried to allocate X. GPU n has a total capacity
# of ..." quoted or wrapped from its second half on (errors.yaml torch_cuda_oom): an OOM error
# event on both read paths, a capture failure only where the process was capturing.
OOM_HALF = (
    "Tried to allocate 136.00 MiB. GPU 0 has a total capacity of 22.36 GiB of which 120.88 MiB "
    "is free. Of the allocated memory 20.1 GiB is allocated by PyTorch."
)


def test_torchs_oom_second_half_is_an_oom_error_not_a_capture_failure(tmp_path: Path) -> None:
    got = _run(tmp_path, {form: paste(OOM_HALF, form) for form in FORMS})
    bad = {n: g for n, g in got.items() if g != (None, False, 1)}
    assert not bad, bad
    path = tmp_path / "half.log"
    path.write_text(paste(OOM_HALF, "wrapped_prefixed"), encoding="utf-8")
    pure, hot = both([str(path)])
    assert_same_tables(pure, hot, "oom-half")


def test_torchs_oom_second_half_while_capturing_is_a_capture_failure(tmp_path: Path) -> None:
    err = "(VllmWorker TP0 pid=2200) ERROR 06-01 12:00:06 [multiproc_executor.py:671] "
    texts = {
        form: VLLM_BEGIN.format(r=0)
        + "\n"
        + "".join(err + ln for ln in paste(OOM_HALF, form).splitlines(True))
        for form in ("bare", "wrapped")
    }
    got = _run(tmp_path, texts)
    bad = {n: g for n, g in got.items() if g != ("oom", True, 1)}
    assert not bad, bad


# ---------------------------------------------------------------- the other all-reduce paths
# frame_causes.yaml: sglang's custom all-reduce v2 and the ROCm quick all-reduce run only under
# use_custom_allreduce (cause custom_all_reduce: --disable-custom-all-reduce is the remedy); the
# symmetric-memory, FlashInfer, MSCCL++ and all-to-all communicators are class distributed.
_SP = "/usr/local/lib/python3.12/site-packages"
AR_FRAMES = {
    "vllm-quick": (f"{_SP}/vllm/distributed/device_communicators/quick_all_reduce.py", True),
    "sglang-v2": (
        f"{_SP}/sglang/srt/distributed/device_communicators/custom_all_reduce_v2.py",
        True,
    ),
    "vllm-symm": (f"{_SP}/vllm/distributed/device_communicators/symm_mem.py", False),
    "flashinfer-comm": (f"{_SP}/flashinfer/comm/allreduce.py", False),
    "vllm-all2all": (f"{_SP}/vllm/distributed/device_communicators/all2all.py", False),
}
OUTER = {
    True: f'  File "{_SP}/vllm/v1/worker/gpu_model_runner.py", line 4100, in capture_model\n'
    "    self._capture_cudagraphs(x)\n",
    False: f'  File "{_SP}/vllm/v1/worker/gpu_model_runner.py", line 3100, in execute_model\n'
    "    out = self.model(x)\n",
}


def _ar_frame_report(tmp_path: Path, path: str, capturing: bool) -> tuple[Any, ...]:
    log = tmp_path / f"{abs(hash((path, capturing)))}.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        + OUTER[capturing]
        + f'  File "{path}", line 250, in all_reduce\n'
        + "    out = self._op(inp)\n"
        + "RuntimeError: CUDA error: invalid argument\n",
        encoding="utf-8",
    )
    run = analyze([str(log)], generated_at="fixed").runs[0]
    gd100 = [f for f in run.findings if f.code == "GD100"]
    err = run.record.to_json()["capture_error"]
    return (err["class"] if err else None), gd100


@pytest.mark.parametrize("name", sorted(AR_FRAMES))
def test_an_all_reduce_frame_in_capture_is_a_distributed_capture_failure(
    name: str, tmp_path: Path
) -> None:
    path, custom = AR_FRAMES[name]
    cls, gd100 = _ar_frame_report(tmp_path, path, capturing=True)
    assert cls == "distributed" and len(gd100) == 1
    first = gd100[0].remediation[0] if gd100[0].remediation else ""
    assert ("--disable-custom-all-reduce" in first) == custom, gd100[0].remediation


@pytest.mark.parametrize("name", sorted(AR_FRAMES))
def test_the_same_frame_while_serving_is_not(name: str, tmp_path: Path) -> None:
    cls, gd100 = _ar_frame_report(tmp_path, AR_FRAMES[name][0], capturing=False)
    assert cls is None and not gd100


def test_canns_capture_reason_in_its_report_line_is_a_capture_failure(tmp_path: Path) -> None:
    """CANN's own text for a capture error (errors.yaml cann_capture_texts), after ``reason=``
    in its report line on a vLLM worker's ERROR line: GD100 stream_capture_invalid, on both
    read paths; the same report line with a non-capture reason is not (the test above)."""
    head = "(Worker_TP1 pid=4367) ERROR 06-17 11:49:59 [multiproc_executor.py:962]        "
    line = (
        "rtMemcpy execution failed, reason=operation not permitted when a stream is capturing "
        "and the specified capture mode is not relaxed"
        "[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:61]"
    )
    got = _run(tmp_path, {"bare": line + "\n", "worker": head + line + "\n"})
    assert got == {"bare": ("stream_capture_invalid", True, 1), "worker": got["bare"]}, got
    path = tmp_path / "worker.log"
    pure, hot = both([str(path)])
    assert_same_tables(pure, hot, "cann-capture")


def _failure_texts() -> list[tuple[str, str]]:
    """(id, text) of every row that is a process saying it failed or died (``failure: true``)."""
    rows = yaml.safe_load((DATA / "errors.yaml").read_text(encoding="utf-8"))["signatures"]
    return [
        (f"{r['id']}-{j}", say)
        for r in rows
        if r.get("failure")
        for j, say in enumerate(r.get("says", ()))
    ]


@pytest.mark.parametrize("form", ("bare", "vllm", "sglang", "quoted"))
def test_a_process_saying_it_died_is_an_engine_error_run(form: str, tmp_path: Path) -> None:
    """An engine process's failure line or a process crash print (CPython's fatal error,
    libstdc++'s terminate, the shell's segfault report) makes a run with an engine error, on
    both read paths, however pasted: never "nothing recognised", never a capture failure on
    its own words."""
    texts = _failure_texts()
    assert len(texts) >= 10
    head = {
        "bare": "",
        "vllm": "(EngineCore_DP0 pid=88) ERROR 06-01 12:00:00 [core.py:1757] ",
        "sglang": "[2026-06-01 12:00:00 TP0] ",
        "quoted": "> ",
    }[form]
    for name, text in texts:
        (tmp_path / name).mkdir()  # one folder each: "x-1.log", "x-2.log" would be a rotated set
        path = tmp_path / name / "server.log"
        path.write_text(head + text + "\n", encoding="utf-8")
        report = analyze([str(path)], generated_at="fixed")
        codes = {f.code for run in report.runs for f in run.findings}
        assert len(report.runs) == 1 and "GD105" in codes and "GD100" not in codes, (name, codes)
        pure, hot = both([str(path)])
        assert_same_tables(pure, hot, name)


def _table_texts() -> list[tuple[str, str]]:
    """(id, text) of every text the signature table's rows say (any class)."""
    rows = yaml.safe_load((DATA / "errors.yaml").read_text(encoding="utf-8"))["signatures"]
    return [(f"{r['id']}-{j}", say) for r in rows for j, say in enumerate(r.get("says", ()))]


@pytest.mark.parametrize("form", ("bare", "error_line"))
def test_every_table_text_alone_makes_a_run(form: str, tmp_path: Path) -> None:
    """A message of the signature table pasted on its own, with no exception name or error
    word around it, or on an engine's ERROR line, is an error of a run: the line reaches the
    table by the literals its row's pattern requires (diag.engines.literals), never "nothing
    recognised". Rows of a general vocabulary (a subsystem's name, "not supported") need an
    error word of their own when bare."""
    head = "" if form == "bare" else "(EngineCore_DP0 pid=1) ERROR 06-01 12:00:00 [core.py:1] "
    general = {"distributed_general", "unsupported_in_graph"}
    texts = [(n, t) for n, t in _table_texts() if n.rsplit("-", 1)[0] not in general]
    assert len(texts) >= 80
    silent = []
    for name, text in texts:
        (tmp_path / name).mkdir()
        path = tmp_path / name / "server.log"
        path.write_text(head + text + "\n", encoding="utf-8")
        if not analyze([str(path)], generated_at="fixed").runs:
            silent.append((name, text[:60]))
    assert not silent, silent
