"""Line normalisation: escapes, tqdm redraws, wrapper prefixes, engine prefixes."""

from __future__ import annotations

import html
import re
from pathlib import Path

import markupsafe
import pytest

from diag.api import analyze
from diag.normalize.lines import clean, split_logical
from diag.normalize.prefix import peel
from diag.normalize.shape import PrefixShapes, shape_of, unprefix
from tests.conftest import ROOT


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
        "(VllmWorker PP0_TP0 pid=4797) ERROR 09-29 05:54:49 [multiproc_executor.py:596] x",
        "vllm",
        "PP0-TP0",
        "VllmWorker PP0_TP0",
        None,
        "x",
    ),
    (
        "[rank1]:[2025-02-27 04:37:29 TP1] Decode batch. #running-req: 8",
        "sglang",
        "TP1",
        "rank1",
        "torchrun",
        "Decode batch.",
    ),
    (
        "> > (EngineCore_DP0 pid=1) INFO 02-02 18:25:03 [core.py:1] Capturing CUDA graphs",
        "vllm",
        "DP0",
        "EngineCore_DP0",
        "quote",
        "Capturing CUDA graphs",
    ),
    (
        "Dec 01 10:00:00 gpu7 python3[4242]: [2025-02-27 04:37:29 TP0] Decode batch. #running-req: 8",
        "sglang",
        "TP0",
        None,
        "unlisted",
        "Decode batch.",
    ),
    (
        "2025-04-23T03:35:43.390Z  INFO dynamo_run::worker: VLLM: "
        "(VllmWorker rank=1 pid=2) INFO 04-23 03:35:43 [gpu_worker.py:1] Model loading took 1 GiB",
        "vllm",
        "TP1",
        "VllmWorker rank=1",
        "docker+unlisted",
        "Model loading took",
    ),
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
    # SGLang's rank prefix inside a python-logging format's file bracket (real-2 pr11854)
    (
        "2025-10-20 03:02:22 INFO 31223 [DP3 TP3 EP3 scheduler_metrics_mixin.py:222] Decode batch.",
        "pylog",
        "DP3-TP3-EP3",
        None,
        None,
        "Decode batch.",
    ),
    (
        "2025-10-20 03:02:22 INFO 31223 [scheduler_metrics_mixin.py:222] Decode batch.",
        "pylog",
        None,
        None,
        None,
        "Decode batch.",
    ),
    # SGLang under a Ray actor: the actor's "(pid=, ip=)" is on every line; the SGLang header
    # names the ranks, a line it names none on is the main process, not a Ray worker
    (
        "(pid=123, ip=10.0.1.1) [2025-03-08 12:29:04] server_args=ServerArgs(model_path='m')",
        "sglang",
        None,
        "pid=123",
        None,
        "server_args",
    ),
    (
        "(pid=123, ip=10.0.1.1) [2025-03-08 12:29:04 TP1] Load weight begin. avail mem=1 GB",
        "sglang",
        "TP1",
        "pid=123",
        None,
        "Load weight",
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


def test_html_entities_of_a_page_source_are_decoded() -> None:
    assert clean("RuntimeError: &quot;x&quot; &#39;y&#39; &#x27;z&#x27; a &lt; b") == (
        "RuntimeError: \"x\" 'y' 'z' a < b"
    )
    assert clean("tokens & more") == "tokens & more"  # a bare ampersand is text


@pytest.mark.parametrize(
    "escaped,text",
    [
        ("&#34;m&#34; &#039;k&#039; &apos;a&apos;", "\"m\" 'k' 'a'"),  # MarkupSafe, PHP, HTML5
        (
            "it&rsquo;s &#8217;x&#x2019; &hellip;",
            "it\u2019s \u2019x\u2019 \u2026",
        ),  # >3 digits, named
        ("&amp;lt; stays &lt;", "&lt; stays <"),  # decoded once: a logged '&lt;' survives a page
    ],
)
def test_every_character_reference_is_decoded_once(escaped: str, text: str) -> None:
    assert clean(escaped) == text


@pytest.mark.parametrize(
    "text",
    ["AT&T && x", "GET /v1?a=1&para=2&copy=3", "&foo; & &; &#;", "R&D&nbsp"],
)
def test_text_with_a_bare_ampersand_is_left_as_it_is(text: str) -> None:
    # html.unescape alone would read '&para' and '&copy' (legacy forms without ';')
    assert clean(text) == text


def test_a_capture_error_pasted_from_page_source_reads_as_the_log(tmp_path: Path) -> None:
    """The same incident through two real escapers (the stdlib's and MarkupSafe's)."""
    log = (ROOT / "fixtures/incidents/sglang-capture-oom/server.log").read_text()
    want = analyze([str(ROOT / "fixtures/incidents/sglang-capture-oom")], generated_at="fixed")
    err = want.runs[0].record.to_json()["capture_error"]
    for name, escape in (("stdlib", html.escape), ("markupsafe", markupsafe.escape)):
        path = tmp_path / f"{name}.log"
        path.write_text("\n".join(str(escape(ln)) for ln in log.splitlines()) + "\n")
        assert "&#" in path.read_text()  # the quotes are escaped
        got = analyze([str(path)], generated_at="fixed").runs[0].record.to_json()["capture_error"]
        assert got is not None and err is not None
        assert (got["class"], got["phase"], got["message"]) == (
            err["class"],
            err["phase"],
            err["message"],
        ), name


def test_unlisted_prefix_shape_frees_digits_and_level_words_only() -> None:
    rx = shape_of("2025-04-23T03:35:43.390Z  INFO dynamo_run::worker: VLLM: ")
    assert re.match(rx, "2025-04-23T03:36:01.002Z ERROR dynamo_run::worker: VLLM:   File")
    assert not re.match(rx, "2025-04-23T03:36:01.002Z  INFO other_crate::worker: VLLM: x")


@pytest.mark.parametrize(
    "prefix",
    ["Dec 01 10:00:00 gpu7 python3[4242]: ", "   17\t", "job-3 >> ", "[worker 2] | "],
)
def test_prefix_learned_from_a_frame_is_stripped_from_the_next_lines(prefix: str) -> None:
    state = PrefixShapes()
    lines = [
        "Traceback (most recent call last):",
        '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 497, in capture',
        "    self.capture_one_batch_size(bs, forward)",
        "RuntimeError: CUDA error: out of memory",
    ]
    got = []
    for i, text in enumerate(lines):
        line = peel("x", i + 1, prefix.replace("17", str(17 + i)) + text)
        unprefix(line, state)
        got.append(line.msg)
    assert got[1:] == lines[1:]


def test_glued_traceback_text_is_never_learned_as_a_prefix() -> None:
    state = PrefixShapes()
    line = peel("x", 1, 'Traceback (most recent call last):  File "/x.py", line 1, in f')
    unprefix(line, state)
    assert state.shapes == ()


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_cri_pod_log_files_stream_and_tag_are_peeled(stream: str, tmp_path: Path) -> None:
    """A CRI runtime's pod log file (/var/log/pods: "<RFC3339Nano> stdout F <line>") is a
    stamp, a stream and a full/partial tag before the line, which keeps its own indentation:
    a vLLM header behind it is read as without it, and an indented exception wrapped over two
    lines is still one capture error, on both read paths."""
    from tests.test_hotpath_oracle import assert_same_tables, both

    head = f"2026-06-01T12:00:00.123456789Z {stream} F "
    line = peel("x", 1, head + "(EngineCore_DP0 pid=7) INFO 06-01 12:00:00 [core.py:1] hello")
    assert (line.header, line.msg, line.ts is not None) == ("vllm", "hello", True)
    assert peel("x", 1, head + "    capture unless").msg == "    capture unless"
    log = tmp_path / "pod.log"
    log.write_text(
        head
        + "    RuntimeError: Cannot copy between CPU and CUDA tensors during CUDA graph\n"
        + head
        + "    capture unless the CPU tensor is pinned.\n",
        encoding="utf-8",
    )
    run = analyze([str(log)], generated_at="fixed").runs[0]
    err = run.record.capture_error
    assert err is not None and err.error_class == "unsupported_op"
    pure, hot = both([str(log)])
    assert_same_tables(pure, hot, "cri")
