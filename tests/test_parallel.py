"""Fast paths give exactly what the plain paths give.

* ingest in worker processes (files and byte ranges of one file in parallel, speculative
  per-stream state, in-order verification) == ingest in this process: same event tables
  row for row, same input statuses, same JSON report (bar generated_at);
* block scanning == line-by-line scanning; FastPeel == peel; the one-regex decode/prefill
  layouts == the per-field searches.
"""

from __future__ import annotations

import gzip
import random
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import diag.ingest.inputs as inputs_mod
import diag.ingest.parallel as ingest_mod
import diag.parsers.sglang as sglang_mod
from diag.api import analyze
from diag.events import EventSink
from diag.ingest import PARALLEL_MIN_BYTES, Ingested, ingest, parsers_for, resolve_jobs
from diag.ingest.owned import cores
from diag.normalize.lines import split_logical
from diag.normalize.prefix import peel
from diag.parsers.scan import FastPeel, StreamScanner, is_plain
from diag.render.serialize import to_json
from tests.conftest import CORPUS, ROOT

sys.path.insert(0, str(ROOT / "bench"))
import gen_logs  # noqa: E402

CHUNK = 48 * 1024  # small byte ranges, so that every generated file is split many times


# ---------------------------------------------------------------- helpers
def _write(path: Path, lines: Iterator[str] | list[str]) -> Path:
    gen_logs.write_log(path, iter(lines))
    return path


def _frames(ing: Ingested) -> dict[str, pd.DataFrame]:
    return {k: ing.tables[k] for k in ing.tables._frames}


def assert_same(a: Ingested, b: Ingested) -> None:
    fa, fb = _frames(a), _frames(b)
    assert list(fa) == list(fb)
    for kind in fa:
        pd.testing.assert_frame_equal(fa[kind], fb[kind], check_exact=True, obj=kind)
    assert [s.to_dict() | {"stream": s.stream} for s in a.inputs] == [
        s.to_dict() | {"stream": s.stream} for s in b.inputs
    ]
    assert [(s.id, s.backend, s.sources) for s in a.streams] == [
        (s.id, s.backend, s.sources) for s in b.streams
    ]
    assert a.snapshots == b.snapshots and a.profiles == b.profiles


def both_ways(paths: list[str], chunk: int = CHUNK) -> tuple[Ingested, Ingested]:
    one = ingest(paths, jobs=1)
    two = ingest(paths, jobs=2, chunk_bytes=chunk)
    assert_same(one, two)
    return one, two


def assert_same_report(paths: list[str], one: Ingested, two: Ingested) -> None:
    ja = to_json(analyze(paths, ingested=one, generated_at="fixed"))
    jb = to_json(analyze(paths, ingested=two, generated_at="fixed"))
    assert ja == jb


# ---------------------------------------------------------------- generated incidents
@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder: a big SGLang log with a restart and tracebacks, a vLLM log, and a rotated
    SGLang set (oldest part gzipped) whose start-up is in the oldest file."""
    d = tmp_path_factory.mktemp("incident")
    _write(
        d / "sglang-node1.log", gen_logs.sglang_lines(1_500_000, seed=1, restarts=1, tracebacks=3)
    )
    _write(d / "vllm-node2.log", gen_logs.vllm_lines(900_000, seed=2, restarts=1, tracebacks=2))
    rotated = list(gen_logs.sglang_lines(700_000, seed=3, restarts=0, tracebacks=1))
    third = len(rotated) // 3
    with gzip.open(d / "decode.log.2.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n".join(rotated[:third]) + "\n")
    _write(d / "decode.log.1", rotated[third : 2 * third])
    _write(d / "decode.log", rotated[2 * third :])
    return d


@pytest.mark.slow
def test_generated_incident_identical(incident: Path) -> None:
    paths = [str(incident)]
    one, two = both_ways(paths)
    assert one.tables.total() > 10_000
    assert {s.id for s in one.streams} >= {str(incident / "decode.log")}
    rotated = next(s for s in one.streams if s.id == str(incident / "decode.log"))
    assert len(rotated.sources) == 3
    assert len(one.tables["error"]) >= 3 and len(one.tables["startup"]) >= 4
    assert_same_report(paths, one, two)


def test_single_file_is_split_and_line_numbers_exact(incident: Path) -> None:
    path = incident / "sglang-node1.log"
    plans = list(ingest_mod._split_plain(str(path), path.stat().st_size, CHUNK, CHUNK // 4))
    assert len(plans) > 10
    data = path.read_bytes()
    for start, _end, first in plans:
        assert start == 0 or data[start - 1 : start] == b"\n"
        assert data.count(b"\n", 0, start) + 1 == first
    one, _ = both_ways([str(path)])
    decode = one.tables["decode_batch"]
    lines = data.split(b"\n")
    for n in decode["line"].sample(200, random_state=0):
        assert b"Decode batch" in lines[int(n) - 1]


def test_segments_shrink_at_the_end_so_workers_end_together(incident: Path) -> None:
    """Near a file's end the segments share what is left among the workers (down to a
    quarter of a chunk) instead of leaving one worker a whole last chunk; they still cover
    the file end to end from line starts, numbered exactly."""
    path = incident / "sglang-node1.log"
    size = path.stat().st_size
    plans = list(ingest_mod._split_plain(str(path), size, CHUNK, CHUNK // 4, workers=2))
    data = path.read_bytes()
    ends = [e if e is not None else size for _, e, _ in plans]
    assert [s for s, _, _ in plans[1:]] == ends[:-1] and ends[-1] == size
    for start, _end, first in plans:
        assert start == 0 or data[start - 1 : start] == b"\n"
        assert data.count(b"\n", 0, start) + 1 == first
    sizes = [e - s for (s, _, _), e in zip(plans, ends, strict=True)]
    assert max(sizes[1:]) >= CHUNK  # whole chunks first
    assert sizes[-1] < 3 * CHUNK // 4  # the last pieces small (a boundary may add some)
    assert ingest_mod.next_size(10 * CHUNK, CHUNK, 2) == CHUNK
    assert ingest_mod.next_size(CHUNK, CHUNK, 2) == CHUNK // 2
    assert ingest_mod.next_size(1, CHUNK, 2) == CHUNK // 4


def _count_rescans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Per accepted-or-refused segment result, how many segments it sent back for a second
    scan (filled as the parallel ingest runs)."""
    rescans: list[int] = []
    real_advance = ingest_mod._Plan.advance

    def advance(self: ingest_mod._Plan) -> None:
        before = self.rescans
        real_advance(self)
        rescans.append(self.rescans - before)

    monkeypatch.setattr(ingest_mod._Plan, "advance", advance)
    return rescans


@pytest.mark.slow
def test_speculation_failure_is_repaired(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """State that changes mid-file (a capture phase opened and never closed, tracebacks cut
    by segment ends) makes speculative segments wrong; the result must still be identical."""
    lines: list[str] = []
    rng = random.Random(5)
    for i in range(12000):
        ts = f"2025-06-10 08:{i // 600 % 60:02d}:{i // 10 % 60:02d}"
        if i % 2500 == 1200:
            lines.append(
                f"[{ts} TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=9.85 GB"
            )
        if i % 997 == 500:
            lines += [
                f"[{ts}] Error in request",
                "Traceback (most recent call last):",
                '  File "/x/scheduler.py", line 1, in run',
                "    boom()",
                "RuntimeError: CUDA error: out of memory",
            ]
        if i % 3 == 0:
            lines.append(
                "  4%|##        | 1/23 [00:01<00:30,  1.2it/s]"
            )  # bare tqdm: depends on state
        lines.append(
            f"[{ts} TP0] Decode batch, #running-req: {rng.randint(1, 200)}, #token: 100, "
            f"token usage: 0.01, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0, "
        )
    path = _write(tmp_path / "state.log", lines)
    rescans = _count_rescans(monkeypatch)
    one, two = both_ways([str(path)], chunk=16 * 1024)
    assert sum(rescans) > 0
    assert len(one.tables["capture_progress"]) > 0
    assert_same_report([str(path)], one, two)


def test_restart_with_the_same_phases_needs_no_second_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server restarted in the middle of its log opens the phases it opened before, in the
    same order: the stream's state after the restart equals its state before, so segments
    speculatively given the earlier state are accepted (a count of phase lines in the state
    made every segment after a restart a second scan: 2 of 17 on the 700 MB bench log)."""
    path = _write(
        tmp_path / "restart.log", gen_logs.sglang_real_lines(3_000_000, seed=3, restarts=1)
    )
    rescans = _count_rescans(monkeypatch)
    one, two = both_ways([str(path)], chunk=256 * 1024)
    assert len(rescans) > 8 and sum(rescans) == 0
    assert len(one.tables["startup"]) >= 2  # both start-ups were read
    assert_same_report([str(path)], one, two)


@pytest.mark.slow
def test_no_safe_boundary_and_long_lines(tmp_path: Path) -> None:
    """Segments cut inside tracebacks and very long lines, no trailing newline."""
    lines: list[str] = []
    for i in range(400):
        lines += ["Traceback (most recent call last):"]
        lines += [f'  File "/x/mod{j}.py", line {j}, in f{j}' for j in range(20)]
        lines += [f"ValueError: bad value {i} " + "x" * (5000 if i % 50 == 0 else 10)]
    path = tmp_path / "tb.log"
    path.write_text(
        "[2025-06-10 08:00:00] sglang server_args=ServerArgs(tp_size=1)\n" + "\n".join(lines)
    )
    both_ways([str(path)], chunk=8 * 1024)


@pytest.mark.slow
def test_truncated_gzip_and_bad_inputs(tmp_path: Path) -> None:
    full = "\n".join(gen_logs.sglang_lines(3_000_000, seed=7)) + "\n"
    comp = gzip.compress(full.encode())
    (tmp_path / "cut.log.1.gz").write_bytes(comp[: len(comp) * 2 // 3])
    _write(tmp_path / "cut.log", gen_logs.sglang_lines(200_000, seed=8))
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "binary.log").write_bytes(bytes(range(256)) * 100)
    one, _ = both_ways([str(tmp_path), str(tmp_path / "missing.log")])
    status = {Path(s.path).name: s for s in one.inputs}
    assert status["cut.log.1.gz"].status == "partial"
    assert status["empty.log"].status == "skipped" and status["missing.log"].status == "skipped"


@pytest.mark.slow
@pytest.mark.skipif(not (CORPUS / "real").is_dir(), reason="shared corpus not present")
def test_real_corpus_identical(tmp_path: Path) -> None:
    paths = [str(CORPUS / "real"), str(ROOT / "tests" / "data")]
    one, two = both_ways(paths, chunk=2048)
    assert_same_report(paths, one, two)


@pytest.mark.slow
def test_progress_from_workers(incident: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs_mod, "PROGRESS_BYTES", 64 * 1024)
    calls: list[tuple[int, int]] = []
    ingest([str(incident)], progress=lambda d, t: calls.append((d, t)), jobs=2, chunk_bytes=CHUNK)
    total = calls[-1][1]
    assert calls[-1] == (total, total)
    assert len(calls) >= 5
    assert all(0 <= d <= t == total for d, t in calls)
    seq: list[tuple[int, int]] = []
    ingest([str(incident)], progress=lambda d, t: seq.append((d, t)), jobs=1)
    assert seq[-1] == (total, total) and len(seq) >= 5
    assert [d for d, _ in seq] == sorted(d for d, _ in seq)


_REAL_SCAN_SEGMENT = ingest_mod._scan_segment


def _failing_segment(task: ingest_mod._Task) -> ingest_mod._Result:
    """A worker that dies on some segments (module level: workers unpickle it by name)."""
    if task.k % 3 == 2:
        raise RuntimeError("worker died")
    return _REAL_SCAN_SEGMENT(task)


@pytest.mark.slow
def test_worker_failure_falls_back_to_this_process(
    incident: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest_mod, "_scan_segment", _failing_segment)
    one, two = both_ways([str(incident)])
    assert one.tables.total() > 10_000


def test_auto_jobs() -> None:
    assert resolve_jobs(None, 10 << 20) == 1
    assert resolve_jobs(0, 10 << 20) == 1
    assert resolve_jobs(3, 1) == min(3, cores())
    assert resolve_jobs(100_000, 1) == cores()  # never thousands of workers
    assert resolve_jobs(None, PARALLEL_MIN_BYTES + 1) >= 1


def test_stdin_stays_in_process(incident: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = (incident / "vllm-node2.log").read_bytes()
    import io

    class _Stdin:
        buffer = io.BytesIO(data)

    monkeypatch.setattr(sys, "stdin", _Stdin())
    ing = ingest(["-"], jobs=2, chunk_bytes=CHUNK)
    ref = ingest([str(incident / "vllm-node2.log")], jobs=1)
    assert ing.tables.total() == ref.tables.total()


# ---------------------------------------------------------------- scanner fast paths
def _scan_lines(lines: list[bytes], fast: bool, blocks: int | None) -> tuple[EventSink, int]:
    sink = EventSink()
    sc = StreamScanner(parsers_for("unknown"), sink, "unknown")
    sc.fast = fast
    if blocks is None:
        n = sc.scan("x.log", lines)
    else:
        data = b"".join(lines)
        n = sc.scan_blocks("x.log", (data[i : i + blocks] for i in range(0, len(data), blocks)))
    sc.close()
    return sink, n


def _corpus_lines() -> list[bytes]:
    files = sorted((CORPUS / "real").glob("*.log")) + sorted(
        (ROOT / "tests" / "data").glob("*.log")
    )
    out: list[bytes] = []
    for f in files:
        out += f.read_bytes().splitlines(keepends=True)
    gen = list(gen_logs.sglang_lines(200_000, seed=11, restarts=1, tracebacks=2)) + list(
        gen_logs.vllm_lines(200_000, seed=12, restarts=1, tracebacks=2)
    )
    return out + [(g + "\n").encode() for g in gen]


EDGE_LINES = [
    "[2025-06-10 08:00:00.123 DP0 TP1 EP1] Decode batch, #running-req: 1, #token: 2, token usage: 0.00, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0",
    "[2025-06-10 08:00:00,5 TP0] Prefill batch. #new-seq: 1, #new-token: 2, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0",
    "[2025-13-45 08:00:00 TP0] Decode batch, #running-req: 1, #token: 2, token usage: 0.00, gen throughput (token/s): 1.00, #queue-req: 0",
    "[2025-06-10 08:00:00 TP0] [gpu=0] Decode batch. #running-req: 381, #token: 344397, token usage: 0.96, gen throughput (token/s): 93.97, #queue-req: 1549",
    "[08:00:00 TP0] Decode batch. #running-req: 3, #token: 3, token usage: 0.00, gen throughput (token/s): 1.00, #queue-req: 0",
    "[2025-06-10T08:00:00Z] [2025-06-10 08:00:00 TP0] Capture cuda graph begin.",
    "[Stage-0] INFO 06-10 08:00:00 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with config: x",
    "(EngineCore_DP0 pid=1) [Stage-0] INFO 06-10 08:00:00 [core.py:1] Graph capturing finished in 3 secs, took 0.1 GiB",
    "(VllmWorker rank=1 pid=33) WARN 06-10 08:00:00 [x.py:1] CUDA graph is not supported on BitsAndBytes",
    "(pid=5) INFO 02-29 08:00:00 [x.py:1] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%",
    "(RayWorkerWrapper pid=5, ip=10.0.0.1) INFO 02-30 08:00:00 [x.py:1] Capturing cudagraphs for decoding.",
    "(EngineCore_DP0 pid=1) (Worker pid=2) INFO 06-10 08:00:00 [x.py:1] cudagraph",
    "INFO 06-10 08:00:00 model_runner.py:1] Capturing the model for CUDA graphs.",
    "DEBUG 06-10 08:00:00.123 [gpu_model_runner.py:1] Running batch with cudagraph_mode: FULL, batch_descriptor: BatchDescriptor(num_tokens=8, num_reqs=8, uniform=True, has_lora=False)",
    'INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 200 OK request',
    "I0911 10:24:17.065000 224 x.py:1] CUDA graph",
    "ERROR 06-10 08:00:00 [x.py:1] Traceback (most recent call last):",
    "svc-1  | [2025-06-10 08:00:00 TP0] Decode batch, #running-req: 1, #token: 2, token usage: 0.00, gen throughput (token/s): 1.00, #queue-req: 0",
    "2025-06-10 08:00:00 [2025-06-10 08:00:00 TP0] Capture cuda graph end. Time elapsed: 1.00 s",
    "[2025-06-10 08:00:00 TP0] Decode batch, #running-req: 1 [repeated 3x across cluster]",
    "\x1b[32mINFO\x1b[0m 06-10 08:00:00 [x.py:1] cudagraph",
    "[2025-06-10 08:00:00] Capturing batches (bs=1 avail_mem=1.00 GB): 100%|##| 2/2 [00:01<00:00, 1.1it/s]",
    "│ [2025-06-10 08:00:00 TP0] Capture cuda graph begin. │",
    "[2025-06-10 08:00:00 TP0]",
    "[2025-06-10 08:00:00 TP0] Decode batch\t#running-req: 2, #queue-req: 1",
    "[2025-06-10 08:00:00 TP0] Decode batch, #running-req: 1234567890123456789, #token: 2, token usage: 0.00, gen throughput (token/s): 1.00, #queue-req: 8999999999999999999",
    "[2025-06-10 08:00:00 TP0] caf\xe9 Capture cuda graph begin \ufffd",
]


def test_fastpeel_equals_peel() -> None:
    fp = FastPeel()
    raws = _corpus_lines() + [(x + "\n").encode() for x in EDGE_LINES]
    raws += [b"[2025-06-10 08:00:00 TP0] \xff\xfe Capture cuda graph\n"]
    hits = 0
    for n, raw in enumerate(raws, start=1):
        if not is_plain(raw):
            continue
        text = raw.decode("utf-8", "replace").rstrip("\n")
        line = fp("f.log", n, text)
        if line is None:
            continue
        hits += 1
        assert split_logical(text) == [text], text
        assert line == peel("f.log", n, text), text
    assert hits > 1000


@pytest.mark.parametrize("blocks", [None, 1, 7, 4096, 1 << 20])
def test_block_scan_equals_line_scan(blocks: int | None) -> None:
    raws = _corpus_lines() + [(x + "\n").encode() for x in EDGE_LINES]
    raws += [
        b"\r\n",
        b"\n",
        b"[2025-06-10 08:00:00 TP0] Capture cuda graph begin. avail mem=1.00 GB\r\n",
        b"[2025-06-10 08:00:00 TP0] Decode batch, #running-req: 4, #token: 2, token usage: 0.00, "
        b"gen throughput (token/s): 1.00, #queue-req: 0",
    ]  # last line without newline
    ref, n_ref = _scan_lines(raws, fast=False, blocks=None)
    got, n_got = _scan_lines(raws, fast=True, blocks=blocks)
    assert n_ref == n_got == len(raws)
    a, b = ref.to_tables(), got.to_tables()
    assert list(a._frames) == list(b._frames)
    for kind in a._frames:
        pd.testing.assert_frame_equal(a[kind], b[kind], check_exact=True, obj=kind)


BATCH_LINES = [
    # §5.1 decode, every layout in the formats reference, plus near misses
    "#running-req: 5, #token: 1938, token usage: 0.24, #queue-req: 0",
    "Decode batch. #running-req: 8, #token: 67724, token usage: 0.13, gen throughput (token/s): 183.54, #queue-req: 0",
    "Decode batch. #running-req: 8, #token: 67724, token usage: 0.13, accept len: 2.50, gen throughput (token/s): 183.54, #queue-req: 0",
    "Decode batch. #running-req: 509, #token: 180776, token usage: 0.43, gen throughput (token/s): 7897.87, largest-len: 0, #queue-req: 0, ",
    "Decode batch. #running-req: 1, #token: 2266, token usage: 0.00, cuda graph: True, gen throughput (token/s): 3.13, #queue-req: 0, timestamp: 2025-07-18T15:32:54.159394",
    "Decode batch. #running-req: 113, #token: 31546, token usage: 0.88, cuda graph: False, gen throughput (token/s): 45.24, #queue-req: 399",
    "Decode batch. #running-req: 1, #token: 108, token usage: 0.00, accept len: 2.17, accept rate: 0.54, cuda graph: True, gen throughput (token/s): 0.39, #queue-req: 0, ",
    "Decode batch, #running-req: 46, #token: 34901, token usage: 0.19, cuda graph: False, gen throughput (token/s): 1447.08, #queue-req: 0, ",
    "Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0",
    "Decode batch, #running-req: 24, #token: 233600, token usage: 0.66, accept len: 3.05, accept rate: 0.68, npu graph: True, gen throughput (token/s): 239.06, #queue-req: 2",
    "Decode batch [17], #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0",
    "Decode batch, #running-req: 5, #full token: 1, full token usage: 0.01, #swa token: 2, swa token usage: 0.02, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0, ",
    "Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): -1.5, #queue-req: 0   ",
    "Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 1e5, #queue-req: 0",
    "Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 1.0, #queue-req: 0, accept len: 9.00",
    "Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 1.0, #queue-req: 0, #queue-req: 7",
    "Decode batch, #running-req: 1234567890123456789, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 1.0, #queue-req: 0",
    "Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 1.0, #queue-",
    # §5.2 prefill
    "new fill batch. #seq: 1. #cached_token: 0. #new_token: 7. #remaining_req: 0. #running_req: 0. tree_cache_hit_rate: 0.00%.",
    "Prefill batch. #new-seq: 2, #new-token: 2048, #cached-token: 888, cache hit rate: 0.00%, token usage: 0.11, #running-req: 69, #queue-req: 130",
    "Prefill batch. #new-seq: 1, #new-token: 2192, #cached-token: 35, #token: 35, token usage: 0.00, #running-req: 0, #queue-req: 0, timestamp: 2025-07-18T15:32:52.498932",
    "Prefill batch, #new-seq: 10, #new-token: 4096, #cached-token: 10, token usage: 0.00, #running-req: 4, #queue-req: 186, ",
    "Prefill batch, #new-seq: 1, #new-token: 2048, #cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0, input throughput (token/s): 45.65, cuda graph: False",
    "Prefill batch, #new-seq: 1, #new-token: 2048, #cached-token: 0, full token usage: 0.01, swa token usage: 0.02, #running-req: 0, #queue-req: 0, input throughput (token/s): 45.65, cuda graph: False",
    "Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, token usage: 0.08, #running-req: 31, #queue-req: 0, cuda graph: True, input throughput (token/s): 559.53",
    "Prefill batch, #new-seq: 12, #new-token: 43008, #cached-token: 0, token usage: 0.14, #running-req: 1, #queue-req: 97, #pending-token: 109585, npu graph: False, input throughput (token/s): 15734.14",
    "Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, token usage: 0.08, #running-req: 31, #queue-req: 0, cuda graph: True",
    "Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, token usage: 0.08, #running-req: 31, #queue-req: 0, cuda graph: True, input throughput (token/s): 5.0, #queue-req: 3",
]


def test_fast_batch_regexes_equal_field_searches(monkeypatch: pytest.MonkeyPatch) -> None:
    prefixes = ["[2025-06-10 08:00:00 TP0] ", "[2025-06-10 08:00:00] ", "[gpu=0] ", "junk prefix "]
    raws = [(p + x + "\n").encode() for x in BATCH_LINES for p in prefixes]
    fast_hits = sum(
        1
        for x in BATCH_LINES
        if sglang_mod._FAST_DECODE.match(x) or sglang_mod._FAST_PREFILL.match(x)
    )
    assert fast_hits >= 12
    got, _ = _scan_lines(raws, fast=True, blocks=None)
    never = re.compile(r"(?!)")
    monkeypatch.setattr(sglang_mod, "_FAST_DECODE", never)
    monkeypatch.setattr(sglang_mod, "_FAST_PREFILL", never)
    ref, _ = _scan_lines(raws, fast=True, blocks=None)
    a, b = ref.to_tables(), got.to_tables()
    assert len(a["decode_batch"]) > 20 and len(a["prefill_batch"]) > 20
    for kind in ("decode_batch", "prefill_batch"):
        pd.testing.assert_frame_equal(a[kind], b[kind], check_exact=True, obj=kind)


@pytest.mark.parametrize("size", [1, 7, 4096, None])
def test_lines_at_equals_iter_lines(size: int | None) -> None:
    import io

    from diag.sources.readers import iter_lines, lines_at

    data = b"".join(_corpus_lines()[:3000]) + b"\r\n\n\nlast line without newline"
    ref = dict(enumerate(iter_lines(io.BytesIO(data), b"", []), start=1))
    rng = random.Random(size)
    for wanted in (
        {1},
        {len(ref)},
        {len(ref) + 1},
        set(rng.sample(range(1, len(ref) + 5), 40)),
        set(),
    ):
        got = lines_at(io.BytesIO(data[10:]), data[:10], wanted, [], size)
        assert got == {n: ref[n] for n in wanted if n in ref}


def test_line_anchors_are_line_starts_and_evidence_reads_the_same(tmp_path: Path) -> None:
    """The segment starts a parallel ingest leaves (``Ingested.line_anchors``) are the byte
    offsets of the lines they number, and evidence read from them is the evidence read
    from the top of the file; a gzip copy of the same log leaves none."""
    from diag.evidence import read_all, read_lines

    log = _write(tmp_path / "a.log", gen_logs.sglang_lines(400_000, seed=5, restarts=1))
    data = log.read_bytes()
    starts = [0] + [i + 1 for i, b in enumerate(data) if b == 0x0A]  # line n starts at [n-1]
    anchors = ingest([str(log)], jobs=2, chunk_bytes=8192).line_anchors[str(log)]
    assert len(anchors) > 10 and anchors[0] == (1, 0)
    assert all(starts[line - 1] == offset for line, offset in anchors)
    n_lines = data.count(b"\n")
    rng = random.Random(5)
    mid = [line for line, _ in anchors[1:4]]
    wanted = {
        1,
        n_lines,
        n_lines + 1,
        *mid,
        *(m - 1 for m in mid),
        *rng.sample(range(1, n_lines), 30),
    }
    top = read_lines(str(log), wanted)
    assert len(top) == len(wanted) - 1  # every line but the one past the end
    assert read_lines(str(log), wanted, anchors) == top
    assert read_all({str(log): wanted}, {str(log): anchors}) == {str(log): top}
    packed = tmp_path / "b.log.gz"
    packed.write_bytes(gzip.compress(data))
    assert ingest([str(packed)], jobs=2, chunk_bytes=8192).line_anchors == {}
    assert read_lines(str(packed), wanted, anchors) == top  # (anchors of a gzip file unused)


def test_cleanup(tmp_path: Path) -> None:
    """Nothing left behind by worker processes (no temp files next to the inputs)."""
    _write(tmp_path / "a.log", gen_logs.sglang_lines(100_000, seed=1))
    ingest([str(tmp_path)], jobs=2, chunk_bytes=8192)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.log"]
    shutil.rmtree(tmp_path)
