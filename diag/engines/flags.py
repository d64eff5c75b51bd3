"""Which flags and config keys each engine version accepts, read from the released wheels.

One row per flag or key: the first and last version read that has it (``None``: still in
the newest read), and where in the source it is defined. The true boundary lies between
the neighbouring read versions; a version outside the read range gets the nearest row's
answer. Remedies name only what :func:`accepts` allows for the run's version.

Versions read, vLLM: 0.4.3 0.5.5 0.6.3.post1 0.6.4.post1 0.6.5 0.6.6.post1 0.7.3 0.8.5.post1 0.9.2 0.10.0
0.10.1.1 0.10.2 0.11.0 0.11.2 0.12.0 0.33.0; SGLang: 0.2.15 0.3.4 0.3.4.post1 0.3.4.post2
0.3.5 0.3.5.post2 0.3.6 0.3.6.post3 0.4.0.post2 0.4.1.post3 0.4.1.post4 0.4.2 0.4.2.post1 0.4.3
0.4.3.post4 0.4.6.post5 0.4.9.post6 0.4.10.post2 0.5.1.post3 0.5.3.post3 0.5.5.post3 0.5.9
0.5.15 0.5.23. Citations: ``<pkg>==<version>:<path>[:line]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from diag.engines.version import Version, parse_version


@dataclass(frozen=True)
class FlagSpan:
    """A flag or config key and the versions that accept it as input."""

    name: str
    since: Version
    until: Version | None  # last version read that has it; None: present in the newest
    cite: str

    @property
    def since_text(self) -> str:
        """The first version read that has it, as the engine spells it ('0.4.2', '0.3.6.post3')."""
        return version_text(self.since)

    def accepted(self, version: str | None) -> bool:
        ver = parse_version(version)
        if ver is None:  # unknown version: only what the newest release still accepts
            return self.until is None
        return ver >= self.since and (self.until is None or ver <= self.until + (99,))


VLLM_FLAGS: dict[str, FlagSpan] = {
    f.name: f
    for f in (
        FlagSpan(
            "--enforce-eager", (0, 4, 3), None, "vllm==0.4.3..0.33.0:vllm/engine/arg_utils.py"
        ),
        FlagSpan(
            "--gpu-memory-utilization",
            (0, 4, 3),
            None,
            "vllm==0.4.3..0.33.0:vllm/engine/arg_utils.py",
        ),
        FlagSpan("--max-num-seqs", (0, 4, 3), None, "vllm==0.4.3..0.33.0:vllm/engine/arg_utils.py"),
        FlagSpan(
            "--kv-cache-memory-bytes", (0, 10, 2), None, "vllm==0.10.2:vllm/engine/arg_utils.py"
        ),
        FlagSpan(
            "--disable-custom-all-reduce",
            (0, 4, 3),
            None,
            "vllm==0.4.3..0.33.0:vllm/engine/arg_utils.py",
        ),
        FlagSpan(
            "--cuda-graph-sizes",
            (0, 9, 2),
            (0, 12, 0),
            "vllm==0.9.2:vllm/config.py:2133 (scheduler field); absent 0.33.0",
        ),
        FlagSpan(
            "cudagraph_capture_sizes",
            (0, 6, 5),
            None,
            "vllm==0.6.5:vllm/config.py:2603 (CompilationConfig); absent vllm==0.6.4.post1; "
            "0.11.0:vllm/config/compilation.py",
        ),
        FlagSpan(
            "max_cudagraph_capture_size",
            (0, 11, 1),
            None,
            "vllm==0.11.1:vllm/config/compilation.py:448; absent 0.11.0 (max_capture_size there is "
            "field(init=False), vllm==0.11.0:vllm/config/compilation.py:323)",
        ),
        FlagSpan(
            "cudagraph_mode",
            (0, 10, 1),
            None,
            "vllm==0.10.1.1:vllm/config/compilation.py:226; absent 0.10.0",
        ),
        FlagSpan(
            "full_cuda_graph",
            (0, 9, 2),
            (0, 10, 0),
            "vllm==0.9.2:vllm/config.py CompilationConfig; deprecated for cudagraph_mode from 0.10.1",
        ),
        FlagSpan(
            "--compilation-config",
            (0, 6, 5),
            None,
            "vllm==0.6.5:vllm/engine/arg_utils.py:914 ('--compilation-config', '-O'); "
            "absent vllm==0.6.4.post1",
        ),
        FlagSpan(
            "--cudagraph-metrics",
            (0, 13, 0),
            None,
            "ObservabilityConfig.cudagraph_metrics, vllm 0.13.0..0.33 wheels, absent 0.12.0 "
            "(../shared/formats/vllm-log-formats.md R-3 and its flag table)",
        ),
        FlagSpan(
            "--max-seq-len-to-capture",
            (0, 4, 3),
            (0, 10, 2),
            "vllm==0.10.2:vllm/engine/arg_utils.py; absent 0.11.0",
        ),
    )
}

SGLANG_FLAGS: dict[str, FlagSpan] = {
    f.name: f
    for f in (
        FlagSpan(
            "--disable-cuda-graph",
            (0, 2, 15),
            None,
            "sglang==0.2.15..0.5.23:sglang/srt/server_args.py",
        ),
        FlagSpan(
            "--mem-fraction-static",
            (0, 2, 15),
            None,
            "sglang==0.2.15..0.5.23:sglang/srt/server_args.py",
        ),
        FlagSpan(
            "--cuda-graph-max-bs",
            (0, 3, 5),
            None,
            "sglang==0.3.5:sglang/srt/server_args.py:643; absent sglang==0.3.4.post2",
        ),
        FlagSpan(
            "--cuda-graph-bs",
            (0, 4, 2),
            None,
            "sglang==0.4.2:sglang/srt/server_args.py:826 (read by "
            "sglang==0.4.2:sglang/srt/model_executor/cuda_graph_runner.py:125); "
            "absent sglang==0.4.1.post4",
        ),
        FlagSpan(
            "--cuda-graph-max-bs-decode",
            (0, 5, 15),
            None,
            "sglang==0.5.15:sglang/srt/server_args.py:6244; absent 0.5.13.post1",
        ),
        FlagSpan(
            "--cuda-graph-bs-decode",
            (0, 5, 15),
            None,
            "sglang==0.5.15:sglang/srt/server_args.py:6252",
        ),
        FlagSpan(
            "--cuda-graph-backend-decode",
            (0, 5, 15),
            None,
            "sglang==0.5.15:sglang/srt/model_executor/runner_backend_utils/__init__.py:15",
        ),
        FlagSpan(
            "--cuda-graph-backend-prefill",
            (0, 5, 15),
            None,
            "sglang==0.5.15:sglang/srt/model_executor/runner_backend_utils/__init__.py; "
            "sglang==0.5.23:sglang/srt/arg_groups/fields/exec_.py:621",
        ),
        FlagSpan(
            "--disable-cuda-graph-padding",
            (0, 2, 15),
            None,
            "sglang==0.2.15..0.5.23:sglang/srt/server_args.py",
        ),
        FlagSpan(
            "--enable-torch-compile",
            (0, 2, 15),
            None,
            "sglang==0.2.15..0.5.23:sglang/srt/server_args.py",
        ),
        FlagSpan(
            "--torch-compile-max-bs",
            (0, 3, 5),
            None,
            "sglang==0.3.5:sglang/srt/server_args.py:637; absent sglang==0.3.4.post2",
        ),
        FlagSpan(
            "--max-running-requests",
            (0, 2, 15),
            None,
            "sglang==0.2.15..0.5.23:sglang/srt/server_args.py",
        ),
        FlagSpan(
            "--disable-custom-all-reduce",
            (0, 2, 15),
            None,
            "sglang==0.2.15..0.5.23:sglang/srt/server_args.py",
        ),
        FlagSpan(
            "--decode-log-interval",
            (0, 3, 5),
            None,
            "sglang==0.3.5:sglang/srt/server_args.py:441; absent sglang==0.3.4; "
            "sglang==0.5.23:sglang/srt/arg_groups/fields/observability.py:136 (flag named by "
            "arg_groups/arg_utils.py:290)",
        ),
        FlagSpan(
            "--enable-profile-cuda-graph",
            (0, 4, 9),
            None,
            "sglang==0.4.9.post6:sglang/srt/server_args.py; absent 0.4.6.post5",
        ),
        FlagSpan(
            "--enable-cudagraph-gc",
            (0, 4, 10),
            None,
            "sglang==0.4.10.post2:sglang/srt/server_args.py; absent 0.4.9.post6",
        ),
        FlagSpan(
            "--enable-dp-attention",
            (0, 3, 6),
            (0, 5, 15),
            "sglang==0.3.6:sglang/srt/server_args.py:646; absent sglang==0.3.5.post2; deprecated for --attn-dp-size in "
            "sglang==0.5.23:sglang/srt/server_args.py:418-423",
        ),
        FlagSpan(
            "--attention-backend",
            (0, 3, 4),
            None,
            "sglang==0.3.4:sglang/srt/server_args.py:517; absent 0.2.15; "
            "sglang==0.5.23:sglang/srt/arg_groups/fields/exec_.py:207",
        ),
        FlagSpan(
            "--chunked-prefill-size",
            (0, 2, 15),
            None,
            "sglang==0.2.15:sglang/srt/server_args.py; "
            "sglang==0.5.23:sglang/srt/arg_groups/fields/schedule.py:52",
        ),
        FlagSpan(
            "--piecewise-cuda-graph-max-tokens",
            (0, 5, 3),
            (0, 5, 15),
            "sglang==0.5.3.post3:sglang/srt/server_args.py; deprecated 0.5.15",
        ),
    )
}

TABLES: dict[str, dict[str, FlagSpan]] = {"vllm": VLLM_FLAGS, "sglang": SGLANG_FLAGS}
# the oldest version read per engine (the docstring's lists): older ones get its answers
OLDEST_READ: dict[str, Version] = {"vllm": (0, 4, 3), "sglang": (0, 2, 15)}


def accepts(engine: str, flag: str, version: str | None) -> bool:
    """Does this engine version take ``flag`` (a CLI flag or a config key) as input?"""
    span = TABLES.get(engine, {}).get(flag)
    if span is None:
        return False
    ver, oldest = parse_version(version), OLDEST_READ.get(engine)
    if ver is not None and oldest is not None and ver < oldest:
        version = version_text(oldest)
    return span.accepted(version)


def span(engine: str, flag: str) -> FlagSpan:
    """The row of ``flag`` (KeyError for a flag the table does not hold: a spec asking about
    a flag nobody read from a wheel is a bug)."""
    return TABLES[engine][flag]


def since(engine: str, flag: str) -> str:
    """The first version read that takes ``flag``, as the engine spells it: what a remedy's
    text quotes ("--cuda-graph-max-bs-decode from SGLang 0.5.15"), never typed by hand."""
    return span(engine, flag).since_text


def version_text(ver: Version) -> str:
    """(0, 4, 2) -> '0.4.2'; (0, 3, 6, 3) -> '0.3.6.post3' (parse_version's inverse)."""
    head = ".".join(map(str, ver[:3]))
    return head + (f".post{ver[3]}" if len(ver) > 3 and ver[3] else "")


def cite(engine: str, flag: str) -> str:
    span = TABLES.get(engine, {}).get(flag)
    return span.cite if span is not None else ""
