"""EngineConfig is the one reading of a run's config: no module outside diag/engines and
diag/parsers indexes a raw config key, and the reading itself follows the engines' spellings."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from diag.engines import ENGINES, SETTINGS_KEYS, WINDOW_KEYS, ConfigEcho, read_config
from tests.conftest import ROOT

ENGINE_DIRS = ("diag/engines", "diag/parsers")


def _engine_modules() -> list[Path]:
    """The modules that read a run's config: the spec shape and each engine's spec."""
    return [ROOT / "diag" / "engines" / f"{m}.py" for m in ("spec", "config", "vllm", "sglang")]


def _config_keys() -> frozenset[str]:
    """Every raw key the engine specs read: the literal keys of their ``.get(...)`` reads and
    subscripts, their key constants, and the spec fields that name keys."""
    keys: set[str] = set(WINDOW_KEYS | SETTINGS_KEYS)
    for spec in ENGINES.values():
        keys |= {spec.graphs_off_key, spec.capture_sizes_key, *spec.ceiling_keys}
        keys |= {spec.padding_off_key} if spec.padding_off_key else set()
    for path in _engine_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id
                in ("c", "config")  # (the raw values, as the specs name them)
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                keys.add(node.args[0].value)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if any(isinstance(t, ast.Name) and t.id.endswith("_KEY") for t in node.targets):
                    if isinstance(node.value.value, str):
                        keys.add(node.value.value)
    return frozenset(keys)


KEYS = _config_keys()


def raw_key_reads(source: str, keys: frozenset[str]) -> list[tuple[int, str]]:
    """(line, key) of every place ``source`` reads a config key by its string: ``x["key"]``,
    ``x.get("key")``, ``... == "key"``, or ``.isin([... "key" ...])``."""
    out: list[tuple[int, str]] = []

    def hit(node: ast.AST) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in keys:
            out.append((node.lineno, node.value))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript):
            hit(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "get" and node.args:
                hit(node.args[0])
            if node.func.attr == "isin" and node.args:
                arg = node.args[0]
                for elt in arg.elts if isinstance(arg, ast.List | ast.Tuple | ast.Set) else [arg]:
                    hit(elt)
        elif isinstance(node, ast.Compare) and all(
            isinstance(op, ast.Eq | ast.NotEq) for op in node.ops
        ):
            for operand in (node.left, *node.comparators):
                hit(operand)
    return out


def test_the_engine_specs_name_the_keys_this_test_looks_for() -> None:
    # the keys of both engines' echoes that rules once read themselves
    assert {
        "max_num_seqs",
        "max_running_requests",
        "disable_cuda_graph_padding",
        "enable_torch_compile",
        "mem_fraction_static",
        "enable_dp_attention",
        "tp_size",
        "compilation_config.cudagraph_mode",
        "enforce_eager",
        "kv_cache_memory_bytes",
        "enable_profile_cuda_graph",
    } <= KEYS


@pytest.mark.parametrize(
    "snippet",
    [
        'cfg.get("max_num_seqs")',
        'facts.config["enable_torch_compile"]',
        'rows = cfg[cfg["key"] == "compilation_config.cudagraph_mode"]',
        'cfg[cfg["key"].isin(["disable_cuda_graph", "x"])]',
    ],
)
def test_the_check_finds_a_raw_read(snippet: str) -> None:
    assert raw_key_reads(snippet, KEYS)


def test_no_module_outside_engines_and_parsers_reads_a_raw_config_key() -> None:
    found = []
    for path in sorted((ROOT / "diag").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(ENGINE_DIRS):
            continue
        found += [f"{rel}:{line} {key}" for line, key in raw_key_reads(path.read_text(), KEYS)]
    assert not found, "read these through EngineConfig (diag.engines): " + ", ".join(found)


# ------------------------------------------------------------------ the reading itself
def _read(backend: str, values: dict[str, object], typed: dict[str, object] | None = None):  # type: ignore[no-untyped-def]
    return read_config(backend, ConfigEcho(values, typed or {}, typed or {}), "0.5.4")


@pytest.mark.parametrize("spell", [True, "true", "True"])
def test_a_boolean_reads_the_same_in_every_spelling_an_echo_uses(spell: object) -> None:
    cfg = _read(
        "sglang",
        {
            "disable_cuda_graph_padding": spell,
            "enable_dp_attention": spell,
            "enable_torch_compile": spell,
            "tp_size": 8,
            "dp_size": 4,
        },
    )
    assert cfg.padding is False and cfg.dp_attention and cfg.torch_compile
    assert cfg.attn_tp == 2  # tp // dp under DP attention


def test_an_echo_without_the_keys_reads_the_engine_defaults() -> None:
    empty = _read("sglang", {})
    assert empty.padding and not empty.dp_attention and empty.attn_tp == 1
    assert empty.max_running is None and empty.graphs_off is None
    assert empty.steps_per_batch_line == 40  # --decode-log-interval default
    assert _read("vllm", {}).stats_interval_s == 10.0  # VLLM_LOG_STATS_INTERVAL default


def test_each_engine_reads_its_own_spelling_of_a_setting() -> None:
    assert _read("sglang", {"disable_cuda_graph": True}).graphs_off is True
    assert _read("sglang", {"enforce_eager": True}).graphs_off is None
    assert _read("vllm", {"enforce_eager": True}).graphs_off is True
    assert _read("vllm", {"max_num_seqs": 64}).max_running == 64
    assert _read("sglang", {"max_running_requests": 48}).max_running == 48
    vllm = _read("vllm", {"compilation_config.max_cudagraph_capture_size": 512})
    assert vllm.ceiling == 512 and vllm.ceiling_named
    assert _read("sglang", {"cuda_graph_max_bs": 160}).ceiling == 160
    # an engine graphdiag does not know: no graphs switch, no advice rules
    unknown = _read("unknown", {"enforce_eager": True, "max_num_seqs": 8})
    assert unknown.graphs_off is None and unknown.advice_rules is None
    assert unknown.max_running == 8


def test_the_user_own_eager_setting_comes_from_the_typed_args_only() -> None:
    typed = {"enforce_eager": "true"}
    assert _read("vllm", {}, typed).typed_eager == "--enforce-eager"
    assert _read("vllm", typed).typed_eager is None  # only echoed: not what the user typed
    none = {"compilation_config.cudagraph_mode": "CUDAGraphMode.NONE"}
    assert _read("vllm", {}, none).typed_eager == "cudagraph_mode=NONE"
    assert _read("vllm", {}, none).user_mode_none is True
    assert _read("vllm", {}).user_mode_none is None


def test_the_advice_limits_carry_every_config_field() -> None:
    """EngineLimits is the config plus the run's current set: no field copied by hand."""
    from diag.advise.limits import EngineLimits
    from diag.engines import EngineConfig

    names = {f.name for f in fields(EngineLimits)}
    assert {f.name for f in fields(EngineConfig)} <= names
    assert names - {f.name for f in fields(EngineConfig)} == {
        "current_sizes",
        "current_source",
        "default_sizes",
    }
