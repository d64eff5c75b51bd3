"""Broken torch-profiler traces next to a good log (``docs/bad-inputs.md``, trace rows):
one stderr line each with its reason, the trace's intact part and the log analysed, no
traceback, the reports written whole."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gen.traces import serving_steps, trace_chunks
from tests.bad_inputs_support import assert_good_log_analysed, assert_row, with_good

STEPS = serving_steps(6, 1762160400.0, ("graph", "eager"), filler=2)


def _doc() -> str:
    return "".join(trace_chunks(STEPS, rank=0))


def make_truncated_gzip(folder: Path) -> Path:
    data = gzip.compress(_doc().encode(), mtime=0)
    path = folder / "a-rank-0.1.pt.trace.json.gz"
    path.write_bytes(data[: len(data) // 2])
    return path


def make_not_a_trace(folder: Path) -> Path:
    path = folder / "config.trace.json"  # named like a trace, a config inside
    path.write_text(json.dumps({"model": "llama", "traceEvents_hint": None}))
    return path


def make_deep_nesting(folder: Path) -> Path:
    head, tail = _doc().split('"traceEvents": [\n', 1)
    bomb = '{"ph": "X", "cat": "kernel", "args": ' + "[" * 100_000 + "]" * 100_000 + "},\n"
    path = folder / "deep.pt.trace.json"
    path.write_text(head + '"traceEvents": [\n' + bomb + tail)
    return path


def make_huge_string(folder: Path) -> Path:
    head, tail = _doc().split('"traceEvents": [\n', 1)
    big = json.dumps({"ph": "X", "cat": "user_annotation", "name": "step[" + "x" * (100 << 20)})
    path = folder / "huge.pt.trace.json.gz"
    path.write_bytes(
        gzip.compress((head + '"traceEvents": [\n' + big + ",\n" + tail).encode(), 1, mtime=0)
    )
    return path


def make_missing_fields(folder: Path) -> Path:
    doc = json.loads(_doc())
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "kernel":
            ev.pop("dur")
            break
    path = folder / "missing-rank-0.1.pt.trace.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("make", "status", "reason", "steps"),
    [
        pytest.param(make_truncated_gzip, "partial", "truncated gzip", 6, marks=pytest.mark.slow),
        (make_not_a_trace, "skipped", "without traceEvents", None),
        (make_deep_nesting, "partial", "nested too deeply", 6),
        pytest.param(make_huge_string, "partial", "more than 16 MiB", 6, marks=pytest.mark.slow),
        (make_missing_fields, "partial", "1 GPU op without args.correlation, ts or dur", 6),
    ],
    ids=["truncated-gzip", "not-a-trace", "deep-nesting", "100MB-string", "missing-fields"],
)
def test_bad_trace_next_to_a_good_log(
    tmp_path: Path, make: object, status: str, reason: str, steps: int | None
) -> None:
    outcome, bad, folder = with_good(tmp_path, make)  # type: ignore[arg-type]
    entry = assert_row(outcome, bad, folder, status, reason)
    assert entry["kind"] == "trace"
    assert_good_log_analysed(outcome, folder)
    assert outcome.doc is not None
    got = [t for t in outcome.doc["traces"] if t["path"] == str(bad)]
    if steps is None:
        assert got == []
    else:
        assert sum(got[0]["steps"].values()) == steps
    assert not list((tmp_path / "reports").glob("*.tmp*"))
