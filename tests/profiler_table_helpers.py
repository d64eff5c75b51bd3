"""Helpers shared by the profiler-table tests: the corpus location, units, cut checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.artifacts.profiler_table import (
    ProfileTableError,
    find_tables,
    parse_table_block,
)

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "profiler-tables"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="../shared/corpus absent")

US, MS = 1e-6, 1e-3


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-9, abs=1e-12)


# --------------------------------------------------------------------------- cuts
def _complete_rows_before(text: str, cut: int, first_row: int, n_rows: int) -> int:
    lines = text.split("\n")
    pos = 0
    done = 0
    for i, ln in enumerate(lines):
        end = pos + len(ln.rstrip())
        if first_row <= i < first_row + n_rows and end <= cut:
            done += 1
        pos += len(ln) + 1
    return done


def check_cuts(text: str, n_rows: int, stride: int = 1) -> None:
    first_row = 3
    full = find_tables(text.splitlines(), "full")[0]
    header_end = len("\n".join(text.split("\n")[:2]))
    for cut in range(0, len(text.rstrip("\n")), stride):
        try:
            table = parse_table_block(text[:cut].split("\n"), "cut", 1)
        except ProfileTableError:
            assert cut < header_end + 1, cut
            continue
        want = _complete_rows_before(text, cut, first_row, n_rows)
        assert len(table.frame) == want, cut
        assert table.frame["name"].tolist() == full.frame["name"].tolist()[:want]
        assert not table.complete, cut
    whole = parse_table_block(text.split("\n"), "cut", 1)
    assert whole.complete and len(whole.frame) == n_rows
