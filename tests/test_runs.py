"""Runs: start-ups split a file, rotated parts join, collectors' prefixes separate servers."""

from __future__ import annotations

from pathlib import Path

from diag.api import analyze

DATA = Path(__file__).parent / "data"
ARGS = (
    "[2025-11-03 {t}] server_args=ServerArgs(model_path='m', tp_size=1, cuda_graph_max_bs={bs}, "
    "disable_cuda_graph=False)\n"
)
END = "[2025-11-03 {t}] Capture cuda graph end. Time elapsed: {s:.2f} s. mem usage=0.30 GB. avail mem=19.70 GB.\n"
DECODE = (
    "[2025-11-03 {t}] Decode batch, #running-req: {n}, #token: 9000, token usage: 0.10, cuda graph: True, "
    "gen throughput (token/s): 600.00, #queue-req: 0\n"
)


def test_restart_inside_one_file_starts_a_new_run(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        ARGS.format(t="09:00:00", bs=32)
        + END.format(t="09:00:05", s=5)
        + DECODE.format(t="09:01:00", n=8)
        + ARGS.format(t="10:00:00", bs=64)
        + END.format(t="10:00:07", s=7)
        + DECODE.format(t="10:01:00", n=9)
    )
    report = analyze([str(log)], generated_at="fixed")
    assert [r.record.to_json()["cuda_graph_max_bs"] for r in report.runs] == [32, 64]
    assert [r.record.to_json()["capture_time_s"] for r in report.runs] == [5.0, 7.0]
    assert [r.id.rsplit("#", 1)[1] for r in report.runs] == ["1", "2"]


def test_multi_rank_init_lines_are_one_start_up(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        ARGS.format(t="09:00:00", bs=32)
        + "".join(f"[2025-11-03 09:00:01 TP{r}] Init torch distributed begin.\n" for r in range(4))
        + "".join(END.format(t="09:00:05", s=5).replace("05]", f"05 TP{r}]") for r in range(4))
    )
    report = analyze([str(log)], generated_at="fixed")
    assert len(report.runs) == 1
    assert [r.rank for r in report.runs[0].facts.ranks] == ["TP0", "TP1", "TP2", "TP3"]


def test_compose_services_interleaved_in_one_file_are_separate_servers() -> None:
    report = analyze([str(DATA / "compose_pd_interleaved.log")], generated_at="fixed")
    by_id = {r.id.split("[")[1].split("]")[0]: r for r in report.runs}
    assert set(by_id) == {"prefill-1", "decode-1"}
    assert by_id["prefill-1"].record.to_json()["prefill_node"] is True
    assert by_id["decode-1"].record.to_json()["prefill_node"] is False
    assert by_id["decode-1"].record.to_json()["capture_time_s"] == 5.0
    assert [f.code for f in by_id["prefill-1"].findings] == ["GD130"]
    assert not by_id["decode-1"].findings
