"""Issue 34 item 6: compare knows what it compares. Each side states its model, TP/PP/DP,
GPU, engine version and capture configuration; a figure that depends on something that
differs is shown but not called better or worse, and the first line says what differs."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from diag.api import analyze
from diag.cli import main
from diag.comparison import Identity, compare, differences
from diag.render.compare import render_html, render_text

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"
BIG = INCIDENTS / "sglang-qwen3-32b-tp2" / "server.log"
SMALL = INCIDENTS / "sglang-qwen3-8b-tp1" / "server.log"


def _doc(before: Path, after: Path) -> dict:
    return compare(analyze([str(before)]), analyze([str(after)]), [str(before)], [str(after)])


def test_another_model_and_tp_size_is_said_first_and_kv_is_not_better() -> None:
    doc = _doc(BIG, SMALL)
    keys = [d["key"] for d in doc["differs"]]
    assert keys == ["model", "parallel"]
    assert doc["identity"]["before"]["model"] == "Qwen/Qwen3-32B"
    assert doc["identity"]["after"]["tp"] == 1 and doc["identity"]["before"]["tp"] == 2
    by_key = {m["key"]: m for m in doc["metrics"]}
    kv = by_key["kv_cache_gib"]
    assert kv["delta"] == 18.88 and kv["better"] is None  # shown, not called better
    assert kv["not_compared"] == ["model", "parallel"]
    for key in ("kv_tokens", "throughput_in_window", "capture_mem_gib"):
        assert by_key[key]["better"] is None, key
    # what the models do not move keeps its verdict (padding of the same buckets)
    assert by_key["padding_waste"]["better"] == "after"
    text = render_text(doc)
    first = text.splitlines()[0]
    assert first.startswith("BEFORE and AFTER differ in model Qwen/Qwen3-32B -> Qwen/Qwen3-8B")
    assert "TP2" in first and "TP1" in first and "not called better or worse" in first
    kv_line = next(ln for ln in text.splitlines() if ln.startswith("KV cache"))
    assert "+18.88 GiB" in kv_line and "(better)" not in kv_line
    assert "Qwen/Qwen3-8B, TP1" in text and "GPU not in the log" in text
    page = render_html(doc)
    assert "differ in model" in page and "Qwen/Qwen3-32B" in page


def test_the_same_server_keeps_its_verdicts_and_says_so() -> None:
    doc = _doc(BIG, BIG)
    assert doc["differs"] == []
    assert doc["summary"].startswith("BEFORE and AFTER are the same model")
    assert all(m["not_compared"] is None for m in doc["metrics"])


def test_a_bucket_change_is_stated_but_keeps_its_verdicts() -> None:
    """Old vs new bucket set on the same model: the capture configuration is said, and the
    figures a bucket change moves keep their verdicts."""
    before = INCIDENTS / "sglang-oversized-window" / "server.log"
    after = INCIDENTS / "sglang-healthy" / "server.log"
    doc = _doc(before, after)
    assert [d["key"] for d in doc["differs"]] == ["capture"]
    by_key = {m["key"]: m for m in doc["metrics"]}
    assert by_key["capture_mem_gib"]["better"] == "after"
    assert "capture configuration graphs enabled (full), 52 sizes" in doc["summary"]


def test_identity_differences_need_both_sides_known() -> None:
    a = Identity("sglang", None, "m", 2, None, None, None, "graphs off")
    b = Identity("sglang", "0.5.5", None, 2, None, None, None, "graphs off")
    assert differences(a, b) == []  # unknown on one side is not a difference


def test_the_cli_prints_what_differs_first() -> None:
    got = CliRunner().invoke(main, ["compare", "-q", str(BIG), str(SMALL)])
    assert got.exit_code == 0, got.stderr
    assert got.stdout.splitlines()[0].startswith("BEFORE and AFTER differ in model")
