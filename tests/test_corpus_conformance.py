"""Conformance: analyze every real excerpt of ../shared/corpus/real and compare with labels.yaml.

Prints every mismatch; passes at >= 95 % of labelled fields, with no crash and no capture
error reported where the label has none.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import yaml

from diag.api import analyze
from diag.facts.record import captured_size_count, sizing
from tests.conftest import need_corpus

TARGET = 0.95


def _num(text: Any) -> float | None:
    if text is None:
        return None
    if isinstance(text, int | float):
        return float(text)
    m = re.search(r"-?[\d,]*\.?\d+", str(text))
    return float(m.group(0).replace(",", "")) if m else None


def _close(a: Any, b: Any, tol: float = 0.011) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol)


def observed(path: str) -> dict[str, Any]:
    report = analyze([path], generated_at="fixed")
    assert report.runs, f"{path}: no run"
    run = report.runs[0]
    rec, t = run.record, run.facts.tables
    decode = t["decode_batch"]
    err = rec["capture_error"]
    return {
        "graph_enabled": {"enabled": True, "disabled": False}.get(rec["graph_mode"], "unknown"),
        "capture_error": err["class"] if err else None,
        "capture_time_s": rec["capture_time_s"],
        "capture_mem_gib": rec["capture_mem_gib"],
        "cuda_graph_max_bs": rec["cuda_graph_max_bs"],
        "capture_sizes": rec["graph_capture_sizes"],
        "kv_tokens": rec["kv_tokens"],
        "gpu_blocks": rec["gpu_blocks"],
        "decode_batches_cuda_graph_true": int((decode["cuda_graph"] == True).sum()),  # noqa: E712
        "decode_batches_cuda_graph_false": int((decode["cuda_graph"] == False).sum()),  # noqa: E712
        "capture_sizes_count": captured_size_count(t),
        "prefill_batches": len(t["prefill_batch"]),
        "max_concurrency": rec["max_concurrency"],
        "available_kv_cache_gib": rec["kv_cache_gib"],
        "estimated_cudagraph_mem_gib": sizing(t, "graph_mem_est_gib"),
        "decode_batches_no_cg_field": int(decode["cuda_graph"].isna().sum()),
    }


def compare(label: dict[str, Any], got: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    mismatches = []
    for key, want in label.items():
        if key not in got:
            continue
        have = got[key]
        if key == "capture_error":
            want_class = None if want is None else re.split(r"[\s:(]", str(want), maxsplit=1)[0]
            ok = want_class == have
        elif key == "capture_sizes":
            ok = (want is None and have is None) or (
                want is not None and have is not None and sorted(want) == sorted(have)
            )
        elif key == "graph_enabled":
            ok = want == have
        elif key in ("max_concurrency",):
            ok = _close(_num(want), have)
        elif isinstance(want, int | float) or want is None:
            ok = _close(want, have) if not isinstance(want, bool) else want == have
        else:
            ok = _close(_num(want), have)
        if not ok:
            mismatches.append((key, want, have))
    return mismatches


@pytest.mark.slow
def test_real_corpus_matches_labels() -> None:
    corpus = need_corpus("real")
    labels = yaml.safe_load((corpus / "labels.yaml").read_text())["cases"]
    total = matched = 0
    false_errors = []
    report_lines = []
    for case in labels:
        path = corpus / case["file"]
        got = observed(str(path))
        fields = {k: v for k, v in case.items() if k in got}
        bad = compare(fields, got)
        total += len(fields)
        matched += len(fields) - len(bad)
        if case.get("capture_error") is None and got["capture_error"] is not None:
            false_errors.append(case["file"])
        for key, want, have in bad:
            report_lines.append(f"MISMATCH {case['file']}: {key}: label={want!r} got={have!r}")
    score = matched / total
    print("\n".join(report_lines))
    print(f"conformance: {matched}/{total} labelled fields = {score:.1%}")
    assert not false_errors, f"capture error reported where the label has none: {false_errors}"
    assert score >= TARGET, f"conformance {score:.1%} < {TARGET:.0%}"


@pytest.mark.parametrize(
    "name", ["sglang-kr-study-retract-decode.log", "sglang-jdgenie197-tp0-decode-cg-true.log"]
)
def test_decode_flags_are_logged_truth(name: str) -> None:
    corpus = need_corpus("real")
    report = analyze([str(corpus / name)], generated_at="fixed")
    batches = report.runs[0].record["batches"]
    assert batches["source"] == "logged"
    assert batches["graph"] + batches["eager"] > 0
