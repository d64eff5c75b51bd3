"""The periodic lines of the engines, each declared once, as data (``LINES``).

The items and what is derived from a declaration (the per-line matcher, the RE2 pattern, the
C op table) are in ``diag.lines.spec``; rewording a line or adding a field is one edit
here (a new column also needs its event kind in ``diag.events``).
"""

from __future__ import annotations

from diag.lines.spec import (
    Alt,
    Bound,
    Field,
    Find,
    Item,
    LineSpec,
    Lit,
    OneOf,
    Opt,
    Pad,
    Skip,
    Tail,
    seq,
)

__all__ = [
    "LINES",
    "Alt",
    "Bound",
    "Field",
    "Find",
    "Item",
    "LineSpec",
    "Lit",
    "OneOf",
    "Opt",
    "Pad",
    "Skip",
    "Tail",
    "seq",
]

# ---------------------------------------------------------------- the declarations
_DEV = "{cuda|cpu|npu|musa|xpu|device}"

SG_DECODE = LineSpec(
    "sglang.decode",
    "sglang",
    "decode_batch",
    seq(
        # " [N]" with SGLANG_LOG_FORWARD_ITERS (sglang==0.5.5:srt/managers/
        # scheduler_metrics_mixin.py:265-266)
        "Decode batch",
        Opt(seq(" [{_:int}]")),
        "{.|,} #running-req: {batch_size:int}, ",
        Alt(
            (
                seq("#token: {tokens:int}, token usage: {token_usage:unum}, "),
                # hierarchical sparse attention (PR 22331): no "#token:"; the per-line field
                # search reads the first "token usage: ", the GPU's
                seq(
                    "#gpu-token: {_:int}, gpu token usage: {token_usage:unum}, "
                    "#cpu-token: {_:int}, cpu token usage: {_:unum}, "
                ),
                # sliding-window and mamba-hybrid models: the first "token usage:" is the full
                # pool's (the "#swa token:" count is not on every era's line: sglang issue
                # 26248; mamba: sglang==0.5.5:srt/managers/scheduler_metrics_mixin.py:249-254)
                seq(
                    "#full token: {_:int}, full token usage: {token_usage:unum}, ",
                    Alt(
                        (
                            seq("#swa token: {_:int}, swa token usage: {_:unum}, "),
                            seq("swa token usage: {_:unum}, "),
                            seq("mamba num: {_:int}, mamba usage: {_:unum}, "),
                        )
                    ),
                ),
            )
        ),
        Opt(seq("accept len: {accept_len:num}, ", Opt(seq("accept rate: {_:unum}, ")))),
        Opt(seq("pre-allocated usage: {_:unum}, ")),
        # PD decode queues (sglang==0.5.5:srt/managers/scheduler_metrics_mixin.py:290-293)
        Opt(seq("#prealloc-req: {_:int}, #transfer-req: {_:int}, ")),
        Opt(seq("#retracted-req: {_:int}, ")),
        Opt(seq(_DEV + " graph: {cuda_graph:bool}, ")),
        "gen throughput (token/s): {gen_throughput:num}",
        # a line without its queue count (the hybrid-SWA line of sglang issue 26248 ends at
        # the throughput) still gives the fields it holds
        Opt(seq(", #queue-req: {queue:int}")),
        Opt(seq(", #cache_miss: {_:int}")),  # the JAX backend
        Tail(comma=True),
    ),
)
SG_PREFILL = LineSpec(
    "sglang.prefill",
    "sglang",
    "prefill_batch",
    seq(
        # " [N]" with SGLANG_LOG_FORWARD_ITERS (P11, sglang==0.5.5:srt/managers/
        # scheduler_metrics_mixin.py:135-138)
        "Prefill batch",
        Opt(seq(" [{_:int}]")),
        "{.|,} #new-seq: {new_seq:int}, #new-token: {new_tokens:int}, "
        "#cached-token: {cached_tokens:int}, ",
        Opt(seq("cache hit rate: {_:unum}%, ")),  # early 2025
        Alt(
            (
                seq("token usage: {_:unum}, "),
                seq(
                    "full token usage: {_:unum}, ",
                    Alt((seq("swa token usage: {_:unum}, "), seq("mamba usage: {_:unum}, "))),
                ),
            )
        ),
        Alt(
            (
                # P6 PD prefill puts its bootstrap queue between (formats P6)
                seq(
                    "#running-req: {running:int}, ",
                    Opt(seq("#unbootstrapped-req: {_:int}, ")),
                    "#queue-req: {queue:int}",
                ),
                # PD prefill P7-P9 prints no running count (sglang==0.5.2:srt/managers/
                # scheduler_metrics_mixin.py:121-125)
                seq("#unbootstrapped-req: {_:int}, #queue-req: {queue:int}"),
            )
        ),
        Opt(seq(", #transferring-req: {_:int}")),  # PD P6-P9
        # PD P10- (sglang==0.5.5:srt/managers/scheduler_metrics_mixin.py:146-149)
        Opt(seq(", #prealloc-req: {_:int}, #inflight-req: {_:int}")),
        Opt(seq(", #pending-token: {_:int}")),
        Opt(
            (
                Alt(
                    (
                        seq(
                            ", input throughput (token/s): {input_throughput:num}",
                            Opt(seq(", " + _DEV + " graph: {cuda_graph:bool}")),
                        ),
                        seq(
                            ", " + _DEV + " graph: {cuda_graph:bool}, "
                            "input throughput (token/s): {input_throughput:num}"
                        ),
                    )
                ),
            )
        ),
        Tail(comma=True),
    ),
)
VL_STEP = LineSpec(
    "vllm.step",
    "vllm",
    "graph_step",
    seq(
        "Running batch with cudagraph_mode: ",
        Opt(seq("CUDAGraphMode.")),
        "{mode:upper}, batch_descriptor: BatchDescriptor(num_tokens={padded_tokens:int}, num_reqs=",
        Alt((seq("{num_reqs:int}"), seq("None"))),
        ", uniform",
        Opt(seq("_decode")),
        "={uniform:bool}",
        Opt(seq(", has_lora={_:bool}")),
        Opt(seq(", num_active_loras={_:int}")),  # vllm/forward_context.py:50 (0.33.0)
        ")",
        Opt(seq(", should_ubatch: {_:bool}, num_tokens_across_dp: None")),
        Tail(),
    ),
)
VL_STATS = LineSpec(
    "vllm.stats",
    "vllm",
    "stats",
    seq(
        Opt(seq("Engine {engine_index:int}: ")),
        "Avg prompt throughput: {prompt_throughput:num} tokens/s, "
        "Avg generation throughput: {gen_throughput:num} tokens/s, Running: {running:int} reqs, ",
        Opt(seq("Swapped: {swapped:int} reqs, ")),  # V0 (engine/metrics.py)
        "{Waiting|Pending}: {waiting:int} reqs, GPU KV cache usage: {kv_usage:num}%",
        Opt(seq(", CPU KV cache usage: {_:num}%")),
        Opt(seq(", Prefix cache hit rate: {_:num}%")),
        Opt(seq(".")),
        Tail(),
    ),
    absent=("preemptions",),
)
# MRV2 / V1 --enable-logging-iteration-details (vllm==0.34.0:vllm/v1/metrics/loggers.py:
# 199-216: "%sIteration(%d): %d context requests, %d context tokens, %d generation requests,
# %d generation tokens, iteration elapsed time: %.2f ms%s, %s KV cache usage: %.1f%%%s", the
# first %s "Engine %03d: ", the second " (dummy)" for a DP dummy step, the last
# ", encoder inputs: %d, encoder output embeddings: %d"); the first form (vllm==0.20.0:
# vllm/v1/engine/core.py) ends at the elapsed time. Elapsed time is host time, not GPU time.
VL_ITERATION = LineSpec(
    "vllm.iteration",
    "vllm",
    "iteration",
    seq(
        Opt(seq("Engine {engine_index:int}: ")),
        "Iteration({iteration:int}): {ctx_reqs:int} context requests, "
        "{ctx_tokens:int} context tokens, {gen_reqs:int} generation requests, "
        "{gen_tokens:int} generation tokens, iteration elapsed time: {elapsed_ms:unum} ms",
        Opt(seq(" (dummy)")),
        Opt(seq(", {_:upper} KV cache usage: {kv_usage:unum}%")),
        Opt(seq(", encoder inputs: {_:int}, encoder output embeddings: {_:int}")),
        Tail(),
    ),
)

# SGLang --log-requests (sglang==0.5.5:srt/managers/tokenizer_manager.py:426 and 987-989:
# "Receive: obj=<GenerateReqInput repr>", "Finish: obj=<repr>[, out=<dict repr>]", each
# --log-requests-level only shortening the reprs): the id is the leftmost non-empty rid='...'
# of the repr, the token counts the leftmost of out's meta_info
_RID = Find(seq("rid='{request_id:quoted}'"), required=True)
SG_RECEIVE = LineSpec(
    "sglang.receive",
    "sglang",
    "request",
    seq("Receive: ", _RID, Tail(text=True)),
    absent=("prompt_tokens", "max_new_tokens"),
    consts=(("action", "received"),),
)
SG_FINISH = LineSpec(
    "sglang.finish",
    "sglang",
    "request",
    seq(
        "Finish: ",
        _RID,
        Find(seq("'prompt_tokens': {prompt_tokens:int}")),
        Find(seq("'completion_tokens': {max_new_tokens:int}")),
        Tail(text=True),
    ),
    consts=(("action", "finished"),),
)

# "Added request %s." (vllm/v1/engine/async_llm.py, V0 engine/async_llm_engine.py:
# shared/formats/vllm-log-formats.md; 0.12+ appends "-<8 hex>" to the id)
VL_ADDED = LineSpec(
    "vllm.added",
    "vllm",
    "request",
    seq("Added request {request_id:id}", Opt(seq(".")), Tail()),
    absent=("prompt_tokens", "max_new_tokens"),
    consts=(("action", "added"),),
    triggers=True,
)

# "Received request %s: params: %s, lora_request: %s." (vllm==0.33.0:vllm/entrypoints/serve/
# utils/request_logger.py:66-71; 0.11 put "prompt: %r, " before the params and
# "prompt_token_ids: %s, prompt_embeds shape: %s, " after them: vllm==0.11.0:vllm/entrypoints/
# logger.py:40-46), the params being SamplingParams.__repr__ (vllm==0.33.0:vllm/
# sampling_params.py:1447-1474: stop strings and structured outputs as reprs, any text):
# max_tokens is the first "max_tokens=<digits>" at a word start after the first
# "SamplingParams(" (a stop string may hold one: the per-line reading, kept)
VL_RECEIVED = LineSpec(
    "vllm.received",
    "vllm",
    "request",
    seq(
        "Received request {request_id:dotid}: ",
        Find(seq("SamplingParams(", Skip(), Bound(), "max_tokens={max_new_tokens:int}")),
        Tail(text=True),
    ),
    absent=("prompt_tokens",),
    consts=(("action", "received"),),
)

# A row of the --cudagraph-metrics table (formats R-3: vllm==0.33.0:vllm/compilation/
# cuda_graph.py:43-49 the header labels, 104-111 a row: "| " + " | ".join(cells each
# ljust to its column's width) + " |"), one logged line per table line: the cells' meaning
# is the header row's (``MetricsTableBlock``), this order is COLUMN_HEADERS' ("Unpadded
# Tokens | Padded Tokens | Num Paddings | Runtime Mode | Count"); the mode is
# CUDAGraphMode's name
_CELL = (Pad(), "|", Pad())
VL_METRICS_ROW = LineSpec(
    "vllm.metrics_row",
    "vllm",
    "graph_step",
    seq(
        "|",
        Pad(),
        "{num_tokens:int}",
        *_CELL,
        "{padded_tokens:int}",
        *_CELL,
        "{_:int}",
        *_CELL,
        "{mode:upper}",
        *_CELL,
        "{count:int}",
        Pad(),
        "|",
        Tail(),
    ),
    absent=("num_reqs", "uniform"),
    consts=(("origin", "metrics_table"),),
    cells="|",
)

#: every declared periodic line, by kind tag
LINES: dict[str, LineSpec] = {
    s.name: s
    for s in (
        SG_DECODE,
        SG_PREFILL,
        SG_RECEIVE,
        SG_FINISH,
        VL_STEP,
        VL_STATS,
        VL_ITERATION,
        VL_ADDED,
        VL_RECEIVED,
        VL_METRICS_ROW,
    )
}
