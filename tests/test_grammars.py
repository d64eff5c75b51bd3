"""The lark grammars: config reprs, tracebacks."""

from __future__ import annotations

import pytest

from diag.engines.errors import judge
from diag.parsers.configs import parse_kwargs, parse_value
from diag.parsers.traceback_text import parse_traceback


def test_server_args_repr() -> None:
    v = parse_value(
        "ServerArgs(model_path='Qwen/Qwen3-8B', cuda_graph_max_bs=160, cuda_graph_bs=[1, 2, 4], "
        "disable_cuda_graph=False, mem_fraction_static=0.88, dtype=torch.bfloat16, "
        "json_model_override_args='{}', max_running_requests=None, lora_paths={'a': 'b'})"
    )
    assert v["cuda_graph_max_bs"] == 160 and v["cuda_graph_bs"] == [1, 2, 4]
    assert v["disable_cuda_graph"] is False and v["max_running_requests"] is None
    assert v["dtype"] == "torch.bfloat16" and v["lora_paths"] == {"a": "b"}


def test_vllm_config_dict_and_json_forms() -> None:
    d = parse_kwargs(
        "model='m', enforce_eager=False, compilation_config={'mode': 3, "
        "'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'cudagraph_capture_sizes': [1, 2, 4]}"
    )
    assert d["compilation_config"]["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    j = parse_kwargs(
        'model=\'m\', compilation_config={"level":3,"use_cudagraph":true,"cudagraph_capture_sizes":[4,2,1],'
        '"local_cache_dir":null}'
    )
    assert j["compilation_config"] == {
        "level": 3,
        "use_cudagraph": True,
        "cudagraph_capture_sizes": [4, 2, 1],
        "local_cache_dir": None,
    }


def test_cut_config_line_keeps_what_it_shows() -> None:
    d = parse_kwargs(
        "model='x', enforce_eager=False, compilation_config={'level': 3, 'cudagraph_capture_sizes': [1, 2"
    )
    assert d["enforce_eager"] is False and d["cudagraph_capture_sizes"] == [1, 2]


def test_traceback_frames_and_chained_exception() -> None:
    tb = parse_traceback(
        [
            "Traceback (most recent call last):",
            '  File "/x/cuda_graph_runner.py", line 309, in __init__',
            "    raise Exception(",
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB.",
            "Possible solutions:",
            "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        ]
    )
    assert len(tb.frames) == 1 and "cuda_graph_runner.py" in tb.frames[0]
    assert tb.exceptions[0].startswith("Exception: Capture cuda graph failed")
    assert "Possible solutions" in tb.exceptions[0]


@pytest.mark.parametrize(
    ("message", "cls"),
    [
        ("RuntimeError: CUDA error: out of memory", "oom"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
        (
            "RuntimeError: CUDA error: operation failed due to a previous error during capture",
            "stream_capture_invalid",
        ),
        (
            "RuntimeError: CUDA error: operation not permitted when stream is capturing",
            "stream_capture_invalid",
        ),
        (
            "RuntimeError: Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture. cudaStreamCaptureStatusActive",
            "unsupported_op",
        ),
        (
            "Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed",
            "distributed",
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp",
            "distributed",
        ),
        ("TypeError: cannot unpack non-iterable ForwardMetadata object", "other"),
    ],
)
def test_error_classes(message: str, cls: str) -> None:
    assert judge(message).error_class == cls


def test_a_config_text_read_again_gives_a_value_of_its_own() -> None:
    """The pods of one deployment echo the same ServerArgs line: it is parsed once, and each
    reader gets its own copy (parse_kwargs pops ``__call__``; a caller may change its dict)."""
    text = "ServerArgs(model_path='m', cuda_graph_bs=[1, 2, 4], tp_size=2, extra={'a': [1]})"
    want = {"model_path": "m", "cuda_graph_bs": [1, 2, 4], "tp_size": 2, "extra": {"a": [1]}}
    first = parse_kwargs(text)
    assert first == want
    first["cuda_graph_bs"].append(8)
    first["extra"]["a"].clear()
    del first["tp_size"]
    assert parse_kwargs(text) == want
    assert parse_value("[1, 2]") is not parse_value("[1, 2]")
