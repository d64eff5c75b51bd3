"""Property-based tests: no parser ever raises on arbitrary or damaged input.

Logs handed to graphdiag are cut, garbled, mixed with binary junk and written by tools
nobody controls, so every parser is driven here with arbitrary text and with *mutated
real-format lines* (lines of the fixture incidents, the fixture generators and, when
present, ``../shared/corpus/real``, with random character insertions, deletions,
truncations and digit swaps). A parser may only fail in the documented way
(``ProfileTableError``, ``SnapshotError``), never with a traceback.

The last property checks that one log gives the same analysis whether it is read whole,
gzipped or split into a rotated set (``x.log.2.gz``, ``x.log.1``, ``x.log``).

Example counts scale with ``HYPOTHESIS_PROFILE``: the default keeps this file around
half a minute on two cores; ``HYPOTHESIS_PROFILE=ci`` runs five times as many.
"""

from __future__ import annotations

import gzip
import math
import re
import shutil
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from diag.api import analyze
from diag.artifacts.profiler_table import ProfileTable, ProfileTableError, parse_table_block
from diag.artifacts.snapshot import SnapshotError, read_plain_pickle, summarize_snapshot
from diag.events import EventSink
from diag.normalize.lines import clean, split_logical
from diag.normalize.prefix import LogLine, peel
from diag.parsers.base import LineParser
from diag.parsers.benchmark import BenchmarkParser
from diag.parsers.configs import parse_kwargs
from diag.parsers.scan import StreamScanner
from diag.parsers.sglang import SGLangParser
from diag.parsers.traceback import ErrorParser
from diag.parsers.traceback_text import ParsedTraceback, parse_traceback
from diag.parsers.vllm import VLLMParser
from tests.property_material import (
    ARBITRARY,
    config_texts,
    fuzz,
    log_files,
    mutate,
    mutate_bytes,
    mutated,
    snapshot_blobs,
    table_texts,
    text_lines,
    tracebacks,
)


# --------------------------------------------------------------------------- normalisation
def _check_logical(parts: list[str]) -> None:
    assert isinstance(parts, list)
    for p in parts:
        assert isinstance(p, str) and p.strip()
        assert "\r" not in p and "\x1b" not in p and "\x00" not in p


@fuzz(1000)
@given(ARBITRARY)
def test_split_logical_and_clean_arbitrary_text(text: str) -> None:
    _check_logical(split_logical(text))
    out = clean(text)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", out)


@pytest.mark.slow
@fuzz(1000)
@given(mutated(text_lines))
def test_split_logical_and_clean_mutated_lines(text: str) -> None:
    _check_logical(split_logical(text))
    assert isinstance(clean(text), str)


def _check_peel(line: LogLine) -> None:
    assert isinstance(line.msg, str) and isinstance(line.text, str)
    assert line.ts is None or (isinstance(line.ts, float) and math.isfinite(line.ts))
    assert line.header in (None, "sglang", "vllm", "pylog", "glog")
    assert line.repeat >= 1


@fuzz(1000)
@given(ARBITRARY)
def test_peel_arbitrary_text(text: str) -> None:
    for logical in split_logical(text) or [text]:
        _check_peel(peel("x.log", 1, logical))


@pytest.mark.slow
@fuzz(1000)
@given(mutated(text_lines))
@example("2025-11-03T09:00:00+14:00 INFO 01-01 00:00:00 [x.py:1] msg")
@example("9999-12-31T23:59:59Z INFO 12-31 23:59:59 [x.py:1] msg")
@example("0001-01-01T00:00:00Z INFO 01-01 00:00:00 [x.py:1] msg")
@example("[0000-01-01 00:00:00 TP0] Decode batch")
def test_peel_mutated_lines(text: str) -> None:
    for logical in split_logical(text):
        _check_peel(peel("x.log", 7, logical))


# --------------------------------------------------------------------------- the line parsers
PARSERS: dict[str, Callable[[], list[LineParser]]] = {
    "sglang": lambda: [SGLangParser(), ErrorParser(), BenchmarkParser()],
    "vllm": lambda: [VLLMParser(), ErrorParser(), BenchmarkParser()],
    "unknown": lambda: [SGLangParser(), VLLMParser(), ErrorParser(), BenchmarkParser()],
}


def _scan(backend: str, lines: list[bytes]) -> EventSink:
    sink = EventSink()
    scanner = StreamScanner(PARSERS[backend](), sink, backend)
    assert scanner.scan("fuzz.log", iter(lines)) == len(lines)
    scanner.close()
    assert not scanner.blocks
    return sink


@st.composite
def mutated_windows(draw: st.DrawFn) -> list[bytes]:
    """A run of consecutive lines of one real-format log (so blocks open and close),
    some of them mutated as text and then as bytes."""
    files = log_files()
    data = draw(st.sampled_from(files)).split(b"\n")
    start = draw(st.integers(0, max(0, len(data) - 1)))
    window = data[start : start + draw(st.integers(1, 40))]
    out = []
    for raw in window:
        if draw(st.integers(0, 3)) == 0:
            text = draw(mutate(raw.decode("utf-8", "replace")))
            raw = text.encode("utf-8", "surrogatepass")
            if draw(st.booleans()):
                raw = draw(mutate_bytes(raw))
        out.append(raw.replace(b"\n", b"") + b"\n")
    return out


@pytest.mark.slow
@fuzz(400)
@given(st.sampled_from(sorted(PARSERS)), mutated_windows())
def test_line_parsers_never_raise_on_mutated_logs(backend: str, lines: list[bytes]) -> None:
    _scan(backend, lines)


@pytest.mark.slow
@fuzz(300)
@given(
    st.sampled_from(sorted(PARSERS)),
    st.lists(
        st.binary(max_size=120)
        | mutated(text_lines).map(lambda s: s.encode("utf-8", "surrogatepass")),
        max_size=12,
    ),
)
def test_line_parsers_never_raise_on_arbitrary_bytes(backend: str, raws: list[bytes]) -> None:
    _scan(backend, [r.replace(b"\n", b" ") + b"\n" for r in raws])


@pytest.mark.slow
@fuzz(100)
@given(
    st.sampled_from(sorted(PARSERS)), mutated_windows(), st.lists(st.integers(1, 4000), max_size=6)
)
def test_block_cuts_do_not_change_events(backend: str, lines: list[bytes], cuts: list[int]) -> None:
    """The scanner reads byte blocks cut anywhere; where they are cut must not matter."""
    data = b"".join(lines)
    whole = _scan_blocks(backend, [data])
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert _scan_blocks(backend, pieces) == whole


def _scan_blocks(backend: str, blocks: list[bytes]) -> dict[str, Any]:
    sink = EventSink()
    scanner = StreamScanner(PARSERS[backend](), sink, backend)
    scanner.scan_blocks("fuzz.log", iter(blocks))
    scanner.close()
    # JSON text: NaN compares equal to itself there, unlike in lists of floats
    return {k: t.frame().to_json(orient="split") for k, t in sorted(sink.tables.items())}


# --------------------------------------------------------------------------- config echoes
@pytest.mark.slow
@fuzz(1000)
@given(ARBITRARY)
@example("a=" + "[" * 3000 + "]" * 3000)
@example("ServerArgs(x={" + "{" * 2000 + "}" * 2000 + "})")
@example("a=(" + "(" * 500 + "1" + ")" * 500)
def test_parse_kwargs_arbitrary_text(text: str) -> None:
    assert isinstance(parse_kwargs(text), dict)


@pytest.mark.slow
@fuzz(600)
@given(mutated(config_texts))
def test_parse_kwargs_mutated_config_echoes(text: str) -> None:
    out = parse_kwargs(text)
    assert isinstance(out, dict) and all(isinstance(k, str) for k in out)


# --------------------------------------------------------------------------- tracebacks
def _check_tb(parsed: ParsedTraceback) -> None:
    assert all(isinstance(f, str) for f in parsed.frames)
    assert all(isinstance(e, str) for e in parsed.exceptions)


@pytest.mark.slow
@fuzz(600)
@given(st.lists(ARBITRARY, max_size=12))
def test_parse_traceback_arbitrary_lines(lines: list[str]) -> None:
    _check_tb(parse_traceback(lines))


@st.composite
def mutated_traceback(draw: st.DrawFn) -> list[str]:
    block = list(draw(st.sampled_from(tracebacks())))
    if draw(st.booleans()):
        block = block[: draw(st.integers(1, len(block)))]  # cut off mid-traceback
    return [draw(mutate(ln)) if draw(st.integers(0, 2)) == 0 else ln for ln in block]


@pytest.mark.slow
@fuzz(500)
@given(mutated_traceback())
def test_parse_traceback_mutated_tracebacks(lines: list[str]) -> None:
    _check_tb(parse_traceback(lines))


# --------------------------------------------------------------------------- operator tables
def _table(lines: list[str]) -> None:
    try:
        table = parse_table_block(lines, "fuzz.txt", 1)
    except ProfileTableError:
        return
    assert isinstance(table, ProfileTable)
    table.to_dict()


@fuzz(600)
@given(st.lists(ARBITRARY, max_size=10))
def test_profile_table_arbitrary_lines(lines: list[str]) -> None:
    _table(lines)


@st.composite
def mutated_table(draw: st.DrawFn) -> list[str]:
    lines = draw(st.sampled_from(table_texts())).split("\n")
    if draw(st.booleans()):
        cut = draw(st.integers(0, sum(len(x) + 1 for x in lines)))
        lines = "\n".join(lines)[:cut].split("\n")
    for _ in range(draw(st.integers(0, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(("mutate", "drop", "dup")))
        if op == "mutate":
            lines[i] = draw(mutate(lines[i]))
        elif op == "drop":
            del lines[i]
        else:
            lines.insert(i, lines[i])
    return lines


@pytest.mark.slow
@fuzz(700)
@given(mutated_table())
def test_profile_table_mutated_tables(lines: list[str]) -> None:
    _table(lines)


# --------------------------------------------------------------------------- snapshots
def _snapshot(data: bytes) -> None:
    try:
        summary = summarize_snapshot(read_plain_pickle(data, "fuzz.pickle"), "fuzz.pickle")
    except SnapshotError as exc:
        assert str(exc).startswith("fuzz.pickle") and "\n" not in str(exc)
        return
    summary.to_dict()


@pytest.mark.slow
@fuzz(1200)
@given(st.deferred(lambda: st.sampled_from(snapshot_blobs())).flatmap(mutate_bytes))
def test_snapshot_loader_mutated_snapshots(data: bytes) -> None:
    _snapshot(data)


@pytest.mark.slow
@fuzz(1000)
@given(st.binary(max_size=300))
def test_snapshot_loader_arbitrary_bytes(data: bytes) -> None:
    _snapshot(b"\x80\x04" + data)


# --------------------------------------------------------------------------- whole / gz / rotated
ROTATION_INCIDENTS = (
    "sglang-out-of-window",
    "sglang-capture-oom",
    "vllm-out-of-window-metrics",
    "vllm-capture-oom",
)


@cache
def incident_lines(name: str) -> tuple[bytes, ...]:
    from gen.incidents import BUILDERS

    content = BUILDERS[name]().files["server.log"]
    raw = content if isinstance(content, bytes) else content.encode()
    return tuple(ln + b"\n" for ln in raw.rstrip(b"\n").split(b"\n"))


def _normalised(folder: Path, parts: list[tuple[str, int]]) -> dict[str, Any]:
    """Runs' records and findings with every (path, line) mapped to the line of the whole log."""
    offset = {str(folder / name): start for name, start in parts}
    doc = analyze([str(folder)], generated_at="fixed").to_dict()

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            if (
                isinstance(value.get("path"), str)
                and value["path"] in offset
                and isinstance(value.get("line"), int)
            ):
                value = {**value, "line": offset[value["path"]] + value["line"], "path": "<log>"}
            # (a run's ``label`` is its file's own name: x.log, x.log.gz, by design)
            return {k: walk(v) for k, v in value.items() if k != "label"}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            # "PATH:LINE" quoted in a sentence (a verdict reason) maps like evidence does
            for path, start in offset.items():
                value = re.sub(
                    re.escape(path) + r":(\d+)",
                    lambda m, start=start: f"<log>:{start + int(m.group(1))}",
                    value,
                )
                value = value.replace(path, "<log>")
        return value

    runs = [{k: v for k, v in r.items() if k not in ("id", "sources")} for r in doc["runs"]]
    return {"runs": walk(runs), "n_runs": len(runs)}


@pytest.mark.slow
@fuzz(8)
@given(st.sampled_from(ROTATION_INCIDENTS), st.integers(0, 10**6), st.integers(0, 10**6))
# found by local runs: the cut between a traceback's first line and its exception line (the
# evidence is sought on in the next file), the same cut with a one-line file between the two
# (sought on through it), and a 19-line tail whose one clock step goes back
@example("sglang-capture-oom", 0, 19)
@example("sglang-capture-oom", 167, 242)
@example("vllm-capture-oom", 0, 6)
def test_whole_gzipped_and_rotated_give_the_same_analysis(name: str, a: int, b: int) -> None:
    lines = incident_lines(name)
    i, j = sorted((a % (len(lines) + 1), b % (len(lines) + 1)))
    with _tmpdir() as tmp:
        whole, gz, rot = tmp / "whole", tmp / "gz", tmp / "rotated"
        for d in (whole, gz, rot):
            d.mkdir()
        data = b"".join(lines)
        (whole / "x.log").write_bytes(data)
        (gz / "x.log.gz").write_bytes(gzip.compress(data, mtime=0))
        (rot / "x.log.2.gz").write_bytes(gzip.compress(b"".join(lines[:i]), mtime=0))
        (rot / "x.log.1").write_bytes(b"".join(lines[i:j]))
        (rot / "x.log").write_bytes(b"".join(lines[j:]))
        expected = _normalised(whole, [("x.log", 0)])
        assert expected["n_runs"] >= 1
        assert _normalised(gz, [("x.log.gz", 0)]) == expected
        assert _normalised(rot, [("x.log.2.gz", 0), ("x.log.1", i), ("x.log", j)]) == expected


class _tmpdir:
    """A temporary folder per hypothesis example (pytest's tmp_path is per test)."""

    def __enter__(self) -> Path:
        self.path = Path(tempfile.mkdtemp(prefix="graphdiag-prop-"))
        return self.path

    def __exit__(self, *_: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
