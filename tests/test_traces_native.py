"""The C pre-scan of the trace reader gives what the all-Python reader gives (the oracle),
on the real traces and on hostile variants of generated ones; and broken traces are read
up to their break with one reason each, never a traceback."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from diag.artifacts import trace_reader as tr
from diag.artifacts.trace import analyse
from diag.artifacts.trace_reader import read_trace
from gen.traces import serving_steps, trace_chunks, write_trace
from tests.conftest import CORPUS

needs_c = pytest.mark.skipif(tr._tracescan is None, reason="C extension not built")


def test_the_trace_scanner_is_built_where_required() -> None:
    """CI sets GRAPHDIAG_REQUIRE_NATIVE=1: there the trace pre-scan must really be built."""
    if os.environ.get("GRAPHDIAG_REQUIRE_NATIVE") == "1":
        assert tr._tracescan is not None, "diag.artifacts._tracescan did not build (setup.py)"
    elif tr._tracescan is None:
        pytest.skip("the C extension is not built here")


def _both(path: Path) -> tuple[object, object]:
    a = analyse(read_trace(path, native=True))
    b = analyse(read_trace(path, native=False))
    return a, b


def _same(path: Path) -> None:
    a, b = _both(path)
    assert a.summary == b.summary  # type: ignore[attr-defined]
    assert a.steps.equals(b.steps)  # type: ignore[attr-defined]
    assert a.captures.equals(b.captures)  # type: ignore[attr-defined]
    assert a.problems == b.problems  # type: ignore[attr-defined]


def _real() -> list[Path]:
    folder = CORPUS / "traces"
    return sorted(folder.glob("*.gz")) if folder.is_dir() else []


@needs_c
@pytest.mark.parametrize("path", _real(), ids=lambda p: p.name[:40])
def test_native_equals_python_on_real_traces(path: Path) -> None:
    _same(path)


def _generated(tmp_path: Path) -> Path:
    steps = serving_steps(9, 1767225600.0, ("graph", "piecewise", "eager", "lost"), filler=3)
    path = tmp_path / "g.pt.trace.json"
    write_trace(path, trace_chunks(steps, rank=1, world=2))
    return path


@needs_c
def test_native_equals_python_on_hostile_variants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = json.loads(_generated(tmp_path).read_text())
    ev = doc["traceEvents"]
    # braces, brackets, quotes and escapes inside strings; keys in other orders; unicode
    ev[0]["name"] = ev[0]["name"] + ' {"cat": "python_function"} ]}'
    ev.insert(1, {"ph": "X", "cat": "python_function", "name": 'a"}\\', "ts": 1, "dur": 1})
    ev.insert(
        2,
        {
            "args": {"correlation": 5, "x": [1, {"y": "}"}]},
            "dur": 1.5,
            "ts": 2,
            "name": "k\u00e9",
            "cat": "kernel",
            "ph": "X",
        },
    )
    ev.insert(3, {"ph": "X", "cat": "kernel", "name": "no corr", "ts": 3, "dur": 1, "args": {}})
    ev.insert(4, {"ph": "X", "cat": "kernel", "ts": "4", "dur": 1, "args": {"correlation": 1}})
    ev.insert(
        5,
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "INVALID",
            "pid": 851,
            "tid": 851,
            "ts": 9,
            "dur": 1,
            "args": {"cbid": 311, "correlation": 99},
        },
    )
    for i, layout in enumerate([dict(indent=None, separators=(",", ":")), dict(indent=3)]):
        path = tmp_path / f"v{i}.json"
        path.write_text(json.dumps(doc, **layout))  # type: ignore[arg-type]
        _same(path)
        monkeypatch.setattr(tr, "BLOCK_BYTES", 5)  # every object cut by block ends
        _same(path)
        monkeypatch.setattr(tr, "BLOCK_BYTES", 4 * 1024 * 1024)


def _write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


@pytest.mark.parametrize("native", [pytest.param(True, marks=needs_c), False])
def test_truncated_gzip_reads_what_is_there(tmp_path: Path, native: bool) -> None:
    src = _generated(tmp_path)
    full = gzip.compress(src.read_bytes())
    cut = _write(tmp_path / "cut.pt.trace.json.gz", full[: len(full) * 2 // 3])
    raw = read_trace(cut, native=native)
    assert raw.problems and "truncated gzip" in raw.problems[0]
    whole = read_trace(src, native=native)
    # CPU events come first (as Kineto writes them): all steps, part of the GPU ops
    assert len(raw.spans) == len(whole.spans) == 9
    assert 0 < len(raw.o_corr) < len(whole.o_corr)


@pytest.mark.parametrize("native", [pytest.param(True, marks=needs_c), False])
def test_deep_nesting_and_a_huge_string_skip_one_event(
    tmp_path: Path, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = json.loads(_generated(tmp_path).read_text())
    want = analyse(read_trace(_write(tmp_path / "ok.json", json.dumps(doc)), native=native))
    monkeypatch.setattr(tr, "MAX_VALUE_CHARS", 1 << 20)  # 1 MiB stands in for 16 MiB
    huge = {"ph": "X", "cat": "cpu_op", "name": "x" * (3 << 20)}
    text = json.dumps(doc)
    head, tail = text.split('"traceEvents": [', 1)
    nested = '{"ph": "X", "cat": "kernel", "args": {"a": ' + "[" * 50000 + "]" * 50000 + "}}"
    body = head + '"traceEvents": [' + nested + ", " + json.dumps(huge) + ", " + tail
    got = analyse(read_trace(_write(tmp_path / "bad.json", body), native=native))
    assert got.steps.equals(want.steps)
    assert any("nested too deeply" in p for p in got.problems)
    assert any("more than 1 MiB" in p for p in got.problems)
    assert got.summary["events"] == want.summary["events"] + 2


@pytest.mark.parametrize("native", [pytest.param(True, marks=needs_c), False])
def test_events_missing_fields_are_counted(tmp_path: Path, native: bool) -> None:
    doc = json.loads(_generated(tmp_path).read_text())
    doc["traceEvents"].append(
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "args": {"correlation": 3}}
    )
    doc["traceEvents"].append(
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "dur": 1.0}
    )
    a = analyse(read_trace(_write(tmp_path / "m.json", json.dumps(doc)), native=native))
    assert a.problems == [
        "events skipped for missing fields: 1 GPU op without args.correlation, ts or dur, "
        "1 launch without args.correlation, ts or dur"
    ]
    assert a.steps["verdict"].tolist()[:4] == ["graph", "piecewise", "eager", "unverified"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"model": "llama", "layers": [1, 2]}', "without traceEvents"),
        ("not json at all", "not a JSON document"),
        ("", "empty file"),
    ],
)
def test_not_a_trace_is_one_reason(tmp_path: Path, text: str, reason: str) -> None:
    with pytest.raises(tr.TraceError, match=reason):
        read_trace(_write(tmp_path / "x.json", text))


@pytest.mark.parametrize("native", [pytest.param(True, marks=needs_c), False])
def test_a_stray_closer_between_events_is_walked_past(tmp_path: Path, native: bool) -> None:
    """A '}' where an event belongs (a mutation of a generated trace found it): the Python
    reader met it again and again, forever; each reader now ends, in well under a second."""
    import time

    text = _generated(tmp_path).read_text()
    cut = text.index("\n  {", len(text) // 3) + 1
    path = _write(tmp_path / "stray.json", text[:cut] + "},\n  " + text[cut:])
    start = time.process_time()
    raw = read_trace(path, native=native)
    assert time.process_time() - start < 5
    assert raw.events > 0 and raw.problems  # read up to (or past) the break, which is said
