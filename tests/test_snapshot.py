"""Allocator snapshot loading: PyTorch's own numbers, graph pools, and hostile files."""

from __future__ import annotations

import json
import os
import pickle
import pickletools
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.artifacts import snapshot as snapshot_mod
from diag.artifacts.snapshot import (
    NotASnapshotError,
    SnapshotError,
    UnsafePickleError,
    load_snapshot,
    read_plain_pickle,
)
from fixtures.gen.snapshots import FORMATS, write_malicious_pickle, write_snapshot

SNAPSHOTS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "snapshots"
STATS = SNAPSHOTS / "torch-memory-viz-stats"
needs_corpus = pytest.mark.skipif(not SNAPSHOTS.is_dir(), reason="../shared/corpus absent")
MIB = 1024 * 1024

CORPUS_PICKLES = sorted(p.name for p in SNAPSHOTS.glob("*.pickle")) if SNAPSHOTS.is_dir() else []
# era per torch-artifacts.md A9 and corpus/snapshots/SOURCE.txt
CORPUS_ERAS = {
    "GENERATED_torch-2.7.0+cu126-no-gpu__empty_dump_snapshot.pickle": "2.5-2.8",
    "JasperSolt_EoR_NN__6686e9f__snapshot.pickle": "2.2",
    "Maphsge4_select_n__dec166a__snapshot.pickle": "2.1-2.2",
    "SunnySood80_unsupervised_finetune_resnet50__a652958__dump_snapshot.pickle": "2.5-2.8",
    "Yiyi-philosophy_LLM-inference__6a8eab0__oom_snapshot.pickle": "2.0",
    "albi2_thesis-text-to-SQL__dbc4621__dump_snapshot.pickle": "2.5-2.8",
    "silmont2000_assignment2-systems__133f064__mem_snapshot.pickle": "2.5-2.7",
}
TO_DICT_KEYS = {
    "path",
    "status",
    "torch_format",
    "total_reserved_bytes",
    "total_allocated_bytes",
    "total_active_bytes",
    "peak_bytes",
    "oom_events",
    "pools",
    "top_allocations",
}


def viz_bytes(num: float) -> str:
    """torch.cuda._memory_viz ``_format_size`` (what its ``stats`` prints)."""
    for unit in ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"]:
        if abs(num) < 1024.0:
            return f"{num:3.1f}{unit}B"
        num /= 1024.0
    return f"{num:.1f}YiB"


def parse_stats(path: Path) -> dict[str, str]:
    """The summary lines of ``python -m torch.cuda._memory_viz stats``."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^(segments|total_reserved|total_allocated|total_free): (\S+)", line)
        if m:
            out[m.group(1)] = m.group(2)
    assert set(out) == {"segments", "total_reserved", "total_allocated", "total_free"}, path
    return out


# --------------------------------------------------------------------------- real files


@needs_corpus
def test_every_corpus_pickle_has_an_expectation() -> None:
    assert CORPUS_PICKLES == sorted(CORPUS_ERAS)


@needs_corpus
@pytest.mark.parametrize("name", CORPUS_PICKLES)
def test_corpus_pickle_matches_pytorch_stats(name: str) -> None:
    summary = load_snapshot(SNAPSHOTS / name)
    d = json.loads(json.dumps(summary.to_dict(), allow_nan=False))
    assert set(d) == TO_DICT_KEYS and d["status"] == "ok"
    assert summary.torch_format == CORPUS_ERAS[name]
    # no public snapshot holds a CUDA-graph pool (SOURCE.txt)
    assert all(p.kind == "default" and p.pool_id == (0, 0) for p in summary.pools)
    assert summary.graph_pool_bytes == 0
    assert sum(p.reserved_bytes for p in summary.pools) == summary.total_reserved_bytes
    assert sum(p.allocated_bytes for p in summary.pools) == summary.total_allocated_bytes
    stats_file = STATS / name.replace(".pickle", ".stats.txt")
    if not stats_file.exists():  # the GENERATED empty snapshot has no reference output
        assert (summary.total_reserved_bytes, summary.segments) == (0, 0)
        return
    stats = parse_stats(stats_file)
    assert int(stats["segments"]) == summary.segments
    assert viz_bytes(summary.total_reserved_bytes) == stats["total_reserved"]
    assert viz_bytes(summary.total_allocated_bytes) == stats["total_allocated"]
    assert (
        viz_bytes(summary.total_reserved_bytes - summary.total_allocated_bytes)
        == stats["total_free"]
    )
    assert (
        summary.total_allocated_bytes <= summary.total_active_bytes <= summary.total_reserved_bytes
    )


@needs_corpus
def test_corpus_active_matches_recorded_snapshot_events() -> None:
    """``snapshot`` trace actions record total active bytes (A6): an independent check."""
    # the only entry of Yiyi's trace, as printed by `_memory_viz trace`
    trace = (STATS / "Yiyi-philosophy_LLM-inference__6a8eab0__oom_snapshot.trace.txt").read_text()
    found = re.search(r"'action': 'snapshot', 'addr': 0, 'size': (\d+)", trace)
    assert found
    recorded = int(found.group(1))
    yiyi = load_snapshot(SNAPSHOTS / "Yiyi-philosophy_LLM-inference__6a8eab0__oom_snapshot.pickle")
    assert yiyi.total_active_bytes == recorded == 11840159744
    # EoR_NN: all 9 snapshot entries = 48760832 = sum of active_size (torch-artifacts.md A6)
    eor = load_snapshot(SNAPSHOTS / "JasperSolt_EoR_NN__6686e9f__snapshot.pickle")
    assert eor.total_active_bytes == 48760832
    assert eor.peak_bytes is not None and eor.peak_bytes >= eor.total_allocated_bytes


@needs_corpus
def test_corpus_top_allocations() -> None:
    s = load_snapshot(SNAPSHOTS / "Yiyi-philosophy_LLM-inference__6a8eab0__oom_snapshot.pickle")
    top = s.top_allocations
    assert [a.bytes for a in top] == sorted((a.bytes for a in top), reverse=True)
    assert top[0].bytes == 411828224
    # legacy 2.0 blocks keep their frames in history[0]
    assert top[0].frames[0] == "/home/dingyiran/FlexGen/flexgen/pytorch_backend.py:190:allocate"
    assert all(":" in f and not f.startswith("??") for a in top for f in a.frames)


@pytest.mark.slow
@needs_corpus
@pytest.mark.parametrize("name", CORPUS_PICKLES)
def test_corpus_pickle_truncated_is_snapshot_error(name: str) -> None:
    data = (SNAPSHOTS / name).read_bytes()
    stride = max(1, len(data) // 50)
    for cut in [*range(0, len(data), stride), len(data) - 1]:
        with pytest.raises(SnapshotError) as info:
            read_plain_pickle(data[:cut], name)
        assert type(info.value) is SnapshotError
        assert "truncated" in str(info.value) or "empty file" in str(info.value), cut


# --------------------------------------------------------------------------- generated files

ERA_LABEL = {
    "2.0": "2.0",
    "2.1": "2.1",
    "2.2": "2.2",
    "2.3": "2.3-2.4",
    "2.5": "2.5-2.7",
    "2.8": "2.8",
    "2.9": "2.9",
    "2.10": "2.10-2.11",
    "2.12": "2.12+",
    "2.14": "2.14+",
}


def _assert_matches(summary: snapshot_mod.SnapshotSummary, exp: dict[str, Any]) -> None:
    assert summary.total_reserved_bytes == exp["total_reserved_bytes"]
    assert summary.total_allocated_bytes == exp["total_allocated_bytes"]
    assert summary.total_active_bytes == exp["total_active_bytes"]
    assert summary.peak_bytes == exp["peak_bytes"]
    assert summary.oom_events == exp["oom_events"]
    assert summary.segments == exp["segments"]
    assert summary.graph_pool_bytes == exp["graph_pool_bytes"]
    got = {
        p.pool_id: {
            "kind": p.kind,
            "reserved_bytes": p.reserved_bytes,
            "allocated_bytes": p.allocated_bytes,
            "segments": p.segments,
        }
        for p in summary.pools
    }
    assert got == exp["pools"]
    if exp["largest_active_bytes"] is not None:
        assert summary.top_allocations[0].bytes == exp["largest_active_bytes"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_generated_snapshot_every_era(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "cuda_graph_runner_memory_usage.pickle"
    graph = [] if fmt == "2.0" else [48 * MIB, 5 * MIB + 1000]
    exp = write_snapshot(
        path, default_pool_bytes=100 * MIB, graph_pools=graph, torch_format=fmt, oom=True
    )
    summary = load_snapshot(path)
    _assert_matches(summary, exp)
    assert summary.torch_format == ERA_LABEL[fmt]
    d = json.loads(json.dumps(summary.to_dict(), allow_nan=False))
    assert set(d) == TO_DICT_KEYS
    assert set(d["pools"][0]) == {
        "pool_id",
        "kind",
        "reserved_bytes",
        "allocated_bytes",
        "segments",
    }
    assert set(d["top_allocations"][0]) == {"bytes", "frames"}
    assert d["oom_events"] == 1


def test_generated_graph_pools(tmp_path: Path) -> None:
    path = tmp_path / "s.pickle"
    exp = write_snapshot(path, default_pool_bytes=10 * MIB, graph_pools=[200 * MIB, 64 * MIB])
    summary = load_snapshot(path)
    _assert_matches(summary, exp)
    pools = summary.to_dict()["pools"]
    assert [(p["pool_id"], p["kind"]) for p in pools] == [
        ([0, 0], "default"),
        ([0, 1], "graph"),
        ([0, 2], "graph"),
    ]
    assert [p["reserved_bytes"] for p in pools] == [10 * MIB, 200 * MIB, 64 * MIB]
    assert summary.graph_pool_bytes == 264 * MIB
    # the largest live block is the graph's static output; frames skip C++/interpreter noise
    top = summary.top_allocations[0]
    assert top.pool_id == (0, 1)
    assert top.frames == [
        "/srv/sglang/srt/layers/linear.py:412:forward",
        "/srv/sglang/srt/model_executor/cuda_graph_runner.py:655:capture_one_batch_size",
    ]
    assert summary.to_dict()["top_allocations"][0] == {"bytes": top.bytes, "frames": top.frames}


def test_generated_capture_own_pool_ids(tmp_path: Path) -> None:
    """``capture_begin()`` without a pool gives (m, 0) ids; still graph pools (A10)."""
    path = tmp_path / "s.pickle"
    exp = write_snapshot(
        path,
        default_pool_bytes=MIB,
        graph_pools=[3 * MIB, 2 * MIB],
        graph_pool_ids=[(1, 0), (2, 0)],
        torch_format="2.8",
    )
    summary = load_snapshot(path)
    _assert_matches(summary, exp)
    assert [(p.pool_id, p.kind) for p in summary.pools] == [
        ((0, 0), "default"),
        ((1, 0), "graph"),
        ((2, 0), "graph"),
    ]


def test_generated_without_history(tmp_path: Path) -> None:
    path = tmp_path / "s.pickle"
    exp = write_snapshot(
        path,
        default_pool_bytes=40 * MIB,
        graph_pools=[8 * MIB],
        torch_format="2.8",
        with_history=False,
    )
    summary = load_snapshot(path)
    _assert_matches(summary, exp)
    assert summary.peak_bytes is None and exp["peak_bytes"] is None
    # without trace entries 2.8 cannot be told from 2.5-2.7
    assert summary.torch_format == "2.5-2.8"


@settings(max_examples=40, deadline=None)
@given(
    default=st.integers(0, 150 * MIB),
    graphs=st.lists(st.integers(1, 90 * MIB), max_size=3),
    fmt=st.sampled_from([f for f in FORMATS if f != "2.0"]),
    history=st.booleans(),
    oom=st.booleans(),
)
def test_generated_snapshots_property(
    tmp_path_factory: pytest.TempPathFactory,
    default: int,
    graphs: list[int],
    fmt: str,
    history: bool,
    oom: bool,
) -> None:
    path = tmp_path_factory.mktemp("snap") / "s.pickle"
    exp = write_snapshot(
        path,
        default_pool_bytes=default,
        graph_pools=graphs,
        torch_format=fmt,
        with_history=history,
        oom=oom,
    )
    _assert_matches(load_snapshot(path), exp)


def test_segment_list_pickle_is_accepted(tmp_path: Path) -> None:
    """``torch.cuda.memory_snapshot()`` returns only the segment list (A1)."""
    full = tmp_path / "full.pickle"
    exp = write_snapshot(
        full, default_pool_bytes=20 * MIB, graph_pools=[4 * MIB], with_history=False
    )
    segments = read_plain_pickle(full.read_bytes())["segments"]
    listed = tmp_path / "list.pickle"
    with open(listed, "wb") as fh:
        pickle.dump(segments, fh, protocol=4)
    summary = load_snapshot(listed)
    assert summary.total_reserved_bytes == exp["total_reserved_bytes"]
    assert summary.graph_pool_bytes == 4 * MIB


def test_reader_equals_pickle_for_plain_data() -> None:
    """Our interpreter rebuilds what pickle wrote, for every protocol torch could use."""
    shared = [{"name": "f", "filename": "a.py", "line": 1}]
    value = {
        "segments": [],
        "s": "ünï\ud800code" * 3,
        "b": b"\x00\xff",
        "big": 2**100,
        "neg": -(2**70),
        "i": [-1, 0, 255, 65535, 2**31 - 1, -(2**31)],
        "f": 0.5,
        "t": (0, 0),
        "t1": (1,),
        "t3": (1, 2, 3),
        "t4": (1, 2, 3, 4),
        "e": (),
        "n": None,
        "bools": [True, False],
        "shared": [shared, shared],
        "nested": {"1": {"2": [[], {}]}},
        "long": "x" * 300,
    }
    for protocol in (3, 4, 5):
        data = pickle.dumps(value, protocol=protocol)
        assert read_plain_pickle(data) == value
    # protocol 2 pickles bytes via codecs.encode + REDUCE, which is refused
    no_bytes = {k: v for k, v in value.items() if k != "b"}
    assert read_plain_pickle(pickle.dumps(no_bytes, protocol=2)) == no_bytes
    again = read_plain_pickle(pickle.dumps(value, protocol=4))
    assert again["shared"][0] is again["shared"][1]  # memo references preserved


# --------------------------------------------------------------------------- hostile files


@pytest.mark.parametrize("opcode", ["STACK_GLOBAL", "GLOBAL"])
def test_malicious_pickle_is_refused_and_never_runs(tmp_path: Path, opcode: str) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "cuda_graph_runner_memory_usage.pickle"
    payload = write_malicious_pickle(path, marker, opcode=opcode)
    # where the first forbidden opcode sits (pickletools only parses, it runs nothing)
    offset = next(pos for op, _, pos in pickletools.genops(payload) if op.name == opcode)
    with pytest.raises(UnsafePickleError) as info:
        load_snapshot(path)
    assert opcode in str(info.value) and f"byte {offset}" in str(info.value)
    assert str(path) in str(info.value)
    assert not marker.exists()


def test_malicious_fixture_is_really_dangerous(tmp_path: Path) -> None:
    """Guard against a toothless fixture: plain pickle (in a child process) creates the marker."""
    marker = tmp_path / "created-by-plain-pickle"
    path = tmp_path / "evil.pickle"
    write_malicious_pickle(path, marker)
    code = "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))"
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
    assert marker.exists()


@pytest.mark.parametrize(
    ("payload", "name"),
    [
        (b"\x80\x04)}b.", "BUILD"),
        (b"\x80\x02(cos\nsystem\nX\x02\x00\x00\x00lsi.", "GLOBAL"),
        (b"(ios\nsystem\nS'ls'\n.", "INST"),
        (b"\x80\x02(]o.", "OBJ"),
        (b"\x80\x02])\x81.", "NEWOBJ"),
        (b"\x80\x04])}\x92.", "NEWOBJ_EX"),
        (b"\x80\x02\x82\x01.", "EXT1"),
        (b"\x80\x02\x83\x01\x00.", "EXT2"),
        (b"\x80\x02\x84\x01\x00\x00\x00.", "EXT4"),
        (b"Pid\n.", "PERSID"),
        (b"\x80\x02K\x01Q.", "BINPERSID"),
        (b"\x80\x04\x8c\x02os\x8c\x06system\x93.", "STACK_GLOBAL"),
        (b"\x80\x04]N\x85R.", "REDUCE"),
        (b"\x80\x05\x97.", "NEXT_BUFFER"),
        (b"\x80\x04\x8f.", "EMPTY_SET"),
    ],
)
def test_forbidden_opcodes(payload: bytes, name: str) -> None:
    with pytest.raises(UnsafePickleError, match=rf"opcode {name} at byte \d+"):
        read_plain_pickle(payload, "x.pickle")


def test_unknown_opcode_byte() -> None:
    with pytest.raises(UnsafePickleError, match=r"unknown opcode 0xff at byte 3"):
        read_plain_pickle(b"\x80\x04]\xff.", "x.pickle")


@pytest.mark.parametrize(
    "obj",
    [
        [1, 2, 3],
        [],
        {"foo": 1},
        42,
        "segments",
        {"segments": "nope"},
        {"segments": [{"total_size": 1, "blocks": [{"size": "big", "state": "inactive"}]}]},
        {"segments": [{"blocks": []}]},
        {"segments": [{"total_size": 512, "blocks": [{"size": 512}]}]},
        {"segments": [{"total_size": 512, "segment_pool_id": "graph", "blocks": []}]},
    ],
)
def test_not_a_snapshot(tmp_path: Path, obj: Any) -> None:
    path = tmp_path / "other.pickle"
    with open(path, "wb") as fh:
        pickle.dump(obj, fh)
    with pytest.raises(NotASnapshotError) as info:
        load_snapshot(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_size_limit_checked_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.pickle"
    write_snapshot(path, default_pool_bytes=4 * MIB, graph_pools=[MIB])
    size = path.stat().st_size

    def no_open(*args: object, **kwargs: object) -> None:
        raise AssertionError("the file was opened despite the size limit")

    monkeypatch.setattr(snapshot_mod, "open", no_open, raising=False)
    with pytest.raises(SnapshotError) as info:
        load_snapshot(path, max_bytes=size - 1)
    assert type(info.value) is SnapshotError
    assert f"over the {size - 1}-byte snapshot limit" in str(info.value)
    monkeypatch.undo()
    assert load_snapshot(path, max_bytes=size).total_reserved_bytes == 5 * MIB


def test_size_limit_message_for_large_file(tmp_path: Path) -> None:
    path = tmp_path / "huge.pickle"
    with open(path, "wb") as fh:  # sparse: no disk used
        fh.truncate(700 * MIB)
    with pytest.raises(SnapshotError, match=r"is 700\.0 MiB, over the 512 MiB snapshot limit"):
        load_snapshot(path)


@pytest.mark.slow
def test_truncated_generated_pickle_every_byte(tmp_path: Path) -> None:
    path = tmp_path / "s.pickle"
    write_snapshot(
        path, default_pool_bytes=3 * MIB, graph_pools=[MIB], torch_format="2.12", oom=True
    )
    data = path.read_bytes()
    for cut in range(len(data)):
        (tmp_path / "cut.pickle").write_bytes(data[:cut])
        with pytest.raises(SnapshotError) as info:
            load_snapshot(tmp_path / "cut.pickle")
        assert type(info.value) is SnapshotError, cut


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="cannot read"):
        load_snapshot(tmp_path / "absent.pickle")
    (tmp_path / "empty.pickle").write_bytes(b"")
    with pytest.raises(SnapshotError, match="empty file"):
        load_snapshot(tmp_path / "empty.pickle")
    (tmp_path / "json.pickle").write_text('{"segments": []}')
    with pytest.raises(SnapshotError, match="not a pickle"):
        load_snapshot(tmp_path / "json.pickle")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_snapshot_errors(data: bytes) -> None:
    try:
        obj = read_plain_pickle(data, "fuzz")
    except SnapshotError:
        return
    try:
        snapshot_mod.summarize_snapshot(obj, "fuzz")
    except SnapshotError:
        pass


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_snapshot_only_raises_snapshot_errors(data: st.DataObject) -> None:
    raw = bytearray(_SMALL_SNAPSHOT)
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        obj = read_plain_pickle(bytes(raw), "mutant")
        snapshot_mod.summarize_snapshot(obj, "mutant")
    except SnapshotError:
        pass


def _small_snapshot() -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "s.pickle")
        write_snapshot(p, default_pool_bytes=MIB, graph_pools=[MIB], torch_format="2.10")
        with open(p, "rb") as fh:
            return fh.read()


_SMALL_SNAPSHOT = _small_snapshot()
