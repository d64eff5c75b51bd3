"""Frames of an op that runs only inside a graph (phases.yaml role ``graph``).

SGLang's MoE layer calls its piecewise op only under the torch.compile piecewise CUDA graph,
"True while inside tc_piecewise CUDA graph capture/replay" (sglang==0.5.23:
srt/model_executor/runner_backend_utils/tc_piecewise_cuda_graph/context_manager.py:43). Such a
frame alone does not say capture or replay: the run's own lines do. An error under it with no
serving line before it is a piecewise capture failure; the same error after the server served
is a replay's, an engine error while serving.
"""

from __future__ import annotations

from pathlib import Path

from diag.api import analyze
from tests.test_hotpath_oracle import assert_same_tables, both

_SG = "/usr/local/lib/python3.12/site-packages/sglang/srt"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    f'  File "{_SG}/models/glm4_moe.py", line 632, in forward_normal\n'
    "    final_hidden_states = self.experts(hidden_states, topk_output)\n"
    f'  File "{_SG}/layers/moe/fused_moe_triton/layer.py", line 1049, in forward\n'
    "    return moe_forward_piecewise_cuda_graph_impl(\n"
    f'  File "{_SG}/layers/moe/fused_moe_triton/layer.py", line 1286, in '
    "moe_forward_piecewise_cuda_graph_impl\n"
    "    return moe_layer.forward_impl(hidden_states, topk_output)\n"
    f'  File "{_SG}/layers/quantization/marlin_utils.py", line 120, in apply\n'
    "    raise RuntimeError(msg)\n"
    "RuntimeError: Runtime check failed at moe_wna16_marlin.cuh:963: size_k = 704, is not "
    "divisible by b_scales.size(1) = 5\n"
)
SERVED = (
    "[2026-06-11 05:10:00] Decode batch, #running-req: 3, #token: 900, token usage: 0.01, "
    "cuda graph: True, gen throughput (token/s): 120.00, #queue-req: 0\n"
)


def _run(tmp: Path, text: str) -> tuple[dict[str, object] | None, list[str], str]:
    log = tmp / "server.log"
    log.write_text(text, encoding="utf-8")
    run = analyze([str(log)], generated_at="fixed").runs[0]
    doc = run.record.to_json()
    return doc["capture_error"], [f.code for f in run.findings], run.verdict


def test_at_start_up_it_is_the_piecewise_capture(tmp_path: Path) -> None:
    err, codes, verdict = _run(tmp_path, TRACEBACK)
    assert err is not None and err["phase"] == "capture_piecewise", err
    assert "moe_forward_piecewise_cuda_graph_impl" in str(err["evidence"])
    assert "GD100" in codes and verdict == "capture_failed"


def test_after_serving_it_is_a_replay(tmp_path: Path) -> None:
    err, codes, verdict = _run(
        tmp_path, SERVED + TRACEBACK.replace("Traceback", "[2026-06-11 05:10:05] Traceback", 1)
    )
    assert err is None and "GD100" not in codes, err
    assert verdict == "serving_failed"


def test_both_read_paths_agree(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(TRACEBACK, encoding="utf-8")
    pure, hot = both([str(log)])
    assert_same_tables(pure, hot, "graph frame")
    assert set(hot["error"]["graph_frame"].dropna()) == {
        "capture_piecewise|moe_forward_piecewise_cuda_graph_impl"
    }
