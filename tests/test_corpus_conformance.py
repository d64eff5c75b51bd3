"""Conformance: analyze every real excerpt of ../shared/corpus/real .. real-4 and of the
project's own mined set (tests/corpus/mined) and compare with their labels.yaml, each set on
its own (the scoring itself is tests/corpus_scoring.py, shared with bench/score_corpus.py).

Prints every mismatch, per-field figures and the set's figures (``pytest -s``); each set
passes at its own share of labelled fields and capture-error F1 (``THRESHOLDS``; a capture
error of the wrong class counts as one missed and one false), with no crash, and with at most
its allowed number of excerpts that make no run although their label expects something (see
``something_to_find``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.api import analyze
from tests.conftest import need_corpus
from tests.corpus_scoring import MINED, SETS, score_set

#: per set: (share of labelled fields, capture-error F1) it must reach, and how many excerpts
#: whose label has something to find may make no run at all.
#: real-4 and mined: the figures main reaches with the evidence attribution and the raise-site
#: atlas merged (fields and F1 rounded down: real-4 94.9 %, F1 0.846). mined: lowered from
#: 0.97 / 0.76 when 13 more excerpts were mined and labelled blind (tests/corpus/mined/README.md):
#: 115 excerpts at 96.7 %, F1 0.731, 4 excerpts with no run; the new ones alone 93.0 %, F1 0.600
#: (4 un-prefixed custom all-reduce failures missed). The target is 0.97 / F1 0.95 / no such
#: excerpt (issue 32). Third round (11 more, labelled blind; README "Third round"): main's code
#: at 7eca86a reads the 126 at 98.0 %, F1 0.928, 2 excerpts with no run (was 0.98 / 0.98 / 1 on
#: the 115); the 11 new alone 97.3 %, F1 0.500 (a CANN plog pair and an HPU V0 warm-up traceback
#: missed, an XPU SYCL-graph error found as other, labelled stream_capture_invalid); the
#: second helper's 12 (one dropped at the merge: a source the first had used) blind 7/0/2 on
#: the new. Merged, with the CANN runtime's ErrCode form read: 137 excerpts, 44 capture
#: failures, 98.2 %, F1 0.941 (tp 40, fp 1, fn 4), 2 with no run. Then, by class: engine
#: warnings that say a capture failed (atlas warning sites, vllm-omni 0.30.0 read), the SYCL
#: graph runtime's capture-only errors, a V0 HPU fork's warmup_graphs frame, a cut
#: compilation_config dict: 98.3 %, F1 0.966 (tp 42, fp 1, fn 2), none with no run.
THRESHOLDS: dict[str, tuple[float, float, int]] = {
    "real": (0.98, 0.97, 0),
    "real-2": (0.98, 0.97, 0),
    "real-3": (0.98, 0.97, 0),
    "real-4": (0.97, 0.96, 0),
    "mined": (0.98, 0.96, 0),
}


def _folder(name: str) -> Path:
    """The mined set is in the repository, so it is never skipped; the shared sets are."""
    if name == "mined":
        assert (MINED / "labels.yaml").is_file(), f"{MINED}: the mined set is missing"
        return MINED
    return need_corpus(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SETS)
def test_corpus_matches_labels(name: str) -> None:
    """One set: its share of labelled fields and capture-error F1 (THRESHOLDS), no crash, a
    run wherever the label has something to find. Per-field figures print with -s."""
    score = score_set(name, _folder(name))
    print("\n".join(f"MISMATCH {m}" for m in score.mismatches))
    print("\n".join(f"NO RUN (label expects none) {f}" for f in score.no_run_expected))
    for key, (ok, n) in sorted(score.per_field.items()):
        print(f"  {name}:{key:40s} {ok:3d}/{n:3d} = {ok / n:.1%}")
    print("conformance " + score.summary())
    fields_min, f1_min, no_run_max = THRESHOLDS[name]
    assert score.fields >= fields_min, f"{name}: conformance {score.fields:.1%} < {fields_min:.0%}"
    assert score.f1 >= f1_min, f"{name}: capture-error F1 {score.f1:.3f} < {f1_min}"
    assert len(score.no_run) <= no_run_max, (
        f"{name}: no run where the label has something to find: {score.no_run}"
    )


def test_every_set_has_a_threshold() -> None:
    assert set(THRESHOLDS) == set(SETS)


@pytest.mark.parametrize(
    "name", ["sglang-kr-study-retract-decode.log", "sglang-jdgenie197-tp0-decode-cg-true.log"]
)
def test_decode_flags_are_logged_truth(name: str) -> None:
    corpus = need_corpus("real")
    report = analyze([str(corpus / name)], generated_at="fixed")
    batches = report.runs[0].record.to_json()["batches"]
    assert batches["source"] == "logged"
    assert batches["graph"] + batches["eager"] > 0
