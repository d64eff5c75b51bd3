"""The stream scanner with the hot path: bulk rows for the periodic lines, the per-line
parsers for everything else, in one walk that gives the per-line path's tables exactly.

Per block, :meth:`HotPath.extract` returns the bulk rows and the lines it left over. The
per-line walk handles those lines (the ones its own prefilter would have chosen), and every
line while the stream is in a state where a consumed line could matter to it:

* a multi-line block is open (tracebacks, profiler and metrics tables see every line): a
  consumed line the walk handles itself is taken back ("vetoed"), its bulk row dropped;
  but where the one open block reads table rows in bulk (``BulkRows``: a metrics table
  under a header row in the declared cell order), the run of its rows from the line on is
  read by the C scanner (or RE2) and handed to it;
* vLLM, while the log's era is not known yet (``VLLMParser`` reads every line until then):
  a consumed line keeps its bulk row and goes to the parser's ``note_bulk`` (the era note
  ``feed`` takes from it before reading the row).

Bulk rows are not sorted into the tables (blocks emit rows for earlier lines late); each is
placed at the count of per-line rows its table had when the walk passed its line, which is
what the per-line path's emission order is. ``EventSink.add_bulk`` keeps them that way; the
table rows a block gives back when it finishes (``Context.held``) go among them where the
walk was then.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from diag.ingest.hotpath.extract import HotPath
from diag.ingest.hotpath.kinds import concat_columns
from diag.normalize.shape import PrefixShapes
from diag.parsers.base import BulkRows, LineParser
from diag.parsers.scan import StreamScanner

#: the event kinds the hot path can emit
BULK_KINDS = ("decode_batch", "prefill_batch", "request", "stats", "graph_step", "iteration")

#: set to 0 to read every line with the per-line parsers (the oracle); see ``hotpath_enabled``
ENV_SWITCH = "GRAPHDIAG_HOTPATH"


def hotpath_enabled(requested: bool | None = None) -> bool:
    """``requested`` when given, else on unless ``GRAPHDIAG_HOTPATH=0``."""
    if requested is not None:
        return requested
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


class HotScanner(StreamScanner):
    """:class:`StreamScanner` whose byte regions go through the hot path first.

    Regions under ``min_region_bytes`` (a file of a few lines) stay on the per-line path,
    where the bulk path's fixed cost per call (its C scanner's set-up, Arrow arrays) is more
    than per-line Python. It was 256 KB while the kernels were RE2 patterns compiled per
    call; with the C scanner a fleet's 10 KB pod log reads in 5.0-5.2 ms on the bulk path
    against 6.1-7.1 ms per line, a many-shape fleet's 4-60 KB logs in 10-11 against 15-16 ms
    (``ingest_stage`` CPU per file, one process, a loaded machine). Both give the same rows, so this
    is only a speed choice (the oracle tests set it to 0)."""

    min_region_bytes = 4 << 10
    #: keep the line numbers read in bulk and those taken back inside a block (the bulk
    #: acceptance measure, ``tests/test_hotpath_acceptance.py``); off in use
    record_lines = False
    #: table rows read per call at most (a table's run of rows ends where its lines do)
    ROW_RUN = 128

    def __post_init__(self) -> None:
        super().__post_init__()
        self.hot = HotPath.for_parsers(self.backend, self.parsers)
        #: the parsers that may read every line (the others keep the base class' "no")
        self._every = [
            p for p in self.parsers if type(p).reads_every_line is not LineParser.reads_every_line
        ]
        self.bulk_rows = 0
        self.vetoed = 0
        self.bulk_lines: list[np.ndarray] = []
        self.block_lines: list[np.ndarray] = []
        self.noted_lines: list[np.ndarray] = []  # kept, and noted by such a parser

    def _note_bulk(self, source: str, lineno: int, raw: bytes) -> None:
        """A consumed line while a parser reads every line (vLLM before its era is known):
        the bulk row stays, the parser takes what else ``feed`` would read from the line."""
        ctx = self.ctx
        for line in self._logical(source, lineno, raw):
            for parser in self.parsers:
                if parser.reads_every_line(ctx):
                    parser.note_bulk(line, ctx)

    def _unsafe(self) -> bool:
        # (asked at every step of the walk: only parsers that may say yes are asked)
        return bool(self.blocks) or any(p.reads_every_line(self.ctx) for p in self._every)

    def _counts(self) -> tuple[int, ...]:
        """``sink.lines_emitted`` of each bulk kind (taken at every line the walk handles)."""
        tables = self.sink.tables
        return tuple(0 if (t := tables.get(k)) is None else t.n for k in BULK_KINDS)

    def _region(self, source: str, buf: bytes, pos: int, end: int, lineno: int) -> int:
        if self.hot is None or end - pos < self.min_region_bytes:
            return super()._region(source, buf, pos, end, lineno)
        block = memoryview(buf)[pos:end]
        res = self.hot.extract(block, lineno, source)
        n, off = res.n_lines, res.offsets
        consumed = np.zeros(n, bool)
        consumed[res.consumed] = True
        fallback_mask: np.ndarray | None = None
        # stops of the walk: the fallback lines, and the consumed prefixed lines whose
        # normalisation keeps state (``BlockResult.learn``)
        learn = res.learn
        fallback = sorted({*res.fallback.tolist(), *learn}) if learn else res.fallback.tolist()
        handled, snaps, vetoed = [-1], [self._counts()], []
        loose = {n for p in self.parsers for n in p.loose_rows}
        in_block: list[int] = []
        noted: list[int] = []
        held_at: list[int] = []  # per held entry: the line whose walk step gave it back
        held = self.ctx.held = []

        def handle(source: str, lineno: int, raw: bytes) -> None:
            self._handle(source, lineno, raw)
            held_at.extend([i] * (len(held) - len(held_at)))

        i = k = 0
        try:
            while True:
                if self._unsafe():  # every line, as the per-line path would see them
                    if i >= n:
                        break
                    took = self._table_rows(source, block, off, i, n, lineno) if self.blocks else 0
                    if took:
                        i += took
                        continue
                    if fallback_mask is None:
                        fallback_mask = np.zeros(n, bool)
                        fallback_mask[res.fallback] = True
                    if consumed[i] and not self.blocks:  # a parser reads every line: its note
                        self._note_bulk(source, lineno + i, bytes(block[off[i] : off[i + 1]]))
                        noted.append(i)
                    elif self.blocks or consumed[i] or fallback_mask[i]:
                        if consumed[i]:  # inside a block
                            vetoed.append(i)
                            in_block.append(i)
                        handle(source, lineno + i, bytes(block[off[i] : off[i + 1]]))
                        handled.append(i)
                        snaps.append(self._counts())
                    i += 1
                    continue
                k = bisect.bisect_left(fallback, i, k)
                if k >= len(fallback):
                    break
                i = fallback[k]
                if loose:  # table rows outside any block: one-row tables, read in bulk
                    run = 1
                    while run < self.ROW_RUN and k + run < len(fallback):
                        if fallback[k + run] != i + run:
                            break
                        run += 1
                    got = self._loose_rows(loose, source, block, off, (i, i + run), lineno)
                    if got:
                        held.append(got[0])
                        held_at.append(i)
                        i += got[1]
                        continue
                if i in learn:  # as unprefix does per line
                    prefix = learn[i]
                    shapes = self.ctx.state_of(PrefixShapes)
                    if prefix is not None:
                        shapes.learn(prefix)
                    i += 1
                    continue
                handle(source, lineno + i, bytes(block[off[i] : off[i + 1]]))
                handled.append(i)
                snaps.append(self._counts())
                i += 1
        finally:
            self.ctx.held = None
        self._keep_bulk(
            res.tables,
            lineno,
            np.array(handled),
            np.array(snaps),
            vetoed,
            list(zip(held_at, held, strict=True)),
        )
        if self.record_lines:
            self.block_lines.append(np.array(in_block, np.int64) + lineno)
            self.noted_lines.append(np.array(noted, np.int64) + lineno)
        del res
        pa.default_memory_pool().release_unused()  # the block's temporaries, not kept cached
        return lineno + n

    def _table_rows(
        self, source: str, block: memoryview, off: np.ndarray, i: int, n: int, lineno: int
    ) -> int:
        """The rows from line ``i`` on that the one open block reads in bulk, handed to it;
        how many (0: line ``i`` goes per line)."""
        if len(self.blocks) != 1 or not isinstance(self.blocks[0], BulkRows):
            return 0
        table = self.blocks[0]
        room = table.bulk_room()
        if room <= 0 or self.hot is None:
            return 0
        if not self._may_be_row(table.row, block, off, i):
            return 0
        span = (i, min(n, i + room, i + self.ROW_RUN))
        got = self.hot.rows(table.row, block, off, span, table.key, source, lineno)
        if got is None:
            return 0
        columns, k = got
        table.take_bulk(columns, k)
        self.bulk_rows += k
        if self.record_lines:
            self.bulk_lines.append(np.arange(i, i + k, dtype=np.int64) + lineno)
        return k

    def _may_be_row(self, name: str, block: memoryview, off: np.ndarray, i: int) -> bool:
        """Whether line ``i`` holds the literal every row of declaration ``name`` holds: the
        bulk read of a run of rows (~40 us of set-up) stops at once on a line without it."""
        assert self.hot is not None
        literal = self.hot.row_kinds[name].literal
        return literal in block[int(off[i]) : int(off[i + 1])].tobytes()

    def _loose_rows(
        self,
        names: set[str],
        source: str,
        block: memoryview,
        off: np.ndarray,
        span: tuple[int, int],
        lineno: int,
    ) -> tuple[tuple[str, dict[str, Any], Any], int] | None:
        """The rows at ``span`` (fallback lines, no block open) that a parser reads as one-row
        tables (``LineParser.loose_rows``), each emitted at its line: a held part and how
        many."""
        assert self.hot is not None
        for name in names:
            if not self._may_be_row(name, block, off, span[0]):
                continue
            got = self.hot.rows(name, block, off, span, None, source, lineno)
            if got is not None:
                columns, k = got
                table = self.hot.row_kinds[name].table
                before = np.full(k, self.sink.lines_emitted(table), np.int64)
                self.bulk_rows += k
                if self.record_lines:
                    self.bulk_lines.append(np.arange(span[0], span[0] + k) + lineno)
                return (table, columns, before), k
        return None

    def _keep_bulk(
        self,
        tables: dict[str, list[dict[str, Any]]],
        lineno: int,
        handled: np.ndarray,
        snaps: np.ndarray,
        vetoed: list[int],
        held: list[tuple[int, tuple[str, dict[str, Any], Any]]],
    ) -> None:
        """The region's bulk rows into the sink, in emission order: each extract row where the
        walk passed its line, each held block part where the walk was when it came back."""
        veto = np.array(vetoed, np.int64)
        self.vetoed += len(veto)
        for kind in {*tables, *(h[1][0] for h in held)}:
            col = BULK_KINDS.index(kind)
            mine = [(at, cols, before) for at, (k, cols, before) in held if k == kind]
            pieces: list[tuple[dict[str, Any], np.ndarray]] = []  # in emission order
            for part in tables.get(kind, []):  # one per kind (extract joins them)
                idx = part["line"].to_numpy() - lineno
                if len(veto):
                    keep = ~np.isin(idx, veto)
                    if not keep.all():
                        mask = pa.array(keep)
                        part = {c: a.filter(mask) for c, a in part.items()}
                        idx = idx[keep]
                if len(idx) == 0:
                    continue
                last = np.searchsorted(handled, idx, side="left") - 1
                before = snaps[last, col].astype(np.int64)
                cut = 0
                for at, cols, held_before in mine:  # the rows of lines before it, then it
                    upto = int(np.searchsorted(idx, at))
                    if upto > cut:
                        rows = {c: a.slice(cut, upto - cut) for c, a in part.items()}
                        pieces.append((rows, before[cut:upto]))
                    pieces.append((cols, held_before))
                    cut = upto
                mine = []
                if cut < len(idx):
                    pieces.append(({c: a.slice(cut) for c, a in part.items()}, before[cut:]))
                if self.record_lines:
                    self.bulk_lines.append(idx + lineno)
                self.bulk_rows += len(idx)
            pieces += [(cols, held_before) for _at, cols, held_before in mine]
            if len(pieces) == 1:
                self.sink.add_bulk(kind, *pieces[0])
            elif pieces:  # one part (each costs its buffers and dictionaries till the end)
                joined = {c: _join([p[c] for p, _ in pieces]) for c in pieces[0][0]}
                self.sink.add_bulk(kind, joined, np.concatenate([b for _, b in pieces]))


def _join(arrays: list[pa.Array]) -> pa.Array:
    """One column of several parts: plain text beside dictionary text encoded alike."""
    if any(pa.types.is_dictionary(a.type) for a in arrays):
        arrays = [a if pa.types.is_dictionary(a.type) else pc.dictionary_encode(a) for a in arrays]
    return concat_columns(arrays)


def make_scanner(
    parsers: Any, sink: Any, backend: str, hotpath: bool | None = None
) -> StreamScanner:
    """The scanner ingest uses: with the hot path unless it is switched off."""
    if hotpath_enabled(hotpath):
        return HotScanner(parsers, sink, backend)
    return StreamScanner(parsers, sink, backend)


@contextmanager
def bulk_on_every_region() -> Iterator[None]:
    """Small inputs take the bulk path too (in use, regions under ``min_region_bytes`` stay per
    line): what the oracle tests and ``bench/acceptance.py`` measure the bulk path with."""
    saved = HotScanner.min_region_bytes
    HotScanner.min_region_bytes = 0
    try:
        yield
    finally:
        HotScanner.min_region_bytes = saved
