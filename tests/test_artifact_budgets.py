"""Bounded artifact reading (issue 36 item 2): a snapshot pickle built to exhaust memory or
time is refused with the budget it broke, quickly, and the log beside it is analysed.

The hostile pickle is 5,000 segments that share one list of 200,000 blocks: ~650 KB on
disk, eleven billion entries for any walk of it (it hung the run before)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diag.artifacts.safe_pickle import Budget, SnapshotError, read_plain_pickle
from tests.bad_inputs_support import GOOD, GOOD_BATCHES, HWM_WRAPPER, peak_mib
from tests.conftest import ROOT


def shared_blocks_pickle(segments: int = 5000, blocks: int = 200_000) -> bytes:
    block = {"size": 512, "requested_size": 512, "address": 0, "state": "active_allocated"}
    shared = [block] * blocks
    segs = [
        {"device": 0, "address": i << 21, "total_size": 1 << 21, "blocks": shared}
        for i in range(segments)
    ]
    return pickle.dumps({"segments": segs, "device_traces": [[]]}, protocol=4)


def test_shared_references_are_refused_within_seconds() -> None:
    data = shared_blocks_pickle()
    start = time.monotonic()
    with pytest.raises(SnapshotError, match="walked .* times through shared references"):
        read_plain_pickle(data, "x.pickle")
    assert time.monotonic() - start < 5.0


def test_the_whole_command_refuses_it_and_analyses_the_log(tmp_path: Path) -> None:
    folder = tmp_path / "incident"
    folder.mkdir()
    shutil.copy(GOOD, folder / "server.log")
    bad = folder / "cuda_graph_runner_memory_usage.pickle"
    bad.write_bytes(shared_blocks_pickle())
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", HWM_WRAPPER, "analyze", str(folder), "-o", str(tmp_path / "r")]
        + ["--no-html", "--format", "json", "-q"],
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    elapsed = time.monotonic() - start
    stderr = proc.stderr.decode()
    assert proc.returncode in (0, 1), stderr
    doc = json.loads(proc.stdout)
    entry = next(i for i in doc["inputs"] if i["path"] == str(bad))
    assert entry["status"] == "skipped" and entry["reason"].startswith("refused: "), entry
    assert str(bad) not in entry["reason"]  # the path is said once, by the listing
    (run,) = [r for r in doc["runs"] if str(folder / "server.log") in r["sources"]]
    assert (run["record"]["batches"]["graph"], run["record"]["batches"]["eager"]) == GOOD_BATCHES
    rss_mib = peak_mib(stderr)
    assert rss_mib < 300, f"{rss_mib:.0f} MiB"
    assert elapsed < 60, f"{elapsed:.1f} s"  # (5 s on a quiet machine; CI shares its cores)


def test_nesting_and_value_budgets_name_what_they_broke() -> None:
    deep: list = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(SnapshotError, match="nested more than 100 deep"):
        read_plain_pickle(pickle.dumps(deep, protocol=4), "x.pickle")
    many = pickle.dumps(list(range(200_000)), protocol=4)
    with pytest.raises(SnapshotError, match="more than 100,000 values"):
        read_plain_pickle(many, "x.pickle", Budget(values=100_000))
    # a plain pickle within the budgets reads as before, shared strings and all
    ok = {"segments": [{"blocks": [{"frames": ["f"] * 3}] * 3}] * 3}
    assert read_plain_pickle(pickle.dumps(ok, protocol=4)) == ok


def test_a_container_that_holds_itself_is_malformed() -> None:
    loop: list = []
    loop.append(loop)
    with pytest.raises(SnapshotError, match="holds itself"):
        read_plain_pickle(pickle.dumps(loop, protocol=4), "x.pickle")
