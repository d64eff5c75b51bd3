"""`compare`: a before/after pair built from generated incidents, its warnings, renderings and CLI contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from diag.advise.recommend import recommend
from diag.api import analyze
from diag.cli import main
from diag.comparison import compare, main_run
from diag.render.compare import render_html, render_text
from gen import incidents as inc
from tests.test_recommend import OUT_OF_WINDOW, write_sglang


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """BEFORE: the out-of-window incident (ceiling 32, bursts to 96); AFTER: the same traffic
    served by the set `recommend` gives for it."""
    root = tmp_path_factory.mktemp("pair")
    before = inc.BUILDERS["sglang-out-of-window"]().write(root / "before")
    rep = analyze([str(before / "server.log")])
    sizes = recommend(rep.runs, rep.snapshots)["recommended"]["sizes"]
    after = write_sglang(
        root / "after" / "server.log",
        OUT_OF_WINDOW,
        sizes,
        explicit=True,
        capture_mem=0.9,
        capture_s=7.0,
    )
    return before / "server.log", after


def test_recommended_set_fixes_the_window(pair: tuple[Path, Path]) -> None:
    before, after = pair
    doc = compare(analyze([str(before)]), analyze([str(after)]), [str(before)], [str(after)])
    rows = {m["key"]: m for m in doc["metrics"]}
    assert rows["captured_share"]["before"] == 0.5
    assert rows["captured_share"]["after"] == 1.0
    assert rows["captured_share"]["better"] == "after"
    assert rows["padding_waste"]["after"] < rows["padding_waste"]["before"]
    assert rows["capture_mem_gib"]["delta"] == pytest.approx(0.3)
    assert rows["capture_mem_gib"]["better"] == "before"
    gone = {f["code"] for f in doc["findings"]["disappeared"]}
    assert "GD110" in gone
    assert "GD110" not in {
        f["code"] for f in doc["findings"]["appeared"] + doc["findings"]["persisting"]
    }
    # both records travel in the JSON
    assert doc["before"]["run"]["record"]["graph_capture_sizes"] == [1, 2, 4, 8, 12, 16, 24, 32]
    assert doc["after"]["run"]["record"]["captured_share"] == 1.0
    assert doc["warnings"] == []
    json.dumps(doc)
    text = render_text(doc)
    assert "captured share" in text and "+50.0 pp (better)" in text and "GD110" in text


def test_graphs_disabled_side_is_flagged(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    disabled = inc.BUILDERS["sglang-graph-disabled"]().write(tmp_path)
    doc = compare(analyze([str(disabled / "server.log")]), analyze([str(pair[1])]))
    assert any(w.startswith("BEFORE ran with CUDA graphs disabled") for w in doc["warnings"])
    assert not any(w.startswith("AFTER ran") for w in doc["warnings"])
    assert "WARNING: BEFORE ran with CUDA graphs disabled" in render_text(doc)


def test_main_run_is_the_one_with_most_decode_batches(tmp_path: Path) -> None:
    small = write_sglang(tmp_path / "a" / "server.log", OUT_OF_WINDOW[:10], [1, 8, 32])
    big = write_sglang(tmp_path / "b" / "server.log", OUT_OF_WINDOW, [1, 8, 32])
    run, why = main_run(analyze([str(small), str(big)]))
    assert run is not None and run.facts.run.sources == [str(big)]
    assert "120 decode batches, the most of 2 runs" == why


def test_html_is_self_contained_and_escaped(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    odd = tmp_path / "a<b&c"
    log = write_sglang(odd / "server.log", OUT_OF_WINDOW, [1, 8, 32])
    page = render_html(
        compare(analyze([str(log)]), analyze([str(pair[1])]), [str(log)], [str(pair[1])])
    )
    assert "a&lt;b&amp;c" in page and "a<b" not in page
    assert "<table>" in page and "http" not in page and "<script" not in page


# ------------------------------------------------------------------ CLI
def test_cli_two_paths_json(pair: tuple[Path, Path]) -> None:
    res = CliRunner().invoke(main, ["compare", str(pair[0]), str(pair[1]), "--format", "json"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "graphdiag.compare/1"
    assert doc["before"]["run"]["record"] and doc["after"]["run"]["record"]
    assert doc["before"]["paths"] == [str(pair[0])]


def test_cli_path_sets_html_file_and_stderr_warning(
    tmp_path: Path, pair: tuple[Path, Path]
) -> None:
    disabled = inc.BUILDERS["sglang-graph-disabled"]().write(tmp_path)
    out = tmp_path / "cmp.html"
    res = CliRunner().invoke(
        main,
        [
            "compare",
            "--before",
            str(disabled / "server.log"),
            "--after",
            str(pair[0]),
            "--after",
            str(pair[1]),
            "--format",
            "html",
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.stderr
    assert res.stdout == ""
    assert "graphs disabled" in res.stderr
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "captured share" in page
    assert "the most of 2 runs" in page


@pytest.mark.parametrize(
    "args",
    [
        ["compare", "only-one.log"],
        ["compare", "a.log", "b.log", "--before", "c.log"],
        ["compare", "--before", "a.log"],
    ],
)
def test_cli_usage_errors(args: list[str]) -> None:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2
    assert res.stdout == "" and "Error" in res.stderr


def test_cli_unreadable_side(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    res = CliRunner().invoke(main, ["compare", str(tmp_path / "missing.log"), str(pair[1])])
    assert res.exit_code == 2
    assert res.stdout == "" and "before: no input could be read" in res.stderr


def test_promise_of_the_before_advice_holds_after(pair: tuple[Path, Path]) -> None:
    before, after = pair
    rb = analyze([str(before)])
    doc = compare(rb, analyze([str(after)]), [str(before)], [str(after)])
    p = doc["promise"]
    adv = rb.runs[0].advice
    assert adv is not None
    assert p["recommended_sizes"] == list(adv.recommended.sizes) == p["after_sizes"]
    assert p["applied"] is True
    assert p["promised_coverage"] == round(adv.promised_coverage, 4)
    assert p["measured_coverage"] == 1.0 and p["held"] is True
    assert "the promise held" in render_text(doc)


def test_promise_missed_on_other_traffic(tmp_path: Path) -> None:
    """AFTER runs the recommended set, but its traffic bursts far above BEFORE's peak."""
    before = inc.BUILDERS["sglang-out-of-window"]().write(tmp_path / "before") / "server.log"
    rb = analyze([str(before)])
    adv = rb.runs[0].advice
    assert adv is not None
    bigger = [b if b < 90 else 150 for b in OUT_OF_WINDOW]
    after = write_sglang(
        tmp_path / "after" / "server.log", bigger, list(adv.recommended.sizes), explicit=True
    )
    doc = compare(rb, analyze([str(after)]), [str(before)], [str(after)])
    p = doc["promise"]
    assert p["applied"] is True and p["held"] is False and p["coverage_held"] is False
    assert p["measured_coverage"] < p["promised_coverage"]
    # priced on AFTER's traffic, the promised set misses the same batches the engine ran eager
    assert p["recommended_on_after_traffic"]["coverage"] == p["measured_coverage"]
    assert any("the promise was missed" in w for w in doc["warnings"])


# ------------------------------------------------------------------ verdicts across units
INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"


def _lines_first(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def test_across_engines_no_metric_is_better_and_the_refusal_comes_first() -> None:
    sg = INCIDENTS / "sglang-healthy" / "server.log"
    vl = INCIDENTS / "vllm-healthy" / "server.log"
    doc = compare(analyze([str(sg)]), analyze([str(vl)]), [str(sg)], [str(vl)])
    assert doc["comparable"] is False
    assert doc["warnings"][0].startswith("not comparable: BEFORE is sglang, AFTER is vllm")
    assert "requests" in doc["warnings"][0] and "tokens" in doc["warnings"][0]
    assert all(m["better"] is None for m in doc["metrics"])
    assert any(m["delta"] for m in doc["metrics"])  # the numbers are still shown
    text = render_text(doc)
    assert _lines_first(text)[0].startswith("WARNING: not comparable")
    assert "(better)" not in text and "(worse)" not in text and "n/a" not in text
    page = render_html(doc)
    assert page.index("not comparable") < page.index("<ul>") < page.index("<table>")
    assert 'class="better"' not in page and 'class="worse"' not in page


def test_vllm_v0_against_v1_is_refused_by_the_unit_change(tmp_path: Path) -> None:
    """The same log with its version moved before 0.8.0 (V0: sizes count sequences)."""
    v1 = INCIDENTS / "vllm-healthy" / "server.log"
    v0 = tmp_path / "v0.log"
    v0.write_text(v1.read_text().replace("0.13.0", "0.6.3"))
    doc = compare(analyze([str(v0)]), analyze([str(v1)]), [str(v0)], [str(v1)])
    assert doc["comparable"] is False
    assert doc["warnings"][0].startswith("not comparable: BEFORE (vllm 0.6.3) counts")
    assert "sequences" in doc["warnings"][0] and "tokens" in doc["warnings"][0]
    same = compare(analyze([str(v1)]), analyze([str(v1)]))
    assert same["comparable"] is True and not same["warnings"]


def test_each_side_carries_its_verdict(pair: tuple[Path, Path]) -> None:
    doc = compare(analyze([str(pair[0])]), analyze([str(pair[1])]))
    assert doc["before"]["verdict"] == "warn" and "GD110" in doc["before"]["verdict_reason"]
    assert doc["after"]["verdict"] in ("ok", "warn")
    assert f"verdict {doc['before']['verdict']}:" in render_text(doc)


def test_a_set_not_applied_is_not_checked_and_says_so_in_one_sentence(
    pair: tuple[Path, Path],
) -> None:
    before = analyze([str(pair[0])])
    doc = compare(before, analyze([str(pair[0])]))  # AFTER kept BEFORE's own set
    p = doc["promise"]
    assert p["applied"] is False and p["held"] is None
    assert p["coverage_held"] is None and p["waste_held"] is None
    s = p["summary"]
    assert "was not applied" in s and "is not checked" in s
    assert "held" not in s and "missed" not in s  # no verdict beside "not applied"
    assert s.count("BEFORE's recommended set") == 1
    assert s in render_text(doc) and not any(s in w for w in doc["warnings"])
