"""What a reader sees in a rendered report, as facts of the page in Chromium (not pixels).

Each check takes a loaded playwright page and returns a list of problems (empty = pass),
so the same checks run in pytest (tests/test_html_browser.py) and by hand on any report:

    python -m tests.page_checks REPORT.html [--multi-run] [--expect-kv] [--shots DIR]

``--shots DIR`` also saves the page (every fold open) and each chart as PNG, at the
1400x900 viewport the checks use, for a human look.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from diag.render.axes import MIN_SPAN_S

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 900}
# Before anything is opened, a many-run page is its runs table (one row a run, each at most
# MAX_RUN_ROW_PX tall) and at most MAX_FOLDED_SCREENS screens besides: every fixture incident
# side by side (49 runs) is 2,265 px beside the table, real-3's 60 excerpts 2,012 px
MAX_FOLDED_SCREENS = 3
MAX_RUN_ROW_PX = 64

# every drawn chart, every visible cartesian axis of every subplot: its tick labels (>= 2
# non-empty, or one per category), the values of its ticks, its title's box against the
# subplot's own extent, the numbers of the data it carries; the div's band under the figure
AXES_JS = """() => Array.from(document.querySelectorAll('div.plot')).filter(d => d.querySelector('.main-svg')).map(div => {
  const box = div.getBoundingClientRect(), out = [];
  const full = div._fullLayout || {};
  const meta = (full.meta && full.meta.axis_min) || {};
  for (const name of Object.keys(full).filter(k => /^[xy]axis\\d*$/.test(k))) {
    const ax = full[name];
    if (!ax.visible) continue;
    const id = ax._id, letter = id[0];
    const labels = Array.from(div.querySelectorAll('g.' + id + 'tick text')).filter(t => t.textContent.trim());
    const title = div.querySelector('text.' + id + 'title');
    const outside = labels.filter(t => { const r = t.getBoundingClientRect();
        return r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1; });
    const want = ax.type === 'category' ? Math.max(1, (ax._categories || []).length) : 2;
    const texts = labels.map(t => t.textContent.trim());
    const ticks = ax.type === 'linear' ? (ax._vals || []).map(v => v.x).filter(v => typeof v === 'number') : [];
    const data = [];
    for (const tr of div._fullData || []) {
      if (tr.visible !== true || (tr[letter + 'axis'] || letter) !== id) continue;
      for (const v of (tr[letter] || [])) { if (typeof v === 'number' && isFinite(v)) data.push(v); }
    }
    let title_box = null;
    if (title && title.textContent.trim()) {
      const r = title.getBoundingClientRect();
      const lo = (letter === 'x' ? box.left : box.top) + ax._offset, hi = lo + ax._length;
      title_box = letter === 'x' ? [r.left, r.right, lo, hi] : [r.top, r.bottom, lo, hi];
    }
    out.push({axis: name, labels: labels.length, want: want, dup: texts.length - new Set(texts).size,
              title: title ? title.textContent.trim() : '', title_box: title_box, matches: ax.matches || '',
              outside: outside.map(t => t.textContent), ticks: ticks, type: ax.type,
              data_min: data.length ? Math.min(...data) : null, axis_min: meta[name] === undefined ? null : meta[name]});
  }
  const svg = div.querySelector('svg.main-svg');
  const series = (div._fullData || []).filter(t => t.visible === true && t.showlegend !== false).map(t => ({
      name: t.name, type: t.type, mode: t.mode || '', symbol: (t.marker && typeof t.marker.symbol === 'string') ? t.marker.symbol : '',
      dash: (t.line && t.line.dash) || '',
      color: (t.marker && typeof t.marker.color === 'string' && t.type !== 'scatter') ? t.marker.color
           : (t.line && typeof t.line.color === 'string' && (t.mode || '').includes('lines')) ? t.line.color
           : (t.marker && typeof t.marker.color === 'string') ? t.marker.color : null}));
  return {id: div.id, label: div.getAttribute('aria-label'), axes: out, series: series,
          band: svg ? Math.round(box.height - svg.getBoundingClientRect().height) : null};
})"""

#: a percentage axis (its title says %) shows ticks within 0-100 only; a band beyond 100
#: (capture memory's share of the KV pool) is drawn as a band, not as more axis
PERCENT = re.compile(r"%")


def _tick_problems(where: str, ax: dict[str, Any]) -> list[str]:
    ticks = ax["ticks"]
    out = []
    if ax["axis_min"] is not None and any(t < ax["axis_min"] - 1e-9 for t in ticks):
        low = [t for t in ticks if t < ax["axis_min"] - 1e-9]
        out.append(f"{where}: ticks at {low} below {ax['axis_min']}, a value it cannot take")
    elif ax["data_min"] is not None and ax["data_min"] >= 0 and any(t < -1e-9 for t in ticks):
        out.append(f"{where}: negative ticks {[t for t in ticks if t < 0]} on data >= 0")
    if PERCENT.search(ax["title"]) and any(t < -1e-9 or t > 100 + 1e-9 for t in ticks):
        out.append(f"{where}: percentage ticks beyond 0-100 % ({min(ticks)}..{max(ticks)})")
    return out


def _title_problems(where: str, ax: dict[str, Any]) -> list[str]:
    if not ax["title_box"]:
        return []
    a, b, lo, hi = ax["title_box"]
    if a < lo - 2 or b > hi + 2:
        return [
            f"{where}: title {ax['title']!r} overflows its subplot ({a:.0f}-{b:.0f} px, subplot {lo:.0f}-{hi:.0f})"
        ]
    return []


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
    """Every axis of every subplot: tick labels, a title inside the subplot, ticks only at
    values the axis can take, percentages within 0-100 %; every legend series a colour its
    neighbours of the same glyph do not share, also for colour-blind readers."""
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
            if not ax["title"] and not ax["matches"]:  # a shared x is titled at the bottom
                problems.append(f"{where}: no axis title")
            if ax["outside"]:
                problems.append(f"{where}: labels outside the chart box {ax['outside'][:3]}")
            problems += _tick_problems(where, ax) + _title_problems(where, ax)
        problems += palette_problems(f"{fig['label']} ({fig['id']})", fig["series"])
        if fig["band"] is not None and fig["band"] > 12:
            problems.append(f"{fig['label']} ({fig['id']}): {fig['band']} px band under the chart")
    return problems


# ------------------------------------------------------------------ colours
#: the least CIE76 distance two series of one glyph keep, in normal vision and simulated
#: protanopia / deuteranopia / tritanopia (Machado, Oliveira & Fernandes 2009, severity 1)
MIN_DELTA_E = 12.0
CVD = {
    "protanopia": (
        (0.152286, 1.052583, -0.204868),
        (0.114503, 0.786281, 0.099216),
        (-0.003882, -0.048116, 1.051998),
    ),
    "deuteranopia": (
        (0.367322, 0.860646, -0.227968),
        (0.280085, 0.672501, 0.047413),
        (-0.011820, 0.042940, 0.968881),
    ),
    "tritanopia": (
        (1.255528, -0.076749, -0.178779),
        (-0.078411, 0.930809, 0.147602),
        (0.004733, 0.691367, 0.303900),
    ),
}


def _linear(c: float) -> float:
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _rgb(color: str) -> tuple[float, float, float] | None:
    m = re.fullmatch(r"#([0-9a-fA-F]{6})", color.strip())
    if m:
        h = m.group(1)
        return tuple(_linear(int(h[i : i + 2], 16) / 255) for i in (0, 2, 4))  # type: ignore[return-value]
    m = re.fullmatch(r"rgba?\(\s*(\d+),\s*(\d+),\s*(\d+)(?:,\s*[\d.]+)?\s*\)", color.strip())
    if m:
        return tuple(_linear(int(v) / 255) for v in m.groups())  # type: ignore[return-value]
    return None


def _lab(rgb: tuple[float, float, float]) -> tuple[float, float, float]:
    r, g, b = rgb
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def _seen(rgb: tuple[float, float, float], vision: str) -> tuple[float, float, float]:
    if vision == "normal":
        return rgb
    m = CVD[vision]
    return tuple(min(1.0, max(0.0, sum(m[i][j] * rgb[j] for j in range(3)))) for i in range(3))  # type: ignore[return-value]


def delta_e(a: str, b: str, vision: str = "normal") -> float | None:
    ra, rb = _rgb(a), _rgb(b)
    if ra is None or rb is None:
        return None
    la, lb = _lab(_seen(ra, vision)), _lab(_seen(rb, vision))
    return float(sum((p - q) ** 2 for p, q in zip(la, lb, strict=True)) ** 0.5)


def palette_problems(where: str, series: list[dict[str, Any]]) -> list[str]:
    """Series drawn alike (same trace type, mode, marker symbol and dash) must differ in
    colour by :data:`MIN_DELTA_E` in every vision of :data:`CVD` and in normal vision."""
    out = []
    for i, a in enumerate(series):
        for b in series[i + 1 :]:
            if not a["color"] or not b["color"]:
                continue
            if (a["type"], a["mode"], a["symbol"], a["dash"]) != (
                b["type"],
                b["mode"],
                b["symbol"],
                b["dash"],
            ):
                continue
            for vision in ("normal", *CVD):
                d = delta_e(a["color"], b["color"], vision)
                if d is not None and d < MIN_DELTA_E:
                    out.append(
                        f"{where}: {a['name']!r} {a['color']} and {b['name']!r} {b['color']} "
                        f"differ by {d:.1f} (< {MIN_DELTA_E}) in {vision} vision"
                    )
                    break
    return out


# ------------------------------------------------------------------ names
#: characters after which a name may wrap (the <wbr> points of diag.render.html_page.breakable,
#: plus the spaces and hyphens where browsers break anyway)
BREAK_AFTER_CHARS = "/\\_#:-, "

NAMES_JS = """(sel) => { const out = [];
  for (const el of document.querySelectorAll(sel)) {
    if (el.offsetParent === null) continue;
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    let prevTop = null, prevChar = '', node;
    while ((node = walker.nextNode())) {
      const text = node.textContent;
      for (let i = 0; i < text.length; i++) {
        const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
        const rect = r.getClientRects()[0];
        if (!rect) continue;
        if (prevTop !== null && rect.top > prevTop + 2 && text[i].trim()) {
          out.push({text: el.textContent.slice(0, 120), before: prevChar, after: text[i]});
        }
        prevTop = rect.top; prevChar = text[i];
      }
    }
  }
  return out; }"""

#: where run names, paths and operator shapes are shown
NAME_SELECTORS = "td.name, details.run > summary .name, p.sources"


def check_names_wrap_at_separators(page: Any) -> list[str]:
    """A long name wraps only after a separator: never mid-word, never inside a number."""
    breaks = page.evaluate(NAMES_JS, NAME_SELECTORS)
    bad = [b for b in breaks if b["before"] not in BREAK_AFTER_CHARS]
    return [
        f"name broken mid-word ({b['before']!r}|{b['after']!r}): {b['text']!r}" for b in bad[:10]
    ]


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
    table = int(page.evaluate("document.getElementById('runs').getBoundingClientRect().height"))
    if height - table > MAX_FOLDED_SCREENS * VIEWPORT["height"]:
        problems.append(
            f"folded page is {height - table} px beside the runs table (> {MAX_FOLDED_SCREENS} screens)"
        )
    tallest = int(
        page.evaluate(
            "Math.max(0, ...Array.from(document.querySelectorAll('#runs table.runs > tbody > tr'))"
            ".map(r => r.getBoundingClientRect().height))"
        )
    )
    if tallest > MAX_RUN_ROW_PX:
        problems.append(f"a runs-table row is {tallest} px (> {MAX_RUN_ROW_PX})")
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


def check_run_labels_distinct(page: Any) -> list[str]:
    """Every run is named apart: the runs table and the run sections never show one name
    for two runs (23 rows all called ``server.log`` cannot be told apart)."""
    problems = []
    for where, sel in (
        ("runs table", "#runs table.runs td.name a"),
        ("run sections", "details.run > summary .name"),
    ):
        names = page.evaluate(
            "(sel) => Array.from(document.querySelectorAll(sel)).map(e => e.textContent.trim())",
            sel,
        )
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            problems.append(f"{where}: {len(dup)} names shared by several runs: {dup[:3]}")
    return problems


#: the toolbar's and the legend's boxes of every drawn chart (the toolbar is in the page
#: while hidden: it shows on hover, where it must not cover a legend entry)
MODEBAR_JS = """() => Array.from(document.querySelectorAll('div.plot')).filter(d => d.querySelector('.main-svg')).map(div => {
  const box = (el) => { if (!el) return null; const r = el.getBoundingClientRect();
      return r.width && r.height ? [r.left, r.top, r.right, r.bottom] : null; };
  return {label: div.getAttribute('aria-label'), modebar: box(div.querySelector('.modebar')),
          legend: box(div.querySelector('g.legend rect.bg') || div.querySelector('g.legend'))};
})"""


def check_modebar_clear_of_legend(page: Any) -> list[str]:
    """plotly's toolbar never covers the legend (it shows on hover, over whatever is there)."""
    problems = []
    for c in page.evaluate(MODEBAR_JS):
        m, g = c["modebar"], c["legend"]
        if not m or not g:
            continue
        w = min(m[2], g[2]) - max(m[0], g[0])
        h = min(m[3], g[3]) - max(m[1], g[1])
        if w > 1 and h > 1:
            problems.append(f"{c['label']}: the toolbar covers the legend ({w:.0f}x{h:.0f} px)")
    return problems


#: every linear axis of every drawn chart: its range, and the extent of what is drawn on it
#: (axes it is matched to included): series, stacked bars as stacked, lines and bands
#: (shapes), 0 where the axis counts from zero; a lone marker does not get to stretch it
RANGE_JS = """() => Array.from(document.querySelectorAll('div.plot')).filter(d => d.querySelector('.main-svg')).flatMap(div => {
  const full = div._fullLayout || {}, out = [];
  const names = Object.keys(full).filter(k => /^[xy]axis\\d*$/.test(k));
  for (const name of names) {
    const ax = full[name];
    if (!ax.visible || ax.type !== 'linear' || !ax.range) continue;
    const id = ax._id, letter = id[0];
    const group = new Set([id]);
    for (const other of names) {
      const o = full[other];
      if (o._id[0] === letter && (o.matches === id || ax.matches === o._id || (ax.matches && o.matches === ax.matches))) group.add(o._id);
    }
    let lo = Infinity, hi = -Infinity, n = 0;
    const put = (v) => { if (typeof v === 'number' && isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); n += 1; } };
    const stacks = {};
    for (const tr of div._fullData || []) {
      if (tr.visible !== true || !group.has(tr[letter + 'axis'] || letter)) continue;
      const vals = tr[letter] || [];
      const marker_only = tr.type === 'scatter' && !(tr.mode || '').includes('lines');
      if (marker_only && vals.length < 2) continue;
      const value_axis = tr.type === 'bar' && ((letter === 'x') === (tr.orientation === 'h'));
      if (value_axis) {
        put(0);
        const cats = tr[letter === 'x' ? 'y' : 'x'] || [];
        vals.forEach((v, i) => { if (full.barmode === 'stack') { const k = String(cats[i]); stacks[k] = (stacks[k] || 0) + (+v || 0); put(stacks[k]); } else put(v); });
      } else vals.forEach(put);
    }
    for (const sh of full.shapes || []) {
      if (!group.has(sh[letter + 'ref'])) continue;
      put(sh[letter + '0']); put(sh[letter + '1']);
    }
    if (ax.rangemode === 'tozero') put(0);
    if (!n) continue;
    out.push({label: div.getAttribute('aria-label'), axis: name, title: (ax.title && ax.title.text) || '',
              range: [Math.min(...ax.range), Math.max(...ax.range)], data: [lo, hi]});
  }
  return out;
})"""


def check_axes_fit_data(page: Any) -> list[str]:
    """An axis spans the data it shows: more than half of it empty on one side (the K axis
    running to 52 for sets of 2-7 sizes) is a problem. Percent axes keep 0-100."""
    problems = []
    for a in page.evaluate(RANGE_JS):
        if PERCENT.search(a["title"]):
            continue
        (r0, r1), (d0, d1) = a["range"], a["data"]
        span = r1 - r0
        if span <= 0:
            continue
        if a["title"].startswith("time") and d1 - d0 < MIN_SPAN_S and span <= 1.1 * MIN_SPAN_S:
            continue  # the axes' own minimum span (render/axes.py MIN_SPAN_S, seconds)
        empty = max(r1 - d1, d0 - r0) / span
        if empty > 0.5 and span > 2 * max(d1 - d0, 1e-9):
            problems.append(
                f"{a['label']} {a['axis']} ({a['title']}): range {r0:g}-{r1:g} for data "
                f"{d0:g}-{d1:g} ({empty:.0%} empty)"
            )
    return problems


CUT = re.compile(r"(\.\.\.|…)\s*$")


def check_cut_names_apart(page: Any) -> list[str]:
    """Names cut short (by the log's own table or the page) never read the same in one
    table: three rows of ``sm90_xmma_gemm_...`` cannot be told apart."""
    tables = page.evaluate("""() => Array.from(document.querySelectorAll('table')).map(t =>
        Array.from(t.querySelectorAll('td.name')).map(td => td.textContent.trim()))""")
    problems = []
    for names in tables:
        cut = [n for n in names if CUT.search(n)]
        dup = sorted({n for n in cut if names.count(n) > 1})
        if dup:
            problems.append(f"cut names alike in one table: {dup[:3]}")
    return problems


def run_checks(browser: Any, path: Path, multi_run: bool, expect_kv: bool) -> list[str]:
    page, errors = open_report(browser, path)
    try:
        problems: list[str] = []
        if multi_run:
            problems += check_runs_table(page)
            problems += check_link_opens_folded_run(page)
        open_everything(page)
        problems += check_axes(page) + check_tiles(page) + check_no_unknowns(page)
        problems += check_run_labels_distinct(page) + check_modebar_clear_of_legend(page)
        problems += check_axes_fit_data(page) + check_cut_names_apart(page)
        problems += check_names_wrap_at_separators(page)
        problems += check_small_data_is_a_table(page)
        if expect_kv:
            problems += check_kv_timeline(page)
        return [f"console: {e}" for e in errors] + problems
    finally:
        page.close()


def screenshots(browser: Any, path: Path, out: Path) -> list[Path]:
    """The whole page with every fold open, then each chart on its own."""
    out.mkdir(parents=True, exist_ok=True)
    page, _ = open_report(browser, path)
    try:
        open_everything(page)
        shots = [out / f"{path.stem}.page.png"]
        page.screenshot(path=str(shots[0]), full_page=True)
        for i, div in enumerate(page.query_selector_all("div.plot")):
            kind = div.get_attribute("data-kind") or "plot"
            shot = out / f"{path.stem}.{i + 1:02d}-{kind}.png"
            div.scroll_into_view_if_needed()
            div.screenshot(path=str(shot))
            shots.append(shot)
        return shots
    finally:
        page.close()


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    report = Path(argv[0])
    shots = Path(argv[argv.index("--shots") + 1]) if "--shots" in argv else None
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            found = run_checks(browser, report, "--multi-run" in argv, "--expect-kv" in argv)
            if shots is not None:
                print("\n".join(str(p) for p in screenshots(browser, report, shots)))
        finally:
            browser.close()
    print("\n".join(found) or "all checks pass")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
