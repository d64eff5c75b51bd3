"""vLLM log lines (0.4 -> 0.33) that bear on capture, eager fallback and KV sizing.

The formats and their version ranges are in ``shared/formats/vllm-log-formats.md``;
section / line ids below (V0-1, V1-4, M-1, R-2, ...) refer to it. Messages are matched
anywhere in the line, never anchored at its start, because unknown prefixes exist
(``VLLM_LOGGING_PREFIX``, pasted message bodies without any header).

Per-stream state (``VllmState`` in ``ctx.state``) keeps what a single line cannot tell: which engine era
the stream is in (V0 and V1 print the same "Graph capturing finished" text), which
process has a capture phase open, and the configured cudagraph mode of the current run.
A new start-up (config echo, args echo, API server banner) resets the run state.
"""

from __future__ import annotations

from diag.normalize.prefix import LogLine
from diag.parsers import prometheus
from diag.parsers.base import Block, Context, LineParser
from diag.parsers.vllm.capture import read_capture, read_progress
from diag.parsers.vllm.metrics_table import LOOSE_ROWS, MetricsTableBlock
from diag.parsers.vllm.patterns import (
    ENGINE,
    METRICS_ROW,
    METRICS_START,
    VllmState,
    vllm_state,
)
from diag.parsers.vllm.runtime import (
    read_graph_status,
    read_iteration,
    read_other,
    read_request,
    read_sizing,
    read_stats,
    read_step,
)
from diag.parsers.vllm.startup import (
    engine_config_line,
    read_args,
    read_echo_fragment,
    read_graph_dict_fragment,
    read_note_era,
)


class VLLMParser(LineParser):
    """Every vLLM line kind of the spec that bears on capture, eager fallback and KV sizing."""

    engine = ENGINE
    loose_rows = LOOSE_ROWS  # METRICS_ROW below: a one-row table
    anchors = (
        # start-up and configuration
        "LLM engine",
        "args: ",
        # an engine-config echo cut before its "with config:" head
        "compilation_config=",
        "enforce_eager=",
        "server version",
        "version ",
        "init engine",
        "Application startup complete",
        "Chunked prefill is enabled",
        "Setting max_num_seqs",
        "backend",
        # capture, modes, eager fallback, advisories (most carry one of these)
        "CUDA graph",
        "CUDA Graph",
        "cuda graph",
        "cudagraph",
        "Cudagraph",
        "CUDAGraph",
        "Capturing",
        "Graph capturing",
        "CG Capture",
        "Enforce eager",
        "eager mode",
        # KV sizing
        " blocks: ",
        "num_gpu_blocks",
        "KV cache size",
        "Maximum concurrency",
        "KV cache memory",
        "KV Cache",
        "kv_cache_size=",
        "model weights take",
        "weights took",
        "Model loading took",
        "total_gpu_memory",
        "Free memory on device",
        # runtime
        "Avg prompt throughput",
        "Iteration(",
        *prometheus.ANCHORS,
        "Unpadded Tokens",
        "- Mode:",
        "- Capture sizes:",
        "| FULL",
        "| NONE",
        "| PIECEWISE",
        "request",
        "Generated response",
        "is preempted",
        # vLLM-only error messages
        "No available memory",
        "To serve at least one request",
        "out of memory occurred",
        # causes and settings remedies must know (rules: cause first, never what is in effect)
        "Failed to load NCCL library",
        "Custom allreduce is disabled",
    )

    def reads_every_line(self, ctx: Context) -> bool:
        st = ctx.state.get(VllmState)  # read, not made: the hot path must not add state
        return st is None or st.era is None  # read_note_era looks at every line until then

    def note_bulk(self, line: LogLine, ctx: Context) -> None:
        # a consumed stats, step or request line is read by feed as the bulk row (stateless
        # readers), after this note
        if vllm_state(ctx).era is None:
            read_note_era(line, ctx)

    def feed(self, line: LogLine, ctx: Context) -> Block | None:
        msg = line.msg
        if not msg or not msg.strip():
            return None
        if vllm_state(ctx).era is None:
            read_note_era(line, ctx)
        if "%|" in msg:
            read_progress(line, ctx)
            return None
        if "Avg prompt throughput" in msg:
            read_stats(line, ctx)
            return None
        if "cudagraph_iterations" in msg and prometheus.read_metric(line, ctx, ENGINE):
            return None
        if "Iteration(" in msg and read_iteration(line, ctx):
            return None
        if "Running batch with cudagraph_mode" in msg:
            read_step(line, ctx)
            return None
        if ("request" in msg or "Generated response" in msg) and read_request(line, ctx):
            return None  # the most frequent runtime lines: skip the start-up checks below
        stripped = msg.strip()
        if stripped.startswith(METRICS_START):
            return MetricsTableBlock(line)
        if METRICS_ROW.match(stripped):
            MetricsTableBlock(line).finish(ctx)
            return None
        if "LLM engine" in msg and "Initializing" in msg:
            return engine_config_line(line, ctx)
        elif "args: " in msg and ("Namespace(" in msg or "non-default args" in msg):
            read_args(line, ctx)
        elif ("compilation_config=" in msg or "enforce_eager=" in msg) and read_echo_fragment(
            line, ctx
        ):
            pass
        elif line.header is None and "cudagraph" in msg and read_graph_dict_fragment(line, ctx):
            pass
        elif read_capture(line, ctx) or read_sizing(line, ctx) or read_graph_status(line, ctx):
            pass
        else:
            read_other(line, ctx)
        return None
