"""A run's decode speed per verdict (diag.facts.throughput) against pandas' own groupby
quantiles over the same rows: graph-served and eager batch lines with a positive batch
size and a positive throughput, other verdicts and unusable rows left out."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from diag.batch_labels import VERDICTS
from diag.facts.throughput import decode_speeds, eager_change


def _frame(seed: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    size = rng.integers(0, 300, n).astype(float)
    size[rng.random(n) < 0.05] = np.nan
    gen = rng.uniform(-50, 5000, n)
    gen[rng.random(n) < 0.1] = np.nan
    verdict = pd.Categorical(rng.choice(VERDICTS, n), categories=VERDICTS)
    return pd.DataFrame({"batch_size": size, "gen_throughput": gen, "verdict": verdict})


def _expected(frame: pd.DataFrame) -> dict[str, tuple[int, list[float], list[float]]]:
    ok = (
        (frame["batch_size"] > 0)
        & (frame["gen_throughput"] > 0)
        & frame["verdict"].isin(["graph", "eager"])
    )
    rows = frame[ok].assign(per_req=lambda f: f["gen_throughput"] / f["batch_size"])
    out = {}
    for verdict, g in rows.groupby(rows["verdict"].astype(str)):
        q = [0.25, 0.5, 0.75]
        out[verdict] = (
            len(g),
            list(g["gen_throughput"].quantile(q)),
            list(g["per_req"].quantile(q)),
        )
    return out


@pytest.mark.parametrize("seed", range(20))
def test_speeds_are_the_groupby_quantiles(seed: int) -> None:
    frame = _frame(seed, 1 + seed * 37)
    got = decode_speeds(frame)
    want = _expected(frame)
    assert [s.verdict for s in got] == [v for v in ("graph", "eager") if v in want]
    for s in got:
        n, gen, per_req = want[s.verdict]
        assert s.n == n
        assert s.gen_throughput == pytest.approx(gen)
        assert s.per_req == pytest.approx(per_req)


def test_no_throughput_column_or_no_rows_gives_none() -> None:
    frame = _frame(1, 50)
    assert decode_speeds(frame.drop(columns="gen_throughput")) == ()
    assert decode_speeds(frame.iloc[:0]) == ()
    assert decode_speeds(frame.assign(gen_throughput=0.0)) == ()


@pytest.mark.parametrize("seed", range(5))
def test_eager_change_is_the_medians_ratio(seed: int) -> None:
    frame = _frame(seed, 400)
    want = _expected(frame)
    graph, eager = want["graph"][2][1], want["eager"][2][1]
    assert eager_change(decode_speeds(frame)) == pytest.approx((eager - graph) / graph)
    only_graph = frame[frame["verdict"] != "eager"]
    assert eager_change(decode_speeds(only_graph)) is None
