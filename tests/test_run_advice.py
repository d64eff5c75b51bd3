"""Advice through the public paths (analyze, recommend, the rules) on generated logs.

The cost model and the set choice are tests/test_cost_model.py's job; here the advice is
computed from real-format logs by ``analyze`` and checked where users read it: the
recommended flags pasted into a second day's server, GD110's message, ``recommend``'s
output, pooled runs of one rotated log, vLLM mixed steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from diag.advise.bucket_sets import traffic_histogram
from diag.advise.recommend import recommend
from diag.advise.run_advice import (
    advise_group,
    advise_runs,
    current_sizes,
    engine_limits,
    run_evidence,
)
from diag.advise.validation import MAX_RUN_FOLDS
from diag.api import analyze
from diag.cli import main
from diag.facts.record import RunFacts
from diag.spill import ReadOnAsk
from gen import sglang_logs as sg
from gen import vllm_logs as vl
from tests.conftest import ROOT
from tests.test_recommend import sizes_from_flags, write_sglang

INCIDENTS = ROOT / "fixtures" / "incidents"


def day(seed: int, n: int = 1500) -> list[int]:
    """One day of decode batch sizes from a fixed distribution (gamma, mean 32)."""
    rng = np.random.default_rng(seed)
    return [int(x) for x in np.clip(np.round(rng.gamma(4.0, 8.0, n)), 1, 400)]


def test_default_set_keeps_its_promise_on_a_second_day(tmp_path: Path) -> None:
    """The set `recommend` prints for day 1, pasted into day 2's server (same distribution,
    other draws): the coverage the engine then measures is the promised one (held-out)."""
    day1 = write_sglang(tmp_path / "d1" / "server.log", day(1), sg.default_sizes(160))
    rep = analyze([str(day1)])
    rec = recommend(rep.runs, rep.snapshots)
    promised = rec["recommended"]["promised_coverage"]
    assert promised is not None and promised >= 0.995
    assert "time blocks" in rec["validation"]["how"]
    # the set to paste, or the current one where the advice keeps it (no flags then)
    new = sizes_from_flags(rec["flags"]) if rec["flags"] else rec["recommended"]["sizes"]
    assert bool(rec["flags"]) == (rec["decision"]["kind"] == "change")
    day2 = write_sglang(tmp_path / "d2" / "server.log", day(2), new, explicit=True)
    measured = analyze([str(day2)]).runs[0].record.to_json()
    assert measured["graph_capture_sizes"] == new
    assert measured["captured_share"] >= promised - 0.005
    # the padding promise holds too (held-out waste, within a point)
    assert abs(measured["padding_waste"] - rec["recommended"]["heldout_waste"]) <= 0.01


@pytest.mark.parametrize(
    "name",
    ["sglang-out-of-window", "vllm-out-of-window-inferred", "vllm-out-of-window-metrics"],
)
def test_gd110_and_recommend_name_the_same_ceiling(name: str) -> None:
    folder = INCIDENTS / name
    report = analyze([str(folder)], generated_at="fixed")
    run = report.runs[0]
    assert run.advice is not None
    doc = report.to_dict()["runs"][0]
    gd110 = [f for f in doc["findings"] if f["code"] == "GD110"]
    assert len(gd110) == 1
    ceiling = run.advice.ceiling
    if not run.advice.changes:  # too little evidence, or today's set is cheaper: both say why
        assert run.advice.decision is not None
        why = run.advice.decision.why
        assert any(why in r for r in gd110[0]["remediation"])
        assert "recommended ceiling" not in gd110[0]["message"]
        res = CliRunner().invoke(main, ["recommend", "-q", str(folder), "--format", "json"])
        rec = json.loads(res.stdout)
        assert rec["decision"]["why"] == why and rec["flags"] == ""
        return
    assert f"recommended ceiling {ceiling} {run.advice.unit}" in gd110[0]["message"]
    assert doc["recommendation"]["ceiling"] == ceiling

    res = CliRunner().invoke(main, ["recommend", "-q", str(folder), "--format", "json"])
    assert res.exit_code == 0, res.stderr
    rec = json.loads(res.stdout)
    assert rec["ceiling"] == ceiling == max(rec["recommended"]["sizes"])
    assert str(ceiling) in rec["flags"]
    res = CliRunner().invoke(main, ["recommend", "-q", str(folder)])
    assert f"ceiling {ceiling} {run.advice.unit}" in res.stdout


def test_three_run_rotated_log_covers_the_last_runs_peak(tmp_path: Path) -> None:
    """One server, three start-ups over a rotated set; peaks 40, 53 and 55 requests. The set
    is the server's: every run's advice covers run 3's peak, validated run against run."""
    clock = sg.Clock()
    peaks = (40, 53, 55)
    sizes = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48]  # SGLang's default step pattern up to 48
    texts = []
    for i, peak in enumerate(peaks):
        series = sg.traffic(80, low=8, high=30, seed=20 + i, burst_every=10, burst_to=peak)
        series[-5] = peak  # the run's own peak, exactly
        lines = [sg.server_args(clock.now, cuda_graph_max_bs=max(sizes))]
        lines += sg.startup(clock, sizes=sizes, kv_gib_each=20.0, kv_tokens=400000)
        served, _ = sg.serve(clock, series, sizes=sizes, seed=i)
        texts.append("\n".join(lines + served) + "\n")
    folder = tmp_path / "srv"
    folder.mkdir()
    for name, text in zip(("server.log.2", "server.log.1", "server.log"), texts, strict=True):
        (folder / name).write_text(text, encoding="utf-8")
    report = analyze([str(folder)])
    assert len(report.runs) == 3
    advice = [r.advice for r in report.runs]
    assert all(a is not None for a in advice)
    ceilings = {a.ceiling for a in advice if a is not None}
    assert len(ceilings) == 1 and min(ceilings) >= 55
    first = advice[0]
    assert first is not None and "leave-one-run-out over 3 runs" in first.folds
    rec = recommend(report.runs, report.snapshots)
    assert rec["ceiling"] == first.ceiling and max(rec["recommended"]["sizes"]) >= 55
    # each run's own set, priced on its own traffic: run 1 (peak 40) fits in 48, run 3 does not
    cur = [a.current for a in advice if a is not None]
    assert cur[0] is not None and cur[0].coverage == 1.0
    assert cur[2] is not None and cur[2].coverage < 1.0


def _vllm_log(path: Path, steps: list[tuple[int, int | None, bool]]) -> Path:
    version = "0.13.0"
    lines, _ = vl.server_log(version, max_num_seqs=64, max_num_batched_tokens=2048)
    clock = vl.Clock()
    for tokens, reqs, uniform in steps:
        clock.advance(0.03)
        mode = "FULL" if uniform else "PIECEWISE"
        lines.append(
            vl.debug_step(
                version, mode=mode, num_tokens=tokens, num_reqs=reqs, uniform=uniform, clock=clock
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_vllm_advice_keeps_the_sizes_mixed_steps_use(tmp_path: Path) -> None:
    """Decode steps of 4-24 tokens, mixed prefill+decode steps of 300-420 tokens (piecewise
    graphs serve them): the ceiling covers the mixed steps, not only the decode batches."""
    rng = np.random.default_rng(5)
    steps: list[tuple[int, int | None, bool]] = []
    for i in range(2400):  # 72 s of steps: enough evidence to size buckets
        if i % 6 == 0:
            steps.append((int(rng.integers(300, 421)), None, False))
        else:
            n = int(rng.integers(4, 25))
            steps.append((n, n, True))
    log = _vllm_log(tmp_path / "v.log", steps)
    report = analyze([str(log)])
    adv = report.runs[0].advice
    assert adv is not None and adv.unit == "tokens"
    mixed_peak = max(t for t, _, u in steps if not u)
    assert adv.ceiling >= mixed_peak
    assert adv.recommended.cost.coverage == 1.0
    assert adv.promised_coverage >= 0.99


def test_classification_and_advice_read_one_decode_steps_fact(tmp_path: Path) -> None:
    """Both read the run's DecodeSteps: taking the mixed prefill+decode lines out of the log
    leaves the classification as it was (they are not decode batches) and takes exactly
    those lines, at their token counts, out of the advice's traffic."""
    from diag.advise.run_advice import run_traffic

    rng = np.random.default_rng(11)
    steps: list[tuple[int, int | None, bool]] = []
    for i in range(400):
        if i % 5 == 0:
            steps.append((int(rng.integers(100, 200)), None, False))
        else:
            n = int(rng.integers(1, 30))
            steps.append((n, n, True))
    (tmp_path / "both").mkdir()
    (tmp_path / "decode").mkdir()
    both = analyze([str(_vllm_log(tmp_path / "both" / "v.log", steps))]).runs[0].facts
    decode = [st for st in steps if st[2]]
    only = analyze([str(_vllm_log(tmp_path / "decode" / "v.log", decode))]).runs[0].facts
    assert len(both.steps) == len(steps) and len(only.steps) == len(decode)
    cols = ["batch_size", "weight", "verdict", "reason", "bucket", "padded"]
    assert both.batches[cols].equals(only.batches[cols])
    assert both.record.batches == only.record.batches
    assert both.record.batches.decided == len(decode)
    t_both, t_only = run_traffic(both), run_traffic(only)
    assert t_both is not None and t_only is not None and t_both.tokens is not None
    assert t_both.tokens.tolist() == [t for t, _, _ in steps]
    assert t_both.mixed is not None and t_both.mixed.tolist() == [not u for _, _, u in steps]
    kept = ~np.asarray(t_both.mixed)
    assert t_both.tokens[kept].tolist() == np.asarray(t_only.tokens).tolist()
    assert np.asarray(t_both.requests)[kept].tolist() == np.asarray(t_only.requests).tolist()


def test_vllm_stats_only_never_shrinks_below_the_current_window(tmp_path: Path) -> None:
    """Stats lines show running requests only (here 2-6): mixed steps' tokens are not in the
    logs, so the ceiling stays at the window the run captured, and a note says why."""
    version = "0.11.0"
    lines, truth = vl.server_log(version, max_num_seqs=256, max_num_batched_tokens=8192)
    clock = vl.Clock()
    rng = np.random.default_rng(3)
    for _ in range(60):
        clock.advance(10)
        running = int(rng.integers(2, 7))
        lines.append(
            vl.stats_line(
                version, gen_tput=running * 40.0, running=running, kv_usage=3.0, clock=clock
            )
        )
    log = tmp_path / "v.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = analyze([str(log)])
    adv = report.runs[0].advice
    assert adv is not None
    assert adv.ceiling >= max(truth.capture_sizes)
    assert any("mixed prefill+decode" in n for n in adv.notes)
    # the decode part is fitted to the running counts; above it, every captured size stays
    rec = adv.recommended.sizes
    decode_top = max(s for s in rec if s <= 8)
    assert [s for s in truth.capture_sizes if s > decode_top] == [s for s in rec if s > decode_top]


def test_html_run_section_shows_the_frontier_and_the_bucket_overlay() -> None:
    from diag.render.advice_plots import bucket_overlay_figure, frontier_figure
    from diag.render.html import render_html

    report = analyze([str(INCIDENTS / "sglang-out-of-window")], generated_at="fixed")
    adv = report.runs[0].advice
    assert adv is not None
    page = render_html(report)
    for label in ("Bucket sets by K", "Current vs recommended buckets", "Cost model parameters"):
        assert label in page
    spec = frontier_figure(adv)
    assert spec is not None
    fig = spec.figure()
    star = [t for t in fig.data if t.name == "recommended"]
    assert len(star) == 1 and list(star[0].x) == [len(adv.recommended.sizes)]
    # the current set is a dotted level named with its K (issue 38: never a point that
    # stretches the K axis)
    assert adv.current is not None
    notes = [a.text for a in fig.layout.annotations]
    assert any(f"current set (K={len(adv.current.sizes)}" in n for n in notes)
    overlay = bucket_overlay_figure(adv, adv.current.sizes)
    assert overlay is not None
    traces = overlay.figure().data
    marks = {t.name: list(t.x) for t in traces if t.name and "buckets" in t.name}
    assert marks[f"recommended buckets ({len(adv.recommended.sizes)})"] == list(
        adv.recommended.sizes
    )
    assert marks[f"current buckets ({len(adv.current.sizes)})"] == list(adv.current.sizes)
    # the bars are the advice's own histogram: every step counted once
    bars = next(t for t in traces if t.name == "decode steps")
    assert float(sum(bars.y)) == pytest.approx(sum(adv.hist().values()))


def test_odd_cluster_gets_a_conventional_set_with_headroom(tmp_path: Path) -> None:
    """Batches of 34-41 requests: the exact set over those odd sizes saves less than the
    step-time fit resolves, so the engine's own step pattern is kept, and the ceiling has
    headroom above 41 (the issue's `[1, 34, 35, 36, 37, 38, 40, 41]` with max 41)."""
    rng = np.random.default_rng(4)
    series = [int(x) for x in rng.integers(34, 42, 400)]
    log = write_sglang(tmp_path / "s" / "server.log", series, sg.default_sizes(160))
    rep = analyze([str(log)])
    rec = recommend(rep.runs, rep.snapshots)
    grid = set(sg.default_sizes(160))
    assert set(rec["recommended"]["sizes"]) <= grid
    assert rec["ceiling"] > max(series)
    picked = next(r for r in rec["frontier"] if r["recommended"])
    assert picked["conventional"] is True


def test_a_fleet_is_validated_in_a_bounded_number_of_folds(tmp_path: Path) -> None:
    """More runs of one server than MAX_RUN_FOLDS (pods of one deployment, one config): the
    runs are dealt into that many folds (one fold per run grew with the square of the runs),
    and every run still gets the one pooled advice."""
    clock = sg.Clock()
    sizes = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48]
    n = MAX_RUN_FOLDS + 3
    folder = tmp_path / "fleet"
    for i in range(n):
        series = sg.traffic(60, low=8, high=30, seed=40 + i, burst_every=10, burst_to=44)
        lines = [sg.server_args(clock.now, cuda_graph_max_bs=max(sizes))]
        lines += sg.startup(clock, sizes=sizes, kv_gib_each=20.0, kv_tokens=400000)
        served, _ = sg.serve(clock, series, sizes=sizes, seed=i)
        pod = folder / f"pod-{i:02d}"
        pod.mkdir(parents=True)
        (pod / "server.log").write_text("\n".join(lines + served) + "\n", encoding="utf-8")
    report = analyze([str(folder)])
    assert len(report.runs) == n
    advice = [r.advice for r in report.runs]
    assert all(a is not None for a in advice)
    first = advice[0]
    assert first is not None
    assert first.folds.startswith(f"{MAX_RUN_FOLDS} folds over {n} runs")
    assert len({a.ceiling for a in advice if a is not None}) == 1
    # the note every run carries names a few of the pooled runs, not all: a fleet's report
    # must not grow with the square of its pods
    (pooled,) = [note for note in first.notes if "runs pooled" in note]
    ids = [r.id for r in report.runs]
    assert pooled.startswith(f"{n} runs pooled ({ids[0]}, {ids[1]}, {ids[2]}, ... {n - 6} more")
    assert pooled.endswith(f"{ids[-1]}); limits from the latest, {ids[-1]}")
    assert sum(run_id in pooled for run_id in ids) == 6


def test_advice_reads_each_run_once_and_pools_as_advise_group(tmp_path: Path) -> None:
    """A fleet's runs are read back from disk one at a time: the advice stage reads each run
    once (its evidence, own set and the server's limits taken on that read, the caller's
    ``each`` too), and pools a server's runs as :func:`advise_group` does on its own reads."""
    clock = sg.Clock()
    sizes = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48]
    folder = tmp_path / "srv"
    folder.mkdir()
    for i, name in enumerate(("server.log.2", "server.log.1", "server.log")):
        series = sg.traffic(60, low=8, high=30, seed=60 + i, burst_every=10, burst_to=40 + i)
        lines = [sg.server_args(clock.now, cuda_graph_max_bs=max(sizes))]
        lines += sg.startup(clock, sizes=sizes, kv_gib_each=20.0, kv_tokens=400000)
        served, _ = sg.serve(clock, series, sizes=sizes, seed=i)
        (folder / name).write_text("\n".join(lines + served) + "\n", encoding="utf-8")
    report = analyze([str(folder)])
    facts = [r.facts for r in report.runs]
    assert len(facts) == 3
    reads: list[int] = []

    def read(i: int) -> RunFacts:
        reads.append(i)
        return facts[i]

    seen: list[str] = []
    got = advise_runs(ReadOnAsk(3, read), report.snapshots, each=lambda f: seen.append(f.run.id))
    assert sorted(reads) == [0, 1, 2]
    assert seen == [f.run.id for f in facts]
    pooled = advise_group(facts, report.snapshots)
    assert pooled is not None
    adv, used = pooled
    assert [f.run.id for f in used] == list(got)
    for f in facts:
        mine = got[f.run.id]
        assert (mine.ceiling, mine.recommended.sizes, mine.notes) == (
            adv.ceiling,
            adv.recommended.sizes,
            adv.notes,
        )
        # its own set priced on its own traffic, with the server's limits (the latest run's)
        ev = run_evidence(f, report.snapshots)
        assert ev is not None
        hist = traffic_histogram(ev.traffic, engine_limits(facts[-1]))
        assert mine.current == adv.price(current_sizes(f, f.backend)[0], hist)
