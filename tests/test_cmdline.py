"""Launch command lines (diag.parsers.cmdline) through diag.api.analyze.

Every command is written here as the argv a user types and rendered in the shapes real
pastes carry (one shell line, ``\\`` continuations, prompts, env prefixes, compose/k8s YAML
lists). The oracle is the engine's own echo of the same settings: a command line must
give the config keys and values the echo parsers give for that echo, whatever its shape.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from diag.api import analyze
from tests.conftest import need_corpus

ORIGIN = "cmdline"
VLLM_ECHO = "INFO 10-18 10:03:11 [utils.py:233] non-default args: {args}"
SGLANG_ECHO = "[2025-11-03 09:00:00] server_args=ServerArgs({args})"
VLLM_STATS = (
    "INFO 10-18 10:05:00 [loggers.py:123] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
    "Avg generation throughput: 300.0 tokens/s, Running: 8 reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: 2.0%, Prefix cache hit rate: 0.0%"
)
SGLANG_DECODE = (
    "[2025-11-03 09:00:10] Decode batch. #running-req: 8, #token: 4096, token usage: 0.10, "
    "gen throughput (token/s): 300.00, #queue-req: 0,"
)


def _runs(tmp_path: Path, text: str) -> list[Any]:
    path = tmp_path / "paste.log"
    path.write_text(text)
    return analyze([str(path)], generated_at="fixed").runs


def _config(tmp_path: Path, text: str, origin: str | None = ORIGIN) -> dict[str, Any]:
    """The config rows one origin emitted (all origins: None), values decoded."""
    out: dict[str, Any] = {}
    for run in _runs(tmp_path, text):
        cfg = run.facts.tables["config"]
        rows = cfg if origin is None else cfg[cfg["origin"] == origin]
        for key, value in zip(rows["key"], rows["value"], strict=True):
            out[key] = json.loads(value)
    return out


# ------------------------------------------------------------------ shapes of one argv
def _one_line(argv: list[str]) -> str:
    return shlex.join(argv)


def _continued(argv: list[str]) -> str:
    """Each flag on its own line, as docs and READMEs print them."""
    lines: list[str] = []
    for tok in argv:
        if tok.startswith("-") or not lines:
            lines.append(shlex.quote(tok))
        else:
            lines[-1] += " " + shlex.quote(tok)
    return " \\\n    ".join(lines)


def _dollar(argv: list[str]) -> str:
    return "$ " + shlex.join(argv)


def _hash(argv: list[str]) -> str:
    return "# " + shlex.join(argv)


def _venv_prompt(argv: list[str]) -> str:
    return "(vllm) [user@node01 models]$ " + shlex.join(argv) + " 2>&1 | tee server.log"


def _env_prefix(argv: list[str]) -> str:
    return "CUDA_VISIBLE_DEVICES=0,1 NCCL_DEBUG=INFO " + shlex.join(argv)


def _compose_flow(argv: list[str]) -> str:
    return "    command: " + json.dumps(argv)


def _k8s_block(argv: list[str]) -> str:
    return "        command:\n" + "".join(f"          - {json.dumps(t)}\n" for t in argv)


def _k8s_command_args(argv: list[str]) -> str:
    """k8s: the program in ``command:``, its flags in ``args:``."""
    cut = next(i for i, t in enumerate(argv) if t.startswith("--"))
    return f"        command: {json.dumps(argv[:cut])}\n        args:\n" + "".join(
        f"          - {json.dumps(t)}\n" for t in argv[cut:]
    )


def _equals_form(argv: list[str]) -> str:
    """``--flag=value`` for every valued flag."""
    out: list[str] = []
    for tok in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and not tok.startswith("-"):
            out[-1] += "=" + tok
        else:
            out.append(tok)
    return shlex.join(out)


SHAPES: dict[str, Callable[[list[str]], str]] = {
    f.__name__.strip("_"): f
    for f in (
        _one_line,
        _continued,
        _dollar,
        _hash,
        _venv_prompt,
        _env_prefix,
        _compose_flow,
        _k8s_block,
        _k8s_command_args,
        _equals_form,
    )
}

# (argv, the engine's echo of the same settings)
CASES: dict[str, tuple[list[str], str]] = {
    "vllm-serve": (
        ["vllm", "serve", "Qwen/Qwen3-0.6B", "--max-num-seqs", "64", "--enforce-eager"],
        VLLM_ECHO.format(
            args="{'model': 'Qwen/Qwen3-0.6B', 'max_num_seqs': 64, 'enforce_eager': True}"
        ),
    ),
    "vllm-api-server": (
        [
            "python",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            "/models/llama",
            "--gpu-memory-utilization",
            "0.85",
            "--compilation-config",
            '{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [4, 1, 2]}',
        ],
        VLLM_ECHO.format(
            args="{'model': '/models/llama', 'gpu_memory_utilization': 0.85, "
            "'compilation_config': {'cudagraph_mode': 'FULL_DECODE_ONLY', "
            "'cudagraph_capture_sizes': [4, 1, 2]}}"
        ),
    ),
    "vllm-bench-throughput": (
        ["vllm", "bench", "throughput", "--model", "m", "--input-len", "32", "--enforce-eager"],
        VLLM_ECHO.format(args="{'model': 'm', 'input_len': 32, 'enforce_eager': True}"),
    ),
    "sglang-launch-server": (
        [
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "deepseek-ai/DeepSeek-V3",
            "--tp",
            "8",
            "--disable-cuda-graph",
            "--cuda-graph-max-bs",
            "8",
            "--cuda-graph-bs",
            "1",
            "2",
            "4",
            "8",
        ],
        SGLANG_ECHO.format(
            args="model_path='deepseek-ai/DeepSeek-V3', tp_size=8, disable_cuda_graph=True, "
            "cuda_graph_max_bs=8, cuda_graph_bs=[1, 2, 4, 8]"
        ),
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_shape_gives_the_echo_keys(tmp_path: Path, case: str, shape: str) -> None:
    argv, echo = CASES[case]
    if shape == "equals_form" and "--cuda-graph-bs" in argv:
        pytest.skip("an nargs='+' list has no --flag=value spelling")
    echoed = _config(tmp_path, echo + "\n", origin=None)
    typed = _config(tmp_path, SHAPES[shape](argv) + "\n")
    assert echoed, "the echo oracle must parse"
    assert typed == echoed


@pytest.mark.parametrize(
    ("argv", "tail", "flag"),
    [
        (CASES["vllm-serve"][0], VLLM_STATS, "--enforce-eager"),
        (CASES["vllm-bench-throughput"][0], VLLM_STATS, "--enforce-eager"),
        (
            [
                "python",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                "m",
                "--enforce-eager",
            ],
            VLLM_STATS,
            "--enforce-eager",
        ),
        (CASES["sglang-launch-server"][0], SGLANG_DECODE, "--disable-cuda-graph"),
    ],
    ids=["vllm-serve", "vllm-bench", "vllm-api-server", "sglang"],
)
def test_user_eager_on_the_command_line_is_gd131(
    tmp_path: Path, argv: list[str], tail: str, flag: str
) -> None:
    (run,) = _runs(tmp_path, _continued(argv) + "\n" + tail + "\n")
    assert run.record.to_json()["graph_mode"] == "disabled"
    gd131 = [f for f in run.findings if f.code == "GD131"]
    assert gd131 and f"user's own {flag}" in gd131[0].message


@pytest.mark.parametrize("after", [False, True], ids=["command-first", "command-last"])
def test_the_engine_echo_wins_over_the_command_line(tmp_path: Path, after: bool) -> None:
    """The echo is what the engine used: a pasted command that disagrees loses, wherever
    it sits in the paste."""
    command = "vllm serve m --max-num-seqs 64 --enforce-eager"
    echo = VLLM_ECHO.format(args="{'model': 'm', 'max_num_seqs': 8}")
    lines = [echo, VLLM_STATS, command] if after else [command, echo, VLLM_STATS]
    (run,) = _runs(tmp_path, "\n".join(lines) + "\n")
    assert run.facts.config.max_running == 8
    assert not [f for f in run.findings if f.code == "GD131"]


@pytest.mark.parametrize(
    ("flags", "key", "value"),
    [
        (["-O3"], "compilation_config.level", 3),
        (["-O", "3"], "compilation_config.level", 3),
        (["-O=3"], "compilation_config.level", 3),
        (["-O.level=3"], "compilation_config.level", 3),
        (["-O", '{"level": 3}'], "compilation_config.level", 3),
        (["-O.cudagraph_mode=NONE"], "compilation_config.cudagraph_mode", "NONE"),
        (
            ["--compilation-config.cudagraph_mode", "FULL"],
            "compilation_config.cudagraph_mode",
            "FULL",
        ),
        (
            ["--compilation_config", '{"cudagraph_mode": 2}'],
            "compilation_config.cudagraph_mode",
            "FULL",
        ),
        (["--compilation_config.level", "3"], "compilation_config.level", 3),
        (
            ["-O.pass_config.enable_fusion=true"],
            "compilation_config.pass_config",
            {"enable_fusion": True},
        ),
        (["--no-enable-prefix-caching"], "enable_prefix_caching", False),
        (["--max_num_seqs", "16"], "max_num_seqs", 16),
        (["-tp", "2"], "tensor_parallel_size", 2),
        (["--cuda-graph-sizes", "16", "32"], "cuda_graph_sizes", [16, 32]),
    ],
)
def test_vllm_flag_spellings(tmp_path: Path, flags: list[str], key: str, value: Any) -> None:
    """vLLM's FlexibleArgumentParser spellings (vllm==0.11.0:vllm/utils/__init__.py:1848-1967)."""
    cfg = _config(tmp_path, shlex.join(["vllm", "serve", "m", *flags]) + "\n")
    assert cfg[key] == value


def test_compilation_config_sizes_become_the_capture_sizes(tmp_path: Path) -> None:
    cmd = "vllm serve m --compilation-config '{\"cudagraph_capture_sizes\": [8, 1, 2, 4]}'"
    (run,) = _runs(tmp_path, cmd + "\n" + VLLM_STATS + "\n")
    assert run.record.to_json()["graph_capture_sizes"] == [1, 2, 4, 8]


def test_engine_env_prefix_is_kept_other_env_is_not(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "CUDA_VISIBLE_DEVICES=0 VLLM_USE_V1=0 vllm serve m\n")
    assert cfg == {"VLLM_USE_V1": 0, "model": "m"}


@pytest.mark.parametrize(
    "text",
    [
        # the engine's own words about its CLI, a traceback path, the benchmark client
        "ValueError: With `vllm serve`, you should provide the model as a positional argument",
        '  File "/usr/lib/python3/site-packages/vllm/entrypoints/cli/serve.py", line 48, in cmd',
        "vllm bench serve --model m --max-concurrency 8",
        "pip install vllm sglang",
    ],
)
def test_not_a_launch(tmp_path: Path, text: str) -> None:
    assert _config(tmp_path, text + "\n" + VLLM_STATS + "\n") == {}


def test_a_cut_paste_keeps_the_flags_before_the_cut(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "vllm serve m --enforce-eager --chat-template '{{ bos\n")
    assert cfg["enforce_eager"] is True


@pytest.mark.parametrize(
    "text",
    [
        "vllm serve m --enforce-eager --compilation-config " + "[" * 5000,
        "    command: " + "[" * 5000,
        "vllm serve m --enforce-eager -O '" + "{" * 3000 + "'",
    ],
    ids=["deep-flag-value", "deep-yaml", "deep-json"],
)
def test_hostile_nesting_reads_on(tmp_path: Path, text: str) -> None:
    """Thousands of brackets neither raise nor stop the flags around them from counting."""
    cfg = _config(tmp_path, text + "\n" + "vllm serve m --max-num-seqs 4\n")
    assert cfg["max_num_seqs"] == 4


def test_corpus_bench_throughput_command_line() -> None:
    corpus = need_corpus("real-3")
    name = "vllm-21266-bench-throughput-enforce-eager-cmdline.log"
    labels = yaml.safe_load((corpus / "labels.yaml").read_text())["cases"]
    (label,) = [c for c in labels if c["file"] == name]
    (run,) = analyze([str(corpus / name)], generated_at="fixed").runs
    assert (run.record.to_json()["graph_mode"] == "enabled") is label["graph_enabled"]
    assert run.facts.config.graphs_off is True  # --enforce-eager on the command line
