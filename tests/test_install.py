"""The installed package (non-editable `pip install .`) works from any folder: grammars, the
rule pack and the HTML templates travel inside the wheel. Skipped when only the source tree
is importable (no installed console script)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from diag.rules.registry import ALL_CODES
from tests.conftest import ROOT


def _installed() -> str:
    script = shutil.which("graphdiag") or str(Path(sys.executable).with_name("graphdiag"))
    if not Path(script).exists():
        pytest.skip("graphdiag is not installed in this environment")
    return script


def test_installed_package_runs_from_another_folder(tmp_path: Path) -> None:
    script = _installed()
    env = {"PATH": str(Path(script).parent), "HOME": str(tmp_path)}
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import diag, diag.resources as r; "
            "print(diag.__file__); print(r.grammar_text('traceback.lark')[:2])",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert where.returncode == 0, where.stderr
    assert not where.stdout.splitlines()[0].startswith(str(ROOT)), (
        "imported the source tree, not the install"
    )
    rules = subprocess.run(
        [script, "rules", "--format", "json"], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert rules.returncode == 0
    assert [r["code"] for r in json.loads(rules.stdout)] == list(ALL_CODES)
    incident = ROOT / "fixtures" / "incidents" / "sglang-out-of-window"
    run = subprocess.run(
        [script, "analyze", str(incident), "-o", "out", "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert "GD110" in run.stdout
    html = (tmp_path / "out" / "sglang-out-of-window.graphdiag.html").read_text()
    assert "Content-Security-Policy" in html and "GD110" in html
