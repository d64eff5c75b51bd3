"""`compare`: a before/after pair built from generated incidents, its warnings, renderings and CLI contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from diag.advise.recommend import recommend
from diag.api import analyze
from diag.cli import main
from diag.render.compare import compare, main_run, render_html, render_text
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
