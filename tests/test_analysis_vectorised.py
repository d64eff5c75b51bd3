"""The vectorised analysis steps against straightforward per-row references.

Analysis reads millions of decode rows, so the batch verdicts, request lifetimes and
windowed step counts are computed on whole numpy columns; each is checked here against
the plain definition, one row (or request) at a time, on generated input.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.facts import classify as cls

windows = st.builds(
    cls.Window,
    graphs=st.sampled_from(["enabled", "disabled", "unknown"]),
    sizes=st.one_of(
        st.none(),
        st.lists(st.integers(1, 300), min_size=1, max_size=12, unique=True).map(
            lambda xs: tuple(sorted(xs))
        ),
    ),
    sizes_inferred=st.booleans(),
    padding=st.booleans(),
    decode_graphs=st.booleans(),
)
batch_sizes = st.lists(st.one_of(st.none(), st.integers(-2, 400)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(windows, batch_sizes)
def test_infer_many_is_infer_per_row(window: cls.Window, sizes: list[int | None]) -> None:
    arr = np.array([math.nan if s is None else float(s) for s in sizes], dtype=float)
    verdicts, reasons, buckets = cls.infer_many(window, arr)
    for i, s in enumerate(sizes):
        verdict, reason, bucket = window.infer(s)
        assert (verdicts[i], reasons[i]) == (verdict, reason)
        if verdict == "graph":
            assert buckets[i] == bucket
        elif window.graphs == "enabled" and window.decode_graphs and window.sizes and s:
            # the bucket a logged graph batch was padded to: the smallest size >= it
            above = [c for c in window.sizes if c >= s]
            expected = min(above) if above and s > 0 else None
            assert (math.isnan(buckets[i]) and expected is None) or buckets[i] == expected
        else:
            assert math.isnan(buckets[i])


@given(st.lists(st.integers(0, len(cls.REASONS) - 1), max_size=50))
def test_labels_are_the_names_with_fixed_categories(codes: list[int]) -> None:
    got = pd.Series(cls.labels(np.array(codes, dtype=np.int8), cls.REASONS))
    assert got.tolist() == [cls.REASONS[c] for c in codes]
    assert list(got.cat.categories) == list(cls.REASONS)  # the same in every run: concat-safe


@given(
    st.lists(st.sampled_from(["graph", "eager", "unknown", "other"]), max_size=30),
    st.booleans(),
)
def test_verdict_codes_of_any_frame(verdicts: list[str], categorical: bool) -> None:
    frame = pd.DataFrame({"verdict": verdicts})
    if categorical and "other" not in verdicts:
        frame["verdict"] = cls.labels(
            np.array([cls.VERDICTS.index(v) for v in verdicts], dtype=np.int8), cls.VERDICTS
        )
    want = [cls.VERDICTS.index(v) if v in cls.VERDICTS else 3 for v in verdicts]
    assert cls.verdict_codes(frame).tolist() == want


@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.floats(1e-4, 10.0, allow_nan=False)),
        min_size=1,
        max_size=60,
    )
)
def test_group_medians_are_np_median_per_group(rows: list[tuple[int, float]]) -> None:
    from diag.advise.grouping import group_medians

    keys = np.array([k for k, _ in rows])
    values = np.array([v for _, v in rows])
    uniq, inv = np.unique(keys, return_inverse=True)
    want = [np.median(values[keys == k]) for k in uniq]
    assert group_medians(inv, values, len(uniq)).tolist() == want


@given(st.lists(st.integers(0, 3000), max_size=60), st.booleans())
def test_unique_inverse_is_np_unique(values: list[int], huge: bool) -> None:
    from diag.advise.grouping import DIRECT_MAX, unique_inverse

    arr = np.array(values + ([DIRECT_MAX + 5] if huge else []), dtype=np.int64)
    got, want = unique_inverse(arr), np.unique(arr, return_inverse=True)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    assert got[0].dtype == want[0].dtype


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.integers(1, 80), st.integers(1, 50), min_size=1, max_size=25),
    st.lists(st.integers(1, 90), max_size=2),
)
def test_one_solver_gives_every_budget_its_own_optimum(
    hist: dict[int, int], forced: list[int]
) -> None:
    from diag.advise.buckets import BucketPlan, BucketSolver

    solver = BucketSolver(hist, 0.0, forced)
    need = len(set(forced) | {solver.ceiling})
    for k in range(need, need + 8):
        plan = solver.plan(k)
        assert plan == BucketSolver(hist, 0.0, forced).plan(k)  # a solver of its own
        assert plan == BucketPlan.evaluate(plan.sizes, hist)  # the figures, scored row by row


requests = st.lists(
    st.tuples(
        st.sampled_from(["r1", "r2", "b", "a10", "a9"]),
        st.sampled_from(["received", "added", "finished", "aborted", "response", "other"]),
        st.floats(0, 100, allow_nan=False),
        st.one_of(st.none(), st.integers(0, 500)),
    ),
    max_size=40,
)


@settings(max_examples=100, deadline=None)
@given(requests, st.sampled_from(["object", "category", "str"]))
def test_lifetimes_are_the_group_by_definition(rows: list, id_dtype: str) -> None:
    from diag.facts.requests import _lifetimes

    req = pd.DataFrame(
        {
            "request_id": pd.Series([r[0] for r in rows], dtype=id_dtype),
            "action": pd.Series([r[1] for r in rows], dtype=id_dtype),
            "ts": [r[2] for r in rows],
            "prompt_tokens": pd.array([r[3] for r in rows], dtype="Int64"),
            "max_new_tokens": pd.array([r[3] and r[3] // 2 for r in rows], dtype="Int64"),
        }
    )
    got, seen = _lifetimes(req)
    # ``seen``: the rows in order of their ids' first lines
    first = list(dict.fromkeys(r[0] for r in rows))
    assert [got["request_id"].iloc[i] for i in seen] == [
        i for i in first if i in set(got["request_id"])
    ]
    want = []
    for rid in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == rid]
        starts = [r[2] for r in mine if r[1] in ("received", "added")]
        ends = [r[2] for r in mine if r[1] in ("finished", "aborted", "response")]
        if starts and ends:
            prompts = [r[3] for r in mine if r[3] is not None]
            want.append((rid, min(starts), max(ends), max(prompts) if prompts else None))
    assert [
        (r, s, e, None if p is pd.NA else p)
        for r, s, e, p in zip(
            got["request_id"], got["start_ts"], got["end_ts"], got["prompt_tokens"], strict=True
        )
    ] == want


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.floats(0, 50, allow_nan=False)),
            st.sampled_from(["graph", "eager", "unknown"]),
            st.sampled_from([1.0, 2.0, 0.5]),
        ),
        min_size=1,
        max_size=40,
    ),
    st.lists(st.tuples(st.floats(0, 50), st.floats(0, 50)), min_size=1, max_size=10),
)
def test_windowed_counts_sum_the_batches_inside_each_lifetime(
    batches: list[tuple[float | None, str, float]], lives: list[tuple[float, float]]
) -> None:
    from diag.facts.requests import _windowed_counts

    frame = pd.DataFrame(
        {
            "ts": [np.nan if t is None else t for t, _, _ in batches],
            "verdict": [v for _, v, _ in batches],
            "weight": [w for _, _, w in batches],
        }
    )
    starts = np.array([min(a, b) for a, b in lives])
    ends = np.array([max(a, b) for a, b in lives])
    graph, eager = _windowed_counts(frame, starts, ends)
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        inside = [(v, w) for t, v, w in batches if t is not None and s <= t <= e]
        assert graph[i] == pytest.approx(sum(w for v, w in inside if v == "graph"))
        assert eager[i] == pytest.approx(sum(w for v, w in inside if v == "eager"))


@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.0, 2.5, 7.0])), st.booleans()),
        max_size=40,
    ),
    st.integers(1, 4),
)
def test_top_rows_are_the_head_of_the_stable_descending_sort(
    rows: list[tuple[float | None, bool]], n: int
) -> None:
    from diag.rules.selectors import _top

    frame = pd.DataFrame(
        {"key": [np.nan if k is None else k for k, _ in rows], "row": range(len(rows))}
    )
    mask = np.array([m for _, m in rows], dtype=bool)
    want = frame[mask].sort_values("key", ascending=False, kind="stable").head(n)
    got = _top(frame, mask, frame["key"].to_numpy(), n)
    assert got["row"].tolist() == want["row"].tolist()


@given(
    st.lists(st.tuples(st.integers(1, 60), st.sampled_from([1.0, 2.0, 3.0, 0.0])), min_size=1),
    st.sampled_from([0.5, 0.9, 0.999, 1.0]),
)
def test_weighted_quantile_is_the_sorted_cumulative_share(
    rows: list[tuple[int, float]], q: float
) -> None:
    from diag.advise.grouping import weighted_quantile

    sizes = np.array([s for s, _ in rows], dtype=np.int64)
    weights = np.array([w for _, w in rows])
    if weights.sum() == 0:
        return
    order = np.argsort(sizes)
    cum = np.cumsum(weights[order]) / weights.sum()
    want = int(sizes[order][min(int(np.searchsorted(cum, q)), len(cum) - 1)])
    assert weighted_quantile(sizes, weights, q) == want


@given(
    st.lists(st.sampled_from([b"a", b"\n", b"\r\n", b"\xe2\x82\xac", b"\x00"]), max_size=80),
    st.sets(st.integers(1, 40), max_size=8),
    st.integers(1, 9),
)
def test_lines_at_is_the_numbered_lines(parts: list[bytes], wanted: set[int], size: int) -> None:
    import io

    from diag.sources.readers import lines_at

    data = b"".join(parts)
    want = {}
    physical = data.split(b"\n")  # line n is physical[n - 1]; a final empty piece is no line
    for n in wanted:
        if n <= len(physical) and (n < len(physical) or physical[-1]):
            want[n] = physical[n - 1] + (b"\n" if n < len(physical) else b"")
    got = lines_at(io.BytesIO(data[3:]), data[:3], wanted, [], size)
    assert got == want


@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.floats(-3, 300)), st.sampled_from([1.0, 2.0, 0.5])),
        max_size=40,
    )
)
def test_batch_shape_histogram_is_the_sorted_sizes(rows: list[tuple[float | None, float]]) -> None:
    frame = pd.DataFrame(
        {
            "batch_size": [np.nan if s is None else s for s, _ in rows],
            "weight": [w for _, w in rows],
        }
    )
    shape = cls.batch_shape(frame)
    known = [(round(s), w) for s, w in rows if s is not None]
    if not known:
        assert shape is None
        return
    sizes = sorted({int(np.rint(s)) for s, _ in rows if s is not None})
    assert shape is not None and [int(k) for k in shape["histogram"]] == sizes
    assert shape["min"] == sizes[0] and shape["max"] == sizes[-1]
    assert shape["count"] == round(sum(w for _, w in known))


@pytest.mark.parametrize("dtype", ["category", "str", "object"])
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_report_does_not_depend_on_the_text_column_dtypes(
    engine: str, dtype: str, tmp_path: Path
) -> None:
    """The sink may hand request ids, actions, modes and origins over as objects,
    categoricals or Arrow strings: the analysis reads them by value (a generated log with
    request lines, decode or DEBUG step lines and a restart)."""
    import dataclasses
    import json

    from bench.gen_logs import GENERATORS, write_log
    from diag.api import analyze
    from diag.events import EventTables
    from diag.ingest import ingest
    from diag.render.serialize import to_json

    path = tmp_path / f"{engine}.log"
    write_log(path, GENERATORS[engine](600_000, seed=3, restarts=1))
    ing = ingest([str(path)], jobs=1)
    assert len(ing.tables["request"]) > 100
    want = json.loads(to_json(analyze([str(path)], ingested=ing, generated_at="-")))
    text = {"request_id", "action", "mode", "origin", "reason", "topic", "marker"}
    frames = {
        kind: frame.astype({c: dtype for c in frame.columns if c in text})
        for kind, frame in ing.tables._frames.items()
    }
    again = dataclasses.replace(ing, tables=EventTables(frames))
    got = json.loads(to_json(analyze([str(path)], ingested=again, generated_at="-")))
    assert got["runs"] and got == want
