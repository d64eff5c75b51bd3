"""The compiled scanner (``_cscan``, plain C): the kinds' strict matchers and the anchor pass.

RE2 submatch extraction costs 1.5-2.5 us a line; C reads a line in ~0.1-0.3 us. Every kind
is a declared line (``diag.lines.periodic``), its op table interpreted by ``_cscan_prog.c``.
Each accepts a SUBSET
of what its kind's RE2 pattern (with validate, exclude and extras) accepts and extracts the
same fields: a line it rejects goes to the per-line parsers, as a line RE2 rejects does. The
RE2 path stays as the reference (``tests/test_hotpath_native.py`` compares both) and as the
fallback when the extension is not built (an install without a compiler) or
``GRAPHDIAG_NATIVE=0``.

C returns the accepted rows compacted into arrays allocated here, the header keys of each
row (one for ts, one for rank) as codes into the distinct key bytes, so ts and rank still
come from ``peel_engine_header`` once per distinct value (``_HeaderCache``), exactly as on
the RE2 path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from diag.engines.literals import fewest
from diag.ingest.hotpath.kinds import finish_fields
from diag.lines import periodic
from diag.lines.spec import TEXT_TYPES

try:  # built by setup.py (optional: no compiler, no extension)
    from diag.ingest.hotpath import _cscan  # type: ignore[attr-defined]  # (compiled, no stub)
except ImportError:  # pragma: no cover - exercised by installs without a compiler
    _cscan = None

#: set to 0 to use the RE2 kernels even when the extension is built
ENV_NATIVE = "GRAPHDIAG_NATIVE"


def native_available() -> bool:
    return _cscan is not None


def native_enabled(requested: bool | None = None) -> bool:
    """``requested`` when given (and built), else on unless ``GRAPHDIAG_NATIVE=0``."""
    if _cscan is None:
        return False
    if requested is not None:
        return requested
    return os.environ.get(ENV_NATIVE, "1").strip().lower() not in ("0", "false", "no", "off")


def count_newlines(block: bytes | memoryview) -> int:
    """``block.count(b"\\n")``: in C when the extension is built (the segment planner and the
    NUL watch count every byte of every log), else by numpy's vectorised compare."""
    if _cscan is not None:
        return int(_cscan.count_newlines(block))
    return int(np.count_nonzero(np.frombuffer(block, np.uint8) == 10))


@dataclass(frozen=True)
class Layout:
    """The columns C fills for a kind, in its order (see the C file of the engine)."""

    ints: tuple[str, ...]  # int64 + validity (bools as 0/1)
    floats: tuple[str, ...]  # float64 + validity


_HEADERS = {"sglang": 0, "vllm": 1}  # CS_HDR_* of _cscan.h


def _program(spec: periodic.LineSpec) -> Any:
    """A declared line's op table, checked by C before use."""
    assert _cscan is not None
    ops, lits = spec.program()
    ints, floats, has_str = spec.layout()
    return _cscan.program(_HEADERS[spec.engine], ops, lits, len(ints), len(floats), has_str)


@dataclass
class Scanned:
    """The accepted lines of one kind and their fields."""

    idx: np.ndarray  # line indices in the block (int64, ascending)
    ints: dict[str, tuple[np.ndarray, np.ndarray]]  # name -> (int64 values, bool valid)
    floats: dict[str, tuple[np.ndarray, np.ndarray]]  # name -> (float64 values, bool valid)
    keys1: list[bytes]  # distinct header keys, code order
    codes1: np.ndarray  # int32 per row
    keys2: list[bytes]
    codes2: np.ndarray
    rid: pa.Array | None  # string: the request id (vLLM step lines: the cudagraph mode)

    def int_col(self, name: str) -> pa.Array:
        values, valid = self.ints[name]
        return pa.array(pool_copy(values), pa.int64(), mask=None if valid.all() else ~valid)

    def float_col(self, name: str) -> pa.Array:
        values, valid = self.floats[name]
        return pa.array(pool_copy(values), pa.float64(), mask=None if valid.all() else ~valid)

    def bool_col(self, name: str) -> pa.Array:
        values, valid = self.ints[name]
        return pa.array(values.astype(bool), pa.bool_(), mask=None if valid.all() else ~valid)


def _pool_empty(n: int, dtype: Any) -> np.ndarray:
    """An uninitialised array in pyarrow's memory pool: the columns wrap it without a copy,
    and when the sink drops them the scanner's ``release_unused`` returns the pages (numpy's
    malloc'd blocks stayed in the heap: +110 MB RSS on the 700 MB SGLang log)."""
    item = np.dtype(dtype).itemsize
    size = max(item, n * item)
    return np.frombuffer(pa.allocate_buffer(size), dtype)[:n]


def _carve(parts: list[tuple[int, Any]]) -> list[np.ndarray]:
    """Arrays of (length, dtype) cut from one pool buffer, each 8-byte aligned: one
    allocation per scan call instead of eight."""
    starts, size = [], 0
    for n, dtype in parts:
        starts.append(size)
        size += -(-n * np.dtype(dtype).itemsize // 8) * 8
    whole = _pool_empty(max(size, 8), np.uint8)
    return [
        whole[a : a + n * np.dtype(t).itemsize].view(t)
        for a, (n, t) in zip(starts, parts, strict=True)
    ]


def pool_copy(values: np.ndarray) -> np.ndarray:
    """``values`` copied into a buffer of its own (a column kept by the sink must not keep
    the whole output block of C alive, unused columns included: +16 B a decode row)."""
    out = _pool_empty(len(values), values.dtype)
    out[:] = values
    return out


class NativeScanner:
    """The C matchers for the kinds of one engine, the anchor set."""

    def __init__(self, kinds: Sequence[Any], anchors: Sequence[str]) -> None:
        assert _cscan is not None
        self._ids: dict[str, tuple[Any, Layout, Any, bool]] = {}
        for kind in kinds:
            spec = kind.spec
            words = [w.encode() for w in kind.exclude_words]
            if len(words) > 255 or not all(len(w) >= 2 and w.isascii() for w in words):
                continue  # more triggers than a C literal set holds: RE2 reads this kind
            excl = _cscan.litset(words) if words else None
            ints, floats, has_str = spec.layout()
            self._ids[kind.name] = (_program(spec), Layout(ints, floats), excl, has_str)
        heads = [
            (int.from_bytes(h[:4], "little"), k) for k, kd in enumerate(kinds) for h in kd.heads
        ]
        self._heads = np.array([w for w, _ in heads], np.uint32).tobytes()
        self._head_kind = np.array([k for _, k in heads], np.int8).tobytes()
        words = [a.encode() for a in fewest(anchors)]  # the same any-of test, fewer words
        self._anchors = (
            _cscan.litset(words)
            if words and len(words) < 256 and all(len(w) >= 2 and w.isascii() for w in words)
            else None
        )

    def handles(self, kind_name: str) -> bool:
        return kind_name in self._ids

    @property
    def has_anchors(self) -> bool:
        return self._anchors is not None

    def scan(
        self, kind_name: str, block: bytes | memoryview, offsets: np.ndarray, idx: np.ndarray
    ) -> Scanned:
        kid, layout, excl, has_str = self._ids[kind_name]
        m = len(idx)
        ni, nf = len(layout.ints), len(layout.floats)
        rows, ints, ival, flts, fval, key1, key2, stroff = _carve(
            [
                (m, np.int64),
                (ni * m, np.int64),
                (ni * m, np.uint8),
                (nf * m, np.float64),
                (nf * m, np.uint8),
                (m, np.int32),
                (m, np.int32),
                (m + 1, np.int32),
            ]
        )
        idx = np.ascontiguousarray(idx, np.int64)
        offsets = np.ascontiguousarray(offsets, np.int64)
        count, keys1, keys2, strdata = _cscan.scan(
            kid, block, offsets, idx, excl, rows, ints, ival, flts, fval, key1, key2, stroff
        )
        ints2, ival2 = ints.reshape(ni, m)[:, :count], ival.reshape(ni, m)[:, :count]
        flts2, fval2 = flts.reshape(nf, m)[:, :count], fval.reshape(nf, m)[:, :count]
        rid = None
        if has_str:  # ASCII only (C checks): valid UTF-8
            data = _pool_empty(len(strdata), np.uint8)
            data[:] = np.frombuffer(strdata, np.uint8)
            rid = pa.Array.from_buffers(
                pa.string(),
                count,
                [None, pa.py_buffer(pool_copy(stroff[: count + 1])), pa.py_buffer(data)],
            )
        return Scanned(
            idx=rows[:count],
            ints={n: (ints2[i], ival2[i].view(bool)) for i, n in enumerate(layout.ints)},
            floats={n: (flts2[i], fval2[i].view(bool)) for i, n in enumerate(layout.floats)},
            keys1=keys1,
            codes1=key1[:count],
            keys2=keys2,
            codes2=key2[:count],
            rid=rid,
        )

    def locate(self, block: bytes | memoryview) -> tuple[np.ndarray, np.ndarray]:
        """(line offsets int64[n + 1], per line the index of the located kind or -1)."""
        offsets, kind_of = _cscan.locate(block, self._heads, self._head_kind)
        return np.frombuffer(offsets, np.int64), np.frombuffer(kind_of, np.int8)

    def anchor_lines(
        self, block: bytes | memoryview, offsets: np.ndarray, idx: np.ndarray
    ) -> np.ndarray:
        """Per line of ``idx``: does it hold any anchor (bool)."""
        out = np.empty(len(idx), np.uint8)
        _cscan.anchor_lines(
            block,
            np.ascontiguousarray(offsets, np.int64),
            np.ascontiguousarray(idx, np.int64),
            self._anchors,
            out,
        )
        return out.view(bool)


# ---------------------------------------------------------------- columns, as kinds.py builds


def _declared(spec: periodic.LineSpec) -> Callable[[Scanned], dict[str, Any]]:
    """The columns of a declared line from its C row, by field type (as kinds.declared)."""

    def build(s: Scanned) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for name, typ in spec.fields():
            if typ == "int":
                fields[name] = s.int_col(name)
            elif typ == "bool":
                fields[name] = s.bool_col(name)
            elif typ in TEXT_TYPES:
                fields[name] = s.rid
            else:
                fields[name] = s.float_col(name)
        return finish_fields(spec, fields, len(s.idx))

    return build


def builder(kind: Any) -> Callable[[Scanned], dict[str, Any]]:
    """The columns of a kind's C rows, from its declaration."""
    return _declared(kind.spec)


def sg_common(s: Scanned, cache: Any) -> tuple[np.ndarray, pa.Array]:
    """ts and rank of SGLang rows, as ``extract._sg_common`` computes them from the groups."""
    ts = np.array([cache.sglang_ts(k) for k in s.keys1], np.float64)[s.codes1]
    ms, has_ms = s.floats["ms"]
    if has_ms.any():
        ts = ts + np.where(has_ms, ms, 0.0)  # FastPeel: ts += float("0." + ms)
    # ts does not depend on the ranks, nor the rank on date and time (peel_engine_header)
    return ts, _ranks([cache.sglang_rank(k) for k in s.keys2], s.codes2)


def _ranks(ranks: list[str], codes: np.ndarray) -> pa.DictionaryArray:
    uniq = sorted(set(ranks))
    pos = {r: i for i, r in enumerate(uniq)}
    idx = np.array([pos[r] for r in ranks], np.int32)[codes]
    return pa.DictionaryArray.from_arrays(pa.array(idx), pa.array(uniq, pa.string()))


def vl_common(s: Scanned, cache: Any) -> tuple[np.ndarray, pa.Array]:
    """ts and rank of vLLM rows, as ``extract._vl_common`` computes them from the groups."""
    ts = np.array([cache.vllm(k) for k in s.keys1], np.float64)[s.codes1]
    return ts, _ranks([cache.proc(k) for k in s.keys2], s.codes2)


COMMON: dict[str, Callable[[Scanned, Any], tuple[np.ndarray, pa.Array]]] = {
    "sglang": sg_common,
    "vllm": vl_common,
}
