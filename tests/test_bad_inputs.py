"""Hostile and broken inputs, one test per row of ``docs/bad-inputs.md``.

Every row runs ``graphdiag analyze`` on a folder holding the bad input next to a good
SGLang log (``fixtures/incidents/sglang-healthy/server.log``) and checks the contract:
exit 0/1 (never 2, never a traceback), the bad input listed in the JSON report's
``inputs[]`` with its status and reason, one stderr line naming its path and the reason
when it was not fully read, and the good log analysed as if it were alone. Where the bad
input is all there is and nothing at all could be read, the exit code is 2.

Known gaps are pinned by ``xfail(strict=True)`` tests next to their row; each reason names
the file and the fix (they turn into failures, i.e. reminders, once fixed).
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from diag.cli import main
from tests.bad_inputs_support import (
    GOOD,
    GOOD_BATCHES,
    OTHER_TRUTH,
    RSS_WRAPPER,
    TRUTH,
    Outcome,
    alone,
    assert_good_log_analysed,
    assert_row,
    cli,
    cut_oom_log,
    deny_access,
    good_lines,
    interleave,
    make_binary,
    make_broken_symlink,
    make_crlf,
    make_cut_table,
    make_empty,
    make_fifo,
    make_gzip_of_garbage,
    make_invalid_utf8,
    make_newest_first,
    make_not_a_snapshot,
    make_nul_bytes,
    make_oversized_pickle,
    make_symlink_loop,
    make_truncated_gz,
    make_unreadable,
    many_small_files,
    own_batches,
    with_good,
)
from tests.conftest import ROOT


def test_row_empty_file(tmp_path: Path) -> None:
    outcome, bad, folder = with_good(tmp_path, make_empty)
    assert_row(outcome, bad, folder, "skipped", "empty file")
    assert alone(tmp_path, make_empty)[0].code == 2


def test_row_binary_file(tmp_path: Path) -> None:
    outcome, bad, folder = with_good(tmp_path, make_binary)
    assert_row(outcome, bad, folder, "skipped", "binary file, not a text log")
    assert outcome.runs_from(bad) == []
    assert alone(tmp_path, make_binary)[0].code == 2


def test_binary_random_bytes_are_not_read_as_a_log(tmp_path: Path) -> None:
    def make(folder: Path) -> Path:
        path = folder / "weights.bin.part"
        path.write_bytes(struct.pack("<8192d", *(i * 0.7310585786 for i in range(8192))))
        return path

    outcome, bad, folder = with_good(tmp_path, make)
    assert_row(outcome, bad, folder, "skipped", "binary file, not a text log")


def test_row_truncated_gz(tmp_path: Path) -> None:
    outcome, bad, folder = with_good(tmp_path, make_truncated_gz)
    entry = assert_row(
        outcome, bad, folder, "partial", "truncated gzip (compressed stream ends early)"
    )
    assert entry["lines"] and entry["events"]  # what was decompressed before the cut is analysed
    assert own_batches(outcome, bad)[0] > GOOD_BATCHES[0]
    assert alone(tmp_path, make_truncated_gz)[0].code in (0, 1)


def test_truncated_small_gz_keeps_what_was_decompressed(tmp_path: Path) -> None:
    def make(folder: Path) -> Path:
        path = folder / "previous-server.log.gz"
        data = gzip.compress(GOOD.read_bytes(), mtime=0)
        path.write_bytes(data[: len(data) * 8 // 10])
        return path

    outcome, bad, folder = with_good(tmp_path, make)
    entry = assert_row(outcome, bad, folder, "partial", "truncated gzip")
    assert entry["events"]


def test_row_gzip_of_garbage(tmp_path: Path) -> None:
    outcome, bad, folder = with_good(tmp_path, make_gzip_of_garbage)
    assert_row(outcome, bad, folder, "skipped", "not a valid gzip file")
    assert alone(tmp_path, make_gzip_of_garbage)[0].code == 2


def test_row_invalid_utf8(tmp_path: Path) -> None:
    outcome, bad, folder = with_good(tmp_path, make_invalid_utf8)
    assert_row(outcome, bad, folder, "ok", None)
    assert own_batches(outcome, bad) == GOOD_BATCHES
    (run,) = outcome.runs_from(bad)
    assert run["record"]["graph_capture_sizes"] == TRUTH["graph_capture_sizes"]


@pytest.mark.slow
def test_row_50mb_single_line(tmp_path: Path) -> None:
    """A 50 MB request dump on one line, with anchors and escapes in it, between normal lines."""
    folder = tmp_path / "incident"
    folder.mkdir()
    shutil.copy(GOOD, folder / "server.log")
    bad = folder / "huge-line.log"
    lines = good_lines()
    chunk = b"the user said: Error in \x1b[0m<tool> [x] Decode batch, Traceback? "
    payload = (chunk * (50 * 2**20 // len(chunk) + 1))[: 50 * 2**20]
    with open(bad, "wb") as fh:
        fh.writelines(lines[:60])
        fh.write(b"[2025-11-03 09:00:30] Receive: obj=GenerateReqInput(text='" + payload + b"')\n")
        fh.writelines(lines[60:])
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                RSS_WRAPPER,
                "analyze",
                str(folder),
                "-o",
                str(tmp_path / "r"),
                "--no-html",
                "--format",
                "json",
                "-q",
            ],
            capture_output=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    finally:
        elapsed = time.monotonic() - start
        bad.write_bytes(b"")  # pytest keeps recent tmp folders: do not leave 50 MB behind
    stderr = proc.stderr.decode()
    assert proc.returncode in (0, 1), stderr
    assert elapsed < 90, f"{elapsed:.1f} s"
    rss_mib = int(stderr.split("MAXRSS_KIB ")[1].split()[0]) / 1024
    assert rss_mib < 1024, f"peak RSS {rss_mib:.0f} MiB for a 50 MiB line"
    outcome = Outcome(proc.returncode, json.loads(proc.stdout), stderr)
    entry = assert_row(outcome, bad, folder, "ok", None)
    assert entry["lines"] == len(lines) + 1
    assert own_batches(outcome, bad) == GOOD_BATCHES  # the neighbouring lines still parse


def test_row_crlf_line_ends(tmp_path: Path) -> None:
    outcome, bad, folder = with_good(tmp_path, make_crlf)
    assert_row(outcome, bad, folder, "ok", None)
    (run,) = outcome.runs_from(bad)
    (good,) = outcome.runs_from(folder / "server.log")
    assert run["record"] == good["record"]


def test_row_nul_bytes(tmp_path: Path) -> None:
    outcome, bad, folder = with_good(tmp_path, make_nul_bytes)
    assert_row(outcome, bad, folder, "ok", None)
    assert own_batches(outcome, bad) == GOOD_BATCHES


def test_nul_padded_block_does_not_make_a_log_binary(tmp_path: Path) -> None:
    def make(folder: Path) -> Path:
        path = folder / "crashed.log"
        lines = good_lines()
        path.write_bytes(b"".join(lines[:50]) + b"\x00" * 8192 + b"".join(lines[50:]))
        return path

    outcome, bad, folder = with_good(tmp_path, make)
    assert_row(outcome, bad, folder, "ok", None)


def test_row_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deny_access(monkeypatch, "root-only.log")
    outcome, bad, folder = with_good(tmp_path, make_unreadable)
    assert_row(outcome, bad, folder, "skipped", "permission denied")
    assert alone(tmp_path, make_unreadable)[0].code == 2


def test_row_unreadable_file_open_fails_after_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listed as readable, then open() fails (permissions changed, NFS, SELinux): same outcome."""
    from diag.sources import readers

    def fake_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(os.fsdecode(file)).name == "revoked.log":
            raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(file))
        return open(file, *args, **kwargs)

    monkeypatch.setattr(readers, "open", fake_open, raising=False)

    def make(folder: Path) -> Path:
        path = folder / "revoked.log"
        shutil.copy(GOOD, path)
        return path

    outcome, bad, folder = with_good(tmp_path, make)
    assert_row(outcome, bad, folder, "skipped", "permission denied")
    assert alone(tmp_path, make)[0].code == 2


def test_row_named_pipe_is_never_opened(tmp_path: Path) -> None:
    """Opening a FIFO nobody writes to would block forever: it must be refused unopened."""
    outcome, bad, folder = with_good(tmp_path, make_fifo)
    assert_row(outcome, bad, folder, "skipped", "not a regular file")
    assert alone(tmp_path, make_fifo)[0].code == 2


def test_row_broken_symlink(tmp_path: Path) -> None:
    outcome, bad, folder = with_good(tmp_path, make_broken_symlink)
    assert_row(outcome, bad, folder, "skipped", "broken symlink")
    assert alone(tmp_path, make_broken_symlink)[0].code == 2


def test_row_symlink_loop(tmp_path: Path) -> None:
    outcome, bad, folder = with_good(tmp_path, make_symlink_loop)
    assert_row(outcome, bad, folder, "skipped", "symlink loop")
    assert_row(outcome, folder / "b.log", folder, "skipped", "symlink loop")
    out, bad_alone = alone(tmp_path, make_symlink_loop)
    assert out.code == 2 and "symlink loop" in out.stderr


@pytest.mark.slow
def test_row_folder_of_10000_small_files_each_listed(tmp_path: Path) -> None:
    from diag.ingest import ingest

    folder = tmp_path / "incident"
    folder.mkdir()
    shutil.copy(GOOD, folder / "server.log")
    paths = many_small_files(folder, 10_000)
    start = time.monotonic()
    ing = ingest([str(folder)])
    assert time.monotonic() - start < 60
    listed = {i.path: i for i in ing.inputs}
    assert len(listed) == 10_001
    assert all(listed[str(p)].status == "ok" and listed[str(p)].lines == 2 for p in paths)


@pytest.mark.slow
def test_folder_of_10000_small_files_analyses_in_reasonable_time(tmp_path: Path) -> None:
    budget = 120.0
    probe = tmp_path / "probe"
    probe.mkdir()
    many_small_files(probe, 100)
    start = time.monotonic()
    # nothing in the probe is a server log: INTERFACE.md's exit 2, after reading every file
    assert cli(probe, out=tmp_path / "r0").code == 2
    projected = (time.monotonic() - start) * 100
    assert projected < budget, (
        f"projected {projected:.0f} s for 10,000 files (budget {budget:.0f} s)"
    )
    folder = tmp_path / "incident"
    folder.mkdir()
    shutil.copy(GOOD, folder / "server.log")
    paths = many_small_files(folder, 10_000)
    start = time.monotonic()
    outcome = cli(folder, out=tmp_path / "r1")
    assert time.monotonic() - start < budget
    assert_good_log_analysed(outcome, folder)
    assert all(outcome.entry(p)["status"] == "ok" for p in paths)


def test_row_log_ends_mid_traceback(tmp_path: Path) -> None:
    """Cut inside the frames: the capture error is still reported, its class unknown."""
    outcome, bad, folder = with_good(tmp_path, lambda f: cut_oom_log(f, b"    raise Exception("))
    assert_row(outcome, bad, folder, "ok", None)
    (run,) = outcome.runs_from(bad)
    error = run["record"]["capture_error"]
    assert (
        error is not None
        and error["class"] == "other"
        and "exception line is not in the log" in error["message"]
    )
    assert error["path"] == str(bad)
    assert "GD100" in [f["code"] for f in run["findings"]]
    assert outcome.code == 1


def test_log_ends_mid_exception_line(tmp_path: Path) -> None:
    """Cut inside the exception message: the part that is there still classifies it."""
    outcome, bad, folder = with_good(
        tmp_path, lambda f: cut_oom_log(f, b"Exception: Capture cuda graph", 60)
    )
    assert_row(outcome, bad, folder, "ok", None)
    (run,) = outcome.runs_from(bad)
    assert run["record"]["capture_error"]["class"] == "oom"


def test_row_lines_out_of_order(tmp_path: Path) -> None:
    """A newest-first copy (log viewers) reads as the original; so do racing writers' swaps."""
    outcome, bad, folder = with_good(tmp_path, make_newest_first)
    assert_row(outcome, bad, folder, "ok", None)
    (run,) = outcome.runs_from(bad)
    (good,) = outcome.runs_from(folder / "server.log")
    assert run["record"] == good["record"]
    assert [f["code"] for f in run["findings"]] == [f["code"] for f in good["findings"]]

    def swapped(f: Path) -> Path:
        lines = good_lines()
        for i in range(
            20, len(lines) - 1, 5
        ):  # neighbours swapped, as two processes racing to write
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
        path = f / "racing.log"
        path.write_bytes(b"".join(lines))
        return path

    (tmp_path / "swap").mkdir()
    outcome2, bad2, _ = with_good(tmp_path / "swap", swapped)
    assert outcome2.entry(bad2)["status"] == "ok"
    assert own_batches(outcome2, bad2) == GOOD_BATCHES


def test_row_two_servers_interleaved_in_one_file(tmp_path: Path) -> None:
    """Two SGLang servers' lines alternating, no prefix to tell them apart: every restart
    marker seen twice starts a run, so there are several runs with mixed records; nothing is
    lost (every decode batch is in some run) and nothing crashes."""
    outcome, bad, folder = with_good(tmp_path, interleave())
    assert_row(outcome, bad, folder, "ok", None)
    runs = outcome.runs_from(bad)
    assert len(runs) >= 2
    graph, eager = own_batches(outcome, bad)
    want = OTHER_TRUTH["batches"]
    assert graph + eager == sum(GOOD_BATCHES) + want["graph"] + want["eager"]


def test_two_compose_services_interleaved_are_separate_runs(tmp_path: Path) -> None:
    """The same file as docker-compose writes it (``svc-1  | `` prefixes): one run per service,
    each with its own server's record."""
    outcome, bad, folder = with_good(tmp_path, interleave(b"sglang-a-1  | ", b"sglang-b-1  | "))
    assert_row(outcome, bad, folder, "ok", None)
    runs = {r["id"].split("[")[-1].split("]")[0]: r for r in outcome.runs_from(bad)}
    assert sorted(runs) == ["sglang-a-1", "sglang-b-1"]
    a, b = runs["sglang-a-1"]["record"], runs["sglang-b-1"]["record"]
    assert (a["batches"]["graph"], a["batches"]["eager"]) == GOOD_BATCHES
    assert (b["batches"]["graph"], b["batches"]["eager"]) == (
        OTHER_TRUTH["batches"]["graph"],
        OTHER_TRUTH["batches"]["eager"],
    )
    assert a["cuda_graph_max_bs"] != b["cuda_graph_max_bs"]


def test_row_pickle_that_is_not_a_snapshot(tmp_path: Path) -> None:
    outcome, bad, folder = with_good(tmp_path, make_not_a_snapshot)
    entry = assert_row(outcome, bad, folder, "skipped", "not an allocator snapshot")
    assert entry["kind"] == "memory_snapshot"
    assert alone(tmp_path, make_not_a_snapshot)[0].code == 2


@pytest.mark.parametrize("opcode", ["STACK_GLOBAL", "GLOBAL"])
def test_row_pickle_with_globals(tmp_path: Path, opcode: str) -> None:
    from gen.snapshots import write_malicious_pickle

    marker = tmp_path / "PWNED"

    def make(folder: Path) -> Path:
        path = folder / "cuda_graph_runner_memory_usage.pickle"
        write_malicious_pickle(path, marker, opcode=opcode)
        return path

    outcome, bad, folder = with_good(tmp_path, make)
    assert_row(outcome, bad, folder, "skipped", f"refusing pickle opcode {opcode}")
    assert alone(tmp_path, make)[0].code == 2
    assert not marker.exists()


def test_row_pickle_over_the_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from diag.artifacts import snapshot

    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("an over-limit snapshot was loaded")

    monkeypatch.setattr(snapshot, "read_plain_pickle", never)
    outcome, bad, folder = with_good(tmp_path, make_oversized_pickle)
    assert_row(outcome, bad, folder, "skipped", "over the 512 MiB snapshot limit")
    assert alone(tmp_path, make_oversized_pickle)[0].code == 2


def test_row_operator_table_cut_mid_row(tmp_path: Path) -> None:
    outcome, bad, folder = with_good(tmp_path, make_cut_table)
    entry = assert_row(outcome, bad, folder, "partial", "table cut mid-row")
    assert entry["kind"] == "profile_table"
    assert outcome.doc is not None
    (table,) = [p for p in outcome.doc["profiles"] if p["path"] == str(bad)]
    assert [r["name"] for r in table["rows"]] == ["aten::op5", "aten::op4", "aten::op3"]
    assert alone(tmp_path, make_cut_table)[0].code in (0, 1)


def test_nothing_readable_among_many_bad_inputs_exits_2(tmp_path: Path) -> None:
    """All the unreadable rows in one folder: exit 2, one stderr line each, no traceback."""
    folder = tmp_path / "junk"
    folder.mkdir()
    bad = [
        make(folder)
        for make in (
            make_empty,
            make_binary,
            make_gzip_of_garbage,
            make_broken_symlink,
            make_not_a_snapshot,
            make_fifo,
        )
    ]
    res = CliRunner().invoke(
        main,
        ["analyze", str(folder), "-o", str(tmp_path / "r"), "--no-html"],
        catch_exceptions=False,
    )
    assert res.exit_code == 2 and res.stdout == ""
    for path in bad:
        assert len([ln for ln in res.stderr.splitlines() if str(path) in ln]) == 1, res.stderr
    assert "no input could be read" in res.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_rows_are_documented() -> None:
    """Every row test names a row of docs/bad-inputs.md (and the other way round)."""
    doc = (ROOT / "docs" / "bad-inputs.md").read_text(encoding="utf-8")
    rows = [ln for ln in doc.splitlines() if ln.startswith("| ") and "`test_row_" in ln]
    named = sorted(re.findall(r"`(test_row_\w+)`", ln)[0] for ln in rows)
    assert named == sorted(name for name in globals() if name.startswith("test_row_"))
    for name in re.findall(r"`(test_\w+)`", doc):  # every test the page cites exists
        assert name in globals() or name in (ROOT / "tests" / "test_properties.py").read_text(), (
            name
        )


def test_a_text_file_named_as_a_pickle_is_skipped_not_read_as_a_log(tmp_path: Path) -> None:
    """A protocol-0 pickle is ASCII (the classic `os.system` payload), and so is any text
    misnamed ``cuda_graph_runner_memory_usage.pickle``: neither is a snapshot torch wrote,
    neither is loaded nor read as a log; the other inputs are analysed."""
    from diag.api import analyze

    (tmp_path / "cuda_graph_runner_memory_usage.pickle").write_text(
        'cos\nsystem\n(S"touch pwned"\ntR.'
    )
    log = tmp_path / "server.log"
    log.write_bytes(
        (ROOT / "fixtures" / "incidents" / "sglang-healthy" / "server.log").read_bytes()
    )
    report = analyze([str(tmp_path)])
    by_name = {Path(i.path).name: i for i in report.inputs}
    pickled = by_name["cuda_graph_runner_memory_usage.pickle"]
    assert (pickled.status, pickled.kind) == ("skipped", "memory_snapshot")
    assert pickled.reason == "named as a pickle but not a binary pickle (protocol 2-5): not read"
    assert by_name["server.log"].status == "ok" and len(report.runs) == 1
    assert not (tmp_path / "pwned").exists()
