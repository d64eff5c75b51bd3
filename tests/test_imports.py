"""What ``analyze`` loads: the HTML side (plotly, the narwhals it pulls in, Jinja2) only when
an HTML page is written. Every module imported before the scan is serial time on the
command's critical path (issue 22: ~80 ms of 3.9 s on a 700 MB log), so a stray top-level
import of the page's modules from the text or JSON side must fail here, not go unseen.

Each case runs the command in a fresh interpreter (this process has imported everything
already) and reads that interpreter's ``sys.modules`` after the command returned.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"
INCIDENT = INCIDENTS / "sglang-capture-oom"
HTML_SIDE = ("plotly", "_plotly_utils", "narwhals", "jinja2")

PROBE = """
import json, sys
from diag.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
except SystemExit:
    pass
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.stdin.readline())))
print("LOADED " + json.dumps(loaded), file=sys.stderr)
"""


def loaded_after(*args: str) -> list[str]:
    """The HTML-side packages a fresh ``graphdiag`` process holds after running ``args``."""
    res = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        input=json.dumps(HTML_SIDE) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    lines = [x for x in res.stderr.splitlines() if x.startswith("LOADED ")]
    assert lines, res.stderr[-2000:]
    loaded: list[str] = json.loads(lines[-1].removeprefix("LOADED "))
    return loaded


@pytest.mark.parametrize(
    ("incident", "fmt"),
    [
        ("sglang-capture-oom", "json"),
        ("sglang-capture-oom", "text"),
        ("sglang-capture-oom", "markdown"),
        ("sglang-capture-oom", "yaml"),
        ("vllm-kv-squeeze", "json"),
        ("sglang-trace-verified", "text"),  # a profiler trace: the text report's trace panel
    ],
)
def test_analyze_no_html_loads_no_page_module(tmp_path: Path, incident: str, fmt: str) -> None:
    out = tmp_path / "out"
    args = ("analyze", str(INCIDENTS / incident), "--no-html", "--format", fmt, "-o", str(out))
    assert loaded_after(*args) == []
    assert (out / f"{incident}.graphdiag.json").is_file()  # the command did run


def test_the_probe_sees_the_page_modules_when_a_page_is_written(tmp_path: Path) -> None:
    """The same probe with the HTML page on: plotly and Jinja2 are loaded, so the check
    above reads the modules of a command that ran, not an empty list by construction."""
    out = tmp_path / "out"
    loaded = loaded_after("analyze", str(INCIDENT), "--format", "json", "-o", str(out))
    assert {"plotly", "jinja2"} <= set(loaded)
    assert (out / "sglang-capture-oom.graphdiag.html").is_file()


def _fresh(code: str) -> str:
    """stdout of ``code`` in a fresh interpreter of this checkout."""
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_reading_starts_before_the_analysis_is_imported() -> None:
    """What ``analyze`` imports before its scan workers fork (issue 37): the reading side only.
    pandas and stages 3-7 load while the workers read (``diag.pipeline.LATER_STAGES``)."""
    out = _fresh(
        "import sys, diag.cli, diag.api, diag.output, diag.rules.errors, diag.ingest.parallel\n"
        "print(sorted(m for m in ('pandas', *__import__('diag.pipeline').pipeline.LATER_STAGES)"
        " if m in sys.modules))"
    )
    assert out.strip() == "[]"
    out = _fresh(
        "import sys\nfrom diag import pipeline\npipeline.load_later_stages()\n"
        "print('pandas' in sys.modules)"
    )
    assert out.strip() == "True"  # the probe sees a load


def test_later_stages_names_every_module_the_stages_import() -> None:
    """Each stage of diag/pipeline.py imports what it uses in its body; the ingest loads them
    beforehand, while its workers read, only if LATER_STAGES names them all."""
    import ast

    from diag import pipeline

    tree = ast.parse((ROOT / "diag" / "pipeline.py").read_text())
    in_bodies = {
        node.module
        for fn in tree.body
        if isinstance(fn, ast.FunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("diag.")
    }
    assert in_bodies  # the stages do import in their bodies
    assert in_bodies <= set(pipeline.LATER_STAGES), sorted(in_bodies - set(pipeline.LATER_STAGES))


def test_a_scan_worker_keeps_pyarrow_from_importing_pandas() -> None:
    """pyarrow's first ``pa.array`` imports pandas to ask what the object is; a scan worker
    answers no (``diag.ingest.owned.arrow_without_pandas``), and pandas still imports where
    it is asked for, by pyarrow too."""
    out = _fresh(
        "import sys\nimport pyarrow as pa\nfrom diag.ingest.owned import arrow_without_pandas\n"
        "arrow_without_pandas()\npa.array([1, 2])\nprint('pandas' in sys.modules)\n"
        "print(type(pa.table({'a': [1]}).to_pandas()).__name__)"
    )
    assert out.split() == ["False", "DataFrame"]
    # without it, the same array loads pandas (the check above is not empty by construction)
    out = _fresh(
        "import sys\nimport pyarrow as pa\npa.array([1, 2])\nprint('pandas' in sys.modules)"
    )
    assert out.strip() == "True"


@pytest.mark.parametrize("incident", ["sglang-busy-day-40-80", "vllm-kv-squeeze"])
def test_a_scan_loads_no_pandas(incident: str) -> None:
    """What a scan worker runs (the bulk path on every region, the per-line parsers, the
    sink) loads no pandas of its own: forked before the parent imports it, each worker would
    pay for it (~0.2 s) for nothing."""
    log = INCIDENTS / incident / "server.log"
    out = _fresh(
        "import sys\nfrom diag.events import EventSink\n"
        "from diag.ingest.hotpath import make_scanner\n"
        "from diag.ingest.hotpath.scanner import bulk_on_every_region\n"
        "from diag.ingest.owned import arrow_without_pandas\n"
        "from diag.parsers.registry import parsers_for\n"
        "from diag.sources.readers import detect_backend, iter_range\n"
        f"path = {str(log)!r}\n"
        "backend = detect_backend(open(path, 'rb').read(1 << 16)) or 'sglang'\n"
        "arrow_without_pandas()\nsink = EventSink()\n"
        "with bulk_on_every_region():\n"
        "    sc = make_scanner(parsers_for(backend), sink, backend, True)\n"
        "    sc.scan_blocks(path, iter_range(path, 0, None))\n"
        "    sc.close()\n"
        "print(sink.count() > 0, 'pandas' in sys.modules)"
    )
    assert out.split() == ["True", "False"]
