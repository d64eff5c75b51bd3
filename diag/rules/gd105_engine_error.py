"""GD105 engine-error."""

from __future__ import annotations

from diag.rules.base import Remedy, Rule
from diag.rules.causes import CAUSE_FIRST_STEPS, Cause, cause_of
from diag.rules.metrics import RunMetrics


def _cause(m: RunMetrics) -> Cause:
    e = m.errors.engine_error
    return cause_of(
        e.error_class if e else None, e.message if e else None, e.frame_cause if e else None
    )


def _phase(*phases: str):  # type: ignore[no-untyped-def]
    return lambda m: m.errors.engine_error is not None and m.errors.engine_error.phase in phases


def _read(m: RunMetrics) -> str | None:
    e = m.errors.engine_error
    if e is None:
        return None
    if e.placed_by == "frames":
        return (
            f"Read the traceback at {e.at}: its innermost frame names the failing component "
            "(the first error of the run; later ones usually follow from it)."
        )
    # no frame placed it: the log may hold no traceback for it (a bare error line, a crash)
    return (
        f"Find the traceback of the error at {e.at} (its process prints it with the error, "
        "in this log or in that process's own output): its innermost frame names the failing "
        "component (the first error of the run; later ones usually follow from it)."
    )


class GD105(Rule):
    """The engine failed outside graph capture: a start-up error before or after capture
    (weights, memory profiling, KV allocation, warm-up) or an error while serving. The
    server did not come up, or stopped serving, whatever its graphs did.

    The run's first root error is the one reported (not a later one such as vLLM's
    front-end "Engine core initialization failed. See root cause above", nor a follow-on
    error errors.yaml marks secondary, nor a traceback cut before its exception line while
    a whole one exists), placed by its traceback frames, else by the serving lines before
    it, else by the last start-up phase the log opened. Remedies follow the cause and the phase: memory steps only for
    an out-of-memory error, in the engine's own words for that phase (vLLM's KV check
    "Try increasing `gpu_memory_utilization` or decreasing `max_model_len`", its warm-up
    "Please try lowering `max_num_seqs` or `gpu_memory_utilization`", SGLang's "Please
    try to increase --mem-fraction-static"); an illegal memory access, a collective
    mismatch, a transport or a compile failure each get their own first step.

    Condition: no capture error, and an error line the run's facts place outside capture
    (detection: facts/verdict.py engine_error). One request's error while the engine goes on
    serving (its frames the HTTP / serving / tokenizer layer's, or the engines' own text for
    a rejected request) is GD106's, never this rule's. An error the log does not place in any
    phase fires too: a traceback is never passed over.

    Fires::

        INFO 10-18 10:03:11 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: model='m', enforce_eager=False
        INFO 10-18 10:03:20 [gpu_worker.py:298] Memory profiling takes 3.10 seconds
        ERROR 10-18 10:03:21 [core.py:708] EngineCore failed to start.
        ERROR 10-18 10:03:21 [core.py:708] Traceback (most recent call last):
        ERROR 10-18 10:03:21 [core.py:708]   File "/usr/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 2521, in profile_run
        ERROR 10-18 10:03:21 [core.py:708]     hidden_states = self._dummy_run(self.max_num_tokens)
        ERROR 10-18 10:03:21 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.

    Near miss (a server that captured and served: no error line)::

        incident: sglang-healthy
    """

    code = "GD105"
    name = "engine-error"
    severity = "error"
    trigger = "an engine error outside capture: start-up (before or after capture) or serving"
    impact = 95
    evidence = "engine_error"
    reads = ("errors.engine_error",)
    remedies = (
        *CAUSE_FIRST_STEPS,
        # ---- out of memory, by phase, in each engine's own words where it prints them
        Remedy(
            "The weights do not fit: spread the model over more GPUs (tensor parallelism) or "
            "use a quantized checkpoint.",
            causes=("oom",),
            when=_phase("weights"),
        ),
        Remedy(
            "Lower --max-num-batched-tokens (the profiling pass runs one batch of that many "
            "tokens) or --max-model-len; with torch.compile on, its autotuning in that pass "
            "needs memory too.",
            engine="vllm",
            causes=("oom",),
            when=_phase("memory_profiling"),
            source="vllm==0.10.2:vllm/v1/worker/gpu_model_runner.py profile_run "
            "(_dummy_run(self.max_num_tokens))",
        ),
        Remedy(
            "Raise --gpu-memory-utilization or lower --max-model-len: the KV pool cannot hold "
            "one request of the maximum length (vLLM's own advice).",
            engine="vllm",
            causes=("oom",),
            flags=("--gpu-memory-utilization",),
            when=_phase("kv_allocation"),
            source="vllm==0.10.2:vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory",
        ),
        Remedy(
            "Lower --max-num-seqs or --gpu-memory-utilization (vLLM's own advice for an OOM "
            "in the warm-up after capture).",
            engine="vllm",
            causes=("oom",),
            flags=("--max-num-seqs", "--gpu-memory-utilization"),
            when=_phase("warmup_after_capture"),
            source="vllm==0.8.5:vllm/v1/worker/gpu_model_runner.py _dummy_sampler_run",
        ),
        Remedy(
            "Lower --gpu-memory-utilization to leave activations room, or --max-num-seqs / "
            "--max-num-batched-tokens to shrink the largest step.",
            engine="vllm",
            causes=("oom",),
            flags=("--gpu-memory-utilization", "--max-num-seqs"),
            when=_phase("serving", "unknown"),
        ),
        Remedy(
            "Raise --mem-fraction-static: the KV pool did not fit in what is left after the "
            "weights (SGLang's own advice).",
            engine="sglang",
            causes=("oom",),
            flags=("--mem-fraction-static",),
            when=_phase("kv_allocation"),
            source="sglang==0.4.3:srt/model_executor/model_runner.py init_memory_pool",
        ),
        Remedy(
            "Lower --chunked-prefill-size (e.g. 4096) for an OOM in prefill, --max-running-requests "
            "for one in decode, or --mem-fraction-static to leave activations room (SGLang's "
            "tuning guide, in that order).",
            engine="sglang",
            causes=("oom",),
            flags=("--chunked-prefill-size", "--max-running-requests", "--mem-fraction-static"),
            when=_phase("memory_profiling", "serving", "unknown"),
            source="SGLang's hyperparameter tuning guide, 'If OOM happens during prefill, try "
            "to decrease --chunked-prefill-size' (project docs, not in the wheel)",
        ),
        # ---- the rest
        Remedy(
            "Fix the NCCL/gloo transport first (network, NCCL_SOCKET_IFNAME, firewall): memory "
            "settings do not help a distributed failure.",
            causes=("distributed",),  # not the custom all-reduce: it talks CUDA IPC, no sockets
        ),
        Remedy(
            "Read the traceback: its innermost frame names the failing component (the first "
            "error of the run; later ones usually follow from it).",
            causes=(
                "other",
                "stream_capture_invalid",
                "unsupported_op",
                "distributed",
                "oom",
                "illegal_memory_access",
                "collective_mismatch",
                "transport",
                "compile",
            ),
            specific=_read,
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        return m.errors.engine_error is not None and not m.capture_failed

    def cause(self, m: RunMetrics) -> str | None:
        return _cause(m)

    def message(self, m: RunMetrics) -> str:
        e = m.errors.engine_error
        assert e is not None
        text = e.headline[:240] or "an error line without text"
        more = (
            f" ({e.others} more error line{'s' if e.others != 1 else ''} follow)"
            if e.others
            else ""
        )
        after = "; the log shows serving lines after it" if e.served_after else ""
        return f"The engine failed {e.during} ({e.error_class}): {text}{more}{after}"
