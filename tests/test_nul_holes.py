"""NUL holes (issue 36 item 3): a log that starts with a hole (copytruncate rotation), holds
one in the middle or ends in one is analysed around it, the hole noted, in constant memory
(holes are jumped over with SEEK_DATA where the file system knows them, else read in blocks
with their NULs dropped block by block, never held as one line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diag.ingest.inputs import NulCount
from diag.sources.readers import Hole, data_from, iter_range
from tests.bad_inputs_support import GOOD, GOOD_BATCHES, HWM_WRAPPER, cli, peak_mib
from tests.conftest import ROOT

MIB = 1 << 20


def _holed(path: Path, lead: int, middle: int, tail: int, sparse: bool) -> Path:
    text = GOOD.read_bytes()
    cut = text.rindex(b"\n", 0, len(text) // 2) + 1
    with open(path, "wb") as fh:
        for part, hole in ((b"", lead), (text[:cut], middle), (text[cut:], tail)):
            fh.write(part)
            if sparse:
                fh.seek(hole, os.SEEK_CUR)
            else:
                fh.write(b"\0" * hole)
        fh.truncate()
    return path


def _batches(doc: dict, path: Path) -> tuple[int, int]:
    (run,) = [r for r in doc["runs"] if str(path) in r["sources"]]
    return run["record"]["batches"]["graph"], run["record"]["batches"]["eager"]


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("lead", [256 * 1024, 3 * MIB + 5])
def test_a_log_that_starts_with_a_hole_is_analysed(tmp_path: Path, lead: int, sparse: bool) -> None:
    log = _holed(tmp_path / "server.log", lead, 4096, 8192, sparse)
    out = cli(log, out=tmp_path / "r")
    assert out.code in (0, 1), out.stderr
    entry = out.entry(log)
    assert entry["status"] == "ok", entry
    assert _batches(out.doc or {}, log) == GOOD_BATCHES
    total = lead + 4096 + 8192
    assert f"{total} NUL byte(s) dropped, the first on line 1" in entry["notes"], entry


def test_only_a_hole_says_how_big(tmp_path: Path) -> None:
    path = tmp_path / "hole.log"
    with open(path, "wb") as fh:
        fh.truncate(600 * 1024)
    out = cli(path, out=tmp_path / "r")
    assert out.code == 2 and "no text (only 614,400 NUL bytes)" in out.stderr


def test_a_sparse_hole_is_jumped_over_not_read(tmp_path: Path) -> None:
    log = _holed(tmp_path / "s.log", 0, 64 * MIB, 0, sparse=True)
    inside = len(GOOD.read_bytes()) // 2 + 4 * MIB
    with open(log, "rb") as fh:
        if data_from(fh, inside) == inside:
            pytest.skip("this file system does not report holes (SEEK_DATA)")
    blocks = list(iter_range(str(log), 0, None))
    holes = [b for b in blocks if type(b) is Hole]
    assert holes and sum(h.skipped for h in holes) > 48 * MIB
    assert sum(len(b) for b in blocks) < 20 * MIB  # at most one block of the hole was read
    nuls = NulCount()
    kept = b"".join(nuls.watch(iter(blocks)))
    assert nuls.count == 64 * MIB and kept == GOOD.read_bytes()


def test_a_64_mib_hole_in_the_middle_costs_constant_memory(tmp_path: Path) -> None:
    """The hole was one 64 MiB line, held ~12 times over (841 MB peak); now ~130 MB, the
    interpreter and its libraries, whatever the hole's size."""
    log = _holed(tmp_path / "server.log", 0, 64 * MIB, 0, sparse=True)
    proc = subprocess.run(
        [sys.executable, "-c", HWM_WRAPPER, "analyze", str(log), "-o", str(tmp_path / "r")]
        + ["--no-html", "--format", "json", "-q", "-j", "1"],
        capture_output=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    stderr = proc.stderr.decode()
    assert proc.returncode in (0, 1), stderr
    doc = json.loads(proc.stdout)
    assert _batches(doc, log) == GOOD_BATCHES
    rss_mib = peak_mib(stderr)
    assert rss_mib < 250, f"{rss_mib:.0f} MiB"
