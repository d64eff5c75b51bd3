"""Per-rank rows: rank 0's as rank0 picks them, and each rank's batch figures summed in one
pass (``classify.rank_summaries``) as those of its rows taken apart, for categorical and
plain rank columns, missing ranks and categories without rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from diag.facts import classify as cls
from diag.facts.access import _rank0, rank0_rows, records

RANKS = ["TP1", "", "TP0", None, "TP1", "DP1-TP0", "TP0", "TP1", None, ""]


def _batches(categorical: bool, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ranks = RANKS * 3
    n = len(ranks)
    # a categorical with a category no row uses (a run's slice of a stream's frame)
    cats = ["", "DP1-TP0", "TP0", "TP1", "TP7"]
    bucket = rng.choice([np.nan, 8.0, 16.0, 32.0], n)
    return pd.DataFrame(
        {
            "rank": pd.Categorical(ranks, categories=cats)
            if categorical
            else pd.Series(ranks, dtype=object),
            "weight": rng.choice([1.0, 2.0, 5.0], n),
            "verdict": cls.labels(rng.integers(0, 3, n).astype(np.int8), cls.VERDICTS),
            "logged": rng.random(n) < 0.5,
            "bucket": bucket.astype(np.float32),
            "padded": np.where(rng.random(n) < 0.2, np.nan, bucket - rng.integers(0, 8, n)),
        }
    )


@pytest.mark.parametrize("categorical", [True, False], ids=["categorical", "object"])
@pytest.mark.parametrize("seed", range(6))
def test_rank_figures_are_those_of_each_ranks_rows(
    categorical: bool, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = _batches(categorical, seed)
    monkeypatch.setattr(cls, "_CHUNK", 4)  # (sums across chunks)
    got = cls.rank_summaries(frame)
    assert set(got) == {r for r in RANKS if isinstance(r, str)}  # none for TP7, nor missing
    for rank, (counts, waste) in got.items():
        rows = frame[(frame["rank"] == rank).to_numpy(dtype=bool, na_value=False)]
        rows = rows.reset_index(drop=True)
        assert counts == cls.batch_counts(rows)
        assert waste == cls.padding_waste(rows)
    assert cls.rank_summaries(frame.iloc[:0]) == {}


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
