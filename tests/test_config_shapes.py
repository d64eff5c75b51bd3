"""Config echoes in every shape the engines print and pastes make of them (issue 32, point 6),
the engine decided by the text rather than a container's name (point 5), and a host logger
re-logging the engine's lines behind its own Python logging prefix.

The echo is vLLM 0.9.1's engine-config line: ``VllmConfig.__str__`` (vllm==0.9.1:vllm/config.py:4620-4652)
ending in ``compilation_config={...}``, which that version prints as JSON
(``CompilationConfig.__repr__``: ``TypeAdapter(...).dump_json``, vllm==0.9.1:vllm/config.py:4023);
0.11.0 the same (vllm==0.11.0:vllm/config/compilation.py:389), its ``cudagraph_mode`` a JSON
enum value, older Python reprs an enum repr (``<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>``).
Each shape must give the settings it still shows, alike on the per-line and the bulk path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.api import analyze
from diag.normalize.prefix import peel
from diag.sources.readers import detect_backend
from tests.test_hotpath_oracle import assert_same_tables, both

SIZES = [*range(512, 0, -8), 4, 2, 1]
HEAD = "INFO 06-27 12:57:50 [core.py:70] Initializing a V1 LLM engine (v0.9.1) with config: "


def _echo(compilation: str) -> str:
    return (
        "model='Qwen/Qwen3-8B', speculative_config=None, tokenizer='Qwen/Qwen3-8B', "
        "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
        "override_neuron_config={}, tokenizer_revision=None, trust_remote_code=False, "
        "dtype=torch.bfloat16, max_seq_len=40960, download_dir=None, load_format=LoadFormat.AUTO, "
        "tensor_parallel_size=1, pipeline_parallel_size=1, disable_custom_all_reduce=False, "
        "quantization=None, enforce_eager=False, kv_cache_dtype=auto,  device_config=cuda, "
        "decoding_config=DecodingConfig(backend='auto', disable_fallback=False, "
        "disable_any_whitespace=False, disable_additional_properties=False, reasoning_backend=''), "
        "observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, "
        "otlp_traces_endpoint=None, collect_detailed_traces=None), seed=0, "
        "served_model_name=Qwen/Qwen3-8B, num_scheduler_steps=1, multi_step_stream_outputs=True, "
        "enable_prefix_caching=True, chunked_prefill_enabled=True, use_async_output_proc=True, "
        f"pooler_config=None, compilation_config={compilation}"
    )


JSON = (
    '{"level":3,"debug_dump_path":"","cache_dir":"","backend":"","custom_ops":["none"],'
    '"splitting_ops":["vllm.unified_attention","vllm.unified_attention_with_output"],'
    '"use_inductor":true,"compile_sizes":[],"inductor_compile_config":'
    '{"enable_auto_functionalized_v2":false},"inductor_passes":{},"use_cudagraph":true,'
    '"cudagraph_num_of_warmups":1,"cudagraph_capture_sizes":['
    + ",".join(map(str, SIZES))
    + '],"cudagraph_copy_inputs":false,"full_cuda_graph":false,"max_capture_size":512,'
    '"local_cache_dir":null}'
)
REPR = (
    "{'level': 3, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, "
    "'cudagraph_capture_sizes': [" + ", ".join(map(str, SIZES)) + "], 'max_capture_size': 512}"
)
LINE = HEAD + _echo(JSON)


def _wrap(text: str, width: int) -> list[str]:
    return [text[i : i + width] for i in range(0, len(text), width)]


# shape -> (lines, settings it must still show)
FULL = {"compilation_config.level": 3, "compilation_config.max_capture_size": 512}
SHAPES: dict[str, tuple[list[str], dict[str, object]]] = {
    "json one line": ([LINE], {**FULL, "enforce_eager": False}),
    "hard-wrapped at 200": (_wrap(LINE, 200), {**FULL, "enforce_eager": False}),
    "hard-wrapped at 80 (inside 'with config:')": (_wrap(LINE, 80), FULL),
    "python repr with an enum repr, wrapped": (
        _wrap(HEAD + _echo(REPR), 120),
        {"compilation_config.cudagraph_mode": "FULL_AND_PIECEWISE", **FULL},
    ),
    "cut at its start": ([LINE[400:]], {**FULL, "enforce_eager": False}),
    "cut at its end": ([LINE[:-150]], {"compilation_config.level": 3, "enforce_eager": False}),
    "host logger prefix": (["2025-06-27 12:57:50,345 - __main__ - INFO - " + LINE], FULL),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_echo_shape_gives_its_settings_alike_on_both_paths(
    shape: str, tmp_path: Path
) -> None:
    lines, want = SHAPES[shape]
    path = tmp_path / "echo.log"
    path.write_text("\n".join(lines) + "\n")
    pure, hot = both([str(path)])
    assert_same_tables(pure, hot, shape)
    cfg = pure["config"]
    got = dict(zip(cfg["key"], cfg["value"], strict=True))
    for key, value in want.items():
        assert key in got, (shape, key, sorted(got))
        assert json.loads(got[key]) == value, (shape, key, got[key])  # (values are JSON)
    sizes = pure["capture_sizes"]
    if shape != "cut at its end":  # (the cut leaves only the list's start: no size list)
        assert sorted(json.loads(sizes["sizes"].iloc[-1])) == sorted(SIZES)


def test_a_wrapped_echo_does_not_swallow_the_lines_after_it(tmp_path: Path) -> None:
    """The echo's continuation stops at the next header or a line no echo piece looks like."""
    path = tmp_path / "echo.log"
    path.write_text(
        "\n".join(
            [
                *_wrap(LINE, 200),
                "Capturing CUDA graphs (decode, FULL):   9%|▊         | 3/35 [00:00<00:09,  3.30it/s]",
                "INFO 06-27 12:58:40 [gpu_model_runner.py:2326] Graph capturing finished in 12 secs, "
                "took 0.52 GiB",
            ]
        )
        + "\n"
    )
    pure, hot = both([str(path)])
    assert_same_tables(pure, hot, "echo then capture")
    assert len(pure["capture_progress"]) == 1 and len(pure["capture_end"]) == 1


def test_host_logger_prefix_is_peeled_before_the_engine_header() -> None:
    line = peel(
        "x.log",
        1,
        "2025-06-27 12:57:45,345 - __main__ - INFO - WARNING 06-27 12:57:45 [utils.py:2737] "
        "We must use the `spawn` multiprocessing start method.",
    )
    assert (line.header, line.level) == ("vllm", "WARNING")
    assert line.unlisted == "2025-06-27 12:57:45,345 - __main__ - INFO - "
    assert line.msg.startswith("We must use")


SGLANG_TEXT = (
    b"[2025-08-02 11:20:01] server_args=ServerArgs(model_path='m', cuda_graph_max_bs=16)\n"
    b"[2025-08-02 11:20:03] Capture cuda graph begin. This can take up to several minutes.\n"
    b"[2025-08-02 11:20:09] Decode batch. #running-req: 1, #token: 90, token usage: 0.00\n"
)


@pytest.mark.parametrize(
    "prefix", ["vllm-server-1  | ", "vllm_vllm_1 | ", "[pod/vllm-7d9f6c-x2k4p/vllm] "]
)
def test_the_text_decides_the_engine_not_the_container_name(prefix: str) -> None:
    """An SGLang server in a service named after vLLM stays SGLang; a name alone is a hint."""
    lines = SGLANG_TEXT.splitlines(keepends=True)
    assert detect_backend(b"".join(prefix.encode() + ln for ln in lines)) == "sglang"
    assert detect_backend(b"".join(b"> " + prefix.encode() + ln for ln in lines)) == "sglang"
    assert detect_backend(prefix.encode() + b"starting\n") == "vllm"  # only the name says it
    assert detect_backend(b"sglang-router-0  | " + LINE.encode() + b"\n") == "vllm"


def test_an_sglang_capture_failure_behind_a_vllm_named_service_keeps_its_verdict(
    tmp_path: Path,
) -> None:
    base = Path(__file__).parent.parent / "fixtures" / "errors" / "attribution-b-process-phase.log"
    lines = base.read_text().splitlines()
    path = tmp_path / "compose.log"
    path.write_text("".join(f"vllm-server-1  | {ln}\n" for ln in lines))
    plain = analyze([str(base)], generated_at="x").runs[0]
    named = analyze([str(path)], generated_at="x").runs[0]
    assert named.facts.backend == plain.facts.backend == "sglang"
    assert named.record.to_json()["capture_error"]["class"] == "oom"
    assert named.verdict == plain.verdict
