"""Every comparative word graphdiag's advice prints is computed (issue 24 point 5): "pads
less", "frees", "cheaper", "saves only", "costs ... more" are checked against the figures the
same sentence (or the advice behind it) carries, on every fixture incident and every inline
rule case of GD110-GD120, and a sentence with such a word in no known computed form fails."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from diag.advise.recommend import RecommendError, recommend
from diag.api import analyze
from diag.figures import number, share
from tests.conftest import ROOT

INCIDENTS = ROOT / "fixtures" / "incidents"
CASES = ROOT / "tests" / "rule_cases"
WORDS = re.compile(
    r"\b(pads (?:less|more|as much)|frees|cheaper|saves only|GPU-s/h more|GiB more)\b"
)
NUM = r"([\d,]+(?:\.\d+)?)"
PCT = r"(\d+(?:\.\d+)?)%"
PADS = re.compile(rf"pads (less|more|as much) than today's: {PCT} of slots against {PCT}")
FREES = re.compile(rf"it frees (?:about )?{NUM} GiB")
TAKES_MORE = re.compile(rf"it takes {NUM} GiB more graph memory")
CHEAPER = re.compile(rf"cheaper than .*? by {NUM} GPU-s/h .*?\({NUM} against {NUM}\)")
SAVES = re.compile(rf"saves only {NUM} GPU-s/h .*?\({NUM} against {NUM} GPU-s/h\)")
COSTS_MORE = re.compile(rf"costs {NUM} GPU-s/h more .*?\({NUM} against {NUM} GPU-s/h\)")


def _f(s: str) -> float:
    return float(s.replace(",", ""))


def _inputs(tmp: Path) -> list[Path]:
    out = sorted(p for p in INCIDENTS.iterdir() if p.is_dir())
    for code in ("GD110", "GD111", "GD112", "GD120"):
        doc = yaml.safe_load((CASES / f"{code}.yaml").read_text())
        for i, case in enumerate(doc["cases"]):
            if "log" in case:
                path = tmp / f"{code}-{i}.log"
                path.write_text(case["log"])
                out.append(path)
    return out


def check_sentence(text: str, advice: Any) -> int:
    """Assert each comparative in ``text`` agrees with its own figures (and the advice's);
    returns how many were checked."""
    checked = 0
    for m in PADS.finditer(text):
        word, new, old = m.group(1), float(m.group(2)), float(m.group(3))
        assert (new < old) if word == "less" else (new > old) if word == "more" else True, text
        if advice is not None and word != "as much":
            a, b = advice.recommended.cost.padding_waste, advice.current.padding_waste
            assert (a < b) == (word == "less"), text
        checked += 1
    for m in FREES.finditer(text):
        freed = _f(m.group(1))
        assert freed > 0, text
        if advice is not None and advice.current is not None:
            exact = advice.current.capture_gib - advice.recommended.cost.capture_gib
            assert number(exact) == m.group(1), (text, exact)
        checked += 1
    for m in TAKES_MORE.finditer(text):
        if advice is not None and advice.current is not None:
            exact = advice.recommended.cost.capture_gib - advice.current.capture_gib
            assert exact > 0 and number(exact) == m.group(1), (text, exact)
        checked += 1
    for m in CHEAPER.finditer(text):
        by, new, old = (_f(g) for g in m.groups())
        assert new < old and abs((old - new) - by) <= 0.011, text
        checked += 1
    for m in SAVES.finditer(text):
        by, new, old = (_f(g) for g in m.groups())
        assert 0 < by and new < old and abs((old - new) - by) <= 0.011, text
        checked += 1
    for m in COSTS_MORE.finditer(text):
        by, new, old = (_f(g) for g in m.groups())
        assert new > old and abs((new - old) - by) <= 0.011, text
        checked += 1
    found = len(WORDS.findall(text))
    assert found <= checked, f"a comparative in no computed form: {text}"
    return checked


def test_the_patterns_read_what_the_advice_prints() -> None:
    assert check_sentence("and pads less than today's: 12% of slots against 41%", None) == 1
    with pytest.raises(AssertionError):
        check_sentence("and pads less than today's: 45% of slots against 41%", None)
    with pytest.raises(AssertionError):
        check_sentence("this set pads less", None)  # a comparative without its figures
    assert check_sentence(
        "the best candidate saves only 2.39 GPU-s/h on held-out traffic (1,510.20 against "
        "1,512.58 GPU-s/h), a change must save more than 75.63 GPU-s/h",
        None,
    )
    assert share(0.41) == "41%"


def test_every_comparative_in_findings_and_recommend_is_computed(tmp_path: Path) -> None:
    checked = 0
    for path in _inputs(tmp_path):
        report = analyze([str(path)], generated_at="fixed")
        for run in report.runs:
            for f in run.findings:
                for text in [f.message, *f.remediation]:
                    checked += check_sentence(text, run.advice)
        try:
            rec = recommend(report.runs, report.snapshots)
        except RecommendError:
            continue
        for note in rec["notes"]:
            checked += check_sentence(note, None)
    assert checked >= 5  # the fixtures do carry such sentences (keep, change, frees)
