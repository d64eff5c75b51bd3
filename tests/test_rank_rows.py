"""Per-rank rows by one sort of the rank codes: the same rows, in the same order, as a mask
per rank, for categorical and plain rank columns, missing ranks and ranks without rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from diag.facts.access import _rank0, rank0_rows, rank_rows, records, rows_at

RANKS = ["TP1", "", "TP0", None, "TP1", "DP1-TP0", "TP0", "TP1", None, ""]


def _frames() -> list[pd.DataFrame]:
    values = np.arange(len(RANKS)) * 1.5
    plain = pd.DataFrame({"rank": pd.Series(RANKS, dtype=object), "v": values})
    # a categorical with a category no row uses (a run's slice of a stream's frame)
    cats = pd.Categorical(RANKS, categories=["", "DP1-TP0", "TP0", "TP1", "TP7"])
    return [plain, pd.DataFrame({"rank": cats, "v": values})]


@pytest.mark.parametrize("frame", _frames(), ids=["object", "categorical"])
def test_rank_rows_are_the_masked_rows_in_order(frame: pd.DataFrame) -> None:
    rows = rank_rows(frame)
    named = {r for r in RANKS if isinstance(r, str)}
    assert set(rows) == named  # no entry for a category without rows, none for missing
    for rank in named:
        mask = (frame["rank"] == rank).to_numpy(dtype=bool, na_value=False)
        assert rows[rank].tolist() == np.flatnonzero(mask).tolist()
        assert rows_at(frame, rows[rank]).equals(frame[mask])
    assert rows_at(frame, rows.get("TP7")).empty
    assert list(rows_at(frame, None).columns) == ["rank", "v"]


def test_one_rank_is_the_frame_itself() -> None:
    frame = pd.DataFrame({"rank": pd.Categorical(["TP0"] * 4), "v": [1, 2, 3, 4]})
    assert rows_at(frame, rank_rows(frame)["TP0"]) is frame
    assert rank_rows(frame.iloc[:0]) == {}


@pytest.mark.parametrize(
    "ranks",
    [
        ["TP1", "", "TP0", "TP1"],  # rank 0's rows (untagged lines count as rank 0)
        ["TP2", "TP1", "TP2"],  # no rank 0: the lowest rank's
        ["1234", "987", "1234"],  # processes named by pid alone: the lowest pid's
        ["TP3", "TP3"],  # one rank only: every row
    ],
)
def test_rank0_rows_picks_the_rows_rank0_picks(ranks: list[str]) -> None:
    frame = pd.DataFrame({"rank": pd.Categorical(ranks), "v": np.arange(len(ranks), dtype=float)})
    picked = rank0_rows(records(frame))
    assert [dict(r) for r in picked] == [dict(r) for r in records(_rank0(frame))]
    assert 0 < len(picked) <= len(ranks)
