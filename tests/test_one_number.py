"""One number per fact (issue 24 point 5): padding waste, captured share, capture memory and
time, and the ceiling read the same in analyze's text and HTML, in `recommend` and in
`compare`, on every fixture incident and every shared corpus log present; each is taken from
the run's record and formatted by :mod:`diag.figures`."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.advise.recommend import MEASURED, RecommendError, recommend
from diag.api import analyze
from diag.comparison import compare
from diag.figures import number, share
from diag.render.compare import render_text as compare_text
from diag.render.html import render_html
from diag.render.recommend_text import render_text
from diag.render.text import render_text as analyze_text
from tests.conftest import CORPUS, ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"


def _inputs() -> list[Path]:
    paths = sorted(p for p in INCIDENTS.iterdir() if p.is_dir())
    for sub in ("real", "real-2", "real-3"):
        if (CORPUS / sub).is_dir():
            paths += sorted(f for f in (CORPUS / sub).iterdir() if f.suffix != ".yaml")
    return paths


def _flat(text: str) -> str:
    """The text with its line wrapping undone (a figure may sit at a line end)."""
    return " ".join(text.split())


@pytest.mark.parametrize("path", _inputs(), ids=lambda p: p.name)
def test_the_same_fact_reads_the_same_everywhere(path: Path) -> None:
    report = analyze([str(path)], generated_at="fixed")
    text, html = _flat(analyze_text(report)), render_html(report)
    for run in report.runs:
        rec = run.record
        waste, on_graphs = rec.padding_waste, rec.captured_share
        decided = rec.batches.decided
        if waste is not None and rec.decode_batch_shape:
            assert f"padding waste {share(waste)}" in text
            assert share(waste) in html
        if run.facts.ceiling:  # the run's one ceiling (facts), in the text and the HTML tiles
            assert f"ceiling {run.facts.ceiling}" in text
            assert f"{run.facts.ceiling:,}" in html
        if on_graphs is not None and decided:
            assert f"{share(on_graphs)} of {decided:,} decode batches on graphs" in text
            assert f"{share(on_graphs)} of {decided:,}" in html
    if not report.runs:
        return
    doc = compare(report, report)
    main = next(r for r in report.runs if r.id == doc["before"]["run"]["id"])
    ctext = _flat(compare_text(doc))
    metrics = {m["key"]: m for m in doc["metrics"]}
    for key, fact in (
        ("padding_waste", main.record.padding_waste),
        ("captured_share", main.record.captured_share),
        ("capture_mem_gib", main.record.capture_mem_gib),
        ("capture_time_s", main.record.capture_time_s),
        ("ceiling", main.facts.ceiling),
    ):
        shown = metrics[key]["before"] if key in metrics else None  # (a row of two unknowns)
        assert shown == fact, key
    if main.record.padding_waste is not None:
        assert share(main.record.padding_waste) in ctext
    # per-request decode speed: the figure compare shows is the one analyze's text prints
    for key, where in (("speed_in", "in"), ("speed_out", "out of window")):
        speed = metrics[key]["before"] if key in metrics else None
        if speed and "decode speed per request" in text:
            assert f"{number(speed)} tok/s" in ctext, key
            assert number(speed) in text, (key, where)
    try:
        rec_doc = recommend(report.runs, report.snapshots)
    except RecommendError:
        return
    cur = rec_doc["current"]
    if rec_doc.get("node") == "prefill" or cur.get("figures") != MEASURED:
        return
    run_rec = next(r for r in report.runs if r.id == rec_doc["main_run"]).record
    assert cur["capture_mem_gib"] == run_rec.capture_mem_gib
    assert cur["capture_time_s"] == run_rec.capture_time_s
    rtext = _flat(render_text(rec_doc))
    if run_rec.padding_waste is not None:
        assert cur["padding_waste"] == run_rec.padding_waste
        assert f"padding waste {share(run_rec.padding_waste)}" in rtext
    if run_rec.capture_mem_gib is not None:
        assert f"capture {run_rec.capture_mem_gib:g} GiB" in rtext
        assert f"{run_rec.capture_mem_gib:g} GiB" in text
