"""The progress meter over the whole command: the reading ETA comes from the recent rate
(not the first block, not the whole run's average), a stall says so instead of a climbing
ETA, and every analysis stage after the last byte advances the meter."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from diag.api import analyze
from diag.cli.progress import Progress
from tests.conftest import ROOT

MIB = 2**20


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _meter() -> tuple[Progress, Clock, io.StringIO]:
    clock, out = Clock(), io.StringIO()
    return Progress(False, stream=out, clock=clock, force=True, ticker=False), clock, out


def _last(out: io.StringIO) -> str:
    return out.getvalue().split("\r")[-1].strip()


def test_eta_follows_the_recent_rate_not_the_first_block() -> None:
    """10 s at 1 MiB/s (workers starting), then 10 s at 100 MiB/s: the ETA for the last
    990 MiB is the fast rate's 10 s, where an average since the start would say 20 s."""
    p, clock, out = _meter()
    total, done = 2000 * MIB, 0
    for _ in range(10):
        clock.t += 1.0
        done += MIB
        p(done, total)
    for _ in range(100):  # 10 s at 100 MiB/s, sampled every 0.1 s
        clock.t += 0.1
        done += 10 * MIB
        p(done, total)
    line = _last(out)
    left = (total - done) / (100 * MIB)
    assert f"ETA {left:.0f}s" in line, line
    average = (total - done) / (done / clock.t)
    assert f"ETA {average:.0f}s" not in line


def test_a_stall_is_said_not_an_eta_that_climbs() -> None:
    p, clock, out = _meter()
    total = 1000 * MIB
    clock.t = 2.0
    p(11 * MIB, total)
    for _ in range(20):  # 20 s with no byte read: a worker's segment not yet counted
        clock.t += 1.0
        p(11 * MIB, total)
    line = _last(out)
    assert "waiting for the readers" in line and "ETA" not in line


def test_every_analysis_stage_advances_the_meter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files read (counted: each file is read as a group of its own here), advice, rules per
    run (counted), evidence, recommendations; each told in order, the counted ones up to
    their total. One group alone is told event tables, runs and facts per run (counted)."""
    import diag.sources.groups as groups

    monkeypatch.setattr(groups, "BATCH_FILES", 1)
    folder = tmp_path / "many"
    folder.mkdir()
    incidents = ROOT / "fixtures" / "incidents"
    for name in ("sglang-kv-squeeze", "vllm-healthy", "sglang-capture-oom"):
        for log in sorted((incidents / name).glob("*.log")):
            (folder / f"{name}-{log.name}").write_bytes(log.read_bytes())
    told: list[tuple[str, int, int]] = []
    report = analyze([str(folder)], jobs=1, stage=lambda n, d, t: told.append((n, d, t)))
    names = list(dict.fromkeys(n for n, _, _ in told))
    assert names == [
        "reading files",
        "advice (bucket sets)",
        "rules per run",
        "evidence",
        "recommendations",
    ]
    n = len(report.runs)
    assert n >= 3
    for counted in ("reading files", "rules per run"):
        steps = [(d, t) for name, d, t in told if name == counted]
        assert steps == [(i, n) for i in range(n)]
    told.clear()
    one = analyze(
        [str(folder / "vllm-healthy-server.log")],
        jobs=1,
        stage=lambda n, d, t: told.append((n, d, t)),
    )
    assert list(dict.fromkeys(n for n, _, _ in told)) == [
        "building the event tables",
        "splitting runs",
        "facts per run",
        "advice (bucket sets)",
        "rules per run",
        "evidence",
        "recommendations",
    ]
    assert [(d, t) for name, d, t in told if name == "facts per run"] == [(0, len(one.runs))]


def test_stage_eta_is_its_own_time_per_item() -> None:
    p, clock, out = _meter()
    clock.t = 5.0
    p.stage("facts per run", 0, 10)
    for i in range(1, 5):
        clock.t += 2.0  # 2 s a run
        p.stage("facts per run", i, 10)
    assert "facts per run 4/10 ETA 12s" in _last(out)
    p.finish()
    assert out.getvalue().endswith("\r")


def test_a_long_stage_keeps_ticking_and_finish_stops_it() -> None:
    """One big run's facts: no stage call for seconds, yet the line's elapsed time moves;
    after finish nothing more is written (no thread outlives the meter)."""
    import threading
    import time

    out = io.StringIO()
    p = Progress(False, stream=out, force=True)
    p.start -= 5.0  # the command has run 5 s
    p.stage("facts per run", 0, 1)
    time.sleep(2.5)
    p.finish()
    drawn = [t.strip() for t in out.getvalue().split("\r") if t.strip()]
    stamps = {t.rsplit("(", 1)[1] for t in drawn if t.startswith("graphdiag: facts per run")}
    assert len(stamps) >= 2, drawn  # the elapsed seconds advanced with no call
    after = out.getvalue()
    time.sleep(1.5)
    assert out.getvalue() == after
    assert not any(t.name == "graphdiag-progress" for t in threading.enumerate())
