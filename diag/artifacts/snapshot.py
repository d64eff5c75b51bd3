"""Summarise CUDA caching-allocator snapshots (``torch.cuda.memory._dump_snapshot`` pickles).

SGLang's ``--enable-profile-cuda-graph`` writes ``cuda_graph_runner_memory_usage.pickle``;
users attach such files to bug reports, so they are untrusted input. ``pickle.load`` would
run whatever the file asks for, even with a restricted ``find_class`` the attack surface
stays large. This module therefore never calls the unpickler: :func:`read_plain_pickle` is
a small opcode interpreter that builds dict/list/tuple/str/bytes/int/float/bool/None (and
memo references) and refuses every opcode that imports, calls or extends objects.

Totals follow ``torch.cuda._memory_viz stats`` (torch-artifacts.md A13): reserved = sum of
segment ``total_size``; allocated = sum of ``requested_size`` of ``active_allocated``
blocks (2.0 legacy: ``history[0].real_size``); active = sum of ``size`` of blocks that are
allocated or pending free. CUDA-graph private pools are segments whose ``segment_pool_id``
is not ``(0, 0)`` (A10).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from diag.artifacts.safe_pickle import (
    NotASnapshotError,
    SnapshotError,
    UnsafePickleError,
    read_plain_pickle,
)
from diag.model import PoolSummary, SnapshotSummary, TopAllocation

__all__ = [
    "DEFAULT_MAX_BYTES",
    "NotASnapshotError",
    "PoolSummary",
    "SnapshotError",
    "SnapshotSummary",
    "TopAllocation",
    "UnsafePickleError",
    "load_snapshot",
    "read_plain_pickle",
    "summarize_snapshot",
]

MIB = 1024 * 1024
DEFAULT_MAX_BYTES = 512 * MIB
TOP_ALLOCATIONS = 10
TOP_FRAMES = 5


# --------------------------------------------------------------------------- summary


def _fmt_size(n: int) -> str:
    return f"{n / MIB:.1f} MiB" if n >= MIB // 10 else f"{n} bytes"


def _fmt_limit(n: int) -> str:
    return f"{n // MIB} MiB" if n % MIB == 0 and n else f"{n}-byte"


def load_snapshot(
    path: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES
) -> SnapshotSummary:
    """Read and summarise a snapshot pickle; the size limit is checked before reading."""
    spath = os.fspath(path)
    try:
        return _load(spath, max_bytes)
    except SnapshotError as exc:
        exc.path = spath
        raise


def _load(spath: str, max_bytes: int) -> SnapshotSummary:
    try:
        size = os.stat(spath).st_size
    except OSError as exc:
        raise SnapshotError(f"{spath}: cannot read snapshot: {exc.strerror or exc}") from None
    if size > max_bytes:
        raise SnapshotError(
            f"{spath}: file is {_fmt_size(size)}, over the {_fmt_limit(max_bytes)} snapshot limit"
        )
    try:
        with open(spath, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise SnapshotError(f"{spath}: cannot read snapshot: {exc.strerror or exc}") from None
    if len(data) > max_bytes:  # grew after stat
        raise SnapshotError(f"{spath}: file is over the {_fmt_limit(max_bytes)} snapshot limit")
    obj = read_plain_pickle(data, spath)
    return summarize_snapshot(obj, spath)


_ACTIVE_STATES = frozenset({"active_allocated", "active_pending_free", "active_awaiting_free"})


def _int(value: Any, what: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise NotASnapshotError(f"{path}: not an allocator snapshot: {what} is not an integer")
    return value


def _pool_id(seg: dict[Any, Any], path: str, idx: int) -> tuple[int, int]:
    raw = seg.get("segment_pool_id", (0, 0))
    if (
        isinstance(raw, (tuple, list))
        and len(raw) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in raw)
    ):
        return (int(raw[0]), int(raw[1]))
    raise NotASnapshotError(
        f"{path}: not an allocator snapshot: segment {idx} has a bad segment_pool_id"
    )


def _block_requested(b: dict[Any, Any]) -> int:
    """Bytes the caller asked for, as ``_memory_viz._block_extra`` reads them."""
    if "frames" not in b:
        hist = b.get("history")
        if isinstance(hist, list) and hist and isinstance(hist[0], dict):
            real = hist[0].get("real_size")
            if isinstance(real, int):
                return real
    req = b.get("requested_size", b["size"])
    return req if isinstance(req, int) else int(b["size"])


def _block_frames(b: dict[Any, Any]) -> list[Any]:
    frames = b.get("frames")
    if frames is None:
        hist = b.get("history")
        if isinstance(hist, list) and hist and isinstance(hist[0], dict):
            frames = hist[0].get("frames")
    return frames if isinstance(frames, list) else []


# MemoryViz.js frameFilter: allocator/interpreter plumbing nobody wants in a report
_OMIT_FUNCTIONS = (
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
)
_OMIT_FILES = (
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
)


def _frame_strings(frames: Iterable[Any], limit: int = TOP_FRAMES) -> list[str]:
    """Innermost useful frames as "file:line:name", Python frames preferred."""
    kept: list[tuple[bool, str]] = []
    for f in frames:
        if not isinstance(f, dict):
            continue
        name, filename, line = str(f.get("name", "")), str(f.get("filename", "")), f.get("line", 0)
        if (
            filename == "??"
            or any(o in name for o in _OMIT_FUNCTIONS)
            or any(o in filename for o in _OMIT_FILES)
        ):
            continue
        kept.append((filename.endswith(".py"), f"{filename}:{line}:{name}"))
    python = [s for is_py, s in kept if is_py]
    return (python or [s for _, s in kept])[:limit]


def _as_segments(obj: Any, path: str) -> tuple[list[dict[Any, Any]], dict[Any, Any]]:
    """The segment list and the top-level dict, validated just enough to summarise."""
    if isinstance(obj, list):
        # torch.cuda.memory_snapshot() output; _memory_viz._read wraps it the same way
        if not obj or not all(isinstance(s, dict) and "blocks" in s for s in obj):
            raise NotASnapshotError(
                f"{path}: not an allocator snapshot: a list, not a dict with 'segments'"
            )
        top: dict[Any, Any] = {"segments": obj, "device_traces": []}
    elif isinstance(obj, dict):
        top = obj
    else:
        raise NotASnapshotError(
            f"{path}: not an allocator snapshot: top level is {type(obj).__name__}, not a dict"
        )
    segments = top.get("segments")
    if not isinstance(segments, list):
        raise NotASnapshotError(f"{path}: not an allocator snapshot: no 'segments' list")
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict) or not isinstance(seg.get("blocks"), list):
            raise NotASnapshotError(
                f"{path}: not an allocator snapshot: segment {i} has no 'blocks' list"
            )
        _int(seg.get("total_size"), f"segment {i} total_size", path)
        for j, b in enumerate(seg["blocks"]):
            if not isinstance(b, dict) or not isinstance(b.get("state"), str):
                raise NotASnapshotError(
                    f"{path}: not an allocator snapshot: segment {i} block {j} has no state"
                )
            _int(b.get("size"), f"segment {i} block {j} size", path)
    return segments, top


def summarize_snapshot(obj: Any, path: str) -> SnapshotSummary:
    """Summary of already-loaded snapshot data (dict from ``_snapshot()`` or segment list)."""
    segments, top = _as_segments(obj, path)
    traces_raw = top.get("device_traces", [])
    traces: list[list[Any]] = (
        [t if isinstance(t, list) else [] for t in traces_raw]
        if isinstance(traces_raw, list)
        else []
    )

    reserved = allocated = active = 0
    pools: dict[tuple[int, int], dict[str, int]] = {}
    live_blocks: list[tuple[int, int, tuple[int, int], str, list[Any]]] = []
    # per device: address -> requested bytes of active_allocated blocks (for peak replay)
    end_alloc: dict[int, dict[int, int]] = {}
    devices: set[int] = set()
    for i, seg in enumerate(segments):
        pid = _pool_id(seg, path, i)
        dev = seg.get("device", 0)
        dev = dev if isinstance(dev, int) else 0
        devices.add(dev)
        pool = pools.setdefault(pid, {"reserved": 0, "allocated": 0, "active": 0, "segments": 0})
        total = int(seg["total_size"])
        reserved += total
        pool["reserved"] += total
        pool["segments"] += 1
        seg_addr = seg.get("address", 0)
        offset = seg_addr if isinstance(seg_addr, int) else 0
        for b in seg["blocks"]:
            size = int(b["size"])
            addr = b.get("address")
            addr = addr if isinstance(addr, int) and not isinstance(addr, bool) else offset
            offset += size
            state = b["state"]
            if state == "active_allocated":
                req = _block_requested(b)
                allocated += req
                pool["allocated"] += req
                end_alloc.setdefault(dev, {})[addr] = req
            if state in _ACTIVE_STATES:
                active += size
                pool["active"] += size
                live_blocks.append((size, _block_requested(b), pid, state, _block_frames(b)))

    live_blocks.sort(key=lambda t: t[0], reverse=True)
    top_allocs = [
        TopAllocation(
            bytes=size, frames=_frame_strings(frames), requested_bytes=req, pool_id=pid, state=state
        )
        for size, req, pid, state, frames in live_blocks[:TOP_ALLOCATIONS]
    ]
    pool_list = [
        PoolSummary(
            pool_id=pid,
            kind="default" if pid == (0, 0) else "graph",
            reserved_bytes=v["reserved"],
            allocated_bytes=v["allocated"],
            segments=v["segments"],
            active_bytes=v["active"],
        )
        for pid, v in sorted(pools.items(), key=lambda kv: (kv[0] != (0, 0), kv[0]))
    ]
    oom = sum(
        1 for entries in traces for e in entries if isinstance(e, dict) and e.get("action") == "oom"
    )
    return SnapshotSummary(
        path=path,
        torch_format=torch_format(top),
        total_reserved_bytes=reserved,
        total_allocated_bytes=allocated,
        total_active_bytes=active,
        peak_bytes=_peak(traces, end_alloc),
        oom_events=oom,
        pools=pool_list,
        top_allocations=top_allocs,
        segments=len(segments),
        devices=sorted(devices),
    )


def _peak(traces: list[list[Any]], end_alloc: dict[int, dict[int, int]]) -> int | None:
    """Highest live (requested) bytes on any one device while history was recorded.

    Replays alloc/free like MemoryViz's "Active Memory Timeline": memory alive before
    recording started is known from frees of never-seen addresses and from blocks still
    allocated at dump time that the trace never allocated. ``snapshot`` entries (total
    active bytes at that moment) count as observations too. None without any history.
    """
    best: int | None = None
    for dev, entries in enumerate(traces):
        live: dict[int, int] = {}
        pending: set[int] = set()
        delta = max_delta = orphan = 0
        replayed = False
        observed: int | None = None
        for e in entries:
            if not isinstance(e, dict):
                continue
            action, addr, size = e.get("action"), e.get("addr"), e.get("size")
            if not isinstance(size, int) or not isinstance(addr, int):
                continue
            if action == "alloc":
                replayed = True
                delta -= live.pop(addr, 0)
                pending.discard(addr)
                live[addr] = size
                delta += size
                max_delta = max(max_delta, delta)
            elif action == "free_requested":
                replayed = True
                if addr in live:
                    delta -= live.pop(addr)
                else:
                    orphan += size
                    delta -= size
                pending.add(addr)
            elif action == "free_completed":
                replayed = True
                if addr in pending:
                    pending.discard(addr)
                elif addr in live:
                    delta -= live.pop(addr)
                else:
                    orphan += size
                    delta -= size
            elif action == "snapshot":
                observed = size if observed is None else max(observed, size)
        if not replayed and observed is None:
            continue
        peak = observed or 0
        if replayed:
            before = orphan + sum(
                req for addr, req in end_alloc.get(dev, {}).items() if addr not in live
            )
            peak = max(peak, before + max_delta)
        best = peak if best is None else max(best, peak)
    return best


# --------------------------------------------------------------------------- torch era


def torch_format(top: dict[Any, Any]) -> str | None:
    """Torch release range implied by the keys present (torch-artifacts.md A9).

    Each key either proves a lower bound (it was added in that release) or, when absent
    where it would have to appear, an upper bound. None when nothing can be told.
    """
    lo, hi = 0, 99  # minor versions of 2.x
    evidence = False

    def at_least(v: int) -> None:
        nonlocal lo, evidence
        lo, evidence = max(lo, v), True

    def at_most(v: int) -> None:
        nonlocal hi, evidence
        hi, evidence = min(hi, v), True

    segments = top.get("segments")
    segments = segments if isinstance(segments, list) else []
    is_dict_snapshot = "device_traces" in top or "allocator_settings" in top
    if segments:
        seg0 = segments[0] if isinstance(segments[0], dict) else {}
        if "segment_pool_id" in seg0 or "is_expandable" in seg0:
            at_least(1)
        else:
            at_most(0)
    if is_dict_snapshot:
        settings = top.get("allocator_settings")
        if isinstance(settings, dict):
            at_least(3)
            if "graph_capture_record_stream_reuse" in settings:
                at_least(9)
            else:
                at_most(8)
        else:
            at_most(2)
        if "external_annotations" in top:
            at_least(5)
        else:
            at_most(4)
        if "host_segments" in top or "host_traces" in top:
            at_least(14)
    traces = top.get("device_traces")
    entries = [
        e
        for t in (traces if isinstance(traces, list) else [])
        if isinstance(t, list)
        for e in t
        if isinstance(e, dict)
        and e.get("action")
        in ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free")
    ]
    if entries:
        e0 = entries[0]
        for key, since in (
            ("time_us", 2),
            ("compile_context", 8),
            ("user_metadata", 10),
            ("pool_id", 12),
        ):
            if key in e0:
                at_least(since)
            else:
                at_most(since - 1)
    all_entries = (
        e
        for t in (traces if isinstance(traces, list) else [])
        if isinstance(t, list)
        for e in t
        if isinstance(e, dict)
    )
    if any(e.get("action") == "annotate" or "internal_metadata" in e for e in all_entries):
        at_least(14)
    if not evidence:
        return None
    if lo > hi:  # contradictory keys: trust the newest feature seen
        hi = 99
    if hi == 99:
        return f"2.{lo}+"
    return f"2.{lo}" if lo == hi else f"2.{lo}-2.{hi}"
