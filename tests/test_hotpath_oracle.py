"""The per-line path is the oracle of the hot path: identical event tables, cell for cell and
dtype for dtype, on every fixture, both shared corpora and hypothesis-generated logs.

The hot path (``diag.ingest.hotpath``) reads the periodic lines in bulk and leaves every
other line to the per-line parsers; ``ingest(..., hotpath=False)`` reads everything per line.
Generated logs come from ``bench/gen_logs.py`` (the steady state a busy server writes) with
the hard cases sprinkled in by hypothesis: docker/compose/k8s prefixes, ANSI colour, tqdm
redraws glued with ``\\r``, CRLF, ``<`` in prompts, cut lines, multi-rank and ``.ms``
headers, words of other parser branches inside prompts, ray ``repeated``, a second process
prefix, lines mutated by ``tests/test_properties.mutate_bytes``; then scanned with blocks cut
anywhere, and ingested whole, gzipped and as a rotated set.

Every test runs twice: with the compiled scanner (``_cscan``, C) and with the RE2 kernels
(``GRAPHDIAG_NATIVE=0``), the C path's reference and fallback.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from diag.events import EventSink, EventTables
from diag.ingest import ingest, parsers_for
from diag.ingest.hotpath import HotScanner, hotpath_enabled
from diag.ingest.hotpath.native import COMMON as NATIVE_ENGINES
from diag.ingest.hotpath.scanner import bulk_on_every_region
from diag.parsers.scan import StreamScanner
from tests.conftest import ROOT, need_corpus
from tests.extraction import extraction  # noqa: F401  (autouse: C and RE2)
from tests.test_properties import _tmpdir, fuzz, mutate_bytes

sys.path.insert(0, str(ROOT / "bench"))
import gen_logs  # noqa: E402

INCIDENTS = ROOT / "fixtures" / "incidents"


def assert_same_tables(pure: EventTables, hot: EventTables, label: str) -> None:
    assert sorted(pure) == sorted(hot), label
    for kind in pure:
        pd.testing.assert_frame_equal(
            pure[kind], hot[kind], check_exact=True, obj=f"{label}:{kind}"
        )


def both(paths: list[str], **kw: object) -> tuple[EventTables, EventTables]:
    pure = ingest(paths, jobs=1, hotpath=False, **kw).tables  # type: ignore[arg-type]
    with bulk_on_every_region():
        hot = ingest(paths, jobs=1, hotpath=True, **kw).tables  # type: ignore[arg-type]
    return pure, hot


# ---------------------------------------------------------------- the switch
def test_switch_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPHDIAG_HOTPATH", "0")
    assert not hotpath_enabled()
    assert hotpath_enabled(True)
    monkeypatch.setenv("GRAPHDIAG_HOTPATH", "1")
    assert hotpath_enabled()
    assert not hotpath_enabled(False)


# ---------------------------------------------------------------- fixtures and corpora
@pytest.mark.parametrize(
    "incident", sorted(p.name for p in INCIDENTS.iterdir() if p.is_dir()), ids=str
)
def test_fixture_incidents(incident: str) -> None:
    pure, hot = both([str(INCIDENTS / incident)])
    assert pure.total() > 0
    assert_same_tables(pure, hot, incident)


def _corpus_inputs(sub: str) -> list[Path]:
    root = need_corpus(sub)
    return [p for p in sorted(root.iterdir()) if p.is_dir() or p.suffix in (".log", ".txt", ".gz")]


@pytest.mark.corpus
@pytest.mark.slow
@pytest.mark.parametrize("sub", ["real", "real-2"])
def test_shared_corpora(sub: str) -> None:
    inputs = _corpus_inputs(sub)
    assert inputs
    for path in inputs:
        pure, hot = both([str(path)])
        assert_same_tables(pure, hot, str(path))


# ---------------------------------------------------------------- generated logs
HARD_CASES: list[tuple[str, bytes, bytes]] = [
    # (name, prefix to add, replacement pair as "old=>new" or b"")
    ("crlf", b"", b"\r"),
    ("docker", b"2025-06-10T08:00:00.123456789Z ", b""),
    ("compose", b"sglang-1  | ", b""),
    ("k8s", b"[pod/server-0/main] ", b""),
    ("ansi", b"\x1b[32m", b"\x1b[0m"),
    (
        "tqdm",
        b"Capturing batches (bs=8 avail_mem=9.10 GB): 100%|##| 3/3 [00:01<00:00,  2.1it/s]\r",
        b"",
    ),
    ("repeated", b"", b" [repeated 3x across cluster]"),
]
REPLACEMENTS: list[tuple[bytes, bytes]] = [
    (b"text='", b"text='<|im_start|> "),
    (b" TP0]", b" DP1 TP3 EP2]"),
    (b":00]", b":00.250]"),
    (b"Receive: obj=", b"Receive: obj=Capture "),
    (b"it/s", b"Traceback (most recent call last)"),
    (b"(APIServer pid=", b"(APIServer pid=900) (EngineCore_DP0 pid="),
    (b"Decode batch,", b"Decode batch."),
    (b"#token: ", b"#token: 1,"),
    (b"Received request ", b"Received request prompt_token_ids "),
    (b"cuda graph: True", b"cuda graph: Maybe"),
    (b"Avg prompt throughput", b"Engine 000: Avg prompt throughput"),
]


@st.composite
def generated_log(draw: st.DrawFn) -> tuple[str, bytes]:
    """A small generated log of one engine with hard cases on random lines."""
    engine = draw(st.sampled_from(("sglang", "vllm")))
    seed = draw(st.integers(0, 10**6))
    size = draw(st.integers(15_000, 60_000))
    make = gen_logs.sglang_lines if engine == "sglang" else gen_logs.vllm_lines
    lines = [ln.encode() for ln in make(size, seed=seed, restarts=draw(st.integers(0, 1)))]
    n_hard = draw(st.integers(0, 25))
    for _ in range(n_hard):
        i = draw(st.integers(0, len(lines) - 1))
        how = draw(st.integers(0, 3))
        if how == 0:
            _, pre, post = draw(st.sampled_from(HARD_CASES))
            lines[i] = pre + lines[i] + post
        elif how == 1:
            old, new = draw(st.sampled_from(REPLACEMENTS))
            lines[i] = lines[i].replace(old, new)
        elif how == 2:
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]  # a cut line
        else:
            lines[i] = draw(mutate_bytes(lines[i])).replace(b"\n", b" ")
    tail = draw(st.sampled_from((b"\n", b"")))  # the last line with or without its newline
    return engine, b"\n".join(lines) + tail


def _scan(cls: type[StreamScanner], engine: str, blocks: list[bytes]) -> tuple[EventTables, int]:
    sink = EventSink()
    scanner = cls(parsers_for(engine), sink, engine)
    lines = scanner.scan_blocks("x.log", blocks)
    scanner.close()
    return sink.to_tables(), lines


@fuzz(15)
@given(generated_log(), st.lists(st.integers(1, 10**9), max_size=12))
def test_generated_logs_with_blocks_cut_anywhere(log: tuple[str, bytes], cuts: list[int]) -> None:
    engine, data = log
    at = sorted({c % (len(data) + 1) for c in cuts})
    blocks = [data[a:b] for a, b in zip([0, *at], [*at, len(data)], strict=True)]
    pure, n_pure = _scan(StreamScanner, engine, [data])
    sink = EventSink()
    hot_scanner = HotScanner(parsers_for(engine), sink, engine)
    hot_scanner.min_region_bytes = 0
    n_hot = hot_scanner.scan_blocks("x.log", blocks)
    hot_scanner.close()
    assert n_hot == n_pure
    assert hot_scanner.hot is not None
    assert_same_tables(pure, sink.to_tables(), f"{engine} cut at {at}")


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_bulk_path_reads_the_periodic_lines(engine: str, extraction: str) -> None:  # noqa: F811
    """Not vacuous: on a plain generated log nearly every row comes from the bulk path (with
    the extraction the fixture chose)."""
    make = gen_logs.sglang_lines if engine == "sglang" else gen_logs.vllm_lines
    data = ("\n".join(make(400_000, seed=1)) + "\n").encode()
    sink = EventSink()
    scanner = HotScanner(parsers_for(engine), sink, engine)
    scanner.min_region_bytes = 0
    assert scanner.hot is not None
    assert scanner.hot.uses_native == (extraction == "c" and engine in NATIVE_ENGINES)
    scanner.scan_blocks("x.log", [data])
    scanner.close()
    assert scanner.bulk_rows > 0.9 * sink.count()
    pure, _ = _scan(StreamScanner, engine, [data])
    assert_same_tables(pure, sink.to_tables(), engine)


@pytest.mark.slow
@fuzz(6)
@given(generated_log(), st.integers(0, 10**6), st.integers(0, 10**6))
def test_generated_logs_whole_gzipped_and_rotated(log: tuple[str, bytes], a: int, b: int) -> None:
    _engine, data = log
    lines = data.splitlines(keepends=True)
    i, j = sorted((a % (len(lines) + 1), b % (len(lines) + 1)))
    with _tmpdir() as tmp:
        (tmp / "whole").mkdir()
        (tmp / "whole" / "server.log").write_bytes(data)
        (tmp / "gz").mkdir()
        (tmp / "gz" / "server.log.gz").write_bytes(gzip.compress(data, 1, mtime=0))
        rot = tmp / "rotated"
        rot.mkdir()
        (rot / "server.log.2.gz").write_bytes(gzip.compress(b"".join(lines[:i]), 1, mtime=0))
        (rot / "server.log.1").write_bytes(b"".join(lines[i:j]))
        (rot / "server.log").write_bytes(b"".join(lines[j:]))
        for d in ("whole", "gz", "rotated"):
            pure, hot = both([str(tmp / d)])
            assert pure.total() > 0
            assert_same_tables(pure, hot, d)


@pytest.mark.slow
def test_parallel_ingest_with_the_hot_path_equals_the_per_line_path(tmp_path: Path) -> None:
    """Worker processes scan byte ranges with the hot path; the result is the per-line one."""
    log = tmp_path / "sglang.log"
    gen_logs.write_log(log, gen_logs.sglang_lines(1_500_000, seed=3, restarts=1, tracebacks=2))
    vlog = tmp_path / "vllm.log"
    gen_logs.write_log(vlog, gen_logs.vllm_lines(1_500_000, seed=4, restarts=1, tracebacks=2))
    paths = [str(log), str(vlog)]
    pure = ingest(paths, jobs=1, hotpath=False).tables
    with bulk_on_every_region():
        hot = ingest(paths, jobs=2, hotpath=True, chunk_bytes=200_000).tables
    assert pure["decode_batch"].shape[0] > 1000
    assert_same_tables(pure, hot, "parallel")
