"""vLLM's ``--cudagraph-metrics`` table rows read in bulk inside their block: the same event
tables as the per-line path (cell for cell, in the same order), with the C scanner and with
the RE2 kernels, on tables in the engine's format (``bench/gen_logs.py``, written from
vllm==0.33.0:vllm/compilation/cuda_graph.py) transformed the ways real logs vary: other
processes' lines inside the table, a second writer's table interleaved, header cells in
another order or no header row, rows past the block's line limit, cells the declaration
does not read, the input cut inside a table, byte blocks cut anywhere."""

from __future__ import annotations

import random
import sys
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from diag.events import EventSink, EventTables
from diag.ingest import parsers_for
from diag.ingest.hotpath import HotScanner
from diag.parsers.scan import StreamScanner
from diag.parsers.vllm.metrics_table import MetricsTableBlock
from tests.conftest import ROOT
from tests.extraction import extraction  # noqa: F401  (autouse: C and RE2)
from tests.property_material import fuzz
from tests.test_hotpath_oracle import assert_same_tables

sys.path.insert(0, str(ROOT / "bench"))
import gen_logs  # noqa: E402

ERA = gen_logs._VL_ERAS[1]  # 0.33: --cudagraph-metrics
API = "(APIServer pid=1000)"
OTHER = "(APIServer_DP1 pid=1200)"  # a second front end: another writer


def _rows(rng: random.Random, n: int) -> list[tuple[int, int, str, int]]:
    out = []
    for _ in range(n):
        u = rng.randint(1, 4000)
        mode = "NONE" if u > 512 else rng.choice(("FULL", "PIECEWISE"))
        out.append((u, u if mode == "NONE" else u + rng.randint(0, 7), mode, rng.randint(1, 900)))
    return out


def _table(rng: random.Random, head: str, n: int, how: str) -> list[str]:
    """One table in the engine's format, then transformed by ``how``."""
    lines = gen_logs._vl_table(head, _rows(rng, n))
    at = next(i for i, ln in enumerate(lines) if "Unpadded Tokens" in ln)
    if how == "swapped":  # another header order: the cells mean other fields
        lines[at] = lines[at].replace("Unpadded Tokens", "Count          ", 1)
    elif how == "no_header":
        del lines[at : at + 2]
    elif how == "odd_cells":  # cells the declaration does not read: those rows per line
        for i in range(at + 2, len(lines) - 1, 3):
            lines[i] = rng.choice(
                (
                    lines[i].replace("| FULL", "| full", 1),
                    lines[i].replace("|\r", "| 7 |\r", 1),
                    lines[i].replace("] | ", "] | -", 1),
                    lines[i].replace("] | ", "] | " + "9" * 17, 1),
                    lines[i].replace("] | ", "]  | ", 1),
                )
            )
    return lines


def _log(seed: int, hows: list[str], foreign: int, interleave: bool, cut_end: bool) -> bytes:
    rng = random.Random(seed)
    clock = 1_000.0
    out = gen_logs._vl_real_startup("03-08 09:00:00", ERA, 1000)
    for k, how in enumerate(hows):
        clock += 1
        ts = f"03-08 09:{int(clock) // 60 % 60:02d}:{int(clock) % 60:02d}"
        core = f"({ERA.core} pid=1001)"
        for _ in range(rng.randint(1, 5)):
            out += gen_logs._vl_step(rng, ts, ERA, core, 1000, rng.randint(1, 700))[0]
        out += gen_logs._vl_real_steady(rng, "stats", ts, API, 40, 0)
        n = 620 if how == "long" else rng.randint(1, 90)
        table = _table(rng, f"{API} INFO {ts} [compilation/cuda_graph.py:123] ", n, how)
        for _ in range(foreign):  # other processes' lines inside the table
            at = rng.randint(1, len(table) - 1)
            table[at:at] = gen_logs._vl_step(rng, ts, ERA, core, 1000, rng.randint(1, 700))[0]
        if interleave and k % 2:  # another writer's table, line by line between these
            other = _table(rng, f"{OTHER} INFO {ts} [compilation/cuda_graph.py:123] ", 20, "plain")
            mixed = []
            for a, b in zip(table, other + [""] * len(table), strict=False):
                mixed += [a, b] if b else [a]
            table = mixed
        out += table
        out += gen_logs._vl_real_steady(rng, "received", ts, API, 40, 0)
    if cut_end:  # the input ends inside a table
        ts = "03-08 10:00:00"
        out += _table(rng, f"{API} INFO {ts} [compilation/cuda_graph.py:123] ", 30, "plain")[:-3]
    return ("\n".join(out) + "\n").encode()


def _scan(cls: type[StreamScanner], data: bytes, cuts: list[int]) -> tuple[EventTables, Any]:
    at = sorted({c % (len(data) + 1) for c in cuts})
    blocks = [data[a:b] for a, b in zip([0, *at], [*at, len(data)], strict=True)]
    sink = EventSink()
    scanner = cls(parsers_for("vllm"), sink, "vllm")
    if isinstance(scanner, HotScanner):
        scanner.min_region_bytes = 0
    scanner.scan_blocks("x.log", blocks)
    scanner.close()
    return sink.to_tables(), scanner


HOWS = ("plain", "plain", "swapped", "no_header", "odd_cells", "long")


@fuzz(12)
@given(
    st.integers(0, 2**32),
    st.lists(st.sampled_from(HOWS), min_size=1, max_size=5),
    st.integers(0, 6),
    st.booleans(),
    st.booleans(),
    st.lists(st.integers(1, 10**9), max_size=6),
)
def test_table_rows_in_bulk_give_the_per_line_tables(
    seed: int, hows: list[str], foreign: int, interleave: bool, cut_end: bool, cuts: list[int]
) -> None:
    data = _log(seed, hows, foreign, interleave, cut_end)
    pure, _ = _scan(StreamScanner, data, [])
    hot, _ = _scan(HotScanner, data, cuts)
    assert_same_tables(pure, hot, f"{hows} foreign={foreign} interleave={interleave}")


def test_rows_under_the_declared_header_are_read_in_bulk_and_no_others() -> None:
    """Not vacuous: a plain table's data rows all come from the bulk path; under a header
    in another order, or with no header row, none do (the block reads them per line)."""
    counts = {}
    for how in ("plain", "swapped", "no_header"):
        data = _log(7, [how] * 3, 0, False, False)
        _, plain = _scan(HotScanner, data, [])
        orig = HotScanner._table_rows
        try:
            HotScanner._table_rows = lambda *a, **k: 0  # type: ignore[method-assign]
            _, without = _scan(HotScanner, data, [])
        finally:
            HotScanner._table_rows = orig  # type: ignore[method-assign]
        counts[how] = plain.bulk_rows - without.bulk_rows
    rows = (
        sum(1 for ln in _log(7, ["plain"] * 3, 0, False, False).split(b"\n") if b"123] | " in ln)
        - 3
    )  # the header rows
    assert counts == {"plain": rows, "swapped": 0, "no_header": 0}


def test_the_block_takes_no_more_rows_than_its_line_limit() -> None:
    """Past ``MAX_LINES`` the block is done and each further row is a one-row table read
    per line, emitted at once; with other processes' step lines among the rows, read alike
    (the rows a limit-free block would take give the same table: this guards the limit's
    line accounting, not a different reading)."""
    data = _log(3, ["long"], 30, False, False)
    assert data.count(b"123] | ") > MetricsTableBlock.MAX_LINES
    pure, _ = _scan(StreamScanner, data, [])
    hot, _ = _scan(HotScanner, data, [])
    assert_same_tables(pure, hot, "long")
