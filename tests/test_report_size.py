"""A report fits a ticket: one incident's page at most 1.5 MB, 25 runs' at most 3 MB, with the
same charts (plotly.js's basic bundle, vendored in diag/render/vendor, and large figures packed).

The charts stay what they were: every trace type the pages draw is one the vendored bundle
registers, and a packed figure unpacks to the figure that was built. The browser draws them in
tests/test_html_browser.py.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from bench.gen_logs import GENERATORS, write_log
from diag.api import analyze
from diag.render.html import render_html
from diag.render.html_page import COMPRESS_ABOVE, figure_block, unpack_figure
from diag.resources import package_file

ROOT = Path(__file__).resolve().parent.parent
INCIDENTS = sorted(p for p in (ROOT / "fixtures" / "incidents").iterdir() if p.is_dir())
ONE_INCIDENT = 1_500_000
TWENTY_FIVE_RUNS = 3_000_000
BLOCK = re.compile(r'<script type="application/json" class="gd-figure"[^>]*>(.*?)</script>', re.S)


def _bundle() -> dict[str, object]:
    return json.loads(Path(package_file("render", "vendor", "bundle.json")).read_text())


def _figures(html_text: str) -> list[dict[str, object]]:
    return [unpack_figure(body) for body in BLOCK.findall(html_text)]


@pytest.fixture(scope="module")
def fleet_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    """25 busy servers (generated real-shape logs of both engines, 1.5 MB each: every
    timeline binned), one page."""
    folder = tmp_path_factory.mktemp("fleet")
    for k in range(25):
        engine = "sglang-real" if k % 2 else "vllm-real"
        write_log(folder / f"pod-{k:02d}.log", GENERATORS[engine](1_500_000, seed=k))
    return render_html(analyze([str(folder)], generated_at="fixed"))


def test_vendored_bundle_is_the_recorded_file() -> None:
    bundle = _bundle()
    data = Path(package_file("render", "vendor", str(bundle["file"]))).read_bytes()
    assert hashlib.sha256(data).hexdigest() == bundle["sha256"]
    registered = set(re.findall(rb'moduleType:"trace",name:"([a-z0-9]+)"', data))
    assert {t.decode() for t in registered} == set(bundle["trace_types"])  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("incident", INCIDENTS, ids=lambda p: p.name)
def test_one_incident_page_fits_a_ticket(incident: Path) -> None:
    html_text = render_html(analyze([str(incident)], generated_at="fixed"))
    assert len(html_text.encode()) <= ONE_INCIDENT
    drawn = {str(t.get("type", "scatter")) for f in _figures(html_text) for t in f["data"]}  # type: ignore[attr-defined]
    assert drawn <= set(_bundle()["trace_types"])  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_busy_servers_page_fits_a_ticket(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    write_log(log, GENERATORS["sglang-real"](12_000_000, seed=5))
    html_text = render_html(analyze([str(log)], generated_at="fixed"))
    assert len(html_text.encode()) <= ONE_INCIDENT
    assert any(len(b) > 0 and '"gzip"' in b for b in BLOCK.findall(html_text)), "nothing packed"


@pytest.mark.slow
def test_twenty_five_runs_fit_a_ticket(fleet_page: str) -> None:
    assert len(fleet_page.encode()) <= TWENTY_FIVE_RUNS
    figures = _figures(fleet_page)
    assert len(figures) >= 25
    drawn = {str(t.get("type", "scatter")) for f in figures for t in f["data"]}  # type: ignore[attr-defined]
    assert drawn <= set(_bundle()["trace_types"])  # type: ignore[arg-type]


def test_packing_keeps_the_figure() -> None:
    small = json.dumps({"data": [{"type": "bar", "y": [1, 2]}], "layout": {}})
    assert figure_block(small) == small
    large = json.dumps(
        {
            "data": [
                {"type": "scatter", "x": [f"2026-01-01 00:00:{i % 60:02d}" for i in range(4000)]}
            ]
        }
    )
    assert len(large) > COMPRESS_ABOVE
    block = figure_block(large)
    assert len(block) < len(large) / 5 and "<" not in block
    assert unpack_figure(block) == json.loads(large)
    assert figure_block(large) == block  # deterministic: no time stamp in the packing


def _sections(html_text: str) -> list[tuple[bool, str]]:
    """Each run section: (quiet, its text up to the next section)."""
    parts = re.split(r'(?=<details class="run[ "])', html_text)[1:]
    return [(p.startswith('<details class="run quiet"'), p) for p in parts]


@pytest.mark.parametrize("quiet_pods", [24, 30])
def test_a_fleet_page_draws_charts_for_the_runs_with_something_to_show(
    tmp_path: Path, quiet_pods: int
) -> None:
    """Past FIGURE_RUNS runs a quiet run's section says why it has no chart and how to get
    them; a run with a finding keeps its charts; up to FIGURE_RUNS every run is drawn."""
    from bench.many_files import write_fleet
    from diag.render.html import FIGURE_RUNS

    write_fleet(tmp_path / "fleet", quiet_pods)
    squeeze = tmp_path / "fleet" / "pod-squeeze"
    squeeze.mkdir()
    for f in (ROOT / "fixtures" / "incidents" / "sglang-kv-squeeze").iterdir():
        if f.suffix != ".yaml":
            (squeeze / f.name).write_bytes(f.read_bytes())
    page = render_html(analyze([str(tmp_path / "fleet")], generated_at="fixed"))
    sections = _sections(page)
    assert len(sections) == quiet_pods + 1
    loud = [text for quiet, text in sections if not quiet]
    assert loud and all('class="plot"' in text or "gd-plot" in text for text in loud)
    many = len(sections) > FIGURE_RUNS
    for quiet, text in sections:
        if not quiet:
            assert "figures-left-out" not in text
            continue
        left_out = "figures-left-out" in text
        assert left_out == many
        if left_out:
            assert "graphdiag analyze " in text and "server.log" in text
            assert "data-target" not in text  # no chart's figure data after it either
    assert _figures(page)  # the loud run's charts are on the page


def test_a_fleet_page_draws_the_charts_of_the_worst_runs_only(tmp_path: Path) -> None:
    """Past FIGURE_RUNS runs with something to show, the page draws the charts of the first
    FIGURE_RUNS of its worst-first order; every other section says why it has none and how
    to get them, so a fleet's page stays one a browser opens."""
    from diag.render.html import FIGURE_RUNS

    squeeze = ROOT / "fixtures" / "incidents" / "sglang-kv-squeeze"
    failed = ROOT / "fixtures" / "incidents" / "sglang-serving-cuda-error"
    pods = [("failed", failed)] * 3 + [("squeeze", squeeze)] * (FIGURE_RUNS + 2)
    for i, (name, incident) in enumerate(pods):
        pod = tmp_path / "fleet" / f"pod-{i:03d}-{name}"
        pod.mkdir(parents=True)
        for f in incident.iterdir():
            if f.suffix != ".yaml":
                (pod / f.name).write_bytes(f.read_bytes())
    page = render_html(analyze([str(tmp_path / "fleet")], generated_at="fixed"))
    sections = _sections(page)
    assert len(sections) == len(pods) and not any(quiet for quiet, _ in sections)
    drawn = ["figures-left-out" not in text for _, text in sections]
    assert sum(drawn) == FIGURE_RUNS
    assert all(drawn[:3])  # the failed runs rank worst: drawn
    for is_drawn, (_, text) in zip(drawn, sections, strict=True):
        if not is_drawn:
            assert f"not among the {FIGURE_RUNS} runs ranked worst" in text
            assert "graphdiag analyze " in text and 'class="plot"' not in text
