"""The cause a failure's remedies are picked by: the error class, refined by the message.

Detection gives each error a class (``oom``, ``stream_capture_invalid``, ``unsupported_op``,
``distributed``, ``other``; diag/engines/data/errors.yaml). Two of them are too broad to
advise on: ``other`` holds illegal memory accesses and compile failures as well as errors
nobody has classed yet, and ``distributed`` holds both a broken transport and ranks that
disagree, and a CUDACHECK failure inside the engine's own custom all-reduce kernel is
neither (its first step is the engine's switch to turn that kernel off). Each cause below
gets its own first step in GD100/GD105; memory remedies serve
only ``oom`` (and ``other`` where the run shows memory pressure, see ``RunMetrics``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from diag.engines.errors import judge, signature
from diag.rules.base import Remedy
from diag.rules.metrics import RunMetrics

Cause = Literal[
    "oom",
    "stream_capture_invalid",
    "unsupported_op",
    "distributed",
    "illegal_memory_access",
    "collective_mismatch",
    "custom_all_reduce",
    "transport",
    "compile",
    "attention_backend",
    "other",
]
CLASSES: tuple[Cause, ...] = (
    "oom",
    "stream_capture_invalid",
    "unsupported_op",
    "distributed",
    "other",
)


@dataclass(frozen=True)
class Signature:
    cause: Cause
    refines: tuple[str, ...]  # the detection classes it narrows
    pattern: re.Pattern[str]
    source: str


def _detected(sig_id: str) -> re.Pattern[str]:
    """The pattern of an errors.yaml row: the text detection reads is declared there once."""
    return signature(sig_id).regex


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "illegal_memory_access",
        ("other",),
        re.compile(
            r"an illegal memory access was encountered|misaligned address|"
            r"an illegal instruction was encountered|hipErrorIllegalAddress|cudaErrorIllegalAddress"
        ),
        "CUDA runtime cudaGetErrorString for cudaErrorIllegalAddress (700), "
        "cudaErrorIllegalInstruction (715), cudaErrorMisalignedAddress (716); HIP the same text",
    ),
    Signature(
        "collective_mismatch",
        ("other", "distributed"),
        re.compile(r"Detected mismatch between collectives on ranks"),
        "torch==2.5.1:torch/csrc/distributed/c10d/ProcessGroupWrapper.cpp (TORCH_DISTRIBUTED_DEBUG)",
    ),
    Signature(
        "custom_all_reduce",
        ("other", "distributed"),
        _detected("custom_ar_cudacheck"),
        "errors.yaml custom_ar_cudacheck: vLLM's csrc/custom_all_reduce.cuh CUDACHECK "
        "('Failed: Cuda error %s:%d '%s'', vllm==0.6.4.post1, 0.8.4, 0.33.0 _C strings)",
    ),
    Signature(
        "transport",
        ("other", "distributed"),
        re.compile(
            r"gloo/transport/|Connection (?:closed by peer|reset by peer|refused)|"
            r"Socket Timeout|remote process exited|unhandled system error|NCCL_SOCKET"
        ),
        "torch==2.5.1:third_party/gloo/gloo/transport/tcp/pair.cc; NCCL ncclSystemError / "
        "ncclRemoteError texts",
    ),
    Signature(
        "compile",
        ("other",),
        re.compile(
            r"Error building extension|ptxas|InductorError|BackendCompilerFailed|"
            r"torch\._dynamo\.exc|CompilationError|nvcc fatal|triton\.compiler"
        ),
        "torch==2.5.1:torch/utils/cpp_extension.py _run_ninja_build ('Error building "
        "extension'); torch/_inductor/exc.py InductorError; triton CompilationError; ptxas",
    ),
)


# the causes a raise site may narrow a class to (tools/gen_raise_atlas.py names them)
NARROWER: dict[str, tuple[str, ...]] = {
    "custom_all_reduce": ("other", "distributed"),
    "compile": ("other",),
}


def cause_of(error_class: str | None, message: str | None, frame_cause: str | None = None) -> Cause:
    """The remedy cause of an error: its class, narrowed by the message where a signature
    says more (an ``other`` that is an illegal memory access, a ``distributed`` that is a
    gloo transport failure), else by its innermost frames (``frame_cause``: custom
    all-reduce, NCCL, an attention backend, a compile step; diag/engines/frame_causes.py)."""
    cls: Cause = error_class if error_class in CLASSES else "other"
    text = message or ""
    site = judge(text).cause  # the engine raise site's own cause (raise_atlas.json)
    if site in NARROWER and cls in NARROWER[site]:
        return site  # type: ignore[return-value]
    for sig in SIGNATURES:
        if cls in sig.refines and sig.pattern.search(text):
            return sig.cause
    if frame_cause in get_args(Cause):
        return frame_cause  # type: ignore[return-value]
    return cls


def custom_all_reduce_off(m: RunMetrics) -> bool:
    """The log shows custom all-reduce already off (its flag or the engine's own warning)."""
    return m.settings.custom_all_reduce_off is not None


def _attention_flag(m: RunMetrics) -> str:
    return "--attention-backend" if m.backend == "sglang" else "VLLM_ATTENTION_BACKEND"


def _backend_step(m: RunMetrics) -> str | None:
    return (
        f"Try another attention backend ({_attention_flag(m)}) or turn off the feature "
        "whose kernel faults; memory settings do not help an illegal access."
    )


def _attention_step(m: RunMetrics) -> str | None:
    backend = (
        f" (the log shows {m.settings.attention_backend})" if m.settings.attention_backend else ""
    )
    return (
        f"Try another attention backend with {_attention_flag(m)}{backend}: the failing frame "
        "is in the attention backend's own code, so memory settings do not help."
    )


# The first step per narrowed cause, shared by GD100 (in capture) and GD105 (outside it):
# one declaration, whichever rule meets the cause.
CAUSE_FIRST_STEPS: tuple[Remedy, ...] = (
    Remedy(
        "Re-run with CUDA_LAUNCH_BLOCKING=1 so the error is raised at the kernel that faults "
        "(torch's own hint after an asynchronous CUDA error).",
        causes=("illegal_memory_access",),
        source="torch==2.5.1:c10/cuda/CUDAException.cpp ('For debugging consider passing "
        "CUDA_LAUNCH_BLOCKING=1')",
    ),
    Remedy(
        "Try another attention backend or turn off the feature whose kernel faults; "
        "memory settings do not help an illegal access.",
        causes=("illegal_memory_access",),
        specific=_backend_step,
    ),
    Remedy(
        "The ranks ran different collectives: start every rank with identical arguments and "
        "model revision, and set TORCH_DISTRIBUTED_DEBUG=DETAIL to see which op differs; "
        "memory settings do not help.",
        causes=("collective_mismatch",),
        source="torch==2.5.1:torch/csrc/distributed/c10d/ProcessGroupWrapper.cpp",
    ),
    Remedy(
        "Turn the engine's custom all-reduce off with --disable-custom-all-reduce: the failing "
        "CUDA check is in its own all-reduce code, and NCCL then does the all-reduce.",
        causes=("custom_all_reduce",),
        flags=("--disable-custom-all-reduce",),
        in_effect=custom_all_reduce_off,
    ),
    Remedy(
        "Try another attention backend: the failing frame is in the attention backend's own code.",
        causes=("attention_backend",),
        specific=_attention_step,
    ),
    Remedy(
        "Fix the NCCL/gloo transport first (network, NCCL_SOCKET_IFNAME / "
        "GLOO_SOCKET_IFNAME, firewall, a rank that exited): memory settings do not help.",
        causes=("transport",),
    ),
    Remedy(
        "A compile step failed (a JIT extension, Triton or Inductor): check the toolchain for "
        "this GPU (CUDA/ROCm version, nvcc/ptxas support for its architecture) and clear the "
        "kernel cache, or run without the feature that compiles.",
        causes=("compile",),
    ),
)
