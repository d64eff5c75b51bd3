"""The HTML report: content and order, offline and CSP, escaping of log text, and size on
huge incidents. The browser-side checks are in test_html_browser.py."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import random
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from diag.api import analyze
from diag.facts.run_record import BatchCounts
from diag.facts.throughput import decode_speeds
from diag.model import PoolSummary, Snapshot, SnapshotSummary
from diag.render import memory_plots, plots
from diag.render.html import render_html
from diag.render.html_page import json_for_script, plotly_js, unpack_figure
from diag.render.serialize import to_yaml
from diag.report import Report

MAX_BYTES = 3 * 2**20  # the page of one incident is at most 1.5 MB: tests/test_report_size.py
#: rows of the synthetic huge batches frame; 10 M is the issue's figure (~10 s here)
BIG_ROWS = int(os.environ.get("GRAPHDIAG_BIG_ROWS", "10000000"))


# ------------------------------------------------------------------ inputs
def sglang_serving_log(n_decode: int = 60, ceiling: int = 32, seed: int = 7) -> str:
    """A small but realistic SGLang start-up and serving log.

    server_args, weights, KV pool, capture begin / bucket list / end with memory, then
    decode batches that grow past the ceiling (``cuda graph: False`` there) with
    periodic prefills and KV retractions at the top.
    """
    rnd = random.Random(seed)
    lines: list[str] = []
    clock = [0]

    def ts(tag: str = "TP0") -> str:
        clock[0] += 1
        s = clock[0]
        return f"[2025-09-11 10:{24 + s // 60:02d}:{s % 60:02d} {tag}]"

    all_sizes = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]
    sizes = [s for s in all_sizes if s <= ceiling]
    lines += [
        f"{ts()} server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tp_size=1, "
        f"mem_fraction_static=0.88, max_running_requests=256, cuda_graph_max_bs={ceiling}, "
        "disable_cuda_graph=False, disable_cuda_graph_padding=False, enable_torch_compile=False, "
        "attention_backend='flashinfer')",
        f"{ts()} Init torch distributed begin.",
        f"{ts()} Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.72 GB, "
        "mem usage=14.99 GB.",
        f"{ts()} KV Cache is allocated. #tokens: 413696, K size: 25.25 GB, V size: 25.25 GB",
        f"{ts()} Memory pool end. avail mem=12.88 GB",
        f"{ts()} Capture cuda graph begin. This can take up to several minutes. avail mem=12.70 GB",
        f"{ts()} Capture cuda graph bs {sizes}",
        f"{ts()} Capture cuda graph end. Time elapsed: 41.37 s. mem usage=3.42 GB. avail mem=9.28 GB.",
        f"{ts()} max_total_num_tokens=413696, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=256, context_len=131072, available_gpu_mem=9.28 GB",
        f"{ts()} The server is fired up and ready to roll!",
    ]
    running = 4
    for i in range(n_decode):
        if i % 10 == 0:
            lines.append(
                f"{ts()} Prefill batch. #new-seq: 8, #new-token: 4096, #cached-token: 0, "
                f"token usage: 0.40, #running-req: {running}, #queue-req: 3,"
            )
        running = max(1, min(90, running + rnd.randint(-6, 12)))
        graph = running <= ceiling
        tput = running * (42.0 if graph else 27.0) * rnd.uniform(0.9, 1.1)
        lines.append(
            f"{ts()} Decode batch. #running-req: {running}, #token: {running * 900}, "
            f"token usage: {min(0.99, running / 95):.2f}, cuda graph: {graph}, "
            f"gen throughput (token/s): {tput:.2f}, #queue-req: {max(0, running - 60)},"
        )
        if running > 80:
            lines.append(
                f"{ts()} KV cache pool is full. Retract requests. #retracted_reqs: 2, "
                "#new_tokens_gained: 1400, #new_token_ratio: 0.3000 -> 0.4000"
            )
    return "\n".join(lines) + "\n"


XSS_SCRIPT = "<script>window.__pwned=1</script>"
XSS_IMG = '"><img src=x onerror="window.__pwned=2">'
XSS_FILE = 'sglang-"><img src=x onerror=window.__pwned=3><script>x.log'


def sglang_failed_capture_log() -> str:
    """A start-up whose capture fails with an exception message carrying markup."""
    return (
        "\n".join(
            [
                "[2025-09-11 10:24:01] server_args=ServerArgs(model_path='<script>alert(3)</script>', tp_size=1, "
                "mem_fraction_static=0.88, cuda_graph_max_bs=32, disable_cuda_graph=False)",
                "[2025-09-11 10:24:03 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                "avail mem=63.72 GB, mem usage=14.99 GB.",
                "[2025-09-11 10:24:04 TP0] KV Cache is allocated. #tokens: 413696, K size: 25.25 GB, V size: 25.25 GB",
                "[2025-09-11 10:24:05 TP0] Capture cuda graph begin. This can take up to several minutes. "
                "avail mem=12.70 GB",
                "[2025-09-11 10:24:06 TP0] Scheduler hit an exception: Traceback (most recent call last):",
                '  File "/sgl/python/sglang/srt/model_executor/cuda_graph_runner.py", line 239, in __init__',
                "    raise Exception(",
                f"Exception: Capture cuda graph failed: {XSS_SCRIPT} {XSS_IMG} CUDA out of memory. "
                "Tried to allocate 2.00 GiB",
                "Possible solutions:",
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
                "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
                "3. disable torch compile by not using --enable-torch-compile",
                "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
                # a decode line still tagged with markup in the rank-free prefix area
                f"[2025-09-11 10:24:07] Decode batch. #running-req: 3, #token: 90, token usage: 0.01, "
                f"cuda graph: False, gen throughput (token/s): 55.00, #queue-req: 0, {XSS_SCRIPT}",
            ]
        )
        + "\n"
    )


@pytest.fixture(scope="module")
def serving_report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    path = tmp_path_factory.mktemp("serve") / "serve.log"
    path.write_text(sglang_serving_log(), encoding="utf-8")
    return analyze([str(path)], generated_at="2025-01-01T00:00:00Z")


@pytest.fixture(scope="module")
def serving_html(serving_report: Report) -> str:
    return render_html(serving_report)


# ------------------------------------------------------------------ HTML inspection helpers
class Tags(HTMLParser):
    """Every start tag with its attributes, the text outside <script>, and script bodies."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._in_script: dict[str, str | None] | None = None
        self._buf: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._in_script = dict(attrs) | {"__tag": tag}
            self._buf = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._in_script is not None:
            if tag == "script":
                self.scripts.append((self._in_script, "".join(self._buf)))
            self._in_script = None

    def handle_data(self, data: str) -> None:
        if self._in_script is not None:
            self._buf.append(data)
        else:
            self.text.append(data)


def parse(html_text: str) -> Tags:
    p = Tags()
    p.feed(html_text)
    p.close()
    return p


def visible_text(html_text: str) -> str:
    return re.sub(r"\s+", " ", "".join(parse(html_text).text))


# ------------------------------------------------------------------ content
def test_sections_in_order(serving_html: str) -> None:
    order = ['id="verdict"', 'id="findings"', 'id="record"', 'id="run-1"', 'id="inputs"']
    positions = [serving_html.index(marker) for marker in order]
    assert positions == sorted(positions)
    run = serving_html[serving_html.index('id="run-1"') : serving_html.index('id="inputs"')]
    kinds = ["kv-timeline", "batch-histogram", "batch-timeline", "throughput", "memory-budget"]
    at = [run.index(f'data-kind="{kind}"') for kind in kinds]
    assert at == sorted(at)  # the KV and queue timeline first, as on a serving dashboard
    assert '<figure class="small-table" data-kind="throughput">' in run  # 2 rows: a table
    assert "Capture time: 41.37 s" in run  # one rank: a sentence, not a bar


def test_essentials_read_without_javascript(serving_report: Report, serving_html: str) -> None:
    text = visible_text(serving_html)
    assert "3 findings" in text or "findings:" in text
    for run in serving_report.runs:
        assert run.label in text
        for f in run.findings:
            assert f.code in text and f.name in text
            assert re.sub(r"\s+", " ", f.message) in text
            for r in f.remediation:
                assert re.sub(r"\s+", " ", r) in text
            for ev in f.evidence[:3]:
                assert re.sub(r"\s+", " ", ev.text).strip() in text
    assert "GD110" in text and "ran eagerly" in text and "above the capture ceiling" in text
    assert "not in the logs" not in text  # every plot of this run has data


def test_record_block_is_the_ticket_record(serving_report: Report, serving_html: str) -> None:
    m = re.search(r'<pre id="record-yaml">(.*?)</pre>', serving_html, re.S)
    assert m
    import html as html_mod

    shown = yaml.safe_load(html_mod.unescape(m.group(1)))
    assert shown == yaml.safe_load(to_yaml(serving_report))
    # checked against the JSON report, not against the function that rendered the block
    doc = json.loads(json.dumps(serving_report.to_dict()))
    assert shown["schema"] == "graphdiag.ticket/1"
    assert [r["run"] for r in shown["runs"]] == [r["label"] for r in doc["runs"]]
    for ticket, run in zip(shown["runs"], doc["runs"], strict=True):
        assert ticket["backend"] == run["backend"]
        assert ticket["engine_version"] == run["engine_version"]
        assert {k: ticket[k] for k in run["record"]} == run["record"]
        assert ticket["findings"] == [
            f"{f['code']} {f['name']} ({f['severity']})" for f in run["findings"]
        ]
    assert 'data-copy="record-yaml"' in serving_html
    assert "graph_capture_sizes: [1, 2, 4, 8, 12, 16, 24, 32]" in serving_html


def test_every_plot_has_its_data(serving_html: str) -> None:
    p = parse(serving_html)
    divs = [a["id"] for t, a in p.tags if t == "div" and "plot" in (a.get("class") or "").split()]
    blocks = [(a, body) for a, body in p.scripts if a.get("type") == "application/json"]
    assert len(divs) >= 4
    assert [a["data-target"] for a, _ in blocks] == divs
    for _, body in blocks:
        spec = unpack_figure(body)
        assert spec["data"], "an empty figure was embedded"


def test_missing_data_is_a_note_not_an_empty_plot(tmp_path: Path) -> None:
    log = tmp_path / "decode-only.log"
    log.write_text(
        "\n".join(
            f"[2026-09-13 16:06:{i:02d}] Decode batch, #running-req: {60 + i % 7}, #token: 81316, token usage: 0.93, "
            f"cuda graph: False, gen throughput (token/s): 2663.43, #queue-req: 9"
            for i in range(20)
        )
        + "\n"
    )
    html_text = render_html(analyze([str(log)]))
    text = visible_text(html_text)
    assert "Memory budget and capture time: not in the logs" in text
    assert 'aria-label="GPU memory budget"' not in html_text
    assert 'aria-label="Decode batch size over time"' in html_text


def test_offline_single_plotly_and_csp(serving_html: str) -> None:
    assert serving_html.count(plotly_js()[:2000]) == 1
    p = parse(serving_html)
    names = {t for t, _ in p.tags}
    assert not names & {
        "link",
        "img",
        "iframe",
        "object",
        "embed",
        "base",
        "form",
        "audio",
        "video",
    }
    for tag, attrs in p.tags:
        for key in ("src", "href", "action", "srcset", "poster"):
            value = attrs.get(key)
            assert value is None or value.startswith("#"), (tag, key, value)
    metas = [
        a for t, a in p.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    ]
    assert len(metas) == 1
    csp = {d.split()[0]: d.split()[1:] for d in (metas[0]["content"] or "").split("; ")}
    assert csp["default-src"] == ["'none'"] and csp["connect-src"] == ["'none'"]
    assert "'unsafe-inline'" not in csp["script-src"] and "'unsafe-eval'" not in csp["script-src"]
    executable = [body for a, body in p.scripts if "type" not in a]
    assert len(executable) == 2
    for body in executable:
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp["script-src"]


def test_typical_report_is_small(serving_html: str) -> None:
    assert len(serving_html.encode()) < MAX_BYTES


# ------------------------------------------------------------------ safety
def test_log_markup_comes_out_inert(tmp_path: Path) -> None:
    folder = tmp_path / "incident"
    folder.mkdir()
    (folder / XSS_FILE).write_text(sglang_failed_capture_log(), encoding="utf-8")
    report = analyze([str(folder)])
    assert report.runs and report.runs[0].record.to_json()["capture_error"]
    assert "window.__pwned=1" in report.runs[0].record.to_json()["capture_error"]["message"]
    html_text = render_html(report)
    p = parse(html_text)
    # no element or attribute came from the logs
    assert not [t for t, _ in p.tags if t in ("img", "iframe", "object", "embed")]
    assert not [(t, k) for t, a in p.tags for k in a if k.lower().startswith("on")]
    scripts = [a for t, a in p.tags if t == "script"]
    assert all(a == {} or a.get("type") == "application/json" for a in scripts)
    assert len([a for a in scripts if a == {}]) == 2
    for _, body in p.scripts:
        assert "__pwned" not in body  # nothing from the logs inside executable code or data
    # ... yet the text is there for the reader, escaped
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html_text
    # MarkupSafe writes a double quote as &#34;
    assert "&#34;&gt;&lt;img src=x onerror=&#34;window.__pwned=2&#34;&gt;" in html_text
    assert (
        "sglang-&#34;&gt;&lt;img src=x onerror=window.__pwned=3&gt;&lt;script&gt;x.log" in html_text
    )
    text = visible_text(html_text)
    assert XSS_SCRIPT in text and XSS_FILE in text


def test_json_for_script_cannot_close_the_block() -> None:
    payload = json.dumps({"t": "</script><script>alert(1)</script><!-- & \u2028"})
    safe = json_for_script(payload)
    assert "<" not in safe and ">" not in safe and "&" not in safe and "\u2028" not in safe
    assert json.loads(safe) == json.loads(payload)


def test_plot_labels_from_logs_are_escaped() -> None:
    capture_end = pd.DataFrame(
        {
            "rank": ["<b>TP0</b>", "TP1"],
            "phase": ["decode", "decode"],
            "time_s": [10.0, 11.0],
            "mem_gib": [1.0, 1.1],
        }
    )
    fig = memory_plots.capture_time_figure(capture_end)
    assert fig is not None
    assert "&lt;b&gt;TP0&lt;/b&gt;" in list(fig.figure().data[0].x)
    rows = memory_plots.memory_budget_rows(
        pd.DataFrame(),
        None,
        pd.DataFrame(),
        [
            Snapshot(
                "/x/<img src=x onerror=alert(1)>.pickle",
                SnapshotSummary(
                    "x",
                    None,
                    2**30,
                    2**30,
                    2**30,
                    None,
                    0,
                    [PoolSummary((1, 1), "graph", 2**30, 2**30, 1)],
                ),
            )
        ],
    )
    mem = memory_plots.memory_figure(rows)
    assert mem is not None and "<img" not in json.dumps(list(mem.figure().data[0].y))


# ------------------------------------------------------------------ big incidents
def synthetic_batches(n: int, seed: int = 0) -> pd.DataFrame:
    """n decode batches: sizes 1..511, graph up to 32, eager above, 20 per second."""
    rng = np.random.default_rng(seed)
    size = rng.integers(1, 512, n).astype("float64")
    graph = size <= 32
    return pd.DataFrame(
        {
            "source": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), ["/logs/serve.log"]),
            "line": np.arange(1, n + 1),
            "ts": 1.7e9 + np.arange(n) * 0.05,
            "rank": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), ["TP0"]),
            "batch_size": size,
            "weight": 1.0,
            "verdict": pd.Categorical.from_codes(
                np.where(graph, 0, 1).astype(np.int8), ["graph", "eager"]
            ),
            "origin": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), ["decode_line"]),
            "reason": pd.Categorical.from_codes(
                np.where(graph, 0, 1).astype(np.int8), ["logged_graph", "above_ceiling"]
            ),
            "bucket": np.where(graph, 32.0, np.nan),
            "padded": np.nan,
            "inferred": "graph",
            "gen_throughput": size * rng.uniform(20, 40, n),
        }
    )


@pytest.mark.slow
def test_huge_batches_frame_gives_a_small_report(serving_report: Report) -> None:
    n = BIG_ROWS
    run = serving_report.runs[0]
    original = run.facts
    batches = synthetic_batches(n)
    # the record's counts are facts of the batches (renderers read them, never recount):
    # the frame's own verdicts, each batch one step (facts are frozen: a new run's facts)
    graph = int((batches["verdict"] == "graph").sum())
    counts = BatchCounts(graph=graph, eager=n - graph, source="logged")
    record = dataclasses.replace(original.record, batches=counts)
    run.facts = dataclasses.replace(original, batches=batches, record=record)
    try:
        start = time.perf_counter()
        html_text = render_html(serving_report)
        elapsed = time.perf_counter() - start
    finally:
        run.facts = original
    size = len(html_text.encode())
    assert size < MAX_BYTES, size
    p = parse(html_text)
    data = [unpack_figure(body) for a, body in p.scripts if a.get("type") == "application/json"]
    assert sum(len(body) for a, body in p.scripts if a.get("type") == "application/json") < 600_000
    timeline = next(d for d in data if "over time" in d["layout"]["title"]["text"])
    assert "binned" in timeline["layout"]["title"]["text"]
    text = visible_text(html_text)
    assert f"of {n:,} decode batches" in text
    print(f"{n:,} rows -> {size:,} bytes in {elapsed:.1f} s")


def test_timeline_and_histogram_are_bounded() -> None:
    frame = synthetic_batches(200_000, seed=1)
    table, kind, binned = plots.timeline_table(frame)
    assert binned and kind == "time" and 0 < len(table) <= plots.MAX_TIMELINE_POINTS
    assert table["n"].sum() == len(frame)
    assert table["max"].max() == frame["batch_size"].max()
    hist, width = plots.histogram_table(frame)
    assert width == 2 and len(hist) <= 2 * plots.MAX_HIST_BARS
    assert hist["weight"].sum() == pytest.approx(len(frame))
    small, _, binned_small = plots.timeline_table(frame.head(100))
    assert not binned_small and len(small) == 100


def test_empty_inputs_give_no_figure() -> None:
    empty = pd.DataFrame(
        columns=["batch_size", "weight", "verdict", "ts", "gen_throughput", "reason"]
    )
    assert plots.batch_size_figure(empty, [1, 2]) is None
    assert plots.timeline_figure(empty, 2) is None
    assert decode_speeds(empty) == ()
    assert memory_plots.memory_figure([]) is None
    assert (
        memory_plots.capture_time_figure(
            pd.DataFrame(columns=["rank", "phase", "time_s", "mem_gib"])
        )
        is None
    )


def test_memory_budget_uses_logged_figures(serving_report: Report) -> None:
    facts = serving_report.runs[0].facts
    rows = memory_plots.memory_budget_rows(
        facts.tables["sizing"], facts.record, facts.tables["capture_end"]
    )
    assert rows[0][0] == "logs (rank 0)"
    got: dict[str, Any] = rows[0][1]
    assert got["weights"] == pytest.approx(14.99)
    assert got["KV cache pool"] == pytest.approx(50.5)
    assert got["CUDA graph capture"] == pytest.approx(3.42)
    assert got["free after capture"] == pytest.approx(9.28)


def test_log_text_is_never_a_template(tmp_path: Path) -> None:
    """Values go into templates, never through them: Jinja syntax in a log stays literal."""
    log = tmp_path / "jinja.log"
    trap = "{{ 7*7 }} {% raw %} {#"
    log.write_text(
        sglang_failed_capture_log().replace("CUDA out of memory", trap + " CUDA out of memory")
    )
    html_text = render_html(analyze([str(log)]))
    assert "{{ 7*7 }} {% raw %} {#" in visible_text(html_text)
    assert "49 {%" not in html_text


def test_raw_markup_only_where_allowed() -> None:
    """Autoescape is the rule: no ``|safe`` or autoescape switch in a template, and
    ``Markup(`` only for fixed text: render/html.py (scripts, CSS, figure JSON made inert)
    render/compare.py (its CSS) and the ``breakable`` filter of render/html_page.py (escaped
    text and ``<wbr>``)."""
    from diag.resources import package_file

    for tpl in Path(package_file("render", "templates")).glob("*.j2"):
        text = tpl.read_text()
        assert "|safe" not in text.replace(" ", "") and "autoescape" not in text, tpl.name
    render = Path(package_file("render"))
    users = {p.name: p.read_text().count("Markup(") for p in render.glob("*.py")}
    assert {k: v for k, v in users.items() if v} == {
        "html.py": 4,
        "compare.py": 1,
        "html_page.py": 1,
    }


# ------------------------------------------------------------------ many runs
INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"


def _section(html_text: str, anchor: str) -> str:
    start = html_text.index(f'id="{anchor}"')
    end = html_text.find('<details class="run', start + 1)
    return html_text[start : end if end > 0 else len(html_text)]


def test_many_run_sections_hold_their_finding_cards(tmp_path: Path) -> None:
    """Several runs: each run's section carries what a single-run page shows on top: each
    finding's message, every remedy numbered and its evidence as ``path:line``."""
    folder = tmp_path / "many"
    folder.mkdir()
    for incident in sorted(p for p in INCIDENTS.iterdir() if p.is_dir()):
        for log in sorted(incident.glob("*.log")):
            (folder / f"{incident.name}-{log.name}").write_bytes(log.read_bytes())
    report = analyze([str(folder)], jobs=1)
    assert len(report.runs) > 3  # the many-runs layout
    html_text = render_html(report)
    for i, run in enumerate(report.runs, start=1):
        section = _section(html_text, f"run-{i}")
        cards = section.count('<article class="finding')
        assert cards == len(run.findings), run.id
        text = visible_text(section)
        for f in run.findings:
            assert " ".join(f.message.split()) in text
            for remedy in f.remediation:
                assert " ".join(remedy.split()) in text
            for ev in f.evidence[:1]:
                assert f"{ev.path}:{ev.line}" in text


def test_names_break_only_at_separators() -> None:
    from diag.render.html_page import breakable

    name = "/logs/node_a/sglang-serving.log#2"
    html_text = str(breakable(name))
    assert html_text.replace("<wbr>", "") == name
    pieces = html_text.split("<wbr>")
    assert pieces == ["/", "logs/", "node_", "a/", "sglang-serving.log#", "2"]
    # markup stays escaped and an entity is never cut
    assert str(breakable("a'<b>_c")) == "a&#39;&lt;b&gt;_<wbr>c"
    assert str(breakable("[4096, 6144]")) == "[4096, 6144]"  # numbers: no break inside
