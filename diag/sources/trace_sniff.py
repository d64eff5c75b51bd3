"""How a torch-profiler (Kineto) Chrome-trace JSON is told apart from other JSON and logs.

By content first: Kineto writes its top-level keys before ``traceEvents`` (kineto
``libkineto/src/output_json.cpp`` L472-473, L1096), and an event array starts with
``{"ph": "X", "cat": ...}``; by name where a writer put other keys first (a 9 MB
``metadata`` object ahead of the events is seen in the corpus).
"""

from __future__ import annotations

import re

TRACE_MARKERS = re.compile(
    rb'"(?:traceEvents|schemaVersion|deviceProperties|distributedInfo|baseTimeNanoseconds)"\s*:'
    rb'|\{\s*"(?:ph|cat|name|pid|tid|ts|dur)"\s*:\s*(?:"X"|"kernel"|"cuda_runtime"|"cpu_op")'
)
# vLLM {instance}-rank-{r}.{ns}.pt.trace.json.gz, SGLang {time}-TP-{r}.trace.json.gz,
# and every .json[.gz] under capture_traces/ (torch-traces.md §2)
TRACE_NAMES = re.compile(
    r"(?:\.pt\.trace\.json|\.trace\.json|capture_traces/[^/]*\.json)(?:\.gz)?$"
)
SNIFF_BYTES = 4096


def looks_like_json(head: bytes) -> bool:
    """Starts like a JSON object or array (after a BOM and whitespace)."""
    return head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[")


def looks_like_trace(head: bytes) -> bool:
    """A Chrome-trace JSON by its first KB: a JSON document with a trace key or event in it."""
    return looks_like_json(head) and TRACE_MARKERS.search(head[:SNIFF_BYTES]) is not None


def trace_by_name(path: str) -> bool:
    """Named as the engines name their traces."""
    return TRACE_NAMES.search(path.replace("\\", "/")) is not None
