"""What a reader sees in a rendered report, as facts of the page in Chromium (not pixels).

Each check takes a loaded playwright page and returns a list of problems (empty = pass),
so the same checks run in pytest (tests/test_html_browser.py) and by hand on any report:

    python -m tests.page_checks REPORT.html [--multi-run] [--expect-kv]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}
MAX_FOLDED_SCREENS = 4

# every drawn chart: each visible cartesian axis with tick labels has >= 2 non-empty ones
# and a title; every label box lies inside the chart's div; the div is not taller than
# the figure (no empty band)
AXES_JS = """() => Array.from(document.querySelectorAll('div.plot')).filter(d => d.querySelector('.main-svg')).map(div => {
  const box = div.getBoundingClientRect(), out = [];
  const full = div._fullLayout || {};
  for (const name of Object.keys(full).filter(k => /^[xy]axis\\d*$/.test(k))) {
    const ax = full[name];
    if (!ax.visible || ax.showticklabels === false) continue;
    const id = ax._id;
    const labels = Array.from(div.querySelectorAll('g.' + id + 'tick text')).filter(t => t.textContent.trim());
    const title = div.querySelector('text.' + id + 'title');
    const outside = labels.filter(t => { const r = t.getBoundingClientRect();
        return r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1; });
    const want = ax.type === 'category' ? Math.max(1, (ax._categories || []).length) : 2;
    const texts = labels.map(t => t.textContent.trim());
    out.push({axis: name, labels: labels.length, want: want, dup: texts.length - new Set(texts).size, title: title ? title.textContent.trim() : '',
              outside: outside.map(t => t.textContent)});
  }
  const svg = div.querySelector('svg.main-svg');
  return {id: div.id, label: div.getAttribute('aria-label'), axes: out,
          band: svg ? Math.round(box.height - svg.getBoundingClientRect().height) : null};
})"""


def open_report(browser: Any, path: Path) -> tuple[Any, list[str]]:
    errors: list[str] = []
    page = browser.new_page(viewport=VIEWPORT)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(300)
    return page, errors


def open_everything(page: Any) -> None:
    """Open every fold (figures in folded runs are drawn on open) and wait for the plots."""
    page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
    page.wait_for_function(
        "Array.from(document.querySelectorAll('div.plot')).every(d => d.querySelector('.main-svg'))",
        timeout=60_000,
    )
    page.wait_for_timeout(300)


def chart_count(page: Any) -> int:
    return int(page.evaluate("document.querySelectorAll('div.plot .main-svg').length"))


def check_axes(page: Any) -> list[str]:
    problems = []
    for fig in page.evaluate(AXES_JS):
        if not fig["axes"]:
            problems.append(f"{fig['label']} ({fig['id']}): no axis with tick labels")
        for ax in fig["axes"]:
            where = f"{fig['label']} ({fig['id']}) {ax['axis']}"
            if ax["labels"] < ax["want"]:
                problems.append(f"{where}: {ax['labels']} tick labels, {ax['want']} wanted")
            if ax["dup"]:
                problems.append(f"{where}: repeated tick labels")
            if not ax["title"]:
                problems.append(f"{where}: no axis title")
            if ax["outside"]:
                problems.append(f"{where}: labels outside the chart box {ax['outside'][:3]}")
        if fig["band"] is not None and fig["band"] > 12:
            problems.append(f"{fig['label']} ({fig['id']}): {fig['band']} px band under the chart")
    return problems


UNKNOWN = re.compile(r"(?<![\w/])(n/a|None|NaN|nan|undefined)(?![\w/])|\{[a-z_]+(:[^}]*)?\}")

#: text the page shows but render does not write: rule messages and remedies (the rule
#: pack's, issue 13), raw log lines (evidence) and the YAML record (null is data there)
NOT_RENDER_TEXT = ".rule-text, pre.evidence, #record-yaml, script, style"


def render_text_of(page: Any) -> str:
    """The visible text render itself produced (tiles, tables, run lines, captions)."""
    return str(
        page.evaluate(
            """(skip) => { const c = document.body.cloneNode(true);
            c.querySelectorAll(skip).forEach(e => e.remove());
            document.body.appendChild(c); c.style.position = 'absolute';
            const t = c.innerText; c.remove(); return t; }""",
            NOT_RENDER_TEXT,
        )
    )


def check_no_unknowns(page: Any) -> list[str]:
    """No 'n/a', 'None', 'NaN' or an unfilled {placeholder} in what render wrote."""
    text = render_text_of(page)
    hits = [text[max(0, m.start() - 60) : m.end() + 20] for m in UNKNOWN.finditer(text)]
    return [f"visible unknown marker: {h!r}" for h in hits[:10]]


def check_tiles(page: Any) -> list[str]:
    """Tiles never cut their text: no tile's content is wider than the tile."""
    cut = page.evaluate("""() => Array.from(document.querySelectorAll('.card')).filter(c =>
        c.offsetParent !== null && Array.from(c.querySelectorAll('.v, .sub')).some(v => v.scrollWidth > v.clientWidth + 1)
    ).map(c => c.innerText.replace(/\\s+/g, ' '))""")
    return [f"tile cuts its text: {t}" for t in cut]


def check_small_data_is_a_table(page: Any) -> list[str]:
    """A chart whose scatter/bar traces all have fewer than 20 points should be a table
    (the memory budget is a composition, not points: exempt)."""
    few = page.evaluate("""() => Array.from(document.querySelectorAll('div.plot')).filter(d => d.querySelector('.main-svg') &&
        d.getAttribute('data-kind') !== 'memory-budget' &&
        (d.data || []).filter(t => t.type === 'scatter' || t.type === 'bar').every(t => (t.x || []).length < 20)
    ).map(d => d.getAttribute('aria-label'))""")
    return [f"chart with < 20 points: {f}" for f in few]


def check_runs_table(page: Any) -> list[str]:
    """Several runs: the runs table comes right after the verdict, links every run once,
    every link has a target, and the page before opening anything is a few screens."""
    problems = []
    n_runs = page.evaluate("document.querySelectorAll('details.run').length")
    first = page.evaluate(
        "() => { const s = document.querySelector('main section:not(#verdict)'); return s && s.id; }"
    )
    if first != "runs":
        problems.append(f"first section after the verdict is {first!r}, not the runs table")
    links = page.evaluate(
        "() => Array.from(document.querySelectorAll('#runs a[href^=\"#run-\"]')).map(a => a.getAttribute('href'))"
    )
    if len(set(links)) != n_runs or len(links) != n_runs:
        problems.append(f"runs table links {len(links)} rows / {len(set(links))} runs of {n_runs}")
    missing = page.evaluate("(ls) => ls.filter(h => !document.getElementById(h.slice(1)))", links)
    problems += [f"runs table link {h} has no target" for h in missing]
    height = int(page.evaluate("document.documentElement.scrollHeight"))
    if height > MAX_FOLDED_SCREENS * VIEWPORT["height"]:
        problems.append(f"folded page is {height} px (> {MAX_FOLDED_SCREENS} screens)")
    return problems


def check_link_opens_folded_run(page: Any) -> list[str]:
    href = page.evaluate(
        "() => { const a = document.querySelector('#runs a[href^=\"#run-\"]'); return a && a.getAttribute('href'); }"
    )
    if not href:
        return ["no run link in the runs table"]
    page.click(f'#runs a[href="{href}"]')
    page.wait_for_timeout(300)
    ok = page.evaluate(
        "(id) => { const d = document.getElementById(id); let p = d; while (p) { if (p.tagName === 'DETAILS' && !p.open) return false; p = p.parentElement; } return !!d; }",
        href[1:],
    )
    return [] if ok else [f"clicking {href} left the run folded"]


def check_kv_timeline(page: Any) -> list[str]:
    """Where stats lines exist: a KV timeline (a chart with a KV axis, or its small table)."""
    found = page.evaluate("""() => Array.from(document.querySelectorAll('[data-kind="kv-timeline"]')).map(el =>
        el.tagName === 'DIV' ? Array.from(el.querySelectorAll('text[class$="title"]')).map(t => t.textContent).join('|')
                             : el.innerText.slice(0, 300))""")
    if not found:
        return ["no KV / queue timeline"]
    return [] if any("KV usage" in f for f in found) else [f"KV timeline without KV usage: {found}"]


def run_checks(browser: Any, path: Path, multi_run: bool, expect_kv: bool) -> list[str]:
    page, errors = open_report(browser, path)
    try:
        problems: list[str] = []
        if multi_run:
            problems += check_runs_table(page)
            problems += check_link_opens_folded_run(page)
        open_everything(page)
        problems += check_axes(page) + check_tiles(page) + check_no_unknowns(page)
        problems += check_small_data_is_a_table(page)
        if expect_kv:
            problems += check_kv_timeline(page)
        return [f"console: {e}" for e in errors] + problems
    finally:
        page.close()


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    report = Path(argv[0])
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            found = run_checks(browser, report, "--multi-run" in argv, "--expect-kv" in argv)
        finally:
            browser.close()
    print("\n".join(found) or "all checks pass")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
