"""A DP rank without graphs runs every rank eager (issue 35, config-caused eager): the
ranks take the minimum of their graph votes each step (sglang==0.5.23:
srt/managers/scheduler_components/dp_attn.py:290,369-381; vllm==0.20.0:
vllm/v1/worker/dp_utils.py:90-97). GD115 names the rank; every rank capturing, or a rank
stuck in capture (GD102's), is no such finding."""

from __future__ import annotations

from pathlib import Path

from diag.api import analyze
from gen import logs2026 as lg
from gen import sglang_logs as sg

_DECODE = (lg.Runner2026("target", "decode", "full", (1, 2, 4, 8, 16), 5.0, 0.4),)


def _log(tmp_path: Path, uncaptured: int | None, graph: bool, stall: bool = False) -> Path:
    clock = sg.Clock()
    lines = lg.sglang_startup(
        clock,
        tp=1,
        dp=4,
        runners=_DECODE,
        kv_tokens=200000,
        max_running_requests=64,
        uncaptured=uncaptured,
        stall=(3, "decode", 0) if stall else None,
    )
    for i in range(6):
        ts = clock.tick(2.0)
        for tag in sg.rank_tags(1, lg.ERA, 4):
            bs = 2 + i
            lines.append(
                sg.decode_line(
                    ts,
                    tag,
                    lg.ERA,
                    running=bs,
                    tokens=bs * 700,
                    usage=0.2,
                    graph=graph,
                    throughput=bs * 40.0,
                    queue=0,
                )
            )
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def _gd115(path: Path) -> list[str]:
    report = analyze([str(path)], generated_at="fixed")
    return [f.message for f in report.runs[0].findings if f.code == "GD115"]


def test_a_dp_rank_without_graphs_is_named(tmp_path: Path) -> None:
    (msg,) = _gd115(_log(tmp_path, uncaptured=2, graph=False))
    assert "DP rank DP2 captured no graphs while DP0, DP1, DP3 did" in msg
    assert "24 of 24 decode batches ran eager (100%)" in msg


def test_every_dp_rank_capturing_is_no_finding(tmp_path: Path) -> None:
    assert _gd115(_log(tmp_path, uncaptured=None, graph=True)) == []


def test_a_rank_stuck_in_capture_is_a_stall_not_this(tmp_path: Path) -> None:
    report = analyze([str(_log(tmp_path, uncaptured=None, graph=False, stall=True))])
    codes = {f.code for f in report.runs[0].findings}
    assert "GD102" in codes and "GD115" not in codes
