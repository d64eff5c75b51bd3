"""The HTML report in a real headless Chromium: plots draw under the CSP with no console
error, findings are visible, nothing is fetched but the file, and log markup stays inert.

Needs the Python package ``playwright`` and Debian's ``chromium`` (/usr/bin/chromium);
``playwright install`` (which downloads a browser) is never used.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from diag.cli import main
from tests.test_html_report import XSS_FILE, sglang_failed_capture_log, sglang_serving_log

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.browser

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (pip) not installed")
if not Path(CHROMIUM).exists():  # pragma: no cover - depends on the machine
    pytest.skip(f"{CHROMIUM} missing (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


def _analyze(inputs: list[Path], out: Path) -> Path:
    result = CliRunner().invoke(
        main, ["analyze", *map(str, inputs), "-o", str(out), "--fail-on", "never", "-q"]
    )
    assert result.exit_code == 0, result.output
    pages = list(out.glob("*.graphdiag.html"))
    assert len(pages) == 1
    return pages[0]


class Watched:
    """A page with its console errors, uncaught exceptions and requests recorded."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.as_uri())
        self.page.wait_for_load_state("load")
        self.page.wait_for_function(  # folded runs are drawn when opened
            "Array.from(document.querySelectorAll('div.plot'))"
            ".every(d => d.querySelector('.main-svg') || d.offsetParent === null)",
            timeout=15_000,
        )
        self.page.wait_for_timeout(300)


@pytest.mark.slow
def test_report_renders_offline_in_chromium(browser: Any, tmp_path: Path) -> None:
    log = tmp_path / "sglang-serving.log"
    log.write_text(sglang_serving_log(), encoding="utf-8")
    html_path = _analyze([log], tmp_path / "out")
    w = Watched(browser, html_path)
    page = w.page

    assert w.errors == []
    assert w.requests == [html_path.as_uri()]
    plots = page.query_selector_all("div.plot")
    assert len(plots) >= 4
    for div in plots:
        assert div.query_selector(".main-svg") is not None, div.get_attribute("id")
        assert "needs JavaScript" not in div.inner_text()
    findings = page.locator("#findings .finding")
    assert findings.count() >= 2
    assert findings.first.is_visible()
    assert page.locator("#findings", has_text="GD110").is_visible()
    assert page.locator("#verdict").is_visible()
    assert page.locator("#record-yaml").is_visible()
    assert page.locator("button.copy").is_visible()  # un-hidden by the script
    assert page.locator(".eager-summary", has_text="ran eagerly").is_visible()

    # a look for a human, in the test's own temporary folder (never the source tree)
    page.screenshot(path=str(tmp_path / "html-browser.png"), full_page=True)
    page.close()


@pytest.mark.slow
def test_packed_figures_draw_in_chromium(browser: Any, tmp_path: Path) -> None:
    """A busy server's binned timelines are packed (gzip, base64) and inflated by the page's
    script with the browser's own DecompressionStream: they draw, offline, under the CSP."""
    from bench.gen_logs import GENERATORS, write_log

    log = tmp_path / "busy.log"
    write_log(log, GENERATORS["sglang-real"](3_000_000, seed=2))
    html_path = _analyze([log], tmp_path / "out")
    assert '{"gzip": "' in html_path.read_text(encoding="utf-8")
    w = Watched(browser, html_path)
    assert w.errors == []
    assert w.requests == [html_path.as_uri()]
    plots = w.page.query_selector_all("div.plot")
    assert plots and all(d.query_selector(".main-svg") is not None for d in plots)
    assert "could not be drawn" not in w.page.inner_text("body")
    # the timeline's traces hold the binned samples, not an empty figure
    points = w.page.evaluate(
        "Math.max(...Array.from(document.querySelectorAll('div.plot'))"
        ".map(d => (d._fullData || []).reduce((n, t) => n + ((t.y && t.y.length) || 0), 0)))"
    )
    assert points > 1000


@pytest.mark.slow
def test_log_markup_is_inert_in_chromium(browser: Any, tmp_path: Path) -> None:
    folder = tmp_path / "incident"
    folder.mkdir()
    (folder / XSS_FILE).write_text(sglang_failed_capture_log(), encoding="utf-8")
    html_path = _analyze([folder], tmp_path / "out")
    w = Watched(browser, html_path)
    page = w.page

    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert w.errors == []
    assert w.requests == [html_path.as_uri()]
    assert page.locator("#findings", has_text="window.__pwned=1</script>").first.is_visible()
    assert page.locator("#inputs", has_text=XSS_FILE).is_visible()

    # and the CSP would have stopped an injected inline script had escaping failed
    blocked = page.evaluate("""() => new Promise(resolve => {
        document.addEventListener('securitypolicyviolation', ev => resolve(ev.violatedDirective));
        const s = document.createElement('script');
        s.textContent = 'window.__pwned = 4';
        document.body.appendChild(s);
        setTimeout(() => resolve(null), 1000);
    })""")
    assert blocked is not None and blocked.startswith("script-src")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    page.close()


# ------------------------------------------------------------------ what a reader sees
INCIDENTS = ROOT / "fixtures" / "incidents"


def _page_problems(browser: Any, html_path: Path, multi_run: bool, expect_kv: bool) -> list[str]:
    from tests.page_checks import run_checks

    return run_checks(browser, html_path, multi_run=multi_run, expect_kv=expect_kv)


@pytest.mark.slow
def test_one_incident_reads_at_a_glance(browser: Any, tmp_path: Path) -> None:
    """SGLang KV squeeze: tick labels and titles on every chart, the KV and queue timeline
    drawn (60 decode lines) with the capture band, tiles uncut, no unknown marker."""
    html_path = _analyze([INCIDENTS / "sglang-kv-squeeze"], tmp_path / "out")
    assert _page_problems(browser, html_path, multi_run=False, expect_kv=True) == []
    w = Watched(browser, html_path)
    kv = w.page.locator('div.plot[data-kind="kv-timeline"]')
    assert kv.count() == 1
    assert "capture memory = 30.0% of the KV pool" in kv.inner_text()
    assert "retractions" in kv.inner_text()
    w.page.close()


@pytest.mark.slow
def test_few_stats_lines_are_a_table(browser: Any, tmp_path: Path) -> None:
    """vLLM KV squeeze has 5 stats lines: the KV timeline is a small table, time since start
    (the log prints no year), never a chart of 5 dots or a date in 2000."""
    html_path = _analyze([INCIDENTS / "vllm-kv-squeeze"], tmp_path / "out")
    assert _page_problems(browser, html_path, multi_run=False, expect_kv=True) == []
    w = Watched(browser, html_path)
    table = w.page.locator('figure.small-table[data-kind="kv-timeline"]')
    assert table.count() == 1
    assert "+40.0 s" in table.inner_text() and "KV usage" in table.inner_text()
    assert "2000" not in w.page.locator("main").inner_text()
    w.page.close()


def _many_runs_folder(root: Path) -> Path:
    """A folder of every fixture incident's logs side by side (the project's own fixtures,
    renamed so each file is its own run), as an operator's log dump would be."""
    import shutil

    folder = root / "many"
    folder.mkdir()
    for incident in sorted(p for p in INCIDENTS.iterdir() if p.is_dir()):
        for log in sorted(incident.glob("*.log")):
            shutil.copy(log, folder / f"{incident.name}-{log.name}")
    return folder


@pytest.mark.slow
def test_many_runs_fit_a_few_screens(browser: Any, tmp_path: Path) -> None:
    html_path = _analyze([_many_runs_folder(tmp_path)], tmp_path / "out")
    assert _page_problems(browser, html_path, multi_run=True, expect_kv=True) == []
    w = Watched(browser, html_path)
    rows = w.page.locator("#runs table.runs > tbody > tr:not(.quiet-row)")
    assert rows.count() >= 3
    assert w.page.locator("#quiet-runs").count() == 1  # runs with nothing to report folded
    w.page.close()


@pytest.mark.slow
@pytest.mark.parametrize("incident", sorted(p.name for p in INCIDENTS.iterdir() if p.is_dir()))
def test_page_checks_pass_on_every_fixture_incident(
    browser: Any, tmp_path: Path, incident: str
) -> None:
    html_path = _analyze([INCIDENTS / incident], tmp_path / "out")
    assert _page_problems(browser, html_path, multi_run=False, expect_kv=False) == []


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.parametrize("corpus", ["real", "real-2", "real-3"])
def test_page_checks_pass_on_each_real_corpus_folder(
    browser: Any, tmp_path: Path, corpus: str
) -> None:
    """A folder of 35-62 real excerpts: a many-runs page; every run section's charts,
    names and tiles checked with every fold open."""
    from tests.conftest import need_corpus

    folder = need_corpus(corpus)
    html_path = _analyze([folder], tmp_path / "out")
    assert _page_problems(browser, html_path, multi_run=True, expect_kv=False) == []


@pytest.mark.slow
def test_fleet_section_reads_in_chromium(browser: Any, tmp_path: Path) -> None:
    """A generated fleet (issue 27 point 3): the page checks pass with the fleet section, and
    its table shows one row per group with the failing pod linked to its run section."""
    from gen import fleet as fleet_gen

    built = fleet_gen.build()
    html_path = _analyze([built.write(tmp_path / "pods")], tmp_path / "out")
    assert _page_problems(browser, html_path, multi_run=True, expect_kv=False) == []
    w = Watched(browser, html_path)
    rows = w.page.locator("#fleet table.fleet > tbody > tr")
    assert rows.count() == len(built.groups)
    link = w.page.locator("#fleet a", has_text=built.groups["sglang-32"].failing[0])
    assert link.count() == 1
    target = link.get_attribute("href")
    assert target is not None and w.page.locator(target).count() == 1
    assert w.errors == []
    w.page.close()


@pytest.mark.slow
def test_multi_run_page_of_incidents_reads_apart(browser: Any, tmp_path: Path) -> None:
    """Every fixture incident in its own folder, each log called server.log (issue 38): the
    runs are named apart, plotly's toolbar never covers a legend, every axis fits the data
    it shows, and no two cut names read alike."""
    from tests import page_checks as pc

    html_path = _analyze([INCIDENTS], tmp_path / "out")
    page, errors = pc.open_report(browser, html_path)
    try:
        pc.open_everything(page)
        problems = (
            pc.check_run_labels_distinct(page)
            + pc.check_modebar_clear_of_legend(page)
            + pc.check_axes_fit_data(page)
            + pc.check_cut_names_apart(page)
            + pc.check_axes(page)
        )
        assert errors == [] and problems == []
        names = page.evaluate(
            "() => Array.from(document.querySelectorAll('#runs table.runs td.name a'))"
            ".map(a => a.textContent.trim())"
        )
        assert len(names) == len({p.name for p in INCIDENTS.iterdir() if p.is_dir()})
        # every run named apart: the shortest path suffix no other file shares, and its number
        assert len(set(names)) == len(names) and all("#" in n for n in names), names
    finally:
        page.close()
