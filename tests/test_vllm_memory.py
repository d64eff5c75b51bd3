"""vLLM step lines held lean (issue 15): the int64 and zero-byte columns of their traffic hold
the values the float conversions gave, and a request log without end lines hashes no id."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.advise.traffic import Traffic, engine_size
from diag.events import EventTables
from diag.facts.steps import StepTiming, from_tables

counts = st.one_of(st.none(), st.integers(-1, 5000))


def _old_ints(v: np.ndarray) -> np.ndarray:
    """What the advice made of a float count column before: -1 missing, truncated."""
    return np.nan_to_num(v, nan=-1).astype(np.int64)


def _floats(col: pd.Series) -> np.ndarray:
    return col.to_numpy(dtype="float64", na_value=np.nan)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            counts,
            counts,
            counts,
            st.sampled_from([None, 1, 1, 2, 0]),
            st.sampled_from([None, "FULL", "none", "PIECEWISE", ""]),
            st.sampled_from([None, True, False]),
        ),
        max_size=30,
    ),
    st.booleans(),
)
def test_step_columns_are_the_float_definition(rows: list, with_tokens: bool) -> None:
    n = len(rows)
    frame = pd.DataFrame(
        {
            "source": pd.Series(["a.log"] * n, dtype="category"),
            "line": pd.array(range(1, n + 1), dtype="Int64"),
            "rank": pd.Series([""] * n, dtype="category"),
            "ts": np.arange(len(rows), dtype=float),
            "mode": pd.Series([r[4] for r in rows], dtype="category"),
            "num_reqs": pd.array([r[0] for r in rows], dtype="Int64"),
            "padded_tokens": pd.array([r[2] for r in rows], dtype="Int64"),
            "count": pd.array([r[3] for r in rows], dtype="Int64"),
            "uniform": pd.array([r[5] for r in rows], dtype="boolean"),
        }
    )
    if with_tokens:
        frame["num_tokens"] = pd.array([r[1] for r in rows], dtype="Int64")
    got = from_tables(EventTables({"graph_step": frame}), StepTiming())
    if not n:
        assert got.empty
        return
    tokens = _floats(frame["num_tokens"]) if with_tokens else np.full(len(rows), np.nan)
    for name, col in (
        ("requests", "num_reqs"),
        ("tokens", "num_tokens"),
        ("padded", "padded_tokens"),
    ):
        # int64 (the event column's own) where every line shows the count, else a copy:
        # int32 where the counts fit (issue 37: a 700 MB log's steps held 15 MB a column less)
        shown = frame[col] if col in frame else pd.Series([None] * n, dtype="Int64")
        some = shown.hasnans and not shown.isna().all()
        assert got.column(name).dtype == (np.int32 if some else np.int64)
    assert got.column("requests").tolist() == _old_ints(_floats(frame["num_reqs"])).tolist()
    assert got.column("tokens").tolist() == _old_ints(tokens).tolist()
    assert got.column("padded").tolist() == _old_ints(_floats(frame["padded_tokens"])).tolist()
    # the engine's flag: -1 where the line names no mode, 0 NONE, else 1; mixed: uniform=False
    want_graph = [-1 if not r[4] else int(r[4].upper() != "NONE") for r in rows]
    assert got.column("graph").tolist() == want_graph
    assert got.column("mixed").tolist() == (_floats(frame["uniform"]) == 0.0).tolist()
    count = _floats(frame["count"])
    want_steps = np.where(np.isnan(count), 1.0, count)  # a metrics row's Count, else 1
    assert got.column("steps").tolist() == want_steps.tolist()
    assert got.column("batches").tolist() == want_steps.tolist()
    for name in ("step_time_s", "usage", "gen_throughput"):  # zero-byte, read-only
        col = got.column(name)
        assert np.isnan(col).all() and len(col) == len(rows)
        if n > 1:  # (pandas copies the columns of a one-row frame)
            assert col.strides == (0,) and not col.flags.writeable
    if n > 1 and (want_steps == 1.0).all():
        assert got.column("steps").strides == (0,)


def test_engine_size_hands_back_sized_tokens_as_they_are() -> None:
    tokens = np.array([8, 16, 3], dtype=np.int64)
    tr = Traffic(t_s=np.zeros(3), requests=np.array([1, 2, 3]), steps=np.ones(3), tokens=tokens)
    assert engine_size(tr, "vllm") is tokens  # no copy of a million-step column
    some = Traffic(
        t_s=np.zeros(3),
        requests=np.array([1, 2, -1]),
        steps=np.ones(3),
        tokens=np.array([8, -1, -1]),
    )
    assert engine_size(some, "vllm", spec_tokens=1).tolist() == [8, 4, 0]


def test_requests_without_end_lines_keep_none() -> None:
    from diag.facts.requests import _lifetimes

    req = pd.DataFrame(
        {
            "request_id": pd.Series(["a", "b", "a"], dtype="str"),
            "action": pd.Series(["received", "added", "added"], dtype="category"),
            "ts": [1.0, 2.0, 3.0],
            "prompt_tokens": pd.array([5, None, 7], dtype="Int64"),
            "max_new_tokens": pd.array([None, 3, None], dtype="Int64"),
        }
    )
    frame, seen = _lifetimes(req)
    assert frame.empty and len(seen) == 0


def test_vllm_step_batches_hold_one_value_columns_as_views() -> None:
    from diag.facts import classify as cls

    def steps(count: list[int | None]) -> pd.DataFrame:
        n = len(count)
        return pd.DataFrame(
            {
                "source": pd.Series(["a.log"] * n, dtype="category"),
                "line": pd.array(range(1, n + 1), dtype="Int64"),
                "ts": np.arange(n, dtype=float),
                "rank": pd.Series([""] * n, dtype="category"),
                "mode": pd.Series(["FULL"] * n, dtype="category"),
                "num_tokens": pd.array([None] * n, dtype="Int64"),
                "padded_tokens": pd.array([8] * n, dtype="Int64"),
                "num_reqs": pd.array([5] * n, dtype="Int64"),
                "uniform": pd.array([True] * n, dtype="boolean"),
                "count": pd.array(count, dtype="Int64"),
                "origin": pd.Series(["debug_step"] * n, dtype="category"),
            }
        )

    def classified(count: list[int | None]) -> pd.DataFrame:
        tables = EventTables({"graph_step": steps(count)})
        return cls.classify_batches(from_tables(tables, StepTiming()), window)

    window = cls.Window("enabled", (1, 8, 16))
    one = classified([1, None, 1])
    for name in ("weight", "gen_throughput"):
        col = one[name].to_numpy()
        assert col.strides == (0,) and not col.flags.writeable
    assert one["weight"].tolist() == [1.0] * 3 and one["gen_throughput"].isna().all()
    assert cls.batch_counts(one)["graph"] == 3
    two = classified([1, 2, None])
    assert two["weight"].tolist() == [1.0, 2.0, 1.0]
    assert cls.batch_counts(two)["graph"] == 4


def test_step_counts_past_int32_stay_int64() -> None:
    n = 3
    frame = pd.DataFrame(
        {
            "source": pd.Series(["a.log"] * n, dtype="category"),
            "line": pd.array(range(1, n + 1), dtype="Int64"),
            "rank": pd.Series([""] * n, dtype="category"),
            "ts": np.arange(n, dtype=float),
            "mode": pd.Series(["FULL"] * n, dtype="category"),
            "num_reqs": pd.array([2**31, None, 4], dtype="Int64"),  # (a garbled count)
            "num_tokens": pd.array([7, None, 4], dtype="Int64"),
            "padded_tokens": pd.array([8, 8, 8], dtype="Int64"),
        }
    )
    got = from_tables(EventTables({"graph_step": frame}), StepTiming())
    assert got.column("requests").dtype == np.int64
    assert got.column("requests").tolist() == [2**31, -1, 4]
    assert got.column("tokens").dtype == np.int32 and got.column("tokens").tolist() == [7, -1, 4]
