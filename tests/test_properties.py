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
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
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
from diag.parsers.traceback import ErrorParser, ParsedTraceback, parse_traceback
from diag.parsers.vllm import VLLMParser
from tests.conftest import CORPUS, ROOT

SCALE = 5 if os.environ.get("HYPOTHESIS_PROFILE") == "ci" else 1
INCIDENTS = ROOT / "fixtures" / "incidents"


def n(default: int) -> int:
    """Examples for one test under the current profile."""
    return default * SCALE


def fuzz(examples: int) -> Any:
    """Settings shared by the fuzz tests: no deadline (lark warms up), no example database.

    Under CI (``CI`` set) the examples are derandomised, so a green CI run stays green;
    locally every run explores new examples."""
    return settings(
        max_examples=n(examples),
        deadline=None,
        database=None,
        derandomize=bool(os.environ.get("CI")),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# --------------------------------------------------------------------------- real-format material
def _read(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


@lru_cache(maxsize=1)
def log_files() -> tuple[bytes, ...]:
    """Every real-format log we have: fixture incidents, generators, shared corpus."""
    from gen.incidents import build_all

    files = [_read(p) for p in sorted(INCIDENTS.glob("*/server.log*"))]
    for inc in build_all():
        for content in inc.files.values():
            raw = content if isinstance(content, bytes) else content.encode()
            files.append(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    real = CORPUS / "real"
    if real.is_dir():
        files += [_read(p) for p in sorted(real.glob("*.log"))]
    return tuple(files)


@lru_cache(maxsize=1)
def log_lines() -> tuple[bytes, ...]:
    """Distinct physical lines (``\\r`` redraws kept inside), capped at 8 KiB each."""
    seen: dict[bytes, None] = {}
    for data in log_files():
        for line in data.split(b"\n"):
            if line.strip():
                seen.setdefault(line[:8192], None)
    return tuple(seen)


@lru_cache(maxsize=1)
def text_lines() -> tuple[str, ...]:
    return tuple(b.decode("utf-8", "replace") for b in log_lines())


@lru_cache(maxsize=1)
def config_texts() -> tuple[str, ...]:
    """What the config parsers are handed: ``ServerArgs(...)`` and vLLM arg / config echoes."""
    out: list[str] = []
    for line in text_lines():
        for marker in ("ServerArgs(", "non-default args: ", "engine config: ", "args: ", "config="):
            i = line.find(marker)
            if i >= 0:
                out.append(line[i + (0 if marker.endswith("(") else len(marker)) :])
    return tuple(dict.fromkeys(out))


_TB_START = re.compile(r"Traceback \(most recent call last\)")


@lru_cache(maxsize=1)
def tracebacks() -> tuple[tuple[str, ...], ...]:
    """Traceback blocks of the real-format logs, as the block collects them (messages)."""
    out: list[tuple[str, ...]] = []
    for data in log_files():
        lines = data.decode("utf-8", "replace").split("\n")
        for i, line in enumerate(lines):
            m = _TB_START.search(line)
            if m is None:
                continue
            block = [line[m.start() :]]
            for nxt in lines[i + 1 : i + 60]:
                msg = peel("x", 0, clean(nxt)).msg
                block.append(msg)
                if not nxt.startswith((" ", "\t")) and not _TB_START.search(nxt) and len(block) > 3:
                    if re.match(r"^\[\d{4}-", nxt):
                        break
            out.append(tuple(block))
    return tuple(dict.fromkeys(out))


@lru_cache(maxsize=1)
def table_texts() -> tuple[str, ...]:
    """Operator tables: generated in every layout plus the shared corpus ones."""
    from gen.profiler_tables import format_table

    rows = [
        {
            "name": "aten::mm",
            "self_cpu_us": 2500.25,
            "cpu_total_us": 3000.0,
            "self_cuda_us": 0.0,
            "cuda_total_us": 12345.678,
            "calls": 30,
            "input_shapes": "[[8, 4096], [4096, 12288]]",
        },
        {
            "name": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
            "self_cpu_us": 0.0,
            "cpu_total_us": 0.0,
            "self_cuda_us": 1500.5,
            "cuda_total_us": 1500.5,
            "calls": 300,
        },
        {
            "name": "cudaGraphLaunch",
            "self_cpu_us": 20.0,
            "cpu_total_us": 20.0,
            "self_cuda_us": 0.0,
            "cuda_total_us": 0.0,
            "calls": 3,
            "input_shapes": "[]",
        },
    ]
    texts = [
        format_table(rows, layout=layout, sort_by=sort, memory=memory)
        for layout in ("cuda", "cpu")
        for sort in (None, "cpu_time_total")
        for memory in (None, "2.7", "2.8")
    ]
    corpus = CORPUS / "profiler-tables"
    if corpus.is_dir():
        texts += [
            p.read_text(encoding="utf-8", errors="replace") for p in sorted(corpus.rglob("*.txt"))
        ]
    return tuple(texts)


@lru_cache(maxsize=1)
def snapshot_blobs() -> tuple[bytes, ...]:
    """Small generated allocator snapshots of several torch eras and protocols."""
    from gen.snapshots import write_snapshot

    blobs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (fmt, proto, pools) in enumerate(
            [
                ("2.0", 2, []),
                ("2.5", 4, [2 << 20]),
                ("2.9", 5, [1 << 20, 3 << 20]),
                ("2.3", 3, [4096]),
            ]
        ):
            path = Path(tmp) / f"s{i}.pickle"
            write_snapshot(
                path,
                default_pool_bytes=8 << 20,
                graph_pools=pools,
                torch_format=fmt,
                protocol=proto,
                oom=i == 1,
            )
            blobs.append(path.read_bytes())
    return tuple(blobs)


# --------------------------------------------------------------------------- mutations
SPECIAL = [
    "\r",
    "\n",
    "\x1b[0;36m",
    "\x1b",
    "\x00",
    "\x7f",
    "^[[0m",
    "^M",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    "<",
    ">",
    "=",
    ",",
    ":",
    "|",
    " | ",
    "'",
    '"',
    "\\",
    "\t",
    " ",
    "│",
    "é",
    "\ufffd",
    "…",
    "█",
    "\u2028",
    "0",
    "9",
    "-",
    ".",
    "e",
    "nan",
    "inf",
    "None",
    "True",
    "[repeated 3x across cluster]",
    "Traceback (most recent call last):",
    "Error: ",
    'File "',
    "TP0",
    "pid=1",
    "0.",
    "1e999",
    "[2025-11-03 09:00:00] ",
    "INFO 09-09 15:33:36 [x.py:1] ",
    "2025-11-03T09:00:00Z ",
]


@st.composite
def mutate(draw: st.DrawFn, text: str) -> str:
    """Random insertions, deletions, truncations, digit swaps and duplications of ``text``."""
    for _ in range(draw(st.integers(0, 5))):
        op = draw(st.sampled_from(("insert", "insert", "delete", "truncate", "digit", "duplicate")))
        if op == "insert" or not text:
            at = draw(st.integers(0, len(text)))
            piece = draw(st.sampled_from(SPECIAL) | st.text(min_size=1, max_size=3))
            text = text[:at] + piece + text[at:]
        elif op == "delete":
            at = draw(st.integers(0, len(text) - 1))
            text = text[:at] + text[at + draw(st.integers(1, 40)) :]
        elif op == "truncate":
            text = text[: draw(st.integers(0, len(text)))]
        elif op == "digit":
            digits = [i for i, c in enumerate(text) if c.isdigit()]
            if digits:
                at = draw(st.sampled_from(digits))
                text = text[:at] + draw(st.sampled_from("0123456789-.,e x")) + text[at + 1 :]
        else:
            a = draw(st.integers(0, len(text)))
            b = draw(st.integers(a, min(len(text), a + 200)))
            text = text[:b] + text[a:b] + text[b:]
    return text


def mutated(pool: Callable[[], tuple[str, ...]]) -> st.SearchStrategy[str]:
    return st.deferred(lambda: st.sampled_from(pool()).flatmap(mutate))


@st.composite
def mutate_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """Byte-level damage: flips, insertions (invalid UTF-8 included), cuts, splices."""
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(("flip", "insert", "delete", "truncate", "splice")))
        if not data:
            op = "insert"
        if op == "flip":
            at = draw(st.integers(0, len(data) - 1))
            data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
        elif op == "insert":
            at = draw(st.integers(0, len(data)))
            data = (
                data[:at]
                + draw(
                    st.binary(min_size=1, max_size=8)
                    | st.sampled_from(
                        [b"\xff", b"\xc3(", b"\x00", b"\r", b"\x80\x04", b"c", b"\x93", b"R", b"."]
                    )
                )
                + data[at:]
            )
        elif op == "delete":
            at = draw(st.integers(0, len(data) - 1))
            data = data[:at] + data[at + draw(st.integers(1, 16)) :]
        elif op == "truncate":
            data = data[: draw(st.integers(0, len(data)))]
        else:
            a = draw(st.integers(0, len(data)))
            b = draw(st.integers(a, min(len(data), a + 64)))
            at = draw(st.integers(0, len(data)))
            data = data[:at] + data[a:b] + data[at:]
    return data


ARBITRARY = st.text(max_size=300)


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
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            for path in offset:
                value = value.replace(path, "<log>")
        return value

    runs = [{k: v for k, v in r.items() if k not in ("id", "sources")} for r in doc["runs"]]
    return {"runs": walk(runs), "n_runs": len(runs)}


@pytest.mark.slow
@fuzz(8)
@given(st.sampled_from(ROTATION_INCIDENTS), st.integers(0, 10**6), st.integers(0, 10**6))
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
