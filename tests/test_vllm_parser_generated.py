"""vLLM parser: generated lines of every era parse back to exactly the values they were
written with."""

from __future__ import annotations

import json
import re
from collections import Counter

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.gen import vllm_logs as g
from tests.vllm_parser_helpers import (
    CAPTURE_KINDS,
    close,
    config,
    first_sizing,
    scan,
    size_count,
    sizing,
)

# ---------------------------------------------------------------- (b) generated round trips
ERA_IDS = list(g.ERAS)


@pytest.mark.parametrize("era", ERA_IDS)
@pytest.mark.parametrize("tp", [1, 2])
def test_startup_round_trip(era: str, tp: int) -> None:
    version = g.ERAS[era]
    lines, truth = g.server_log(version, tp=tp, seed=ERA_IDS.index(era) + 10 * tp, max_num_seqs=128)
    t = scan(lines)
    v = g.ver(version)

    assert set(t["version"]["version"]) == {version}
    assert {"api_server", "args", "engine_config", "ready"} <= set(t["startup"]["marker"])
    assert config(t, "tensor_parallel_size", "engine_config") == tp
    assert config(t, "enforce_eager", "engine_config") is False
    assert config(t, "max_seq_len", "engine_config") == truth.kv.max_model_len
    assert (
        config(t, "pooler_config", "engine_config") is None
    )  # last field, before <=0.6.4's closing ")"
    assert config(t, "served_model_name", "engine_config") == "meta-llama/Llama-3.1-8B-Instruct"
    assert config(t, "max_num_seqs", "args" if v < (0, 9, 0) else "non_default_args") == 128
    if truth.engine == "v1" or v >= (0, 6, 0):
        assert config(t, "max_num_batched_tokens", "log") == truth.max_num_batched_tokens

    # what the config echo says about graphs
    echo_sizes = truth.engine == "v1" or v >= (0, 6, 5)
    if echo_sizes:
        assert (
            config(t, "compilation_config.cudagraph_capture_sizes", "engine_config")
            == truth.capture_sizes
        )
        cs = t["capture_sizes"]
        row = cs[cs["sizes"].notna()].iloc[0]
        assert json.loads(row["sizes"]) == truth.capture_sizes
        assert (row["count"], row["largest"]) == (
            len(truth.capture_sizes),
            max(truth.capture_sizes),
        )
        first_set = (
            truth.sets[0] if truth.engine == "v0" else ("mixed", "PIECEWISE", truth.capture_sizes)
        )
        assert (row["phase"], row["mode"]) == first_set[:2]
    modes = t["graph_mode"]
    config_modes = list(modes[modes["origin"] == "config"]["mode"])
    if truth.cudagraph_mode is not None:
        assert (
            config(t, "compilation_config.cudagraph_mode", "engine_config") == truth.cudagraph_mode
        )
        assert config_modes == [truth.cudagraph_mode]
    elif truth.engine == "v1":
        assert config_modes == ["PIECEWISE"]  # derived from level 3 + use_cudagraph
    else:
        assert config_modes == []
    assert t["graph_disabled"].empty

    # KV sizing
    kv = truth.kv
    if truth.engine == "v0" or (0, 9, 0) <= v < (0, 11, 1):
        assert sizing(t, "gpu_blocks") == [kv.gpu_blocks]
    else:
        assert sizing(t, "gpu_blocks") == []
    if truth.engine == "v1":
        assert sizing(t, "kv_tokens") == [kv.kv_tokens]
        assert sizing(t, "init_engine_s") == [61.5]
    if v >= (0, 6, 3) or truth.engine == "v1":
        assert sizing(t, "max_concurrency") == [kv.max_concurrency]
        assert sizing(t, "max_model_len") == [kv.max_model_len]
    if truth.engine == "v0" and v >= (0, 6, 4) or truth.engine == "v1" and v >= (0, 9, 1):
        assert close(first_sizing(t, "kv_cache_gib"), kv.kv_gib)
    assert set(sizing(t, "weights_gib")) == {kv.weights_gib}

    # capture
    ends = t["capture_end"]
    assert len(ends) == tp
    assert set(ends["time_s"]) == {float(truth.time_s or 0)}
    if truth.mem_gib is None:
        assert ends["mem_gib"].isna().all()
    else:
        assert set(ends["mem_gib"]) == {truth.mem_gib}
    begins = t["capture_begin"]
    if truth.engine == "v0":
        assert list(begins["phase"]) == ["decode"] * tp
        assert set(ends["phase"]) == {"decode"}
    else:
        assert set(begins["phase"]) <= {"all"} and set(ends["phase"]) == {"all"}
        assert len(begins) == (tp if v >= (0, 27, 0) else 1 if v >= (0, 9, 2) else 0)
    prog = t["capture_progress"]
    prints_bars = (truth.engine == "v0" and v >= (0, 6, 6)) or (
        truth.engine == "v1" and v >= (0, 9, 2)
    )
    if prints_bars:
        got = {
            (p, m): int(n) for (p, m), n in prog.groupby(["phase", "mode"])["total"].max().items()
        }
        assert got == {(p, m): len(s) for p, m, s in truth.sets}
        assert (prog["done"] <= prog["total"]).all()
    else:
        assert prog.empty

    # graph-memory profiling (M-1..M-5), >= 0.20
    if v >= (0, 20, 0):
        m1 = cs[cs["sizes"].isna()]
        assert set(zip(m1["mode"], m1["count"], m1["largest"], strict=True)) == set(truth.m1)
        assert set(sizing(t, "graph_mem_est_gib")) == {kv.graph_est_gib}
        assert set(sizing(t, "graph_pool_actual_gib")) == {truth.pool_actual_gib}
        adv = t["advisory"]
        assert set(adv["topic"]) == {"graph_memory_profiling"}
        assert close(
            float(adv["value"].iloc[0]),
            round(kv.utilization + (kv.graph_est_gib or 0) / kv.total_gib, 4),
        )
    assert t["error"].empty


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0", "0.12.0", "0.20.0", "0.33.0"])
def test_enforce_eager_round_trip(version: str) -> None:
    lines, truth = g.server_log(version, enforce_eager=True)
    t = scan(lines)
    assert "enforce_eager" in set(t["graph_disabled"]["reason"])
    assert config(t, "enforce_eager", "engine_config") is True
    assert config(t, "enforce_eager", "non_default_args") is True
    assert config(t, "compilation_config.cudagraph_mode", "engine_config") == "NONE"
    assert list(t["graph_mode"]["mode"]) == ["NONE"]
    for kind in CAPTURE_KINDS:
        assert t[kind].empty, kind


@pytest.mark.parametrize("version", ["0.6.6", "0.10.0", "0.11.0"])
def test_glued_bar(version: str) -> None:
    lines, truth = g.server_log(version, glued=True, tp=2)
    t = scan(lines)
    assert len(t["capture_end"]) == 2  # the line glued after the bar still parses
    assert size_count(t) == len(truth.capture_sizes)


@pytest.mark.parametrize("version", ["0.13.0", "0.20.0", "0.33.0"])
def test_metrics_table_round_trip(version: str) -> None:
    rows = [
        (37, 40, "FULL", 512),
        (2048, 2048, "NONE", 12),
        (300, 304, "PIECEWISE", 7),
        (1, 1, "FULL", 3),
    ]
    sizes = g.default_capture_sizes(version)
    clock = g.Clock()
    lines = [
        g.stats_line(version, gen_tput=1242.7, running=20, waiting=3, kv_usage=57.9, clock=clock)
    ]
    lines += g.metrics_table(
        version, mode="FULL_AND_PIECEWISE", capture_sizes=sizes, rows=rows, clock=clock
    )
    lines.append(
        g.stats_line(version, gen_tput=800.0, running=5, waiting=0, kv_usage=12.0, clock=clock)
    )
    lines += g.metrics_table(
        version, mode="FULL_AND_PIECEWISE", capture_sizes=sizes, rows=rows[:2], clock=clock
    )
    t = scan(lines)
    steps = t["graph_step"]
    assert set(steps["origin"]) == {"metrics_table"}
    got = Counter(
        zip(steps["num_tokens"], steps["padded_tokens"], steps["mode"], steps["count"], strict=True)
    )
    assert got == Counter(rows + rows[:2])
    cs = t["capture_sizes"]
    assert list(cs["phase"]) == ["metrics"] and json.loads(cs["sizes"].iloc[0]) == sizes
    assert list(t["graph_mode"]["origin"]) == ["metrics"]
    assert len(t["stats"]) == 2  # the stats line after a table is not swallowed by it


def test_metrics_table_interleaved_and_orphan() -> None:
    version = "0.13.0"
    table = g.metrics_table(
        version, mode="PIECEWISE", capture_sizes=[1, 2, 4], rows=[(3, 4, "PIECEWISE", 9)]
    )
    other = g.log(
        version,
        "INFO",
        "gpu_worker.py",
        1,
        "Available KV cache memory: 1.00 GiB",
        process="Worker_TP1 pid=7",
    )
    t = scan(
        table[:3] + [other] + table[3:]
    )  # another process between "- Mode:" and "- Capture sizes:"
    assert list(t["graph_step"]["count"]) == [9] and sizing(t, "kv_cache_gib") == [1.0]
    assert list(zip(t["capture_sizes"]["mode"], t["capture_sizes"]["count"], strict=True)) == [
        ("PIECEWISE", 3)
    ]
    orphan = g.log(
        version,
        "INFO",
        "cuda_graph.py",
        108,
        "| 17              | 24            | 7            | FULL         | 5     |",
    )
    t = scan([orphan])
    assert list(
        zip(t["graph_step"]["num_tokens"], t["graph_step"]["padded_tokens"], strict=True)
    ) == [(17, 24)]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 8192),
            st.integers(0, 64),
            st.sampled_from(["FULL", "PIECEWISE", "NONE"]),
            st.integers(1, 10**6),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_metrics_rows_property(raw: list[tuple[int, int, str, int]]) -> None:
    rows = [(u, u + pad, m, c) for u, pad, m, c in raw]
    t = scan(g.metrics_table("0.33.0", mode="FULL", capture_sizes=[1, 8], rows=rows))
    steps = t["graph_step"]
    assert Counter(
        zip(steps["num_tokens"], steps["padded_tokens"], steps["mode"], steps["count"], strict=True)
    ) == Counter(rows)


@pytest.mark.parametrize("version", ["0.12.0", "0.13.0", "0.33.0"])
def test_debug_steps(version: str) -> None:
    steps = [("NONE", 2048, None, False), ("FULL", 40, 40, True), ("PIECEWISE", 304, None, False)]
    t = scan(
        [
            g.debug_step(version, mode=m, num_tokens=n, num_reqs=r, uniform=u, tp=2, rank=1)
            for m, n, r, u in steps
        ]
    )
    f = t["graph_step"]
    assert list(f["mode"]) == ["NONE", "FULL", "PIECEWISE"]
    assert list(f["padded_tokens"]) == [2048, 40, 304]
    assert f["num_tokens"].iloc[0] == 2048 and f["num_tokens"].iloc[1:].isna().all()
    assert f["num_reqs"].iloc[1] == 40 and f["num_reqs"].iloc[[0, 2]].isna().all()
    assert list(f["uniform"]) == [False, True, False] and set(f["count"]) == {1}
    assert set(f["origin"]) == {"debug_step"} and set(f["rank"]) == {"TP1"}


@pytest.mark.parametrize("era", ERA_IDS)
def test_stats_round_trip(era: str) -> None:
    version = g.ERAS[era]
    t = scan(
        [
            g.stats_line(
                version,
                prompt_tput=1254.4,
                gen_tput=29.2,
                running=10,
                waiting=4,
                swapped=1,
                kv_usage=57.9,
                prefix_hit=40.5,
                preemptions=3,
                engine_index=2,
            )
        ]
    )
    row = t["stats"].iloc[0]
    v0 = g.engine_of(version) == "v0"
    assert (row["prompt_throughput"], row["gen_throughput"]) == (1254.4, 29.2)
    assert (row["running"], row["waiting"], row["kv_usage"]) == (10, 4, 57.9)
    assert (row["swapped"] == 1) if v0 else pd.isna(row["swapped"])
    has_idx = not v0 and g.ver(version) >= (0, 8, 3)
    assert (row["engine_index"] == 2) if has_idx else pd.isna(row["engine_index"])
    has_pre = not v0 and g.ver(version) >= (0, 11, 1)
    assert (row["preemptions"] == 3) if has_pre else pd.isna(row["preemptions"])


@pytest.mark.parametrize("version", ["0.5.4", "0.9.1", "0.11.0", "0.13.0"])
def test_requests(version: str) -> None:
    t = scan(g.request(version, "chatcmpl-7f3a", prompt_tokens=17, max_tokens=256))
    f = t["request"]
    v0 = g.engine_of(version) == "v0"
    assert list(f["action"]) == ["received", "added"] + (["finished"] if v0 else [])
    assert set(f["request_id"]) == {"chatcmpl-7f3a"}
    rec = f.iloc[0]
    assert rec["max_new_tokens"] == 256
    assert (
        (rec["prompt_tokens"] == 17)
        if g.ver(version) < (0, 12, 0)
        else pd.isna(rec["prompt_tokens"])
    )


@pytest.mark.parametrize("version", ["0.6.6", "0.11.0", "0.33.0"])
def test_capture_oom_is_one_capture_error(version: str) -> None:
    lines, _ = g.server_log(version, tp=2)
    cut = next(i for i, line in enumerate(lines) if "Graph capturing finished" in line)
    t = scan(lines[:cut] + g.capture_oom(version, rank=1, tp=2))
    errors = t["error"]
    assert len(errors) == 1
    assert errors["error_class"].iloc[0] == "oom" and bool(errors["capture_related"].iloc[0])
    assert not t["capture_begin"].empty and t["capture_end"].empty


def test_downgrade_and_disabled_lines() -> None:
    version = "0.11.0"
    t = scan([g.downgrade(version, to="PIECEWISE", tp=2, rank=1), g.downgrade(version, to="NONE")])
    f = t["graph_mode"]
    assert (
        list(f["mode"]) == ["PIECEWISE", "NONE"]
        and f["downgraded"].all()
        and set(f["origin"]) == {"downgrade"}
    )
    msgs = {
        "Skipping CUDA graph capture. To turn on CUDA graph capture, ensure `cudagraph_mode` was not manually set to `NONE`": "skipping_capture",
        "CUDA graph is not supported on BitsAndBytes 8bit yet, fallback to the eager mode.": "bitsandbytes",
        "CUDA graph is not supported for gfx90a on ROCm yet, fallback to eager mode.": "rocm_unsupported",
        "cudagraph dispatching keys are not initialized. No cudagraph will be used.": "dispatch_keys_uninitialized",
        "Enforce eager set, overriding optimization level to -O0": "enforce_eager",
        "DeepEP: Disabling CUDA Graphs since DeepEP high-throughput kernels are optimized for prefill": "deepep",
    }
    t = scan([g.log(version, "WARNING", "x.py", 1, m) for m in msgs])
    assert list(t["graph_disabled"]["reason"]) == list(msgs.values())
    more = [
        "Pooling models do not support full cudagraphs. Overriding cudagraph_mode to PIECEWISE.",
        "Encoder-decoder models do not support FULL_AND_PIECEWISE. Overriding cudagraph_mode to FULL_DECODE_ONLY.",
        "Cudagraph mode FULL is not compatible with compilation mode 0. Overriding to NONE.",
        "Capping cudagraph capture sizes from max 512 to 128 to fit Mamba cache blocks (300 blocks available).",
        "Truncating max_cudagraph_capture_size to 496",
        "cudagraph_capture_sizes specified in compilation_config [1, 2, 4096] is overridden by config [1, 2, 2048]",
        "In v0.19, CUDA graph memory profiling will be enabled by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), "
        "which more accurately accounts for CUDA graph memory during KV cache allocation. To try it now, set "
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase --gpu-memory-utilization from 0.7000 to 0.7021 to "
        "maintain the same effective KV cache size.",
    ]
    t = scan([g.log("0.19.0", "WARNING", "x.py", 1, m) for m in more])
    assert list(t["graph_mode"]["mode"]) == ["PIECEWISE", "FULL_DECODE_ONLY", "NONE"]
    adv = t["advisory"]
    assert list(zip(adv["topic"], adv["value"], strict=True)) == [
        ("capping_capture_sizes", 128.0),
        ("truncating_capture_size", 496.0),
        ("sizes_overridden", 2048.0),
        ("graph_memory_profiling", 0.7021),
    ]


def test_vllm_only_errors_not_duplicated() -> None:
    v = "0.11.0"
    warm = (
        "CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try lowering "
        "`max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
    )
    nokv = "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
    t = scan(
        [
            g.log(v, "WARNING", "gpu_model_runner.py", 1, warm),
            g.log(v, "WARNING", "kv_cache_utils.py", 1, nokv),
        ]
    )
    f = t["error"]
    assert list(zip(f["error_class"], f["capture_related"], strict=True)) == [
        ("oom", True),
        ("oom", False),
    ]
    # ERROR-level OOM text is ErrorParser's: exactly one event, not two
    t = scan([g.log(v, "ERROR", "core.py", 1, warm), g.log(v, "ERROR", "core.py", 2, nokv)])
    assert len(t["error"]) == 2


def test_benign_look_alikes() -> None:
    lines = [
        'Capturing CUDA graph shapes:   0%|          | 0/1 [00:00<?, ?it/s]loc("/x/triton_decode_attention.py":308:16): '
        "error: operation scheduled before its operands",
        "2025-11-04T12:25:41.391681Z  INFO dynamo_llm::block_manager::distributed::worker: Initializing KvbmWorker "
        "with params: num_device_blocks=8297, page_size=16, dtype_width_bytes=2",
        g.log("0.11.0", "INFO", "x.py", 1, "Using TRITON Fp8 MoE backend"),
        g.log("0.11.0", "INFO", "x.py", 1, "Loading weights took 0.56 seconds"),
    ]
    t = scan(lines)
    assert t["error"].empty and t["sizing"].empty and t["config"].empty


def test_headerless_messages_parse() -> None:
    """A paste of message bodies (prefixes stripped) gives the same KV and capture figures."""
    lines, truth = g.server_log("0.20.0", seed=3)
    header = re.compile(
        r"^(?:\([^)]*\) )?(?:INFO|DEBUG|WARNING) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\] "
    )
    t = scan([header.sub("", line) for line in lines])
    assert sizing(t, "kv_tokens") == [truth.kv.kv_tokens]
    assert sizing(t, "graph_mem_est_gib")[0] == truth.kv.graph_est_gib
    assert list(t["capture_end"]["time_s"]) == [float(truth.time_s or 0)]
    assert (
        config(t, "compilation_config.cudagraph_capture_sizes", "engine_config")
        == truth.capture_sizes
    )


def test_misc_lines() -> None:
    def at(version: str, msg: str, level: str = "INFO") -> str:
        return g.log(version, level, "x.py", 1, msg)

    t = scan(
        [
            at(
                "0.6.3",
                "Sequence group 123 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV "
                "cache space. total_num_cumulative_preemption=1",
                "WARNING",
            ),
            at(
                "0.10.2",
                "Free memory on device (78.5/79.19 GiB) on startup. Desired GPU memory utilization is (0.9, 71.27 "
                "GiB). Actual usage is 14.99 GiB for weight, 4.36 GiB for peak activation, 0.19 GiB for non-torch "
                "memory, and 0.53 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
                "`--kv-cache-memory=52428800000` to fit into requested memory.",
            ),
            at(
                "0.11.0",
                "Initial free memory 78.50 GiB, reserved 20.00 GiB memory for KV Cache as specified by "
                "kv_cache_memory_bytes config and skipped memory profiling.",
            ),
            at(
                "0.13.0",
                "2 Engines Aggregated: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1242.7 "
                "tokens/s, Running: 20 reqs, Waiting: 23 reqs, Preemptions: 4, GPU KV cache usage: 98.4%, Prefix "
                "cache hit rate: 0.0%",
            ),
            at("0.13.0", "Aborted request(s) cmpl-1,cmpl-2."),
            at(
                "0.13.0",
                "Generated response chatcmpl-9 (streaming complete): output: 'hi', output_token_ids: [1], "
                "finish_reason: stop",
            ),
            at(
                "0.11.0",
                "Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN']",
            ),
            at(
                "0.13.0",
                "Setting max_num_seqs to 1024 for OPENAI_API_SERVER usage context.",
                "DEBUG",
            ),
            at(
                "0.13.0",
                "Capturing a cudagraph on (FULL,BatchDescriptor(num_tokens=32, num_reqs=32, uniform=True, "
                "has_lora=False))",
                "DEBUG",
            ),
            at(
                "0.20.0",
                "CG Capture: mode=PIECEWISE, batch_desc=BatchDescriptor(num_tokens=512, num_reqs=None, "
                "uniform=False, has_lora=False)",
                "DEBUG",
            ),
            at(
                "0.33.0",
                "Capturing CUDA graphs (FULL): 100%|██████████| 35/35 [00:02<00:00, 14.2it/s]",
            ),
            at("0.15.0", " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.15.0rc3"),
        ]
    )
    assert list(t["retract"]["count"]) == [1]
    assert sizing(t, "graph_mem_actual_gib") == [0.53] and sizing(t, "total_gpu_memory_gib") == [
        79.19
    ]
    assert sizing(t, "weights_gib") == [14.99] and sizing(t, "kv_cache_gib") == [20.0]
    st_ = t["stats"].iloc[0]
    assert (st_["running"], st_["waiting"], st_["preemptions"], st_["kv_usage"]) == (
        20,
        23,
        4,
        98.4,
    )
    assert pd.isna(st_["engine_index"])
    req = t["request"]
    assert list(zip(req["request_id"], req["action"], strict=True)) == [
        ("cmpl-1", "aborted"),
        ("cmpl-2", "aborted"),
        ("chatcmpl-9", "response"),
    ]
    assert (
        config(t, "attention_backend", "log") == "FLASH_ATTN"
        and config(t, "max_num_seqs", "log") == 1024
    )
    prog = t["capture_progress"]
    assert list(zip(prog["phase"], prog["mode"], prog["size"].fillna(-1), strict=True)) == [
        ("decode", "FULL", 32),
        ("mixed", "PIECEWISE", 512),
        ("decode", "FULL", -1),
    ]
    assert list(t["version"]["version"]) == ["0.15.0rc3"]
