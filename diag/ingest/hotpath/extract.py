"""One byte block in, typed columns per event kind plus the lines left to the per-line path.

How a block is read (``bench/README.md`` has the measurements behind each step). With the
compiled scanner (:mod:`.native`, C; the default where it is built):

1. **Lines and locator** in one C pass: line offsets (line numbers are ``first_lineno +
   index`` and never serialise the scan) and per line the kind whose 4-byte head follows
   the line's first ``]``. Only a locator: the matchers decide.
2. **Extract.** One strict C matcher per kind on the located lines, accepting a subset of
   what the kind's RE2 pattern accepts; ts and rank from
   :func:`diag.normalize.prefix.peel_engine_header` itself, once per distinct header key, so
   they equal the per-line values by construction.
3. **Fallback.** One C pass of all active anchors over the lines not consumed gives exactly
   the lines the per-line prefilter would have chosen.

With the RE2 kernels (``GRAPHDIAG_NATIVE=0``, no compiler at install; the C path's
reference): ``np.flatnonzero(u8 == 10)`` and a zero-copy ``pa.binary`` array of the lines,
the numpy locator (:func:`_msg_words`), one anchored RE2 pattern per kind (``take``),
numbers cast by Arrow (correctly rounded, like ``float()``), the same header cache, and one
RE2 pass of all anchors over the lines not consumed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from diag.engines.literals import fewest
from diag.events import EVENT_KINDS, INT_DIGITS
from diag.ingest.hotpath import native as native_mod
from diag.ingest.hotpath import prefixed
from diag.ingest.hotpath.kinds import (
    ENGINE_KINDS,
    ENGINE_ROWS,
    SUPPORTED_PARSERS,
    Kind,
    _dict_const,
    _float,
    _s,
    concat_columns,
)
from diag.normalize import prefix
from diag.normalize.prefix import LogLine

#: one kind's rows: line indices in the block, ts, rank, the kind's field columns
_KindRows = tuple[np.ndarray, np.ndarray, pa.Array, dict[str, Any]]

# ---------------------------------------------------------------- headers -> ts, rank


class _HeaderCache:
    """ts/rank of a header value, computed by peel's own ``peel_engine_header`` once per value.
    Shared by every scanner of the process (``HotPath.for_parsers``): emptied when it holds
    ``LIMIT`` values of a kind (a fleet of logs names millions of distinct seconds)."""

    LIMIT = 1 << 16

    def __init__(self) -> None:
        self._sg_ts: dict[bytes, float] = {}
        self._sg_rank: dict[bytes, str] = {}
        self._proc: dict[bytes, str] = {}
        self._key: dict[bytes, str] = {}
        self._vl: dict[bytes, float] = {}

    def _room(self, memo: dict[bytes, Any]) -> dict[bytes, Any]:
        if len(memo) >= self.LIMIT:
            memo.clear()
        return memo

    @staticmethod
    def _peeled(text: str) -> LogLine:
        line = LogLine("", 0, text, text)
        prefix.peel_engine_header(line, text)
        return line

    def sglang_ts(self, key: bytes) -> float:
        """ts of an SGLang ts key: "date|time" (b"" when the header has no date)."""
        hit = self._sg_ts.get(key)
        if hit is None:
            # peel's own conversion (a header with no date keeps the line's ts: none here)
            ts = prefix.sglang_epoch(*key.decode().split("|")) if key else None
            hit = self._room(self._sg_ts)[key] = np.nan if ts is None else ts
        return hit

    def sglang_rank(self, key: bytes) -> str:
        """rank of an SGLang rank key: the ranks group (" TP0" of a bracket header, "TP0 "
        of python logging's file field), 0x1f, the process prefix."""
        hit = self._sg_rank.get(key)
        if hit is None:
            ranks, head = key.decode().split("\x1f", 1)
            ranks = " " + ranks.strip() if ranks.strip() else ""
            ref = self._peeled(f"{head}[2000-01-01 00:00:00{ranks}] x")
            hit = self._room(self._sg_rank)[key] = ref.rank or ""
        return hit

    def key(self, head: bytes) -> str:
        """``LogLine.key`` of a vLLM process prefix head (which writer a block continues)."""
        hit = self._key.get(head)
        if hit is None:
            ref = self._peeled(head.decode() + "INFO 01-01 00:00:00 [x.py:1] x")
            hit = self._room(self._key)[head] = ref.key
        return hit

    def proc(self, head: bytes) -> str:
        hit = self._proc.get(head)
        if hit is None:
            ref = self._peeled(head.decode() + "INFO 01-01 00:00:00 [x.py:1] x") if head else None
            hit = self._room(self._proc)[head] = (ref.rank or "") if ref is not None else ""
        return hit

    def vllm(self, key: bytes) -> float:
        hit = self._vl.get(key)
        if hit is None:
            ref = self._peeled(key.decode() + " [x.py:1] x")
            hit = self._room(self._vl)[key] = np.nan if ref.ts is None else ref.ts
        return hit


def _lookup(keys: pa.Array, fn: Callable[[bytes], Any]) -> tuple[list[Any], np.ndarray]:
    enc = pc.dictionary_encode(keys)
    values = [fn(k) for k in enc.dictionary.to_pylist()]
    return values, enc.indices.to_numpy(zero_copy_only=False)


def _sg_common(st: pa.StructArray, cache: _HeaderCache) -> tuple[np.ndarray, pa.Array]:
    """ts and rank from the header groups, through the same keys as the C rows."""
    bracket = pc.greater(pc.binary_length(pc.fill_null(_s(st, "time"), b"")), 0)
    date = pc.if_else(bracket, pc.fill_null(_s(st, "date"), b""), _s(st, "pdate"))
    time_ = pc.if_else(bracket, _s(st, "time"), _s(st, "ptime"))
    has_date = pc.greater(pc.binary_length(pc.fill_null(date, b"")), 0)
    joined = pc.binary_join_element_wise(date, time_, b"|")
    key1 = pc.if_else(has_date, joined, pa.scalar(b"", joined.type))
    values, idx = _lookup(key1, cache.sglang_ts)
    ts = np.array(values, np.float64)[idx]
    ms = pc.fill_null(_s(st, "ms"), b"")
    has_ms = pc.greater(pc.binary_length(ms), 0)
    if pc.any(has_ms).as_py():
        frac = _float(pc.binary_join_element_wise(pa.scalar(b"0."), ms, b""))
        frac = pc.if_else(has_ms, frac, 0.0).to_numpy(zero_copy_only=False)
        ts = ts + frac  # FastPeel: ts += float("0." + ms) (NaN stays NaN)
    ranks = pc.binary_join_element_wise(
        pc.fill_null(_s(st, "ranks"), b""), pc.fill_null(_s(st, "pranks"), b""), b""
    )
    key2 = pc.binary_join_element_wise(ranks, pc.fill_null(_s(st, "phead"), b""), b"\x1f")
    ranks, ridx = _lookup(key2, cache.sglang_rank)
    uniq = sorted(set(ranks))
    pos = {r: i for i, r in enumerate(uniq)}
    codes = (
        np.array([pos[r] for r in ranks], np.int32)[ridx] if len(ridx) else np.zeros(0, np.int32)
    )
    return ts, pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(uniq, pa.string()))


def _vl_common(st: pa.StructArray, cache: _HeaderCache) -> tuple[np.ndarray, pa.Array]:
    key = pc.binary_join_element_wise(_s(st, "lvl"), _s(st, "md"), _s(st, "hms"), b" ")
    values, idx = _lookup(key, cache.vllm)
    ts = np.array(values, np.float64)[idx]
    head = pc.fill_null(_s(st, "phead"), b"")
    ranks, ridx = _lookup(head, cache.proc)
    uniq = sorted(set(ranks))
    pos = {r: i for i, r in enumerate(uniq)}
    codes = (
        np.array([pos[r] for r in ranks], np.int32)[ridx] if len(ridx) else np.zeros(0, np.int32)
    )
    return ts, pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(uniq, pa.string()))


def _leading(ok: np.ndarray) -> int:
    """How many leading entries are true (``ok`` bool), or equal their index (int)."""
    hit = ok if ok.dtype == bool else ok == np.arange(len(ok))
    bad = np.flatnonzero(~hit)
    return int(bad[0]) if len(bad) else len(hit)


#: how each engine's header groups become ts and rank
_COMMON = {"sglang": _sg_common, "vllm": _vl_common}

# ---------------------------------------------------------------- the block call


@dataclass
class BlockResult:
    """What one block gave: event columns per kind, consumed and fallback line indices."""

    first_lineno: int
    n_lines: int
    offsets: np.ndarray  # int64, n_lines + 1: line i is block[offsets[i]:offsets[i+1]]
    tables: dict[str, list[dict[str, pa.Array]]] = field(default_factory=dict)
    consumed: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    fallback: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: consumed lines behind a prefix (``prefixed.read``): line index -> the unlisted
    #: launcher prefix whose shape the stream learns there, as per line (None: a listed one)
    learn: dict[int, str | None] = field(default_factory=dict)

    def rows(self) -> int:
        return sum(len(p["line"]) for parts in self.tables.values() for p in parts)


def _word(head: bytes) -> int:
    return int.from_bytes(head[:4], "little")


def _msg_words(block: bytes | memoryview, offsets: np.ndarray) -> np.ndarray:
    """Per line, the first 4 bytes of what follows the line's first "]" (and one blank):
    where the message starts after a plain SGLang ``[date time RANKS]`` or vLLM ``[file:N]``
    header. Only a locator: the anchored regexes decide; 0 for lines without "]"."""
    u8 = np.frombuffer(block, np.uint8)
    size = len(u8)
    n = len(offsets) - 1
    if size < 8 or n == 0:
        return np.zeros(n, np.uint32)
    rb = np.flatnonzero(u8 == 93)
    if len(rb) == 0:
        return np.zeros(n, np.uint32)
    j = np.searchsorted(rb, offsets[:-1])
    has = j < len(rb)
    p = rb[np.minimum(j, len(rb) - 1)]
    has &= p < offsets[1:]
    ms = np.minimum(p + 1, size - 1)
    ms = np.minimum(ms + (u8[ms] == 32), size - 4)
    w = u8[ms].astype(np.uint32)
    w |= u8[ms + 1].astype(np.uint32) << 8
    w |= u8[ms + 2].astype(np.uint32) << 16
    w |= u8[ms + 3].astype(np.uint32) << 24
    w[~has] = 0
    return w


_BUILT: dict[tuple[str, tuple[str, ...], bool], HotPath] = {}


class HotPath:
    """The bulk reader for one engine's periodic lines (stateless apart from caches)."""

    def __init__(self, backend: str, anchors: Sequence[str], native: bool | None = None) -> None:
        self.backend = backend
        anchors = fewest(anchors)  # the same any-of test (the C literal set holds < 256)
        # free-text kinds exclude every trigger of the active parsers (their anchors)
        self.kinds = tuple(k.with_triggers(anchors) for k in ENGINE_KINDS[backend])
        #: table rows, read where their block asks (``rows``), by declaration name
        self.row_kinds = {k.name: k for k in ENGINE_ROWS[backend]}
        self._cache = _HeaderCache()
        self._common = _COMMON[backend]
        # every anchor of the active parsers: the per-line prefilter, in RE2
        self._anchor_re = "|".join(
            re.escape(a) for a in sorted(set(anchors), key=lambda a: (-len(a), a))
        )
        # prefixed lines (``prefixed.read``): a kind's literal in the line, a trigger before
        # the message
        literals = re.compile(b"|".join(re.escape(k.literal) for k in self.kinds))
        self.literal_search: Callable[[bytes], re.Match[bytes] | None] = literals.search
        anchors_rx = re.compile(self._anchor_re)
        self.anchor_search: Callable[[str], re.Match[str] | None] = anchors_rx.search
        # the compiled scanner where built and not switched off (GRAPHDIAG_NATIVE=0)
        self._native = (
            native_mod.NativeScanner((*self.kinds, *self.row_kinds.values()), anchors)
            if native_mod.native_enabled(native) and backend in native_mod.COMMON
            else None
        )

    @property
    def uses_native(self) -> bool:
        return self._native is not None

    @classmethod
    def for_parsers(
        cls, backend: str, parsers: Sequence[Any], native: bool | None = None
    ) -> HotPath | None:
        """The bulk reader for a stream read by ``parsers``; None when the hot path does not
        serve them. One per engine, anchors and native switch in a process: building one
        (RE2 patterns, C programs, literal sets) took ~10 ms, once per segment a worker
        scans (17 of the 700 MB bench log's 0.18 s segments)."""
        names = tuple(type(p).__name__ for p in parsers)
        if SUPPORTED_PARSERS.get(backend) != names:
            return None
        anchors = tuple(a for p in parsers for a in p.anchors)
        key = (backend, anchors, native_mod.native_enabled(native))
        hot = _BUILT.get(key)
        if hot is None:
            hot = _BUILT[key] = cls(backend, anchors, native)
        return hot

    @staticmethod
    def lines(block: bytes | memoryview) -> tuple[pa.BinaryArray, np.ndarray]:
        """Zero-copy one-element-per-line view of ``block`` (each element keeps its "\\n")."""
        u8 = np.frombuffer(block, np.uint8)
        nl = np.flatnonzero(u8 == 10)
        ends = nl + 1
        if len(block) and (len(ends) == 0 or ends[-1] != len(block)):
            ends = np.append(ends, len(block))  # last line without newline (end of input)
        offsets = np.empty(len(ends) + 1, np.int64)
        offsets[0] = 0
        offsets[1:] = ends
        typ, off = (
            (pa.binary(), offsets.astype(np.int32))
            if len(block) < 2**31
            else (pa.large_binary(), offsets)
        )
        arr = pa.Array.from_buffers(typ, len(ends), [None, pa.py_buffer(off), pa.py_buffer(block)])
        return arr, offsets

    def extract(self, block: bytes | memoryview, first_lineno: int, source: str) -> BlockResult:
        offsets, found, arr = self.kind_rows(block)
        n = len(offsets) - 1
        res = BlockResult(first_lineno, n, offsets)
        taken = np.zeros(n, bool)
        for kind, idx, ts, rank, fields in found:
            taken[idx] = True
            self._add(
                res, kind, source, idx + first_lineno, ts, rank, _dict_const(len(idx), ""), fields
            )
        # the per-line prefilter's choice among the lines not consumed (only those are
        # searched: 2-3x cheaper than all lines on busy logs)
        rest = np.flatnonzero(~taken)
        if self._native is not None and self._native.has_anchors:
            anchored = self._native.anchor_lines(block, offsets, rest)
        else:
            anchored = self._re2_anchored(block, arr, rest)
        res.fallback = rest[anchored]
        if len(res.fallback):  # lines behind a collector's or launcher's prefix
            read = prefixed.read(self, block, offsets, res.fallback)
            if read is not None:
                for kind, idx, ts, rank, instance, fields in read.rows:
                    taken[idx] = True
                    self._add(res, kind, source, idx + first_lineno, ts, rank, instance, fields)
                res.fallback = res.fallback[~np.isin(res.fallback, read.consumed)]
                res.learn = read.learn
        for table, parts in res.tables.items():
            if len(parts) > 1:  # several shapes of one table (receive + finish): line order
                cols = {c: concat_columns([p[c] for p in parts]) for c in parts[0]}
                order = pa.array(np.argsort(cols["line"].to_numpy(), kind="stable"))
                res.tables[table] = [{c: a.take(order) for c, a in cols.items()}]
        res.consumed = np.flatnonzero(taken)
        return res

    def kind_rows(
        self, block: bytes | memoryview
    ) -> tuple[np.ndarray, list[tuple[Kind, np.ndarray, Any, pa.Array, dict[str, Any]]], Any]:
        """The line offsets of ``block`` and, per kind, the rows its matcher accepts."""
        arr: pa.BinaryArray | None = None
        if self._native is not None:  # lines and locator in one C pass
            offsets, kind_of = self._native.locate(block)
        else:
            arr, offsets = self.lines(block)
            words = _msg_words(block, offsets)
        found = []
        for k, kind in enumerate(self.kinds):
            if self._native is not None:
                idx = np.flatnonzero(kind_of == k)
            else:
                hit = words == _word(kind.heads[0])
                for h in kind.heads[1:]:
                    hit |= words == _word(h)
                idx = np.flatnonzero(hit)
            if len(idx) == 0:
                continue
            if self._native is not None and self._native.handles(kind.name):
                got = self._native_kind(kind, block, offsets, idx)
            else:
                if arr is None:
                    arr, _ = self.lines(block)
                got = self._re2_kind(kind, arr, idx)
            if got is not None:
                found.append((kind, *got))
        return offsets, found, arr

    def rows(
        self,
        name: str,
        block: bytes | memoryview,
        offsets: np.ndarray,
        span: tuple[int, int],
        key: str | None,
        source: str,
        first_lineno: int,
    ) -> tuple[dict[str, Any], int] | None:
        """The table rows of declaration ``name`` at the lines ``span`` of ``block`` from its
        start, as long as each is one (its declaration accepts it) of the writer ``key``
        (None: any writer):
        their event columns and how many; None when the first is not. The open block that
        asked knows their cells' order (``MetricsTableBlock.bulk_room``)."""
        kind = self.row_kinds[name]
        start, stop = span
        if self._native is not None:
            got = self._native.scan(name, block, offsets, np.arange(start, stop, dtype=np.int64))
            k = _leading(got.idx - start)
            if key is not None:
                keys = np.array([self._cache.key(h) == key for h in got.keys2], bool)
                k = min(k, _leading(keys[got.codes2[:k]]))
            if k == 0:
                return None
            ts, rank = native_mod.COMMON[self.backend](got, self._cache)
            fields = native_mod.builder(kind)(got)
        else:
            a, b = int(offsets[start]), int(offsets[stop])
            arr, _ = self.lines(bytes(block[a:b]))
            st = pc.extract_regex(arr, kind.pattern)
            k = _leading(st.is_valid().to_numpy(zero_copy_only=False))
            if k == 0:
                return None
            if key is not None:
                heads = pc.fill_null(st.field("phead").slice(0, k), b"")
                writers, codes = _lookup(heads, self._cache.key)
                k = min(k, _leading(np.array([w == key for w in writers], bool)[codes]))
            if k == 0:
                return None
            st = st.slice(0, k)
            ts, rank = self._common(st, self._cache)
            fields = kind.build(st)
        res = BlockResult(first_lineno, 0, offsets)
        lines = np.arange(start, start + k, dtype=np.int64) + first_lineno
        cut = {c: a.slice(0, k) for c, a in fields.items()}
        self._add(
            res, kind, source, lines, np.asarray(ts)[:k], rank.slice(0, k), _dict_const(k, ""), cut
        )
        return res.tables[kind.table][0], k

    def _add(
        self,
        res: BlockResult,
        kind: Kind,
        source: str,
        lines: np.ndarray,
        ts: Any,
        rank: pa.Array,
        instance: pa.Array,
        fields: dict[str, Any],
    ) -> None:
        n = len(lines)
        cols: dict[str, Any] = {
            "source": _dict_const(n, source),
            # in pyarrow's pool, as every kept column: freed pages go back to the OS
            "line": pa.array(native_mod.pool_copy(lines), pa.int64()),
            "ts": pa.array(native_mod.pool_copy(np.asarray(ts, np.float64)), pa.float64()),
            "rank": rank,
            "instance": instance,
            "engine": _dict_const(n, self.backend),
        }
        cols.update(fields)
        res.tables.setdefault(kind.table, []).append(
            {c: cols[c] for c in EVENT_KINDS[kind.table].columns}
        )

    def _re2_anchored(
        self, block: bytes | memoryview, arr: pa.BinaryArray | None, rest: np.ndarray
    ) -> np.ndarray:
        """The RE2 anchor pass over the lines ``rest`` (bool per line)."""
        if arr is None:
            arr, _ = self.lines(block)
        if len(rest) != len(arr):
            arr = arr.take(pa.array(rest))
        return pc.match_substring_regex(arr, self._anchor_re).to_numpy(zero_copy_only=False)

    def _native_kind(
        self, kind: Kind, block: bytes | memoryview, offsets: np.ndarray, idx: np.ndarray
    ) -> _KindRows | None:
        """The C matcher of ``kind`` on the located lines."""
        assert self._native is not None
        got = self._native.scan(kind.name, block, offsets, idx)
        if len(got.idx) == 0:
            return None
        ts, rank = native_mod.COMMON[self.backend](got, self._cache)
        return got.idx, ts, rank, native_mod.builder(kind)(got)

    def _re2_kind(self, kind: Kind, arr: pa.Array, idx: np.ndarray) -> _KindRows | None:
        """The RE2 kernels for ``kind`` on the located lines (the C path's reference)."""
        sub = arr.take(pa.array(idx))
        st = pc.extract_regex(sub, kind.pattern)
        ok = st.is_valid()
        if kind.validate is not None:
            ok = pc.and_(ok, pc.match_substring_regex(sub, kind.validate))
        if kind.exclude is not None:
            ok = pc.and_(ok, pc.invert(pc.match_substring_regex(sub, kind.exclude)))
        okn = ok.to_numpy(zero_copy_only=False)
        if not okn.any():
            return None
        if not okn.all():
            st = st.filter(ok)
            sub = sub.filter(ok)
            idx = idx[okn]
        fields = self._extras(kind, sub, st)
        if fields is None:
            return None
        st, keep = fields
        if keep is not None:
            idx = idx[keep]
        ts, rank = self._common(st, self._cache)
        return idx, ts, rank, kind.build(st)

    @staticmethod
    def _extras(
        kind: Kind, sub: pa.Array, st: pa.StructArray
    ) -> tuple[pa.StructArray, np.ndarray | None] | None:
        """Fields found by leftmost search (as the per-line ``re.search`` calls do)."""
        if not kind.extra:
            return st, None
        names = [st.type.field(i).name for i in range(st.type.num_fields)]
        arrays = [st.field(i) for i in range(st.type.num_fields)]
        keep = np.ones(len(st), bool)
        for group, rx, typ, required in kind.extra:
            exs = pc.extract_regex(sub, rx)
            valid = exs.is_valid().to_numpy(zero_copy_only=False)
            ex = pc.struct_field(exs, [0])  # null where the search found nothing
            if required:  # the per-line path would emit None; rare: leave it to it
                keep &= valid
            if typ in ("quoted", "upper"):
                # a non-ASCII text is decoded with replacement characters per line: leave it
                ascii_only = pc.match_substring_regex(pc.fill_null(ex, b""), r"^[\x00-\x7f]*$")
                keep &= ascii_only.to_numpy(zero_copy_only=False)
            elif typ == "int":  # past INT_DIGITS: the sink's note, per line; leave it
                lng = pc.fill_null(pc.binary_length(ex), 0).to_numpy(zero_copy_only=False)
                keep &= lng <= INT_DIGITS
            names.append(group)
            arrays.append(pc.fill_null(ex, b""))
        st = pa.StructArray.from_arrays(arrays, names=names)
        if not keep.all():
            st = st.filter(pa.array(keep))
            return (st, keep) if len(st) else None
        return st, None
