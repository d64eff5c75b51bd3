"""GD100 capture-failed."""

from __future__ import annotations

import re
from typing import get_args

from diag.engines.flags import since, span
from diag.rules.base import Remedy, Rule
from diag.rules.causes import CAUSE_FIRST_STEPS, Cause, cause_of, custom_all_reduce_off
from diag.rules.engine_solutions import follow_printed
from diag.rules.metrics import RunMetrics

ALL_CAUSES: tuple[Cause, ...] = get_args(Cause)
# SGLang prints one "Possible solutions" list whatever the error; with no class to go on
# ("other") that printed order is the best guide, so "other" follows the OOM order there
# (its memory steps only where the run shows memory pressure)
_PRINTED_ORDER: tuple[Cause, ...] = ("oom", "other")
_NAMED_CAUSE: tuple[Cause, ...] = ("stream_capture_invalid", "unsupported_op", "distributed")
_FLAG = re.compile(r"--[a-z][a-z0-9-]+")


def _cause(m: RunMetrics) -> Cause:
    return cause_of(
        m.capture.capture_error_class,
        m.capture.capture_error_message,
        m.capture.capture_error_frame_cause,
    )


def _memory_cause(m: RunMetrics) -> bool:
    """Memory remedies serve an OOM, or an error nothing narrows ("other") in a run short
    of memory or after which the engine printed its own list (SGLang's "Possible
    solutions", whose first steps are memory steps): an illegal access, a collective
    mismatch, a transport or compile failure never get them."""
    cause = _cause(m)
    return cause == "oom" or (
        cause == "other" and (m.memory.memory_pressure or bool(m.capture.engine_solutions))
    )


def _nccl_first(m: RunMetrics) -> str | None:
    if m.settings.nccl_load_failure is None:
        return None
    return (
        f"Fix the NCCL library first; the log shows it failed to load: "
        f"'{m.settings.nccl_load_failure[:160]}'. Point VLLM_NCCL_SO_PATH at a working libnccl.so.2 "
        "(or reinstall the nvidia-nccl package); graph capture of collectives cannot succeed "
        "without it."
    )


def _nccl_not_capturable(m: RunMetrics) -> bool:
    return "cannot be captured in a graph" in (m.capture.capture_error_message or "")


def _mem_fraction_low(m: RunMetrics) -> bool:
    return m.settings.mem_fraction_static is not None and m.settings.mem_fraction_static <= 0.7


def _mem_fraction_step(m: RunMetrics) -> str | None:
    """The step with the value in effect quoted (``0.94 -> 0.8``)."""
    now = m.settings.mem_fraction_static
    if now is None:
        return None
    to = 0.8 if now > 0.8 else round(now - 0.1, 2)
    return (
        f"Lower --mem-fraction-static {now:g} -> {to:g}: capture memory comes out of what the "
        "KV pool leaves."
    )


def _max_bs_small(m: RunMetrics) -> bool:
    return m.window.ceiling is not None and m.window.ceiling <= 16


def _fewer_sizes_vllm(m: RunMetrics) -> str | None:
    flag = m.flags.ceiling_flag
    return f"Capture fewer and smaller graphs: lower {flag} or --max-num-seqs." if flag else None


def _sglang_max_bs(m: RunMetrics) -> str | None:
    flag = m.flags.ceiling_flag
    return f"Lower {flag} (e.g. 16): fewer and smaller graphs need less memory." if flag else None


def _disable_last(m: RunMetrics) -> str | None:
    flag = m.flags.graphs_off_flag
    return f"Only as a last resort {flag} (huge decode performance loss)." if flag else None


_SPLIT = since("sglang", "--cuda-graph-backend-decode")  # the per-phase flags' release
_LAST_SGLANG = Remedy(
    f"Only as a last resort turn graphs off (--disable-cuda-graph before SGLang {_SPLIT}, "
    f"--cuda-graph-backend-decode=disabled from {_SPLIT}): huge decode performance loss.",
    engine="sglang",
    causes=ALL_CAUSES,
    specific=_disable_last,
)
_LAST_VLLM = Remedy(
    "Only as a last resort --enforce-eager (the diagnostic state: no graphs at all).",
    engine="vllm",
    causes=ALL_CAUSES,
    flags=("--enforce-eager",),
)
_READ_IT = Remedy(
    "Read the capture exception: the innermost frame names the failing component; lower "
    "memory pressure or the number of captured sizes only if it says memory.",
    causes=ALL_CAUSES,
    when=lambda m: m.backend == "unknown" or _cause(m) == "other",
)


class GD100(Rule):
    """CUDA-graph capture raised an error, so the server did not come up with graphs.

    The error class (oom, stream_capture_invalid, unsupported_op, distributed, other)
    decides the remedy: lowering memory does not help a stream-capture or NCCL failure.
    Remedies follow the engine's own printed order for the version (SGLang's "Possible
    solutions": 0.2.15-0.4.3 disable first; 0.4.6-0.5.13 mem-fraction, max-bs, torch
    compile, disable last; 0.5.15+ per-phase flags; an error of class "other" follows that
    printed order too) and name the cause first when the log
    shows one (vLLM's "Failed to load NCCL library" before a stream-capture failure).
    Never offered when already in effect: --disable-custom-all-reduce when the log says
    custom all-reduce is off or TP is 1; torch compile only when it is on.

    Condition: the record has a capture error (detection: facts/record.py capture_error).

    Fires::

        incident: sglang-capture-oom

    Near miss (an OOM while serving, after capture ended, is not a capture failure)::

        incident: sglang-kv-squeeze
    """

    code = "GD100"
    name = "capture-failed"
    severity = "error"
    trigger = "the record has a capture error (an exception raised while capturing graphs)"
    impact = 100
    evidence = "capture_error"
    reads = (
        "backend",
        "capture.capture_error_class",
        "capture.capture_error_evidence",
        "capture.capture_error_frame_cause",
        "capture.capture_error_message",
        "capture.engine_solutions",
        "cudagraph_mode",
        "flags.ceiling_flag",
        "flags.graphs_off_flag",
        "memory.memory_pressure",
        "settings.kv_cache_memory_bytes_set",
        "settings.mem_fraction_static",
        "settings.nccl_load_failure",
        "settings.torch_compile",
        "window.ceiling",
    )
    remedies = (
        Remedy(
            "Fix the NCCL library first when the log shows it failed to load "
            "(VLLM_NCCL_SO_PATH / the nvidia-nccl package).",
            causes=ALL_CAUSES,
            when=lambda m: m.settings.nccl_load_failure is not None,
            specific=_nccl_first,
            source="vllm==0.11.0:vllm/distributed/device_communicators/pynccl_wrapper.py:265",
        ),
        # ---- the cause's own first step (illegal access, collective mismatch, transport,
        # compile: diag/rules/causes.py)
        *CAUSE_FIRST_STEPS,
        # ---- SGLang, its own order per version (remedies.md; cuda_graph_runner.py); where
        # the log carries its printed list, that order wins (GD100.remediation)
        Remedy(
            "Turn graphs off with --disable-cuda-graph (SGLang before 0.4.6 lists this first).",
            engine="sglang",
            until=(0, 4, 6),
            causes=_PRINTED_ORDER,
            flags=("--disable-cuda-graph",),
            source="sglang==0.4.0.post2:sglang/srt/model_executor/cuda_graph_runner.py",
        ),
        Remedy(
            "Lower --mem-fraction-static (e.g. 0.8 or 0.7): capture memory comes out of what "
            "the KV pool leaves.",
            engine="sglang",
            causes=_PRINTED_ORDER,
            flags=("--mem-fraction-static",),
            when=_memory_cause,
            in_effect=_mem_fraction_low,
            specific=_mem_fraction_step,
        ),
        Remedy(
            "Lower --cuda-graph-max-bs (e.g. 16; --cuda-graph-max-bs-decode from SGLang "
            f"{since('sglang', '--cuda-graph-max-bs-decode')}): fewer and smaller graphs need "
            "less memory.",
            engine="sglang",
            since=(0, 4, 3),
            causes=_PRINTED_ORDER,
            flags=("--cuda-graph-max-bs",),
            when=_memory_cause,
            in_effect=_max_bs_small,
            specific=_sglang_max_bs,
        ),
        Remedy(
            "Drop --enable-torch-compile: compiled graphs add capture memory and often break capture.",
            engine="sglang",
            until=(0, 5, 15),
            causes=_PRINTED_ORDER,
            when=lambda m: m.settings.torch_compile,
        ),
        Remedy(
            "Drop --enable-torch-compile: compile-time autotuning and syncs inside capture break it.",
            engine="sglang",
            causes=(*_NAMED_CAUSE, "compile"),
            when=lambda m: m.settings.torch_compile,
        ),
        Remedy(
            "Try another --attention-backend (flashinfer, triton or fa3): the failing kernel "
            "belongs to the backend.",
            engine="sglang",
            causes=("stream_capture_invalid", "unsupported_op"),
            flags=("--attention-backend",),
        ),
        Remedy(
            "Install an NCCL that can be captured: NCCL says it must be built with CUDA runtime "
            ">= 11.3 and run on a CUDA driver >= R465; point the engine at a current "
            "libnccl.so.2 (VLLM_NCCL_SO_PATH for vLLM) and check the driver.",
            causes=("distributed", "other"),
            when=lambda m: _nccl_not_capturable(m),
            source="NCCL's own warning 'NCCL cannot be captured in a graph if ...'",
        ),
        Remedy(
            "Fix the NCCL/gloo transport first (network, NCCL_SOCKET_IFNAME, firewall): lowering "
            "memory does not help a distributed failure.",
            causes=("distributed",),  # not the custom all-reduce: it talks CUDA IPC, no sockets
            in_effect=lambda m: _nccl_not_capturable(m),
        ),
        Remedy(
            "Try --disable-custom-all-reduce: custom all-reduce registers graph buffers during capture.",
            engine="sglang",
            causes=("stream_capture_invalid", "distributed", "collective_mismatch"),
            flags=("--disable-custom-all-reduce",),
            in_effect=custom_all_reduce_off,
        ),
        Remedy(
            "Lower --cuda-graph-max-bs to capture fewer sizes and find the failing one.",
            engine="sglang",
            causes=_NAMED_CAUSE,
            flags=("--cuda-graph-max-bs",),
            in_effect=_max_bs_small,
        ),
        _READ_IT,
        _LAST_SGLANG,
        # ---- vLLM
        Remedy(
            "Lower --kv-cache-memory-bytes: it overrides --gpu-memory-utilization and leaves "
            "graphs the rest.",
            engine="vllm",
            causes=("oom", "other"),
            flags=("--kv-cache-memory-bytes",),
            when=lambda m: m.settings.kv_cache_memory_bytes_set and _memory_cause(m),
        ),
        Remedy(
            "Lower --gpu-memory-utilization: graphs live in the memory it leaves free.",
            engine="vllm",
            causes=("oom", "other"),
            flags=("--gpu-memory-utilization",),
            when=_memory_cause,
            in_effect=lambda m: m.settings.kv_cache_memory_bytes_set,
        ),
        Remedy(
            "Capture fewer and smaller graphs: lower --max-num-seqs, or the capture ceiling "
            f"(max_cudagraph_capture_size from vLLM {since('vllm', 'max_cudagraph_capture_size')}"
            f", --cuda-graph-sizes from {since('vllm', '--cuda-graph-sizes')} before it, a "
            f"cudagraph_capture_sizes list from {since('vllm', 'cudagraph_capture_sizes')}).",
            engine="vllm",
            since=span("vllm", "cudagraph_capture_sizes").since,
            causes=("oom", "other"),
            when=_memory_cause,
            specific=_fewer_sizes_vllm,
        ),
        Remedy(
            "Use cudagraph_mode=PIECEWISE in --compilation-config: no full graphs (less graph "
            "memory), and an op that cannot be captured runs between the graph pieces.",
            engine="vllm",
            causes=("oom", "unsupported_op", "stream_capture_invalid", "other"),
            flags=("cudagraph_mode",),
            in_effect=lambda m: (m.cudagraph_mode or "").upper() == "PIECEWISE",
        ),
        Remedy(
            "Set full_cuda_graph to false in --compilation-config: the failing op then runs "
            "outside the piecewise graphs.",
            engine="vllm",
            causes=("unsupported_op", "stream_capture_invalid"),
            flags=("full_cuda_graph",),
            when=lambda m: (m.cudagraph_mode or "").upper() == "FULL",
        ),
        Remedy(
            "Try another attention backend (VLLM_ATTENTION_BACKEND): some kernels synchronise "
            "or allocate during capture.",
            engine="vllm",
            causes=("stream_capture_invalid", "unsupported_op", "other"),
        ),
        Remedy(
            "With tensor parallelism try --disable-custom-all-reduce (all-reduce during capture).",
            engine="vllm",
            causes=("stream_capture_invalid", "distributed", "collective_mismatch"),
            flags=("--disable-custom-all-reduce",),
            in_effect=custom_all_reduce_off,
        ),
        _LAST_VLLM,
    )

    def fires(self, m: RunMetrics) -> bool:
        return m.capture_failed

    def cause(self, m: RunMetrics) -> str | None:
        return _cause(m)

    def remediation(self, m: RunMetrics) -> list[str]:
        out = super().remediation(m)
        return follow_printed(out, m, _memory_cause(m)) if m.capture.engine_solutions else out

    def message(self, m: RunMetrics) -> str:
        text = (m.capture.capture_error_message or "").strip()
        out = f"Graph capture failed ({m.capture.capture_error_class})"
        out += f": {text}" if text else ", and the exception carries no text"
        if m.settings.nccl_load_failure is not None:
            out += "; before it the log shows the NCCL library failed to load"
        if m.capture.capture_error_evidence is not None:
            confidence, evidence, conflict = m.capture.capture_error_evidence
            out = out.rstrip(".") + f". {confidence.capitalize()} a capture failure: {evidence}"
            if conflict:
                out += f" ({conflict})"
        return out
