"""vLLM runtime lines: KV sizing, graph status, stats, steps, requests, vLLM-only errors."""

from __future__ import annotations

import re

from diag.lines import periodic
from diag.normalize.prefix import LogLine
from diag.parsers.base import Context, num, parse_int_list, to_int
from diag.parsers.traceback import error_line_verdict
from diag.parsers.traceback_text import EXC_LINE
from diag.parsers.vllm.patterns import (
    _DISABLED,
    ACTIONS,
    API_VERSION,
    ATTN_BACKEND,
    ATTN_NAMES,
    AVAIL_KV,
    BACKEND_REFUSED,
    BANNER_VERSION,
    BLOCKS,
    CACHE_INFO_BLOCKS,
    CHUNKED,
    CONCURRENCY,
    DESC_REQS,
    DESC_TOKENS,
    DESC_UNIFORM,
    ENGINE,
    EST_GRAPH,
    FAST_ADDED,
    FAST_ITERATION,
    FAST_RECEIVED,
    FAST_STATS,
    FAST_STEP,
    FREE_ACT,
    FREE_GRAPH,
    FREE_MEM,
    FREE_NON_TORCH,
    FREE_UTIL,
    FREE_WEIGHT,
    GMU_ADVICE,
    GRAPH_MEM_WARN,
    INIT_ENGINE,
    KV_ERRORS,
    KV_FIXED,
    KV_TOKENS,
    LOAD_WEIGHTS,
    MAMBA_CAP,
    MAX_TOKENS,
    OVERRIDDEN,
    OVERRIDE_BLOCKS,
    OVERRIDE_MODE,
    OVERRIDE_TO,
    POOL,
    PREEMPT,
    PROMPT_IDS,
    PROMPT_INTS,
    REQ,
    ROCM_UNSUPPORTED,
    SET_MAX_SEQS,
    SETTING_MODE,
    STEP,
    TRUNCATE,
    V0_ACTIVATION,
    V0_KV_REST,
    V0_NON_TORCH,
    V0_TOTAL,
    V0_WEIGHTS,
    WARMUP_OOM,
    N,
    mode_name,
    new_run,
    number_in,
    vllm_state,
)


def read_sizing(line: LogLine, ctx: Context) -> bool:
    msg = line.msg
    emitted = False

    def size(name: str, value: float | None, unit: str) -> None:
        nonlocal emitted
        if value is not None:
            ctx.emit("sizing", line, engine=ENGINE, name=name, value=value, unit=unit)
            emitted = True

    if " blocks: " in msg:
        m = BLOCKS.search(msg)
        if m:
            size("gpu_blocks", num(m.group("g")), "blocks")
            size("cpu_blocks", num(m.group("c")), "blocks")
    if "num_gpu_blocks" in msg:
        size("gpu_blocks", number_in(CACHE_INFO_BLOCKS, msg), "blocks")
        size("num_gpu_blocks_override", number_in(OVERRIDE_BLOCKS, msg, 2), "blocks")
    if "KV cache size:" in msg:
        size("kv_tokens", number_in(KV_TOKENS, msg), "tokens")
    if "Maximum concurrency" in msg:
        m = CONCURRENCY.search(msg)
        if m:
            size("max_concurrency", num(m.group(2)), "x")
            size("max_model_len", num(m.group(1)), "tokens")
    if "KV cache memory" in msg or "KV Cache" in msg:
        size(
            "kv_cache_gib",
            number_in(AVAIL_KV, msg)
            if "Available KV" in msg
            else number_in(V0_KV_REST, msg) or number_in(KV_FIXED, msg),
            "GiB",
        )
    if "total_gpu_memory (" in msg:
        m = V0_TOTAL.search(msg)
        if m:
            size("total_gpu_memory_gib", num(m.group(1)), "GiB")
            size("gpu_memory_utilization", num(m.group(2)), "fraction")
    if "model weights take" in msg:
        size("weights_gib", number_in(V0_WEIGHTS, msg), "GiB")
        size("non_torch_gib", number_in(V0_NON_TORCH, msg), "GiB")
        size("activation_peak_gib", number_in(V0_ACTIVATION, msg), "GiB")
    if "Memory profiling results:" in msg:  # 0.6.4 key=value form
        kv = dict(re.findall(r"(\w+)=" + N, msg))
        size("total_gpu_memory_gib", num(kv.get("total_gpu_memory")), "GiB")
        size("non_torch_gib", num(kv.get("non_torch_memory")), "GiB")
        size("kv_cache_gib", num(kv.get("kv_cache_size")), "GiB")
        size("gpu_memory_utilization", num(kv.get("gpu_memory_utilization")), "fraction")
    if "weights took" in msg or "Model loading took" in msg:
        size("weights_gib", number_in(LOAD_WEIGHTS, msg), "GiB")
    if "Free memory on device" in msg:
        m = FREE_MEM.search(msg)
        if m:
            size("total_gpu_memory_gib", num(m.group(2)), "GiB")
        size("gpu_memory_utilization", number_in(FREE_UTIL, msg), "fraction")
        size("weights_gib", number_in(FREE_WEIGHT, msg), "GiB")
        size("activation_peak_gib", number_in(FREE_ACT, msg), "GiB")
        size("non_torch_gib", number_in(FREE_NON_TORCH, msg), "GiB")
        size("graph_mem_actual_gib", number_in(FREE_GRAPH, msg), "GiB")
    if "Estimated CUDA graph memory" in msg:
        size("graph_mem_est_gib", number_in(EST_GRAPH, msg), "GiB")
    if "CUDA graph pool memory" in msg:
        m = POOL.search(msg)
        if m:
            size("graph_pool_actual_gib", num(m.group(1)), "GiB")
            size("graph_mem_est_gib", num(m.group(2)), "GiB")
    return emitted


def read_graph_status(line: LogLine, ctx: Context) -> bool:
    msg = line.msg
    text = msg.strip()[:400]
    for needle, reason in _DISABLED:
        if needle in msg:
            ctx.emit("graph_disabled", line, engine=ENGINE, reason=reason, text=text)
            return True
    if ROCM_UNSUPPORTED.search(msg):
        ctx.emit("graph_disabled", line, engine=ENGINE, reason="rocm_unsupported", text=text)
        return True
    m = SETTING_MODE.search(msg) or OVERRIDE_MODE.search(msg) or OVERRIDE_TO.search(msg)
    if m and mode_name(m.group("mode")):
        refused = BACKEND_REFUSED.search(msg)
        ctx.emit(
            "graph_mode",
            line,
            engine=ENGINE,
            mode=mode_name(m.group("mode")),
            origin="downgrade",
            downgraded=True,
            text=text,
            backend=(refused.group("backend") or refused.group("spec")) if refused else None,
        )
        return True

    def advise(topic: str, value: float | None = None) -> bool:
        ctx.emit("advisory", line, engine=ENGINE, topic=topic, value=value, text=text)
        return True

    if "--gpu-memory-utilization" in msg and "CUDA graph memory profiling" in msg:
        return advise("graph_memory_profiling", number_in(GMU_ADVICE, msg))
    m = MAMBA_CAP.search(msg)
    if m:
        return advise("capping_capture_sizes", num(m.group(2)))
    m = TRUNCATE.search(msg)
    if m:
        return advise("truncating_capture_size", num(m.group(1)))
    m = OVERRIDDEN.search(msg)
    if m:
        new = parse_int_list(m.group("new")) or []
        return advise("sizes_overridden", max(new) if new else None)
    if any(w in msg for w in GRAPH_MEM_WARN):
        return advise("graph_memory_warning")
    # causes and settings a remedy must know (vllm==0.11.0:vllm/distributed/device_communicators/
    # pynccl_wrapper.py:265 logger.error; custom_all_reduce.py logger.warning/info)
    for needle, topic in (
        ("Failed to load NCCL library", "nccl_load_failed"),
        ("Custom allreduce is disabled", "custom_all_reduce_disabled"),
    ):
        if needle in msg:
            return advise(topic)
    return False


def read_other(line: LogLine, ctx: Context) -> None:
    msg = line.msg
    m = INIT_ENGINE.search(msg)
    if m:
        ctx.emit("startup", line, engine=ENGINE, marker="init_engine_done")
        ctx.emit(
            "sizing",
            line,
            engine=ENGINE,
            name="init_engine_s",
            value=num(m.group("t")),
            unit="s",
        )
        if m.group("c"):
            ctx.emit(
                "sizing",
                line,
                engine=ENGINE,
                name="compilation_s",
                value=num(m.group("c")),
                unit="s",
            )
        return
    if "server version" in msg or "version " in msg:
        m = API_VERSION.search(msg)
        banner = None if m else (BANNER_VERSION.fullmatch(msg) if line.header == "vllm" else None)
        if m or banner:
            new_run(ctx, vllm_state(ctx).era)
            ctx.emit("startup", line, engine=ENGINE, marker="api_server")
            ctx.emit("version", line, engine=ENGINE, version=(m or banner).group("ver"))  # type: ignore[union-attr]
            return
    if "Application startup complete" in msg:
        ctx.emit("startup", line, engine=ENGINE, marker="ready")
        return
    m = CHUNKED.search(msg)
    if m:
        ctx.emit(
            "config",
            line,
            engine=ENGINE,
            origin="log",
            key="max_num_batched_tokens",
            value=to_int(m.group(1)),
        )
        return
    m = SET_MAX_SEQS.search(msg)
    if m:
        ctx.emit(
            "config",
            line,
            engine=ENGINE,
            origin="log",
            key="max_num_seqs",
            value=to_int(m.group(1)),
        )
        return
    if "is preempted" in msg and "Sequence group" in msg:
        ctx.emit("retract", line, engine=ENGINE, count=1, text=msg.strip()[:300])
        return
    if "backend" in msg:
        m = ATTN_BACKEND.search(msg)
        if (
            m
            and (
                "AttentionBackendEnum" in m.group("name")
                or "attention backend" in msg
                or ATTN_NAMES.search(m.group("name"))
            )
            and "MoE" not in msg
        ):
            name = m.group("name").replace("AttentionBackendEnum.", "")
            ctx.emit(
                "config", line, engine=ENGINE, origin="log", key="attention_backend", value=name
            )
            return
    read_error(line, ctx)


def read_request(line: LogLine, ctx: Context) -> bool:
    fast = FAST_ADDED.match(line.msg)
    if fast is not None:  # the declared line (periodic.VL_ADDED)
        ctx.emit("request", line, engine=ENGINE, **periodic.VL_ADDED.read(fast))
        return True
    fast = FAST_RECEIVED.match(line.msg)
    if fast is not None and PROMPT_IDS.search(line.msg) is None:
        # the declared line (periodic.VL_RECEIVED); 0.10-0.11 also print the prompt's token
        # ids, which the declaration does not read (their count): those read below
        ctx.emit("request", line, engine=ENGINE, **periodic.VL_RECEIVED.read(fast))
        return True
    m = REQ.search(line.msg)
    if not m:
        return False
    verb = m.group("verb")
    rest = m.group("rest")
    action = ACTIONS[verb]
    if action in ("received", "response"):
        rid_m = re.match(r"(\S+?)(?: \(streaming (?:delta|complete)\))?:(?:\s|$)", rest)
        ids = [rid_m.group(1)] if rid_m else []
    else:
        body = rest.strip()
        body = body[:-1] if body.endswith(".") else body
        ids = [i.strip(" '\"[]{}") for i in re.split(r",\s*", body) if i.strip(" '\"[]{}")]
    if not ids:
        return False
    prompt_tokens = max_new = None
    if action == "received":
        p = PROMPT_IDS.search(rest)
        if p and p.group(1) != "None":
            ints = PROMPT_INTS.findall(p.group(1))
            prompt_tokens = len(ints) if p.group(1).endswith("]") else None
        mt = MAX_TOKENS.search(rest)
        max_new = to_int(mt.group(1)) if mt else None
    for rid in ids:
        ctx.emit(
            "request",
            line,
            engine=ENGINE,
            request_id=rid,
            action=action,
            prompt_tokens=prompt_tokens,
            max_new_tokens=max_new,
        )
    return True


def read_error(line: LogLine, ctx: Context) -> None:
    """vLLM-specific error messages that ErrorParser would not already report."""
    msg = line.msg
    warmup = WARMUP_OOM.search(msg) is not None
    kv = any(k in msg for k in KV_ERRORS)
    if not (warmup or kv) or _error_parser_covers(line):
        return
    ctx.emit(
        "error",
        line,
        engine=ENGINE,
        error_class="oom",
        message=msg.strip()[:600],
        capture_related=warmup,
        explicit_capture=False,
    )


def read_iteration(line: LogLine, ctx: Context) -> bool:
    """An ``Iteration(N)`` line (periodic.VL_ITERATION): one engine step's requests and
    tokens; a line of another shape is not read (no field search: it is not a sample)."""
    fast = FAST_ITERATION.match(line.msg)
    if fast is None:
        return False
    ctx.emit("iteration", line, engine=ENGINE, **periodic.VL_ITERATION.read(fast))
    return True


def read_stats(line: LogLine, ctx: Context) -> None:
    msg = line.msg
    fast = FAST_STATS.match(msg)
    if fast is not None:  # the declared line (periodic.VL_STATS): each field once, in place
        ctx.emit("stats", line, engine=ENGINE, **periodic.VL_STATS.read(fast))
        return
    # another shape (cut, merged with another print): each declared field by its label
    found = periodic.VL_STATS.search_labelled(msg)
    if found["running"] is None or found["waiting"] is None:
        return  # a line cut before its queue fields is not a sample
    found["preemptions"] = to_int(first_group(PREEMPT, msg))
    ctx.emit("stats", line, engine=ENGINE, **found)


def read_step(line: LogLine, ctx: Context) -> None:
    fast = FAST_STEP.match(line.msg)
    if fast is not None:  # the declared line (periodic.VL_STEP)
        f = periodic.VL_STEP.read(fast)
        ctx.emit(
            "graph_step",
            line,
            engine=ENGINE,
            mode=f["mode"],
            num_tokens=f["padded_tokens"] if f["mode"] == "NONE" else None,
            padded_tokens=f["padded_tokens"],
            num_reqs=f["num_reqs"],
            uniform=f["uniform"],
            count=1,
            origin="debug_step",
        )
        return
    m = STEP.search(line.msg)
    if not m:
        return
    mode = m.group("mode")
    desc = m.group("desc")
    tokens = to_int(first_group(DESC_TOKENS, desc))
    reqs = first_group(DESC_REQS, desc)
    uniform = first_group(DESC_UNIFORM, desc)
    ctx.emit(
        "graph_step",
        line,
        engine=ENGINE,
        mode=mode,
        num_tokens=tokens if mode == "NONE" else None,
        padded_tokens=tokens,
        num_reqs=None if reqs in (None, "None") else to_int(reqs),
        uniform=None if uniform is None else uniform == "True",
        count=1,
        origin="debug_step",
    )


def first_group(rx: re.Pattern[str], text: str) -> str | None:
    m = rx.search(text)
    return m.group(1) if m else None


def _error_parser_covers(line: LogLine) -> bool:
    """Would ErrorParser (same scanner) report this line itself? Mirrors its feed()."""
    msg = line.msg
    if "Traceback (most recent call last)" in msg:
        return True
    stripped = msg.lstrip()
    if stripped.startswith('File "') and line.header in (None, "vllm"):
        return True
    if line.header is None and EXC_LINE.match(msg):
        return True
    return error_line_verdict(line, msg) is not None
