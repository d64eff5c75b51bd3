"""Issue 34 item 4: no warning without an action. A finding at warning carries a remedy that
changes something on the server; one whose remedies only keep, check or wait is said at info.
Checked over every fixture incident, the project's mined corpus and every shared real excerpt,
by the engine's own marker and by the remedy text (an oracle that does not read the marker)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diag.api import analyze
from diag.model import Finding
from diag.rules.base import Standstill, acts
from diag.rules.engine import NOTHING_TO_CHANGE
from tests.conftest import ROOT, need_corpus

INCIDENTS = ROOT / "fixtures" / "incidents"
MINED = ROOT / "tests" / "corpus" / "mined"

# remedy texts that change nothing: keep today's state, check something, wait for advice
STANDSTILL_TEXT = re.compile(
    r"^(Keep\b|Keeping\b|Check\b|Then re-check\b|No [\w ]+ can be advised"
    r"|(Raising|Lowering|Capturing)\b[^:]* not advised"
    r"|The engine declined graphs inside the window: check\b"
    r"|Steps inside the window ran without graphs: cascade attention"
    r"|The engine turned prefill graphs off for this model or feature)"
)


def _inputs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() or p.suffix in (".log", ".txt", ".gz"))


def _bad(path: Path) -> list[str]:
    """Warnings of ``path`` without a remedy that acts, by marker or by text; and findings
    lowered to info though a remedy of theirs acts."""
    out = []
    for f in analyze([str(path)], generated_at="fixed").findings:
        out += [f"{path.name} {f.code}: {why}" for why in _problems(f)]
    return out


def _problems(f: Finding) -> list[str]:
    acting = [r for r in f.remediation if acts(r)]
    by_text = [r for r in f.remediation if not STANDSTILL_TEXT.match(r)]
    if f.severity == "warning":
        if not acting:
            return [f"warning without an acting remedy: {f.remediation}"]
        if not by_text:
            return [f"warning whose remedies all read as keep/check: {f.remediation}"]
    if NOTHING_TO_CHANGE in f.message and (acting or f.severity != "info"):
        return [f"lowered though a remedy acts: {acting}"]
    return []


def test_every_fixture_incident_warns_only_with_an_action() -> None:
    bad = [b for p in _inputs(INCIDENTS) for b in _bad(p)]
    assert not bad, "\n".join(bad)


def test_the_mined_corpus_warns_only_with_an_action() -> None:
    bad = [b for p in _inputs(MINED) for b in _bad(p)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", ["real", "real-2", "real-3", "real-4"])
def test_every_shared_input_warns_only_with_an_action(name: str) -> None:
    bad = [b for p in _inputs(need_corpus(name)) for b in _bad(p)]
    assert not bad, "\n".join(bad)


def test_a_warning_of_checks_only_is_said_at_info() -> None:
    """The engine declined graphs inside the window, no DP attention on: the only remedy is to
    check the request mix, so GD110 (and GD170 quoting it) are info, saying why."""
    rep = analyze([str(INCIDENTS / "sglang-dp-prefill-eager")], generated_at="fixed")
    codes = {f.code: f for f in rep.findings}
    for code in ("GD110", "GD170"):
        f = codes[code]
        assert f.severity == "info" and f.message.endswith(NOTHING_TO_CHANGE), f
        assert not any(acts(r) for r in f.remediation)
    f = Finding("GD110", "out-of-window", "warning", "x", remediation=[Standstill("Check it.")])
    assert _problems(f)


def test_the_demand_limited_slope_is_no_padding_cost() -> None:
    """vLLM 0.22 stats lines whose throughput is set by demand: the derived step time grows as
    the running count (1.89 ms a request from zero). No GD111 at any severity; the slope is
    the default one, and the note says why the fitted one is not a padding cost."""
    run = analyze([str(INCIDENTS / "vllm-022-demand-limited-slope")], generated_at="fixed").runs[0]
    codes = {f.code: f for f in run.findings}
    assert "GD111" not in codes and codes["GD120"].severity == "warning"
    assert run.advice is not None
    slot = run.advice.parameters.slot_step_s
    assert slot.source == "default" and "is not a padding cost" in slot.why
    assert re.search(r"would double within [\d.]+ tokens", slot.why), slot.why
    assert re.search(r"fitted slope 1\.8\d ms per token", slot.why), slot.why


def test_the_sglang_padding_case_still_warns_with_its_set() -> None:
    run = analyze([str(INCIDENTS / "sglang-padding-waste")], generated_at="fixed").runs[0]
    gd111 = next(f for f in run.findings if f.code == "GD111")
    assert gd111.severity == "warning" and gd111.remediation[0].startswith("Capture the advised")
    assert run.recommendation is not None
    assert run.recommendation["flags"] in gd111.remediation[0]
