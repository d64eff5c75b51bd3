"""Sources: folder walking order, rotated sets oldest first, gzip by magic bytes, stdin."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from diag.api import analyze
from diag.ingest import ingest
from diag.sources.discover import discover, rotation_key

LINE = "[2025-11-03 09:00:{s:02d}] Decode batch, #running-req: {n}, #token: 10, token usage: 0.01, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0\n"


def test_rotation_keys_order_oldest_first() -> None:
    names = ["x.log", "x.log.1", "x.log.2.gz", "x.log.10"]
    ordered = sorted(names, key=lambda n: rotation_key(n)[1])
    assert ordered == ["x.log.10", "x.log.2.gz", "x.log.1", "x.log"]
    assert {rotation_key(n)[0] for n in names} == {"x.log"}


def test_rotated_set_is_one_stream_in_time_order(tmp_path: Path) -> None:
    (tmp_path / "server.log.2.gz").write_bytes(gzip.compress(LINE.format(s=1, n=1).encode()))
    (tmp_path / "server.log.1").write_text(LINE.format(s=2, n=2))
    (tmp_path / "server.log").write_text(LINE.format(s=3, n=3))
    files, problems = discover([str(tmp_path)])
    assert not problems
    assert [Path(f.path).name for f in files] == ["server.log.2.gz", "server.log.1", "server.log"]
    report = analyze([str(tmp_path)], generated_at="fixed")
    assert len(report.runs) == 1
    assert list(report.tables["decode_batch"]["batch_size"]) == [1, 2, 3]


def test_gzip_recognised_by_magic_not_name(tmp_path: Path) -> None:
    (tmp_path / "weird.txt").write_bytes(gzip.compress(LINE.format(s=1, n=7).encode()))
    ing = ingest([str(tmp_path / "weird.txt")])
    assert list(ing.tables["decode_batch"]["batch_size"]) == [7]


@pytest.mark.slow
def test_stdin_dash(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "diag",
            "analyze",
            "-",
            "--no-html",
            "-o",
            str(tmp_path),
            "--format",
            "json",
        ],
        input=LINE.format(s=1, n=5).encode(),
        capture_output=True,
        cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert out.returncode == 0, out.stderr.decode()
    assert b'"path": "-"' in out.stdout
    assert (tmp_path / "stdin.graphdiag.json").exists()


def test_invalid_utf8_does_not_crash(tmp_path: Path) -> None:
    p = tmp_path / "bad.log"
    p.write_bytes(b"\xff\xfe\x80 " + LINE.format(s=1, n=4).encode() + b"\xc3\x28 junk\n")
    ing = ingest([str(p)])
    assert list(ing.tables["decode_batch"]["batch_size"]) == [4]
    assert ing.inputs[0].status == "ok"


def test_folder_walk_skips_non_logs_and_reports_them(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "z.log").write_text(LINE.format(s=2, n=2))
    (tmp_path / "a.log").write_text(LINE.format(s=1, n=1))
    (tmp_path / "notes.md").write_text("# notes\n")
    files, problems = discover([str(tmp_path)])
    assert [Path(f.path).name for f in files] == ["a.log", "z.log"]
    assert [Path(p.path).name for p in problems] == ["notes.md"]
