"""`recommend`: what it promises is what the engine then measures, flags per engine/version, CLI
contract; it renders the run's advice (the one the rules quote).

Optimality of the bucket DP itself is tests/test_buckets.py's job; here the recommendation is
applied: the same traffic is replayed by the generator against the recommended set (built from
the pasted flags) and the regenerated log is analysed again.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from diag.advise.recommend import (
    NoDecodeBatches,
    attach_recommendations,
    bucket_flags,
    recommend,
)
from diag.advise.run_advice import engine_limits
from diag.api import analyze
from diag.cli import main
from diag.engines import ConfigEcho, EngineConfig, read_config
from diag.facts.record import RunFacts
from diag.model import PoolSummary, Snapshot, SnapshotSummary
from gen import incidents as inc
from gen import sglang_logs as sg
from gen import vllm_logs as vl
from gen.vllm_lines import Clock

OUT_OF_WINDOW = sg.traffic(120, low=8, high=30, seed=2, burst_every=6, burst_to=96)


def write_sglang(
    path: Path,
    traffic: list[int],
    sizes: list[int],
    *,
    era: str = "0.5.5",
    explicit: bool = False,
    capture_mem: float = 0.6,
    capture_s: float = 6.2,
) -> Path:
    """One SGLang start-up plus the traffic; ``explicit`` passes the list as --cuda-graph-bs."""
    clock = sg.Clock()
    lines = [
        sg.server_args(
            clock.now,
            cuda_graph_max_bs=max(sizes),
            cuda_graph_bs=sizes if explicit else None,
            era=era,
        )
    ]
    lines += sg.startup(
        clock,
        era=era,
        sizes=sizes,
        capture_mem_gib=capture_mem,
        capture_s=capture_s,
        kv_gib_each=20.0,
        kv_tokens=400000,
    )
    served, _ = sg.serve(clock, traffic, sizes=sizes, era=era, seed=3)
    lines += served
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def sizes_from_flags(flags: str) -> list[int]:
    """Read back what an operator would paste: --cuda-graph-bs ... --cuda-graph-max-bs N."""
    m = re.fullmatch(r"--cuda-graph-bs((?: \d+)+) --cuda-graph-max-bs (\d+)", flags)
    assert m, flags
    sizes = [int(x) for x in m.group(1).split()]
    assert int(m.group(2)) == max(sizes)
    return sizes


@pytest.mark.parametrize(
    ("era", "k", "q"),
    [
        ("0.5.5", None, None),  # engine logs the per-batch flag; default: peak plus headroom
        ("0.5.5", 4, 0.9),  # tight budget, bursts given up: some batches stay out of the window
        ("0.4.3", None, None),  # no flag, no size line: verdicts inferred from the pasted list
        ("2026.03", 3, 0.5),
    ],
)
def test_promise_equals_measurement_on_replayed_traffic(
    tmp_path: Path, era: str, k: int | None, q: float | None
) -> None:
    before = write_sglang(
        tmp_path / "before" / "server.log",
        OUT_OF_WINDOW,
        sg.default_sizes(32),
        era=era,
        explicit=era == "0.4.3",
    )
    rep = analyze([str(before)])
    rec = recommend(rep.runs, rep.snapshots, max_buckets=k, min_coverage=q)
    run0 = rep.runs[0].record.to_json()
    # the model scores the current set exactly as the classifier measured it
    assert rec["current"]["coverage"] == run0["captured_share"] == 0.5
    assert rec["current"]["padding_waste"] == run0["padding_waste"]
    d = rec["decision"]
    if d["kind"] == "keep":  # no set within the budget beats today's by the margin: said so
        assert rec["recommended"]["sizes"] == rec["current"]["sizes"] and rec["flags"] == ""
        # short of the margin held out, or dearer on all the traffic (never dearer in sample)
        assert (
            d["candidate_cost_s_h"] > d["current_cost_s_h"] - d["margin_s_h"]
            or "more on all of it" in d["why"]
        )
        assert k is not None
        return
    assert d["kind"] == "change"
    assert d["candidate_cost_s_h"] < d["current_cost_s_h"] - d["margin_s_h"]
    assert k is None or len(rec["recommended"]["sizes"]) <= k
    assert rec["recommended"]["coverage"] >= (q or 1.0)
    assert 1 in rec["recommended"]["sizes"]
    if q is None:  # headroom: the largest batch fits below the ceiling with room to spare
        assert rec["ceiling"] == max(rec["recommended"]["sizes"]) > max(OUT_OF_WINDOW)

    new = sizes_from_flags(rec["flags"])
    assert new == rec["recommended"]["sizes"]
    after = write_sglang(
        tmp_path / "after" / "server.log", OUT_OF_WINDOW, new, era=era, explicit=True
    )
    measured = analyze([str(after)]).runs[0].record.to_json()
    assert measured["graph_capture_sizes"] == new
    assert measured["captured_share"] == rec["recommended"]["coverage"]
    assert measured["padding_waste"] == rec["recommended"]["padding_waste"]
    if k is None:  # strictly better on both counts than the default window it replaces
        assert measured["padding_waste"] < run0["padding_waste"]
        assert measured["captured_share"] > run0["captured_share"]


def test_interface_shape_and_estimates(tmp_path: Path) -> None:
    log = write_sglang(tmp_path / "s" / "server.log", OUT_OF_WINDOW, sg.default_sizes(32))
    rep = analyze([str(log)])
    rec = recommend(rep.runs, rep.snapshots)
    assert {"engine", "version", "current", "recommended", "flags", "notes"} <= set(rec)
    assert {"frontier", "parameters", "validation"} <= set(rec)
    assert {"sizes", "coverage", "padding_waste"} <= set(rec["current"])
    assert {
        "sizes",
        "coverage",
        "padding_waste",
        "capture_mem_gib_est",
        "kv_tokens_regained_est",
    } <= set(rec["recommended"])
    assert (
        rec["engine"] == "sglang"
        and isinstance(rec["flags"], str)
        and isinstance(rec["notes"], list)
    )
    new = rec["recommended"]
    # capture memory scales from the run's own 0.6 GiB for 8 graphs; KV tokens at its bytes/token
    per_token = 20.0 / 400000
    # (capture_mem_gib_est is rounded to 1 MiB: 0.0005 GiB is 10 tokens at 20 GiB / 400k tokens)
    assert abs(new["kv_tokens_regained_est"] - (0.6 - new["capture_mem_gib_est"]) / per_token) <= 10
    assert rec["parameters"]["capture_gib_per_graph"]["source"] == "run"
    assert rec["parameters"]["capture_gib_per_graph"]["source_of"] == rep.runs[0].id
    # the generator prints a flat step time: the slope cannot be measured, the default is used
    # and says why (a zero slope would make padding free)
    slot = rec["parameters"]["slot_step_s"]
    assert slot["source"] == "default" and "cannot be told from zero" in slot["why"]
    assert new["padding_waste"] < rec["current"]["padding_waste"]
    rows = rec["frontier"]
    assert [r["k"] for r in rows] == sorted(r["k"] for r in rows)
    assert sum(r["recommended"] for r in rows) == 1
    picked = next(r for r in rows if r["recommended"])
    assert picked["sizes"] == new["sizes"]
    assert rec["validation"]["promised_coverage"] == picked["heldout_coverage"]
    json.dumps(rec)  # JSON-ready


def test_recommend_quotes_the_advice_analyze_attached(tmp_path: Path) -> None:
    log = write_sglang(tmp_path / "s" / "server.log", OUT_OF_WINDOW, sg.default_sizes(32))
    rep = analyze([str(log)])
    run = rep.runs[0]
    assert run.advice is not None
    rec = recommend(rep.runs, rep.snapshots)
    assert rec["ceiling"] == run.advice.ceiling
    assert rec["recommended"]["sizes"] == list(run.advice.recommended.sizes)
    assert run.recommendation is not None
    assert run.recommendation["recommended"]["sizes"] == rec["recommended"]["sizes"]
    assert run.to_dict()["recommendation"]["ceiling"] == run.advice.ceiling


def test_snapshot_graph_pools_take_precedence(tmp_path: Path) -> None:
    log = write_sglang(tmp_path / "s" / "server.log", OUT_OF_WINDOW, sg.default_sizes(32))
    rep = analyze([str(log)])
    pools = [
        PoolSummary((1, 2), "graph", 2 * 2**30, 2 * 2**30, 1),
        PoolSummary((0, 0), "default", 50 * 2**30, 50 * 2**30, 1),
    ]
    summary = SnapshotSummary("x.pickle", None, 52 * 2**30, 52 * 2**30, 52 * 2**30, None, 0, pools)
    snap = [Snapshot("x.pickle", summary, run=rep.runs[0].id)]
    rec = recommend(rep.runs, snap)
    # one number per fact: capture memory as the engine printed it (what analyze shows), the
    # snapshot's graph pools beside it under their own name, and the model scaled from them
    assert (
        rec["current"]["capture_mem_gib"] == rep.runs[0].record.to_json()["capture_mem_gib"] != 2.0
    )
    assert rec["current"]["snapshot_graph_pool_gib"] == 2.0
    assert rec["parameters"]["capture_gib_per_graph"]["source"] == "snapshot"
    assert rec["parameters"]["capture_gib_per_graph"]["source_of"] == "x.pickle"
    assert any("snapshot graph pools" in n for n in rec["notes"])


def test_pooled_runs_of_two_servers(tmp_path: Path) -> None:
    a = write_sglang(tmp_path / "a" / "server.log", OUT_OF_WINDOW, sg.default_sizes(32))
    b = write_sglang(tmp_path / "b" / "server.log", OUT_OF_WINDOW[:30], sg.default_sizes(64))
    rep = analyze([str(a), str(b)])
    rec = recommend(rep.runs, rep.snapshots)
    assert rec["decode_batches"] == 150
    assert rec["main_run"].startswith(str(b))  # limits and current set from the latest run
    assert rec["current"]["sizes"] == sg.default_sizes(64)
    assert any("2 runs pooled" in n for n in rec["notes"])
    assert "leave-one-run-out" in rec["validation"]["how"]
    # the pooled set covers both runs' peaks
    assert rec["ceiling"] > max(OUT_OF_WINDOW)


def test_graphs_disabled_run_uses_the_default_list(tmp_path: Path) -> None:
    folder = inc.BUILDERS["sglang-graph-disabled"]().write(tmp_path)
    rep = analyze([str(folder)])
    rec = recommend(rep.runs, rep.snapshots)
    assert rec["current"]["source"] == "default"
    assert rec["current"]["sizes"] == sg.default_sizes(160)
    assert rec["current"]["capture_mem_gib"] is None
    # nothing was captured: per-graph defaults price the sets, and the parameters say so
    assert rec["parameters"]["capture_gib_per_graph"]["source"] == "default"
    assert rec["recommended"]["capture_mem_saved_gib_est"] is None


def test_prefill_node_gets_graphs_off(tmp_path: Path) -> None:
    folder = inc.BUILDERS["sglang-prefill-node"]().write(tmp_path)
    rep = analyze([str(folder)])
    rec = recommend(rep.runs, rep.snapshots)
    assert rec["node"] == "prefill"
    assert rec["recommended"]["sizes"] == []
    assert rec["flags"] == "--disable-cuda-graph"
    assert rec["recommended"]["kv_tokens_regained_est"] > 0


def test_attach_to_runs(tmp_path: Path) -> None:
    oom = inc.BUILDERS["sglang-capture-oom"]().write(tmp_path)
    log = write_sglang(tmp_path / "s" / "server.log", OUT_OF_WINDOW, sg.default_sizes(32))
    rep = analyze([str(log), str(oom)])
    attach_recommendations(rep.runs, rep.snapshots)
    by_src = {r.facts.run.sources[0]: r for r in rep.runs}
    assert by_src[str(log)].recommendation is not None
    assert "recommendation" in by_src[str(log)].to_dict()
    assert all(r.recommendation is None for r in rep.runs if r.facts.run.sources[0] != str(log))


def test_vllm_metrics_table_run(tmp_path: Path) -> None:
    version = "0.13.0"
    lines, truth = vl.server_log(version, max_num_batched_tokens=8192)
    rows = [(3, 4, "FULL", 50), (5, 8, "FULL", 30), (9, 16, "FULL", 10), (100, 104, "FULL", 3)]
    clock = Clock()
    for _ in range(12):  # two minutes of tables, 1,116 steps: enough evidence to size buckets
        clock.advance(10.0)
        lines += vl.metrics_table(
            version,
            mode="FULL_AND_PIECEWISE",
            capture_sizes=truth.capture_sizes,
            rows=rows,
            clock=clock,
        )
    path = tmp_path / "v.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rep = analyze([str(path)])
    rec = recommend(rep.runs, rep.snapshots, max_buckets=4)
    assert rec["engine"] == "vllm" and rec["version"] == version and rec["unit"] == "tokens"
    # four sizes pad 100-token steps to 112 and 3-token ones to 8: by the advice's own prices
    # they cost more than today's 51 graphs, so the advice keeps the current set, with figures
    d = rec["decision"]
    four = next(r for r in rec["frontier"] if r["k"] == 4)
    assert four["total_s_h"] > rec["current"]["cost_s_h"]
    assert d["kind"] == "keep" and d["candidate_cost_s_h"] >= d["current_cost_s_h"]
    assert rec["recommended"]["sizes"] == rec["current"]["sizes"] == truth.capture_sizes
    assert rec["flags"] == "" and rec["notes"][0] == d["headline"]
    assert d["headline"].startswith("Keep the current set: the best candidate")
    assert rec["recommended"]["cost_s_h"] == rec["current"]["cost_s_h"]


@pytest.mark.parametrize(
    ("engine", "version", "config", "want"),
    [
        ("vllm", "0.10.1", {}, "--compilation-config '{\"cudagraph_capture_sizes\": [1, 8, 24]}'"),
        (
            "vllm",
            "0.11.1",
            {},
            '--compilation-config \'{"cudagraph_capture_sizes": [1, 8, 24], '
            '"max_cudagraph_capture_size": 24}\'',
        ),
        (
            "vllm",
            None,
            {},
            '--compilation-config \'{"cudagraph_capture_sizes": [1, 8, 24], '
            '"max_cudagraph_capture_size": 24}\'',
        ),
        ("vllm", "0.6.3", {}, ""),
        ("sglang", "0.5.5", {}, "--cuda-graph-bs 1 8 24 --cuda-graph-max-bs 24"),
        (
            "sglang",
            None,
            {"cuda_graph_config.decode.max_bs": 24},
            "--cuda-graph-bs-decode 1 8 24 --cuda-graph-max-bs-decode 24",
        ),
        ("sglang", "0.4.1.post4", {}, "--cuda-graph-max-bs 24"),
        ("sglang", "0.3.0", {}, ""),
    ],
)
def test_flag_spelling_per_version(
    engine: str, version: str | None, config: dict[str, Any], want: str
) -> None:
    notes: list[str] = []
    assert bucket_flags(engine, version, config, [24, 1, 8], notes) == want
    exact = "capture_sizes" in want or re.search(r"--cuda-graph-bs(-decode)? ", want) is not None
    assert bool(notes) == (not exact)  # anything short of the exact list says why


def _echoed(f: RunFacts, **more: object) -> EngineConfig:
    """The run's config as read had its echo also shown ``more``."""
    return read_config(f.backend, ConfigEcho({**f.config.raw, **more}), f.engine_version)


def test_sglang_two_batch_overlap_limits(tmp_path: Path) -> None:
    log = write_sglang(tmp_path / "s" / "server.log", OUT_OF_WINDOW, sg.default_sizes(32))
    f = analyze([str(log)]).runs[0].facts
    f = dataclasses.replace(f, config=_echoed(f, enable_two_batch_overlap=True, tp_size=2))
    assert engine_limits(f).multiple() == 4


def test_no_decode_batches_raises(tmp_path: Path) -> None:
    folder = inc.BUILDERS["sglang-capture-oom"]().write(tmp_path)
    rep = analyze([str(folder)])
    with pytest.raises(NoDecodeBatches):
        recommend(rep.runs, rep.snapshots)


# ------------------------------------------------------------------ CLI
def test_cli_text_json_and_exit_codes(tmp_path: Path) -> None:
    log = write_sglang(tmp_path / "s" / "server.log", OUT_OF_WINDOW, sg.default_sizes(32))
    runner = CliRunner()
    res = runner.invoke(main, ["recommend", str(log), "--format", "json", "--max-buckets", "6"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["constraints"]["max_buckets"] == 6 and len(doc["recommended"]["sizes"]) <= 6
    assert res.stderr == ""

    res = runner.invoke(main, ["recommend", str(log), "--engine", "vllm"])
    assert res.exit_code == 0
    assert "--compilation-config" in res.stdout and "cudagraph_capture_sizes" in res.stdout

    oom = inc.BUILDERS["sglang-capture-oom"]().write(tmp_path)
    res = runner.invoke(main, ["recommend", str(oom / "server.log")])
    assert res.exit_code == 2
    assert res.stdout == ""
    assert res.stderr.count("\n") == 1 and "no decode batches" in res.stderr

    res = runner.invoke(main, ["recommend", str(tmp_path / "missing.log")])
    assert res.exit_code == 2 and res.stdout == ""

    res = runner.invoke(main, ["recommend", str(log), "--coverage", "1.5"])
    assert res.exit_code == 2 and res.stdout == ""


def test_no_speculative_note_without_an_algorithm(tmp_path: Path) -> None:
    """Every SGLang config echo has speculative_* keys; a note needs an algorithm."""
    log = write_sglang(tmp_path / "s" / "server.log", OUT_OF_WINDOW, sg.default_sizes(32))
    rep = analyze([str(log)])
    f = rep.runs[0].facts
    assert "speculative_algorithm" in f.config.raw and f.config.speculative_algorithm is None
    rec = recommend(rep.runs, rep.snapshots)
    assert not any("speculative" in n for n in rec["notes"])
    echoed = _echoed(f, speculative_algorithm="EAGLE", speculative_num_draft_tokens=4)
    rep.runs[0].facts = dataclasses.replace(f, config=echoed)
    rec = recommend(rep.runs, rep.snapshots, max_buckets=6)
    assert any("speculative decoding (EAGLE)" in n and "requests" in n for n in rec["notes"])
