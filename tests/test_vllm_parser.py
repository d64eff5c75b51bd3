"""vLLM parser: the real excerpts give what their labels state, and unit checks.

The generated round trips (every era parses back to the values it was written with) are in
``tests/test_vllm_parser_generated.py``."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd
import pytest
import yaml

from diag.parsers.vllm import mode_name, parse_config_echo, parse_metrics_table
from fixtures.gen import vllm_logs as g
from tests.conftest import CORPUS, need_corpus
from tests.vllm_parser_helpers import (
    CAPTURE_KINDS,
    close,
    config,
    first_sizing,
    rank0,
    scan,
    scan_file,
    size_count,
    sizing,
)


# ---------------------------------------------------------------- (a) the real corpus
def _labels() -> dict[str, dict[str, Any]]:
    path = CORPUS / "real" / "labels.yaml"
    if not path.is_file():
        return {}
    cases = yaml.safe_load(path.read_text(encoding="utf-8"))["cases"]
    return {c["file"]: c for c in cases if c.get("backend") == "vllm"}


LABELS = _labels()
ERROR_CLASSES = ("oom", "stream_capture_invalid", "unsupported_op", "distributed", "other")


@pytest.mark.corpus
@pytest.mark.parametrize("name", sorted(LABELS) or ["(corpus absent)"])
def test_corpus_labels(name: str) -> None:
    real = need_corpus("real")
    if name not in LABELS:
        pytest.skip("no vLLM labels")
    label = LABELS[name]
    t = scan_file(real / name)

    # KV figures: present exactly when the label shows them
    for key, ev in (("gpu_blocks", "gpu_blocks"), ("kv_tokens", "kv_tokens")):
        got = first_sizing(t, ev)
        assert got == (None if label.get(key) is None else float(label[key])), (key, got)
    if label.get("max_concurrency"):
        m = re.match(r"([\d.]+)x for ([\d,]+) tokens", label["max_concurrency"])
        assert m
        assert close(first_sizing(t, "max_concurrency"), float(m.group(1)))
        assert close(first_sizing(t, "max_model_len"), float(m.group(2).replace(",", "")))
    if label.get("available_kv_cache_gib") is not None:
        assert close(first_sizing(t, "kv_cache_gib"), float(label["available_kv_cache_gib"]))
    if label.get("estimated_cudagraph_mem_gib") is not None:
        assert close(
            first_sizing(t, "graph_mem_est_gib"), float(label["estimated_cudagraph_mem_gib"])
        )

    # capture result
    ends = rank0(t["capture_end"])
    if label.get("capture_time_s") is not None:
        assert float(ends["time_s"].iloc[0]) == float(label["capture_time_s"])
        assert close(float(ends["mem_gib"].iloc[0]), float(label["capture_mem_gib"]))
    else:
        assert ends.empty
    if label.get("capture_sizes_count") is not None:
        assert size_count(t) == label["capture_sizes_count"]
    if label.get("full_capture_sizes_count") is not None:
        cs = t["capture_sizes"]
        assert list(cs[cs["mode"] == "FULL"]["count"]) == [label["full_capture_sizes_count"]]
    if label.get("cuda_graph_max_bs") is not None:
        assert int(t["capture_sizes"]["largest"].max()) == label["cuda_graph_max_bs"]

    # graph on / off
    captured = any(not t[k].empty for k in CAPTURE_KINDS)
    errors = t["error"]
    if label["graph_enabled"] is False:
        assert not t["graph_disabled"].empty and not captured
    elif label["graph_enabled"] is True:
        assert captured or bool((errors["capture_related"] == True).any())  # noqa: E712
        assert t["graph_disabled"].empty
    else:
        assert t["graph_disabled"].empty and not captured

    # errors: the labelled class, or none at all (benign Triton/MLIR lines, dynamo tracing)
    if label.get("capture_error"):
        cls = next(c for c in ERROR_CLASSES if str(label["capture_error"]).startswith(c))
        assert cls in set(errors["error_class"]), list(errors["error_class"])
    else:
        assert errors.empty, errors[["line", "message"]].to_string()


@pytest.mark.corpus
def test_corpus_specifics() -> None:
    real = need_corpus("real")
    # M-1 per mode; the profiling-time override is not the final pool
    t = scan_file(real / "vllm-pr39559-profiling-cg-mem-piecewise-full.log")
    cs = t["capture_sizes"]
    assert sorted(zip(cs["mode"], cs["phase"], cs["count"], cs["largest"], strict=True)) == [
        ("FULL", "decode", 35, 256),
        ("PIECEWISE", "mixed", 51, 512),
    ]
    assert cs["sizes"].isna().all()
    assert sizing(t, "num_gpu_blocks_override") == [512.0] and sizing(t, "gpu_blocks") == []
    # pool actual vs estimate, init engine with compilation time, FULL decode from tqdm
    t = scan_file(real / "vllm-club3090-158-full-1size-pool-mem.log")
    assert sizing(t, "graph_pool_actual_gib") == [0.04, 0.04]
    assert sizing(t, "init_engine_s") == [147.31] and sizing(t, "compilation_s") == [79.95]
    assert list(t["graph_mode"]["mode"]) == ["FULL"] and list(t["graph_mode"]["origin"]) == ["tqdm"]
    assert list(t["startup"]["marker"]) == ["init_engine_done"]
    # per-stage eager line
    t = scan_file(real / "vllm-omni1160-stage-tag-eager-kv.log")
    assert list(t["graph_disabled"]["reason"]) == ["enforce_eager"]
    assert sizing(t, "init_engine_s") == [2.6]
    # both capture sets of a FULL_AND_PIECEWISE start-up, through mojibake and caret escapes
    t = scan_file(real / "vllm-pr33756-mojibake-ansi-caret-tqdm.log")
    prog = t["capture_progress"]
    assert set(zip(prog["phase"], prog["mode"], prog["total"], strict=True)) == {
        ("mixed", "PIECEWISE", 83),
        ("decode", "FULL", 83),
    }
    assert int(prog[prog["mode"] == "FULL"]["done"].max()) == 14
    assert len(t["capture_begin"]) == 1
    # DEBUG per-shape lines glued after bars
    t = scan_file(real / "vllm-23739-debug-piecewise-shapes.log")
    shapes = t["capture_progress"]["size"].dropna().astype(int).tolist()
    assert shapes == [24, 16, 8, 4, 2, 1]
    # message bodies without any header
    t = scan_file(real / "vllm-startup-profile-prefix-stripped.log")
    assert sizing(t, "init_engine_s") == [70.62] and sizing(t, "compilation_s") == [42.18]
    assert sizing(t, "weights_gib") == [55.22]
    assert config(t, "attention_backend", "log") == "FLASHINFER"
    # V0 three-line memory profile
    t = scan_file(real / "vllm-11251-v064-gpu-blocks-capture.log")
    assert sizing(t, "kv_cache_gib") == [3.76] and sizing(t, "total_gpu_memory_gib") == [15.77]
    assert sizing(t, "activation_peak_gib") == [2.53] and sizing(t, "gpu_memory_utilization") == [
        0.9
    ]
    assert list(t["capture_begin"]["phase"]) == ["decode"]


# ---------------------------------------------------------------- units
@pytest.mark.parametrize(
    "value,name",
    [
        (0, "NONE"),
        (1, "PIECEWISE"),
        (2, "FULL"),
        ([2, 0], "FULL_DECODE_ONLY"),
        ([2, 1], "FULL_AND_PIECEWISE"),
        ((2, 1), "FULL_AND_PIECEWISE"),
        ("FULL_DECODE_ONLY", "FULL_DECODE_ONLY"),
        ("CUDAGraphMode.FULL", "FULL"),
        ("<CUDAGraphMode.PIECEWISE: 1>", "PIECEWISE"),
        ("full_and_piecewise", "FULL_AND_PIECEWISE"),
        (True, None),
        ("bogus", None),
    ],
)
def test_mode_name(value: Any, name: str | None) -> None:
    assert mode_name(value) == name


def test_config_echo_cut_and_unquoted() -> None:
    text = (
        "model='m', served_model_name=Qwen/Qwen3-0.6B, enforce_eager=False, compilation_config={'mode': 3, "
        "'cudagraph_mode': <CUDAGraphMode.FULL_DECODE_ONLY: (2, 0)>, 'cudagraph_capture_sizes': [1, 2, 4, 8, 16"
    )
    cfg = parse_config_echo(text)
    assert cfg["served_model_name"] == "Qwen/Qwen3-0.6B" and cfg["enforce_eager"] is False
    cc = cfg["compilation_config"]
    assert cc["mode"] == 3 and cc["cudagraph_mode"] == "FULL_DECODE_ONLY"
    assert cc["cudagraph_capture_sizes"] == [1, 2, 4, 8, 16]


def test_metrics_grammar_rejects_garbage_line_only() -> None:
    items = parse_metrics_table(
        ["- Mode: FULL", "| 3 | 4 | 1 | FULL | 2 |", "garbage ((", "| 5 | 8 | 3 | NONE | 1 |"]
    )
    rows = [i.values for i in items if i.kind == "row"]
    assert rows == [[3, 4, 1, "FULL", 2], [5, 8, 3, "NONE", 1]]


def test_parser_keeps_no_state_between_streams() -> None:
    """Two scanners over the same log give the same events, whatever the first one read
    before: per-stream state lives in the scanner's context, not in the parser class."""
    lines, _ = g.server_log("0.20.0", tp=2, seed=7)
    other, _ = g.server_log("0.10.2", enforce_eager=True, seed=3)
    fresh = scan(lines)
    scan(other)  # a different era and mode first
    again = scan(lines)
    for name in ("capture_sizes", "graph_mode", "capture_end", "stats"):
        pd.testing.assert_frame_equal(fresh[name], again[name], obj=name)
    assert len(fresh["capture_end"]) > 0 and len(fresh["graph_mode"]) > 0
