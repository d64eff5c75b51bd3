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
