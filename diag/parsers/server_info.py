"""An engine's server-info JSON (input kind ``server_info``) read as the events its log lines give.

A server-info dump is what a ticket often carries instead of the start-up log: ``curl
:30000/server_info > server_info.json``. It says what the log's config echo, KV and capture
lines say, as values, so it is read into the same events (``config``, ``sizing``,
``capture_end``, ``capture_sizes``, ``version``) and judged by the same facts and rules.

SGLang ``GET /server_info`` (``/get_server_info`` is its deprecated alias;
sglang==0.5.23:sglang/srt/entrypoints/http_server.py:853-891): the resolved server args
(srt/server_args.py:316-333 ``resolved_dict``) with ``launch_command``, the scheduler's info
and ``kv_events`` (srt/utils/common.py:3584-3593), ``startup_time``, ``version`` and
``internal_states``, one per DP rank (srt/managers/scheduler_components/internal_state.py:44-106):
``memory_usage`` = weight, kvcache, token_capacity and ``graph`` = GB per capture phase
(scheduler_components/memory_usage.py:15-40; the phases:
srt/model_executor/graph_memory_usage.py:5-12), ``startup_time.cuda_graph`` = seconds per phase
(srt/observability/startup_time.py:11-28), with PD disaggregation ``decode_cuda_graph_bs``.
Before the per-phase split (sglang==0.5.6:sglang/srt/entrypoints/http_server.py:540-557,
srt/managers/scheduler.py:2257-2270) the args are ``dataclasses.asdict(server_args)`` and
``memory_usage.graph`` is one number, the decode runner's. SGLang's "GB" is GiB
(``get_available_gpu_memory`` divides by 1 << 30), as in its log lines.

vLLM ``GET /server_info`` (served with ``VLLM_SERVER_DEV_MODE=1``;
vllm==0.34.0:vllm/entrypoints/serve/dev/server_info/api_router.py:43-59): ``vllm_config`` is
``str(vllm_config)``, the text of the engine-config echo line, or with ``?config_format=json``
the config as JSON (its sub-configs nested: ``model_config.enforce_eager``,
``compilation_config.cudagraph_mode``); ``system_env.vllm_version`` is the version
(vllm/collect_env.py:418-435).
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass
from typing import Any

from diag.normalize.prefix import LogLine
from diag.parsers.base import Context
from diag.parsers.configs import parse_config_echo
from diag.parsers.vllm.startup import flatten_settings, read_graph_config

#: SGLang top-level keys that are not server args
_SGLANG_NOT_ARGS = frozenset(
    {
        "internal_states",
        "version",
        "launch_command",
        "startup_time",
        "kv_events",
        "frontend",
        "status",
        "hicache_object_layout",
    }
)
#: SGLang top-level keys from the scheduler's info, not from the args
_SGLANG_SCHEDULER_KEYS = frozenset({"max_total_num_tokens", "max_req_input_len"})
#: SGLang graph-memory / capture-time phase keys -> the parsers' capture phase
#: (graph_memory_usage.py:5-12 GRAPH_MEMORY_USAGE_KEYS; diag.engines.runners.PHASE_RUNNER)
SGLANG_INFO_PHASES = {
    "decode": "decode",
    "prefill": "prefill",
    "target_verify": "verify",
    "draft_decode": "draft",
    "draft_prefill": "draft_prefill",
    "draft_extend": "draft_extend",
}
#: the ``memory_usage`` keys read (memory_usage.py:31-40; 0.5.6 scheduler.py:2260-2270)
SGLANG_MEMORY_KEYS = ("weight", "kvcache", "token_capacity", "graph")
#: vLLM sub-configs whose fields the text echo shows at the top level
_VLLM_FLAT_SECTIONS = ("model_config", "cache_config", "parallel_config", "scheduler_config")


@dataclass(frozen=True)
class ServerInfo:
    """One server-info document as read: its path, engine, the parsed JSON and its text (for
    the line each key stands on)."""

    path: str
    backend: str
    doc: dict[str, Any]
    text: str


def emit_server_info(info: ServerInfo, ctx: Context) -> int:
    """The document's events into ``ctx``'s sink; the number emitted."""
    before = ctx.sink.count()
    if info.backend == "sglang":
        _sglang(info, ctx)
    else:
        _vllm(info, ctx)
    return int(ctx.sink.count() - before)


class _Lines:
    """Evidence lines: the line a key first stands on in the document's text (a ``curl``
    dump is one line; a ``jq``-printed one a key a line)."""

    def __init__(self, info: ServerInfo) -> None:
        self.info = info
        self._starts = [0, *(m.end() for m in re.finditer("\n", info.text))]

    def at(self, key: str, value: Any) -> LogLine:
        pos = self.info.text.find(f'"{key}"')
        lineno = bisect.bisect_right(self._starts, pos) if pos > 0 else 1
        shown = json.dumps(value, separators=(", ", ": "), default=str)
        text = f'"{key}": {shown[:300]}'
        return LogLine(self.info.path, lineno, text, text)


def _mark(info: ServerInfo, lines: _Lines, ctx: Context) -> None:
    """The run holds a server-info document (the verdict says what it cannot show)."""
    line = LogLine(info.path, 1, lines.info.text[:200], lines.info.text[:200])
    ctx.emit("startup", line, engine=info.backend, marker="server_info")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _sglang(info: ServerInfo, ctx: Context) -> None:
    doc, lines, eng = info.doc, _Lines(info), "sglang"
    _mark(info, lines, ctx)
    version = doc.get("version")
    if isinstance(version, str) and version:
        ctx.emit("version", lines.at("version", version), engine=eng, version=version)
    for key in sorted(doc):
        if key in _SGLANG_NOT_ARGS:
            continue
        origin = "scheduler" if key in _SGLANG_SCHEDULER_KEYS else "server_args"
        line = lines.at(key, doc[key])
        ctx.emit("config", line, engine=eng, origin=origin, key=key, value=doc[key])
    states = doc.get("internal_states")
    first = states[0] if isinstance(states, list) and states else None
    state: dict[str, Any] = first if isinstance(first, dict) else {}
    usage = state.get("memory_usage")
    memory: dict[str, Any] = usage if isinstance(usage, dict) else {}
    weight, kvcache, capacity, graph_key = SGLANG_MEMORY_KEYS
    tokens = _num(doc.get("max_total_num_tokens"))
    if tokens is None:
        tokens = _num(memory.get(capacity))
    if tokens is not None:
        line = lines.at(
            "max_total_num_tokens" if "max_total_num_tokens" in doc else capacity, tokens
        )
        ctx.emit(
            "sizing",
            line,
            engine=eng,
            name="max_total_num_tokens",
            value=int(tokens),
            unit="tokens",
        )
    for key, name in ((weight, "weights_gib"), (kvcache, "kv_cache_gib")):
        gib = _num(memory.get(key))
        if gib is not None and gib > 0:
            ctx.emit("sizing", lines.at(key, gib), engine=eng, name=name, value=gib, unit="GiB")
    graph = memory.get(graph_key)
    per_phase = {"decode": graph} if _num(graph) is not None else graph
    started = state.get("startup_time") or doc.get("startup_time")
    for key, name in (("load_weight", "weights_s"), ("kv_cache_allocation", "kv_alloc_s")):
        secs = _num(started.get(key)) if isinstance(started, dict) else None
        if secs:
            ctx.emit("sizing", lines.at(key, secs), engine=eng, name=name, value=secs, unit="s")
    times = started.get("cuda_graph") if isinstance(started, dict) else None
    times = times if isinstance(times, dict) else {}
    if isinstance(per_phase, dict):
        for key, phase in SGLANG_INFO_PHASES.items():
            gib, secs = _num(per_phase.get(key)), _num(times.get(key))
            if not gib and not secs:
                continue  # the schema holds every phase, 0.0 where nothing was captured
            ctx.emit(
                "capture_end",
                lines.at("graph", per_phase),
                engine=eng,
                phase=phase,
                time_s=secs,
                mem_gib=gib,
                avail_mem_gib=None,
            )
    sizes = state.get("decode_cuda_graph_bs")
    if isinstance(sizes, list) and sizes and all(isinstance(s, int) for s in sizes):
        ctx.emit(
            "capture_sizes",
            lines.at("decode_cuda_graph_bs", sizes),
            engine=eng,
            phase="decode",
            mode=None,
            sizes=sizes,
            count=len(sizes),
            largest=max(sizes),
        )


def _vllm(info: ServerInfo, ctx: Context) -> None:
    doc, lines, eng = info.doc, _Lines(info), "vllm"
    _mark(info, lines, ctx)
    system = doc.get("system_env")
    version = system.get("vllm_version") if isinstance(system, dict) else None
    if isinstance(version, str) and version and version[:1].isdigit():
        shown = version.split()[0]
        ctx.emit("version", lines.at("vllm_version", version), engine=eng, version=shown)
    # the config alone (its sections at the top) or under /server_info's "vllm_config"
    config = doc.get("vllm_config", doc if "compilation_config" in doc else None)
    if isinstance(config, str):
        settings = flatten_settings(parse_config_echo(config))
    elif isinstance(config, dict):
        top: dict[str, Any] = {}
        for section in _VLLM_FLAT_SECTIONS:
            part = config.get(section)
            if isinstance(part, dict):
                top.update({k: v for k, v in part.items() if k not in top})
        top.update({k: v for k, v in config.items() if k not in _VLLM_FLAT_SECTIONS})
        settings = flatten_settings(top)
    else:
        return
    line = lines.at("vllm_config" if "vllm_config" in doc else "compilation_config", config)
    for key, value in settings:
        ctx.emit("config", line, engine=eng, origin="engine_config", key=key, value=value)
    read_graph_config(line, ctx, dict(settings), "v1")
