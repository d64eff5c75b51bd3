"""GD111 only where the run's own step times show that padding costs time (issue 24 point 4):
the same sparse buckets and traffic, once with a flat step time (padding is free by the
run's numbers: a run note says why no finding) and once with a step time that grows with the
padded size (a slope above its error: the finding names it)."""

from __future__ import annotations

from pathlib import Path

from diag.api import analyze
from gen import sglang_logs as sg


def _log(path: Path, step_s: tuple[float, float, float] | None) -> Path:
    clock = sg.Clock()
    sizes = [1, 48, 96]
    lines = [sg.server_args(clock.now, cuda_graph_max_bs=96, cuda_graph_bs=sizes)]
    lines += sg.startup(clock, sizes=sizes)
    traffic = sg.traffic(80, low=8, high=30, seed=4, burst_every=8, burst_to=80)
    served, _ = sg.serve(clock, traffic, sizes=sizes, seed=4, step_s=step_s)
    path.write_text("\n".join(lines + served) + "\n", encoding="utf-8")
    return path


def test_flat_step_time_is_a_note_not_a_finding(tmp_path: Path) -> None:
    run = analyze([str(_log(tmp_path / "flat.log", None))]).runs[0]
    assert run.record.to_json()["padding_waste"] > 0.20  # the same padding as below
    assert "GD111" not in {f.code for f in run.findings}
    note = next(n for n in run.notes if "not reported as GD111" in n)
    assert "cannot be told from zero" in note and "do not show that padding costs time" in note


def test_a_measured_slope_makes_it_a_finding(tmp_path: Path) -> None:
    run = analyze([str(_log(tmp_path / "slope.log", (0.020, 0.0004, 0.005)))]).runs[0]
    gd111 = next(f for f in run.findings if f.code == "GD111")
    slot = run.advice.parameters.slot_step_s if run.advice else None
    assert slot is not None and slot.source == "run"
    assert f"at the measured {slot.value * 1e3:.3g} ms per padded request" in gd111.message
