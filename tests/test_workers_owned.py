"""Workers are bounded and owned: ``--jobs`` is capped at the cores and the segments, and no
worker outlives its parent, even when the parent is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diag.ingest import ingest
from diag.ingest.owned import bounded_jobs, cores
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import gen_logs  # noqa: E402


def _children(pid: int) -> set[int]:
    """Every descendant of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_bytes()
            except OSError:
                continue
            parents[int(d.name)] = int(stat.rsplit(b")", 1)[1].split()[1])
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for c, pp in parents.items():
            if pp == p and c not in out:
                out.add(c)
                todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


def test_jobs_are_capped_at_cores_and_segments() -> None:
    assert bounded_jobs(100_000, 10**6) == cores()
    assert bounded_jobs(64, 1) == 1
    assert bounded_jobs(0, 5) == 1


def test_many_jobs_on_a_small_log_run_like_auto(tmp_path: Path) -> None:
    log = tmp_path / "small.log"
    gen_logs.write_log(log, gen_logs.sglang_lines(200_000, seed=2))
    auto = ingest([str(log)])
    many = ingest([str(log)], jobs=100_000)
    assert many.tables.total() == auto.tables.total() > 0
    for kind in auto.tables:
        assert many.tables[kind].equals(auto.tables[kind])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_no_worker_outlives_a_killed_parent(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    gen_logs.write_log(log, gen_logs.sglang_lines(40_000_000, seed=5, restarts=1))
    code = (
        "import sys; from diag.ingest import ingest; "
        "ingest([sys.argv[1]], jobs=2, chunk_bytes=1 << 20, hotpath=False)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code, str(log)], cwd=ROOT)
    workers: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(workers) < 2 and parent.poll() is None:
        workers |= _children(parent.pid)
        time.sleep(0.1)
    assert parent.poll() is None, "ingest ended before its workers were seen"
    assert workers, "no worker process started"
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.1)
    assert not [w for w in workers if _alive(w)]
