"""Advice that cannot regress (issue 24 point 3): on every fixture incident the set `recommend`
prints costs no more than the current one by the tool's own prices, a change is advised only
where the decision's held-out figures show the margin, and the same traffic gives the same
set whatever the input path (file or stdin)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from diag.advise.decision import MIN_LINES, MIN_SPAN_S, MIN_STEPS, Evidence, decide
from diag.advise.recommend import RecommendError, recommend
from diag.api import analyze
from diag.cli import main
from diag.facts.advisories import Advisory
from diag.rules.gd120_kv_squeeze import MEMORY_SETTING

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"
NAMES = sorted(p.name for p in INCIDENTS.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", NAMES)
def test_recommended_set_never_costs_more_than_the_current(name: str) -> None:
    rep = analyze([str(INCIDENTS / name)], generated_at="fixed")
    try:
        rec = recommend(rep.runs, rep.snapshots)
    except RecommendError:
        return  # no decode traffic: nothing advised (the no-advice tests cover the message)
    if rec.get("node") == "prefill":
        assert rec["recommended"]["sizes"] == []
        return
    cur, new, d = rec["current"], rec["recommended"], rec["decision"]
    assert new["cost_s_h"] <= cur["cost_s_h"] + 1e-9, (name, cur, new)
    if d["kind"] == "change":
        assert d["candidate_cost_s_h"] < d["current_cost_s_h"] - d["margin_s_h"]
        assert rec["flags"]
    else:  # keep or too little evidence: today's set, no flags, and the note says why first
        assert new["sizes"] == cur["sizes"] and rec["flags"] == ""
        assert rec["notes"][0] == d["headline"]


def test_the_issue_cases_get_the_advice_they_should() -> None:
    """The three issue-24 incidents: the squeezed vLLM 0.22 run keeps its set (sizes 2 and 4 the
    traffic uses stay), the PD decode node raises its ceiling to cover 72 with a measured set
    cheaper than today's, and five lines in a second get no set but what is missing."""
    by_name = {}
    for name in (
        "issue24-vllm-squeezed-small-batches",
        "issue24-sglang-pd-decode-max-bs-8",
        "issue24-sglang-five-lines-one-second",
    ):
        rep = analyze([str(INCIDENTS / name)], generated_at="fixed")
        by_name[name] = recommend(rep.runs, rep.snapshots)
    squeezed = by_name["issue24-vllm-squeezed-small-batches"]
    assert {2, 4} <= set(squeezed["recommended"]["sizes"])
    assert squeezed["decision"]["kind"] != "change"
    pd = by_name["issue24-sglang-pd-decode-max-bs-8"]
    assert pd["decision"]["kind"] == "change" and max(pd["recommended"]["sizes"]) >= 72
    assert {1, 2, 4, 8} <= set(pd["recommended"]["sizes"])  # used sizes kept
    eager = pd["parameters"]["eager_penalty_s"]
    assert eager["source"] == "default" and "extrapolated" in eager["why"]
    few = by_name["issue24-sglang-five-lines-one-second"]
    assert few["decision"]["kind"] == "insufficient" and few["flags"] == ""
    why = few["decision"]["why"]
    assert "200 decode steps in 5 lines" in why and "--decode-log-interval" in why
    assert "a longer window" in why and "2 distinct batch size(s)" in why


def test_a_change_needs_the_margin_and_the_evidence() -> None:
    enough = Evidence(steps=MIN_STEPS, lines=MIN_LINES, span_s=MIN_SPAN_S, sizes=3)
    assert not enough.missing("more lines")
    # 100 GPU-s/h today: the margin is 5 of it (above 0.25 % of 1,000 decode GPU-s/h)
    assert decide(94.0, 100.0, "current", 1000.0, "held-out", []).kind == "change"
    keep = decide(96.0, 100.0, "current", 1000.0, "held-out", [])
    assert keep.kind == "keep" and "saves only 4.00 GPU-s/h" in keep.why
    assert "96.00 against 100.00" in keep.why and keep.headline.startswith("Keep the current")
    worse = decide(120.0, 100.0, "default", 1000.0, "held-out", [])
    assert worse.kind == "keep" and "costs 20.00 GPU-s/h more" in worse.why
    assert worse.headline.startswith("Keep the engine's default set")
    # a large decode time makes the fit's resolution the margin: 0.25 % of 100,000 = 250
    assert decide(50.0, 200.0, "current", 100_000.0, "held-out", []).kind == "keep"
    short = Evidence(steps=200, lines=5, span_s=0.8, sizes=2)
    missing = short.missing("DEBUG step lines")
    assert len(missing) == 3 and "DEBUG step lines" in missing[0]
    assert decide(1.0, 100.0, "current", 1000.0, "held-out", missing).kind == "insufficient"


# incidents that are one log (stdin carries one stream)
ONE_LOG = [
    n for n in NAMES if {p.name for p in (INCIDENTS / n).iterdir()} <= {"server.log", "truth.yaml"}
]


@pytest.mark.parametrize("name", ONE_LOG)
def test_same_traffic_same_set_from_a_file_and_from_stdin(name: str) -> None:
    log = INCIDENTS / name / "server.log"
    runner = CliRunner()
    by_file = runner.invoke(main, ["recommend", "-q", str(log), "--format", "json"])
    by_stdin = runner.invoke(
        main, ["recommend", "-q", "-", "--format", "json"], input=log.read_text()
    )
    assert by_file.exit_code == by_stdin.exit_code, (by_file.stderr, by_stdin.stderr)
    if by_file.exit_code != 0:  # no decode traffic: the same refusal either way
        return
    a, b = json.loads(by_file.stdout), json.loads(by_stdin.stdout)
    for key in ("ceiling", "flags", "decision", "recommended", "current", "frontier"):
        assert a.get(key) == b.get(key), key


# the four wordings of vLLM's --gpu-memory-utilization advice, as formats/vllm-log-formats.md
# M-4a..M-4d quote them from the wheels (numbers filled in)
GMU_WORDINGS = [
    "In v0.19, CUDA graph memory profiling will be enabled by default "
    "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), which more accurately accounts for CUDA graph "
    "memory during KV cache allocation. To try it now, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 "
    "and increase --gpu-memory-utilization from 0.9000 to 0.9530 to maintain the same effective "
    "KV cache size.",
    "CUDA graph memory profiling is enabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1). This will "
    "become the default in v0.19. The current --gpu-memory-utilization=0.9000 is equivalent to "
    "--gpu-memory-utilization=0.8470 without CUDA graph memory profiling. To maintain the same "
    "effective KV cache size as before, increase --gpu-memory-utilization to 0.9530.",
    "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
    "--gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=0.8470 without CUDA "
    "graph memory profiling. To maintain the same effective KV cache size as before, increase "
    "--gpu-memory-utilization to 0.9530. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",
    "CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without "
    "it, CUDA graph memory is not accounted for during KV cache allocation, which may require "
    "lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling it (the default as of "
    "v0.21.0) and increasing --gpu-memory-utilization from 0.9000 to 0.9530.",
]


@pytest.mark.parametrize("text", GMU_WORDINGS, ids=["M-4a", "M-4b", "M-4c", "M-4d"])
def test_vllms_own_memory_advice_is_read_in_every_wording(text: str) -> None:
    assert Advisory("graph_memory_profiling", 0.953, text).advised_increase == (0.9, 0.953)


def test_the_engines_own_advice_comes_first_and_memory_pointers_point_right() -> None:
    """The squeezed vLLM 0.22 run: vLLM's own number first; GD120's keep remedy points at the
    memory setting where it stands ("above"), on every incident only where one is listed."""
    rep = analyze([str(INCIDENTS / "issue24-vllm-squeezed-small-batches")], generated_at="f")
    gd120 = next(f for f in rep.runs[0].findings if f.code == "GD120")
    assert gd120.remediation[0].startswith(
        "Follow vLLM's own advice: raise --gpu-memory-utilization from 0.9 to 0.9316"
    )
    for name in NAMES:
        report = analyze([str(INCIDENTS / name)], generated_at="f")
        for f in (f for r in report.runs for f in r.findings if f.code == "GD120"):
            for i, text in enumerate(f.remediation):
                for where in ("above", "below"):
                    if f"memory setting {where}" not in text:
                        continue
                    others = f.remediation[:i] if where == "above" else f.remediation[i + 1 :]
                    assert any(MEMORY_SETTING.search(o) for o in others), (name, f.remediation)
