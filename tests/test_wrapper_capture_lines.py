"""Graph wrappers decide a capture phase only by the source line of their capture branch (a
frame row's ``code``): a fragment whose innermost frame is ``CUDAGraphWrapper.__call__`` at
``output = weak_ref_tensors(output)`` failed while a graph was captured; the same wrapper at its
replay or eager line (same file, same function) is no capture error, in every prefix shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.api import analyze
from diag.engines.phases import place
from tests.conftest import need_corpus

SITE = "/opt/venv/lib/python3.12/site-packages"
# how the lines of one vLLM worker reach a log (multiproc worker, bare, compose, kubectl)
PREFIXES = {
    "worker": "(VllmWorker PP0_TP0 pid=4797) ERROR 09-29 05:54:49 [multiproc_executor.py:596] ",
    "bare": "ERROR 09-29 05:54:49 [multiproc_executor.py:596] ",
    "compose": "vllm-1  | (VllmWorker TP1 pid=77) ERROR 09-29 05:54:49 [multiproc_executor.py:596] ",
    "kubectl": "2025-09-29T05:54:49.123456789Z (EngineCore_0 pid=12) ERROR 09-29 05:54:49 "
    "[core.py:700] ",
}
# lines of vllm==0.10.1:vllm/compilation/cuda_graph.py CUDAGraphWrapper.__call__
CAPTURE_LINES = [
    "output = weak_ref_tensors(output)",  # :168, inside 'with torch.cuda.graph(...)'
    "entry.output = weak_ref_tensors(output)",  # :172, after the capture, same branch
    "with torch.cuda.graph(cudagraph, pool=self.graph_pool):",  # :158
]
NEAR_MISSES = [
    "entry.cudagraph.replay()",  # :192 replay (serving)
    "return self.runnable(*args, **kwargs)",  # :119 eager (profiling, warm-up, no graphs)
    "return entry.output",  # :193 after a replay
]


def _fragment(tmp_path: Path, prefix: str, code: str) -> Path:
    """A traceback cut at both ends: no header, no exception line (as issue excerpts are)."""
    body = [
        "    self._dummy_run(num_tokens,",
        f'  File "{SITE}/vllm/v1/worker/gpu_model_runner.py", line 2395, in _dummy_run',
        "    outputs = self.model(",
        "              ^^^^^^^^^^^",
        f'  File "{SITE}/vllm/compilation/cuda_graph.py", line 168, in __call__',
        f"    {code}",
        "             ^^^^",
    ]
    path = tmp_path / "fragment.log"
    path.write_text("".join(prefix + line + "\n" for line in body))
    return path


@pytest.mark.parametrize("code", CAPTURE_LINES)
@pytest.mark.parametrize("shape", sorted(PREFIXES))
def test_a_wrapper_frame_at_its_capture_line_is_a_capture_error(
    tmp_path: Path, shape: str, code: str
) -> None:
    run = analyze([str(_fragment(tmp_path, PREFIXES[shape], code))], generated_at="fixed").runs[0]
    err = run.record.to_json()["capture_error"]
    assert err is not None and err["phase"] == "capture_decode", err
    assert err["class"] == "other"  # the exception line is not in the log: no class is guessed
    assert run.verdict == "capture_failed", run.verdict_reason


@pytest.mark.parametrize("code", NEAR_MISSES)
@pytest.mark.parametrize("shape", sorted(PREFIXES))
def test_the_same_wrapper_at_a_replay_or_eager_line_is_no_capture_error(
    tmp_path: Path, shape: str, code: str
) -> None:
    run = analyze([str(_fragment(tmp_path, PREFIXES[shape], code))], generated_at="fixed").runs[0]
    assert run.record.to_json()["capture_error"] is None
    assert run.verdict != "capture_failed", run.verdict_reason


def test_an_outer_frame_that_named_the_capture_keeps_its_phase() -> None:
    outer = f'File "{SITE}/sglang/srt/model_executor/model_runner.py", line 9, in init_piecewise_cuda_graphs'
    wrapper = (
        f'File "{SITE}/sglang/srt/compilation/cuda_piecewise_backend.py", line 199, in __call__'
    )
    vllm_outer = f'File "{SITE}/vllm/spec_decode/eagle.py", line 3, in capture_model'
    vllm_wrapper = f'File "{SITE}/vllm/compilation/cuda_graph.py", line 168, in __call__'
    assert place([outer, wrapper + " output = entry.runnable(*args)"]) == "capture_piecewise"
    assert place([wrapper + " output = entry.runnable(*args)"]) == "capture_piecewise"
    assert place([wrapper + " return entry.runnable(*args)"]) is None  # eager path
    assert place([vllm_outer, vllm_wrapper + " output = weak_ref_tensors(output)"]) == (
        "capture_draft"
    )


def test_the_real_capture_fragment_is_a_capture_error() -> None:
    path = need_corpus("real-3") / "vllm-gfx906-44-pp0-tp0-prefix-capture-traceback.log"
    run = analyze([str(path)], generated_at="fixed").runs[0]
    err = run.record.to_json()["capture_error"]
    assert err is not None and err["phase"] == "capture_decode" and err["class"] == "other"
    assert run.verdict == "capture_failed"
