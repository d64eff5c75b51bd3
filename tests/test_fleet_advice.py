"""The fleet's binned traffic (diag.advise.fleet) against the run's own evidence: what the
advice reads of the steps survives binning exactly (histogram, lines, steps, KV-full share,
span), so the ceiling and the evidence a pooled recommendation rests on are those of the raw
lines. Inputs: fixture incidents of every traffic kind (SGLang batch lines, vLLM metrics
tables, stats lines, DEBUG steps)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from diag.advise.bucket_sets import advise, traffic_histogram
from diag.advise.fleet import _medians, run_traffic_of
from diag.advise.run_advice import engine_limits, run_evidence
from diag.api import analyze
from tests.conftest import ROOT

INCIDENTS = [
    "sglang-healthy",
    "sglang-kv-squeeze",
    "sglang-out-of-window",
    "sglang-v043-tp2-inferred",
    "vllm-out-of-window-metrics",
    "vllm-out-of-window-inferred",
    "vllm-kv-squeeze",
    "issue24-vllm-squeezed-small-batches",
]


@pytest.mark.parametrize("incident", INCIDENTS)
def test_binning_keeps_what_the_advice_reads(incident: str) -> None:
    report = analyze([str(ROOT / "fixtures" / "incidents" / incident)], generated_at="x")
    checked = 0
    for run in report.runs:
        ev = run_evidence(run.facts)
        digest = run_traffic_of(run.facts)
        if ev is None:
            assert digest is None
            continue
        assert digest is not None
        limits = engine_limits(run.facts)
        assert digest.histogram() == pytest.approx(traffic_histogram(ev.traffic, limits))
        again = digest.evidence()
        assert len(again.traffic) == len(ev.traffic)  # one row per logged line
        assert float(np.sum(again.traffic.steps)) == pytest.approx(float(np.sum(ev.traffic.steps)))
        assert again.traffic.span_h() == pytest.approx(ev.traffic.span_h())
        assert (again.traffic.observed_s == 0.0) == (ev.traffic.observed_s == 0.0)
        assert again.capture == ev.capture and again.kv_pool_tokens == ev.kv_pool_tokens
        raw, binned = advise([ev], limits), advise([again], limits)
        assert binned.ceiling == raw.ceiling
        assert binned.evidence == raw.evidence
        assert binned.parameters.saturated_share == raw.parameters.saturated_share
        assert binned.parameters.steps_per_hour.value == pytest.approx(
            raw.parameters.steps_per_hour.value
        )
        checked += 1
    assert checked >= 1


@pytest.mark.parametrize("in_order", [False, True], ids=["any-order", "values-in-order"])
def test_medians_are_numpy_medians_per_group(in_order: bool) -> None:
    rng = np.random.default_rng(7)
    group = rng.integers(0, 9, 500)
    values = rng.normal(size=500)
    if in_order:  # as the steps' times come (the group sort alone orders each group)
        values = np.sort(np.round(values, 1))  # ties too
    values[rng.random(500) < 0.2] = math.nan
    values[group == 4] = math.nan  # a group without one finite value
    got = _medians(group, values, 10)  # group 9 has no row at all
    for k in range(10):
        finite = values[(group == k) & np.isfinite(values)]
        if len(finite):
            assert got[k] == pytest.approx(float(np.median(finite)))
        else:
            assert math.isnan(got[k])
