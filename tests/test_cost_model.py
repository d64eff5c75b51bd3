"""Cost model and robust bucket sets (issue 14) against independent oracles.

Oracles here never call the code under test to get their expectation: traffic is simulated with
numpy's seeded generator, coverage/padding are recounted step by step in plain Python, and the
exactness check enumerates every subset of the conventional grid.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from diag.advise.bucket_sets import EngineLimits, advise, conventional_grid
from diag.advise.cost_model import DEFAULT_EAGER_PENALTY_S, set_cost
from diag.advise.fitting import fit_parameters
from diag.advise.traffic import CaptureMeasurement, RunEvidence, Traffic
from diag.facts.steps import step_time_from_throughput

SGLANG_DEFAULT_053 = (
    [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 497, 16))
)  # sglang-log-formats §7, 0.5.3rc0+, written out here so the oracle does not read defaults.py


def day(
    rng: np.random.Generator,
    n: int,
    *,
    shape: float = 4.0,
    scale: float = 8.0,
    cap: int = 4096,
    t0: float = 0.02,
    slope: float = 5e-5,
    run_id: str = "run",
) -> Traffic:
    """One day of SGLang decode lines: gamma batch sizes, one line per 40 steps, noisy step time."""
    req = np.clip(np.round(rng.gamma(shape, scale, n)), 1, cap).astype(np.int64)
    step_t = (t0 + slope * req) * rng.lognormal(0.0, 0.05, n)
    thr = req / step_t  # what the Decode batch line would print as gen throughput
    return Traffic(
        t_s=np.arange(n) * 86400.0 / n,
        requests=req,
        steps=np.full(n, 40.0),
        step_time_s=step_time_from_throughput(req, thr),
        graph=np.ones(n, dtype=np.int64),
        run_id=run_id,
    )


def covered_share(sizes: tuple[int, ...], traffic: Traffic) -> float:
    """Oracle: the share of steps at or below the largest bucket, counted one line at a time."""
    top = max(sizes)
    hit = total = 0.0
    for r, w in zip(traffic.requests.tolist(), traffic.steps.tolist(), strict=True):
        total += w
        if r <= top:
            hit += w
    return hit / total


def padded_slots(sizes: tuple[int, ...], hist: dict[int, float]) -> float:
    """Oracle: padding slots, bucket found by a linear scan."""
    out = 0.0
    for b, w in hist.items():
        for s in sorted(sizes):
            if s >= b:
                out += (s - b) * w
                break
    return out


SGL = EngineLimits(
    engine="sglang",
    version="0.5.4",
    current_sizes=tuple(SGLANG_DEFAULT_053[:24]),
    current_source="logged",
    max_running=4096,
)


def test_promised_coverage_holds_on_a_second_day() -> None:
    rng = np.random.default_rng(20240614)
    day1, day2 = day(rng, 4000), day(rng, 4000)
    adv = advise([RunEvidence(day1)], SGL)
    rec = adv.recommended.sizes
    assert adv.promised_coverage >= 0.99
    assert covered_share(rec, day2) >= adv.promised_coverage - 0.005
    assert max(rec) >= int(day1.requests.max()), "ceiling below the observed peak"
    assert rec[0] == 1, "size 1 is kept"


def test_heldout_promise_is_not_trivial_without_headroom() -> None:
    """With no headroom a fold's ceiling is its training peak: the promise must drop below 1
    (so the validation really holds data out) and still hold on a second day."""
    rng = np.random.default_rng(7)
    day1, day2 = day(rng, 3000, shape=2.0, scale=20.0), day(rng, 3000, shape=2.0, scale=20.0)
    adv = advise([RunEvidence(day1)], SGL, headroom=0.0)
    assert adv.promised_coverage < 1.0
    assert covered_share(adv.recommended.sizes, day2) >= adv.promised_coverage - 0.01


def test_set_fitted_across_runs_covers_every_runs_peak() -> None:
    rng = np.random.default_rng(3)
    runs = [day(rng, 800, run_id=f"r{i}", cap=c) for i, c in enumerate((48, 53, 55))]
    peak3 = int(runs[2].requests.max())
    adv = advise([RunEvidence(r) for r in runs[:2]] + [RunEvidence(runs[2])], SGL)
    assert "leave-one-run-out" in adv.folds
    assert max(adv.recommended.sizes) >= peak3
    assert covered_share(adv.recommended.sizes, runs[2]) == 1.0


def test_ceiling_never_above_max_running_requests() -> None:
    rng = np.random.default_rng(11)
    tr = day(rng, 1500, cap=128)
    limits = EngineLimits(
        engine="sglang",
        version="0.5.4",
        current_sizes=(),
        current_source="default",
        max_running=128,
    )
    adv = advise([RunEvidence(tr)], limits)
    assert max(adv.recommended.sizes) == 128 == adv.ceiling
    assert all(max(r.sizes) <= 128 for r in adv.frontier)


def test_coverage_lets_the_one_ceiling_policy_drop_to_the_covering_size() -> None:
    """``--coverage Q``: the ceiling is the smallest grid size at or above the size covering a
    Q share of the steps (counted line by line here), on the pooled traffic and every fold;
    a Q the ceiling already covers changes nothing."""
    rng = np.random.default_rng(5)
    tr = day(rng, 2000, shape=2.0, scale=20.0)
    default = advise([RunEvidence(tr)], SGL)
    q = 0.9
    order = sorted(zip(tr.requests.tolist(), tr.steps.tolist(), strict=True))
    total, run, covering = sum(w for _, w in order), 0.0, order[-1][0]
    for size, w in order:
        run += w
        if run >= q * total:
            covering = size
            break
    want = min(g for g in conventional_grid(SGL, 4096) if g >= covering)
    assert want < default.ceiling
    lowered = advise([RunEvidence(tr)], SGL, min_coverage=q)
    assert lowered.ceiling == want
    fitted = [r for r in lowered.frontier if r.sizes != SGL.current_sizes]  # (not the kept set)
    assert fitted and {max(r.sizes) for r in fitted} == {want}
    assert any(
        n.startswith(f"--coverage {q:g}: ceiling allowed down to {covering} ")
        for n in lowered.notes
    )
    assert all(r.cost.coverage >= q for r in fitted)
    peak = int(tr.requests.max())  # Q = 1: the peak itself, without the headroom
    assert advise([RunEvidence(tr)], SGL, min_coverage=1.0).ceiling == min(
        g for g in conventional_grid(SGL, 4096) if g >= peak
    )
    kept = advise([RunEvidence(tr)], SGL, headroom=0.0, min_coverage=1.0)
    assert kept.ceiling == advise([RunEvidence(tr)], SGL, headroom=0.0).ceiling
    assert any("already covers that share" in n for n in kept.notes)


def test_frontier_padding_is_exact_and_monotone_in_k() -> None:
    """Each conventional row is the minimum-padding set of its size over the grid (brute force
    over all subsets with 1 and the ceiling), so padding never grows with K."""
    rng = np.random.default_rng(5)
    tr = day(rng, 600, shape=3.0, scale=6.0, cap=40)
    limits = EngineLimits(
        engine="sglang", version="0.5.4", current_sizes=(), current_source="default", max_running=40
    )
    adv = advise([RunEvidence(tr)], limits, headroom=0.0)
    hist: dict[int, float] = {}
    for r, w in zip(tr.requests.tolist(), tr.steps.tolist(), strict=True):
        hist[r] = hist.get(r, 0.0) + w
    grid = [g for g in SGLANG_DEFAULT_053 if g < 40]
    rows = [r for r in adv.frontier if r.conventional]
    assert len(rows) >= 4
    prev = float("inf")
    for row in rows:
        inner = [g for g in grid if g != 1]
        best = min(padded_slots((1, *c, 40), hist) for c in combinations(inner, len(row.sizes) - 2))
        mine = padded_slots(row.sizes, hist)
        assert mine == pytest.approx(best)
        assert mine <= prev + 1e-9
        prev = mine
    assert sum(r.recommended for r in adv.frontier) == 1


def test_cost_terms_match_a_step_by_step_simulation() -> None:
    rng = np.random.default_rng(9)
    tr = day(rng, 500, cap=90)
    ev = RunEvidence(tr, CaptureMeasurement((1, 8, 16, 32, 64), 10.0, 0.5), 500_000, 20.0)
    params = fit_parameters([ev], "sglang")
    sizes = (1, 16, 48, 64)
    hist: dict[int, float] = {}
    for r, w in zip(tr.requests.tolist(), tr.steps.tolist(), strict=True):
        hist[r] = hist.get(r, 0.0) + w
    c = set_cost(sizes, hist, params)
    per_h = params.steps_per_hour.value / sum(hist.values())
    pad = eager = 0.0
    for r, w in hist.items():
        if r > 64:
            eager += w * params.eager_penalty_s.value * per_h
        else:
            pad += (min(s for s in sizes if s >= r) - r) * w * params.slot_step_s.value * per_h
    assert c.padded_s_h == pytest.approx(pad)
    assert c.eager_s_h == pytest.approx(eager)
    assert c.eager_s_h > 0
    # the measured capture scales per graph: 4 graphs of these sizes vs 5 measured ones
    assert 0 < c.capture_gib < 0.5
    assert c.capture_s_h == pytest.approx(c.capture_time_s / 24.0)


def test_parameters_come_from_the_run_when_it_has_them() -> None:
    rng = np.random.default_rng(13)
    tr = day(rng, 3000, t0=0.030, slope=1e-4, cap=200)
    eager_req = np.arange(20, 70)  # inside the graph sizes: the penalty is measured there
    eager_t = 0.030 + 1e-4 * eager_req + 0.006  # 6 ms eager penalty
    both = Traffic(
        t_s=np.concatenate([tr.t_s, np.full(50, 86400.0)]),
        requests=np.concatenate([tr.requests, eager_req]),
        steps=np.concatenate([tr.steps, np.full(50, 40.0)]),
        step_time_s=np.concatenate([tr.step_time_s, eager_t]),
        graph=np.concatenate([tr.graph, np.zeros(50, dtype=np.int64)]),
    )
    p = fit_parameters(
        [RunEvidence(both, CaptureMeasurement((1, 2, 4), 3.0, 0.3), 1000, 2.0)], "sglang"
    )
    assert p.base_step_s.source == p.slot_step_s.source == p.eager_penalty_s.source == "run"
    assert p.base_step_s.value == pytest.approx(0.030, rel=0.05)
    assert p.slot_step_s.value == pytest.approx(1e-4, rel=0.1)
    assert p.eager_penalty_s.value == pytest.approx(0.006, rel=0.15)
    assert p.capture_s_per_graph.value == pytest.approx(1.0)
    assert p.kv_tokens_per_gib.value == pytest.approx(500.0)
    bare = fit_parameters(
        [RunEvidence(Traffic(np.arange(3.0), np.ones(3, int), np.ones(3)))], "sglang"
    )
    assert bare.eager_penalty_s.source == "default" and bare.eager_penalty_s.why
    assert bare.kv_tokens_per_gib.value is None and "not priced" in bare.kv_tokens_per_gib.why


def _graph_and_eager(
    rng: np.random.Generator, graph_req: np.ndarray, eager_req: np.ndarray, penalty: float
) -> Traffic:
    """Graph steps at ``graph_req`` and eager ones at ``eager_req``, 20 ms + 0.1 ms a request,
    eager ``penalty`` slower, 2 % noise."""
    req = np.concatenate([graph_req, eager_req])
    eager = np.arange(len(req)) >= len(graph_req)
    t = (0.020 + 1e-4 * req + np.where(eager, penalty, 0.0)) * rng.lognormal(0.0, 0.02, len(req))
    return Traffic(
        t_s=np.arange(len(req), dtype=float),
        requests=req.astype(np.int64),
        steps=np.full(len(req), 40.0),
        step_time_s=t,
        graph=(~eager).astype(np.int64),
    )


def test_eager_penalty_is_measured_where_sizes_overlap_and_never_extrapolated() -> None:
    """Issue 24: a PD decode node with --cuda-graph-max-bs 8 whose batches reach 72 got an
    eager penalty of 0 from a line fitted on sizes 1-8 and carried to 22-72. Only sizes logged
    both ways measure the penalty; without any, the documented prior stands, and says so."""
    rng = np.random.default_rng(7)
    small = np.tile(np.arange(1, 9), 30)
    apart = fit_parameters(
        [RunEvidence(_graph_and_eager(rng, small, np.tile(np.arange(22, 73), 4), 0.004))],
        "sglang",
    )
    assert apart.eager_penalty_s.source == "default"
    assert apart.eager_penalty_s.value == pytest.approx(DEFAULT_EAGER_PENALTY_S)
    assert "extrapolated" in apart.eager_penalty_s.why and "22-72" in apart.eager_penalty_s.why
    both = fit_parameters(
        [RunEvidence(_graph_and_eager(rng, small, np.tile(np.arange(5, 13), 20), 0.004))],
        "sglang",
    )
    assert both.eager_penalty_s.source == "run"
    assert both.eager_penalty_s.value == pytest.approx(0.004, rel=0.25)
    assert "4 request count(s)" in both.eager_penalty_s.why  # sizes 5-8 are logged both ways


def vllm_stats(rng: np.random.Generator, n: int) -> Traffic:
    """vLLM V1 stats lines: running requests only, one line per 10 s."""
    run = np.clip(np.round(rng.gamma(2.0, 2.0, n)), 1, 256).astype(np.int64)
    return Traffic(t_s=np.arange(n) * 10.0, requests=run, steps=np.full(n, 200.0))


def test_vllm_stats_only_never_shrinks_below_mixed_step_needs() -> None:
    rng = np.random.default_rng(17)
    tr = vllm_stats(rng, 500)
    limits = EngineLimits(
        engine="vllm",
        version="0.11.1",
        current_sizes=tuple(range(8, 513, 8)),
        current_source="logged",
        max_running=256,
        max_num_batched_tokens=2048,
    )
    adv = advise([RunEvidence(tr)], limits)
    # 0.11.1 default ceiling min(2 * max_num_seqs, 512, max_num_batched_tokens) = 512 (formats §11)
    assert adv.ceiling >= 512
    assert any("mixed prefill+decode" in n for n in adv.notes)
    assert not any("speculative" in n for n in adv.notes)


def test_vllm_step_tokens_size_the_window_and_spec_multiplies() -> None:
    """Decode steps count requests x (1 + k) tokens; mixed steps their scheduled tokens."""
    rng = np.random.default_rng(19)
    n = 2000
    reqs = np.clip(np.round(rng.gamma(3.0, 12.0, n)), 1, 120).astype(np.int64)
    mixed = rng.random(n) < 0.2
    tokens = np.where(mixed, reqs + rng.integers(16, 100, n), -1)
    tr = Traffic(t_s=np.arange(n) * 0.05, requests=reqs, steps=np.ones(n), tokens=tokens)
    limits = EngineLimits(
        engine="vllm",
        version="0.13.0",
        current_sizes=(),
        current_source="default",
        max_running=128,
        max_num_batched_tokens=1024,
        spec_tokens=2,
        speculative_algorithm="eagle",
    )
    adv = advise([RunEvidence(tr)], limits)
    decode_need = int(reqs[~mixed].max()) * 3
    mixed_need = int(tokens[mixed].max())
    assert decode_need > mixed_need  # the request count alone would undersize the window
    assert max(decode_need, mixed_need) <= max(adv.recommended.sizes) <= 1024
    assert any("x 3 tokens" in n for n in adv.notes)


def test_sglang_tbo_multiples_and_no_spec_note_without_spec() -> None:
    rng = np.random.default_rng(23)
    tr = day(rng, 1000, cap=200)
    limits = EngineLimits(
        engine="sglang",
        version="0.5.4",
        current_sizes=(),
        current_source="default",
        max_running=512,
        two_batch_overlap=True,
        attn_tp=2,
        dp_attention=True,
    )
    adv = advise([RunEvidence(tr)], limits)
    assert all(s % 4 == 0 for r in adv.frontier for s in r.sizes)
    assert adv.recommended.sizes[0] == 4
    assert not any("speculative" in n for n in adv.notes)
    assert any("per DP rank" in n for n in adv.notes)
    grid = conventional_grid(EngineLimits(engine="vllm", version="0.11.1"), 1024)
    assert grid[:4] == [1, 2, 4, 8] and 264 not in grid and 272 in grid and 528 in grid


def test_too_short_a_run_keeps_conventional_sizes_and_says_so() -> None:
    rng = np.random.default_rng(29)
    tr = day(rng, 12, cap=60)
    adv = advise([RunEvidence(tr)], SGL)
    assert adv.recommended.conventional
    assert adv.promised_coverage == 1.0
    assert any("too few step lines" in n for n in adv.notes)
    assert all(r["heldout_coverage"] is None for r in adv.frontier_frame().to_dict("records"))
