"""Issue 34 item 5: advice robust to traffic the log did not show. A set fitted to a busy
window keeps the small sizes whose capture costs less than the padding they save on a quiet
hour; validation holds out whole time windows, the quietest among them; the promised figures
are the held-out ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from diag.advise.recommend import recommend
from diag.advise.validation import MIN_BLOCK_LINES, quietest_window
from diag.api import analyze
from diag.facts.pricing import price

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"


def _quiet_waste(sizes: list[int], top: int) -> float:
    """Padding waste of ``sizes`` on a quiet hour: one step at each batch size 1..top-1."""
    xs = np.arange(1, top, dtype=np.int64)
    got = price(np.array(sorted(sizes), dtype=np.int64), xs, np.ones(len(xs)))
    assert got.padding_waste is not None
    return got.padding_waste


@pytest.mark.parametrize(
    ("name", "busy_from", "most_waste"),
    [("sglang-busy-day-40-80", 40, 0.20), ("vllm-busy-tokens-140-250", 140, 0.20)],
)
def test_a_busy_window_still_gets_the_small_sizes(
    name: str, busy_from: int, most_waste: float
) -> None:
    rep = analyze([str(INCIDENTS / name)], generated_at="fixed")
    rec = recommend(rep.runs, rep.snapshots)
    assert rec["decision"]["kind"] == "change"
    sizes = rec["recommended"]["sizes"]
    small = [s for s in sizes if 1 < s < busy_from]
    assert len(small) >= 5, sizes
    # what the set fitted to the busy window alone would pad a quiet hour to, and this one
    busy_only = [1] + [s for s in sizes if s >= busy_from]
    assert _quiet_waste(busy_only, busy_from) > 0.4
    assert _quiet_waste(sizes, busy_from) <= most_waste
    assert any("small sizes kept for a quiet hour" in n for n in rec["notes"])
    # the promise is the held-out figure, and the held-out folds include the quietest window
    assert rec["validation"]["promised_coverage"] == rec["recommended"]["promised_coverage"]
    assert "the quietest window" in rec["validation"]["how"]
    picked = next(r for r in rec["frontier"] if r["recommended"])
    assert rec["validation"]["promised_coverage"] == picked["heldout_coverage"]


def test_a_max_buckets_budget_is_never_exceeded_for_the_quiet_hour() -> None:
    rep = analyze([str(INCIDENTS / "sglang-busy-day-40-80")], generated_at="fixed")
    rec = recommend(rep.runs, rep.snapshots, max_buckets=8)
    assert len(rec["recommended"]["sizes"]) <= 8 or rec["decision"]["kind"] != "change"


def test_the_quietest_window_is_found_in_time_order() -> None:
    n = 10 * MIN_BLOCK_LINES
    sizes = np.full(n, 60, dtype=np.int64)
    sizes[130:150] = 3  # a quiet stretch of MIN_BLOCK_LINES lines
    steps = np.full(n, 40.0)
    assert quietest_window(sizes, steps, MIN_BLOCK_LINES) == (130, 150)
    assert quietest_window(sizes[:30], steps[:30], MIN_BLOCK_LINES) is None  # too short


def test_one_run_is_validated_on_whole_windows_with_its_quietest() -> None:
    rep = analyze([str(INCIDENTS / "sglang-tp4-max-bs-512-quiet")], generated_at="fixed")
    adv = rep.runs[0].advice
    assert adv is not None and adv.folds.startswith("5 time blocks and the quietest window")
