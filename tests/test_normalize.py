"""Line normalisation: escapes, tqdm redraws, wrapper prefixes, engine prefixes."""

from __future__ import annotations

import pytest

from diag.normalize.lines import clean, split_logical
from diag.normalize.prefix import peel


def test_tqdm_redraws_split_and_glued_log_line_separated() -> None:
    phys = (
        "Capturing CUDA graph shapes:   0%|          | 0/11 [00:00<?, ?it/s]\r"
        "Capturing CUDA graph shapes: 100%|##########| 11/11 [00:05<00:00,  2.10it/s]"
        "INFO 09-09 15:33:36 [gpu_model_runner.py:2700] Graph capturing finished in 5 secs, took 0.40 GiB"
    )
    parts = split_logical(phys)
    assert len(parts) == 3
    assert parts[1].endswith("2.10it/s]")
    assert parts[2].startswith("INFO 09-09")


def test_cr_collapsed_notebook_redraws_split() -> None:
    phys = (
        "    Capturing num tokens (num_tokens=32 avail_mem=118.88 GB):  84%|########4 | 49/58 [00:01<00:00, 44.16it/s]"
        "Capturing num tokens (num_tokens=28 avail_mem=118.88 GB):  84%|########4 | 49/58 [00:01<00:00, 44.16it/s]"
    )
    assert len(split_logical(phys)) == 2


@pytest.mark.parametrize(
    "raw",
    [
        "\x1b[0;36m(EngineCore_DP0 pid=185)\x1b[0;0m INFO",
        "^[[0;36m(EngineCore_DP0 pid=185)^[[0;0m INFO",
    ],
)
def test_ansi_raw_and_caret_forms_removed(raw: str) -> None:
    assert clean(raw) == "(EngineCore_DP0 pid=185) INFO"


CASES = [
    # (line, expected header, rank, proc, wrapper, msg start)
    (
        "[2025-02-27 04:37:29 TP0] Decode batch. #running-req: 8",
        "sglang",
        "TP0",
        None,
        None,
        "Decode batch.",
    ),
    (
        "[2025-07-02 07:41:58 DP0 TP1 EP1] Load weight end.",
        "sglang",
        "DP0-TP1-EP1",
        None,
        None,
        "Load weight end.",
    ),
    (
        "[2026-04-05 20:02:51] Prefill batch, #new-seq: 1",
        "sglang",
        None,
        None,
        None,
        "Prefill batch",
    ),
    ("[gpu=0] Decode batch. #running-req: 381", "sglang", "TP0", None, None, "Decode batch."),
    (
        "INFO 12-20 20:25:46 worker.py:241] Memory profiling takes 19.77 seconds",
        "vllm",
        None,
        None,
        None,
        "Memory profiling",
    ),
    (
        "(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] RuntimeError: x",
        "vllm",
        "TP3",
        "VllmWorker rank=3",
        None,
        "RuntimeError",
    ),
    (
        "(Worker_DP0_TP1_EP1 pid=5016) WARNING 10-24 13:22:34 [gpu_model_runner.py:4068] CUDAGraphMode.FULL",
        "vllm",
        "DP0-TP1-EP1",
        "Worker_DP0_TP1_EP1",
        None,
        "CUDAGraphMode",
    ),
    (
        "(VllmWorkerProcess pid=13109) INFO 08-19 07:51:12 model_runner.py:1024] Capturing the model",
        "vllm",
        "pid13109",
        "VllmWorkerProcess",
        None,
        "Capturing the model",
    ),
    (
        "(RayWorkerWrapper pid=5012, ip=10.0.0.1) INFO 02-11 09:51:19 model_runner.py:1077] Capturing cudagraphs",
        "vllm",
        "pid5012",
        "RayWorkerWrapper",
        None,
        "Capturing cudagraphs",
    ),
    (
        "2026-05-12T08:01:39.331095044Z INFO 05-12 08:01:39 [core.py:77] Initializing a V1 LLM engine",
        "vllm",
        None,
        None,
        "docker",
        "Initializing",
    ),
    (
        '[2025-12-13T19:54:35Z] (Worker_TP0 pid=9260) ERROR 12-13 11:54:35 [multiproc_executor.py:826]   File "x"',
        "vllm",
        "TP0",
        "Worker_TP0",
        "ci",
        "  File",
    ),
    (
        "2025-02-04 21:29:17 [2025-02-04 05:29:17 TP0] KV Cache is allocated. K size: 2.82 GB",
        "sglang",
        "TP0",
        None,
        "docker-desktop",
        "KV Cache",
    ),
    (
        "│ INFO 03-21 20:15:46 [executor_base.py:111] # cuda blocks: 7191, # CPU blocks: 512          │",
        "vllm",
        None,
        None,
        "k9s",
        "# cuda blocks",
    ),
    (
        "sglang-1  | [2025-02-27 04:37:29 TP0] Decode batch. #running-req: 8",
        "sglang",
        "TP0",
        None,
        "compose",
        "Decode",
    ),
    (
        "2025-12-04 20:35:53 INFO 151972 [scheduler_metrics_mixin.py:287] Decode batch. #running-req: 1",
        "pylog",
        None,
        None,
        None,
        "Decode batch.",
    ),
    (
        "(EngineCore_DP0 pid=181642) [Stage-0] INFO 02-02 18:25:03 [kv_cache_utils.py:1305] GPU KV cache size: 2,925,232 tokens",
        "vllm",
        "DP0",
        "EngineCore_DP0",
        None,
        "GPU KV cache size",
    ),
    (
        "W0911 10:24:17.065000 224 torch/utils/cpp_extension.py:2425] TORCH_CUDA_ARCH_LIST is not set",
        "glog",
        None,
        None,
        None,
        "TORCH_CUDA_ARCH_LIST",
    ),
]


@pytest.mark.parametrize(("text", "header", "rank", "proc", "wrapper", "msg"), CASES)
def test_prefixes(
    text: str, header: str | None, rank: str | None, proc: str | None, wrapper: str | None, msg: str
) -> None:
    line = peel("x.log", 1, text)
    assert line.header == header
    assert line.rank == rank
    assert (line.proc or "").startswith(proc or "") and (proc is None) == (line.proc is None)
    assert (line.wrapper or "").endswith(wrapper or "") and (wrapper is None) == (
        line.wrapper is None
    )
    assert line.msg.startswith(msg)


def test_timestamps() -> None:
    s = peel("x", 1, "[2025-02-27 04:37:29 TP0] Decode batch.")
    assert s.ts == 1740631049.0
    v = peel("x", 1, "INFO 02-27 04:37:29 [core.py:1] x")
    assert v.ts is not None  # vLLM prints no year: placed in 2000
    d = peel("x", 1, "2025-02-27T04:37:29Z INFO 02-27 04:37:30 [core.py:1] x")
    assert d.ts == 1740631050.0  # the docker wrapper supplies the year


def test_ray_repeat_suffix() -> None:
    line = peel(
        "x",
        1,
        "(pid=123, ip=10.0.0.1) INFO 02-11 09:51:19 model_runner.py:1077] hello [repeated 7x across cluster]",
    )
    assert line.repeat == 7 and line.msg == "hello"
