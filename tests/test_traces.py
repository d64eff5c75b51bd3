"""Torch-profiler traces: the nine real traces give their README's counts, and generated
traces (Kineto's layout, the corpus's structure) give back the steps they were made of."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from diag.artifacts.trace import analyse, step_info
from diag.artifacts.trace_reader import read_trace
from diag.ingest import ingest
from gen.traces import Step, serving_steps, trace_chunks, write_trace
from tests.conftest import need_corpus

# ../shared/corpus/traces/README.md: graph launches / GPU ops joined to them / eager launches
README_COUNTS = {
    "tracelens-vllm-decode-full-graph-execution.json.gz": (1, 421, 4),
    "tracelens-vllm-prefilldecode-piecewise-graph-execution.json.gz": (25, 361, 52),
    "tracelens-sglang-qwen3-8b-decode.json.gz": (1, 544, 11),
    "hta-a100-rank0-graph-launches.json.gz": (70, 345, 5240),
}
EAGER_TRACES = (
    "tracelens-sglang-qwen3-8b-prefilldecode.json.gz",
    "tracelens-h100-qwen1.5-0.5b-eager.json.gz",
)


def _plain_counts(path: Path) -> tuple[int, int, int]:
    """What the README means by "all": eager launches counted by a plain json.load."""
    doc = json.load(gzip.open(path))
    names = [
        e.get("name", "")
        for e in doc["traceEvents"]
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
    ]
    return 0, 0, sum(1 for n in names if "LaunchKernel" in n)


@pytest.mark.parametrize("name", sorted(README_COUNTS))
def test_real_trace_counts_match_the_readme(name: str) -> None:
    path = need_corpus("traces") / name
    t = analyse(read_trace(path)).to_dict()
    assert (t["graph_launches"], t["gpu_ops_on_graphs"], t["eager_launches"]) == README_COUNTS[name]
    assert t["kind"] == "step_trace"


@pytest.mark.parametrize("name", EAGER_TRACES)
def test_eager_traces_have_no_graph_launch(name: str) -> None:
    path = need_corpus("traces") / name
    t = analyse(read_trace(path)).to_dict()
    assert (t["graph_launches"], t["gpu_ops_on_graphs"], t["eager_launches"]) == _plain_counts(path)
    assert t["eager_launches"] > 0
    assert t["steps"]["eager"] >= 1 and t["steps"]["graph"] == t["steps"]["piecewise"] == 0


def test_real_step_verdicts_and_batches() -> None:
    root = need_corpus("traces")
    full = analyse(read_trace(root / "tracelens-vllm-decode-full-graph-execution.json.gz")).steps
    assert full[["verdict", "mode", "batch_size"]].values.tolist() == [["graph", "DECODE", 32]]
    sg = analyse(read_trace(root / "tracelens-sglang-qwen3-8b-decode.json.gz")).steps
    # step[DECODE bs=32] inside execute_32_...: one step, SGLang's own mode; 11 sampling ops
    assert sg[["verdict", "mode", "batch_size", "eager_launches"]].values.tolist() == [
        ["graph", "DECODE", 32, 11]
    ]
    pw = analyse(
        read_trace(root / "tracelens-vllm-prefilldecode-piecewise-graph-execution.json.gz")
    )
    assert pw.steps["verdict"].tolist() == ["piecewise"]
    assert int(pw.steps["eager_between"].iloc[0]) > 0
    ext = analyse(read_trace(root / "tracelens-sglang-qwen3-8b-prefilldecode.json.gz")).steps
    assert ext[["verdict", "mode", "batch_size", "tokens"]].values.tolist() == [
        ["eager", "EXTEND", 15, 15360]
    ]


def test_capture_traces_per_size_match_their_replays() -> None:
    """Kernels launched under stream capture are the graph's nodes: as many as the replay of
    the same size runs (vLLM FULL 421, SGLang 544, PIECEWISE 25 pieces of 4-15)."""
    root = need_corpus("traces")
    cap = sorted(root.glob("tracelens-vllm-decode-full-capture_traces-*"))[0]
    a = analyse(read_trace(cap))
    assert a.kind == "capture_trace" and a.steps.empty
    assert a.captures[["size", "mode", "graphs", "instantiated"]].values.tolist() == [
        [32, "FULL", 1, 1]
    ]
    replay = analyse(read_trace(root / "tracelens-vllm-decode-full-graph-execution.json.gz"))
    assert a.captures["nodes_per_graph"].iloc[0] == [replay.summary["gpu_ops_on_graphs"]]
    sg = analyse(read_trace(root / "tracelens-sglang-decode-capture_traces-bs_32_rank0.json.gz"))
    assert sg.captures[["size", "mode"]].values.tolist() == [[32, "DECODE"]]
    assert sg.captures["nodes_per_graph"].iloc[0] == [544]
    pw = analyse(
        read_trace(sorted(root.glob("tracelens-vllm-prefilldecode-piecewise-capture*"))[0])
    )
    nodes = pw.captures["nodes_per_graph"].iloc[0]
    assert pw.captures["graphs"].iloc[0] == pw.captures["instantiated"].iloc[0] == 25
    assert min(nodes) == 4 and max(nodes) == 15
    piece_ops = analyse(
        read_trace(root / "tracelens-vllm-prefilldecode-piecewise-graph-execution.json.gz")
    )
    assert sum(nodes) == piece_ops.summary["gpu_ops_on_graphs"]


def test_folder_finds_traces_by_content_and_name() -> None:
    ing = ingest([str(need_corpus("traces"))])
    kinds = {Path(i.path).name: i.kind for i in ing.inputs}
    assert all(kinds[n] == "trace" for n in [*README_COUNTS, *EAGER_TRACES])
    assert len(ing.traces) == 9
    # the H100 trace starts with a 9 MB "metadata" object: found by the key further in
    assert any(t.path.endswith("h100-qwen1.5-0.5b-eager.json.gz") for t in ing.traces)


def test_span_names_of_both_engines() -> None:
    assert step_info("execute_context_0(0)_generation_7(7)") == {
        "engine": "vllm",
        "mode": "DECODE",
        "batch_size": 7,
        "tokens": 7,
    }
    assert step_info("execute_context_2(300)_generation_5(5)")["mode"] == "MIXED"
    assert step_info("step[EXTEND bs=3 toks=900 extra=1]")["tokens"] == 900
    assert step_info("step[DRAFT_LOOP raw_bs=3 bs=4 topk=2]")["batch_size"] == 4
    assert step_info("ProfilerStep#12")["engine"] == "torch"
    assert step_info("aten::mm") == {}


@pytest.mark.parametrize("suffix", [".pt.trace.json.gz", ".json"])
def test_generated_interleaved_steps_come_back(tmp_path: Path, suffix: str) -> None:
    steps = serving_steps(12, 1767225600.0, ("graph", "eager", "piecewise", "lost"), filler=5)
    path = tmp_path / f"node-rank-3{suffix}"
    write_trace(path, trace_chunks(steps, rank=3, world=4))
    a = analyse(read_trace(path))
    assert a.rank == 3 and a.problems == []
    got = a.steps["verdict"].tolist()
    want = [{"lost": "unverified"}.get(s.kind, s.kind) for s in steps]
    assert got == want
    assert a.steps["epoch_s"].round(3).tolist() == [round(s.epoch_s, 3) for s in steps]
    assert a.summary["graph_launches_without_ops"] == 3


def test_whitespace_and_key_order_do_not_matter(tmp_path: Path) -> None:
    """The same events re-serialised compactly, keys reversed, as a bare array: same result."""
    steps = serving_steps(6, 1767225600.0, ("graph", "piecewise", "eager"))
    src = tmp_path / "a.pt.trace.json"
    write_trace(src, trace_chunks(steps))
    doc = json.loads(src.read_text())
    want = analyse(read_trace(src)).steps.drop(columns=[]).to_dict("list")
    flipped = {k: doc[k] for k in reversed(list(doc))}
    flipped["traceEvents"] = [{k: e[k] for k in reversed(list(e))} for e in doc["traceEvents"]]
    compact = tmp_path / "b.json"
    compact.write_text(json.dumps(flipped, separators=(",", ":")))
    assert analyse(read_trace(compact)).steps.to_dict("list") == want
    bare = tmp_path / "c.json"
    bare.write_text(json.dumps(doc["traceEvents"], indent=1))
    got = analyse(read_trace(bare)).steps  # no baseTimeNanoseconds: no epoch, same verdicts
    assert got["verdict"].tolist() == want["verdict"]


def test_step_without_launch_and_small_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events cut at every block boundary (tiny blocks) read the same as in one block."""
    import diag.artifacts.trace_reader as tr

    steps = [
        Step(1767225600.0, 8, "graph", nodes=30),
        Step(1767225601.0, 8, "eager", nodes=0, sampling=0),
    ]
    path = tmp_path / "x.pt.trace.json.gz"
    write_trace(path, trace_chunks(steps))
    want = analyse(read_trace(path)).steps
    assert want["verdict"].tolist() == ["graph", "no_launches"]
    monkeypatch.setattr(tr, "BLOCK_BYTES", 7)
    assert analyse(read_trace(path)).steps.equals(want)
