"""Conformance: analyze every real excerpt of ../shared/corpus/real, real-2 and real-3 and
compare with their labels.yaml, each set on its own.

Prints every mismatch, per-field figures and the set's figures (``pytest -s``); each set
passes at >= 98 % of labelled fields and a capture-error F1 >= 0.97 (a capture error of the
wrong class counts as one missed and one false), with no crash. An excerpt that makes no
run fails only when its label expects something (see ``something_to_find``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import yaml

from diag.api import analyze
from diag.facts.graphs import total
from diag.facts.record import captured_size_count, sizing
from tests.conftest import need_corpus

TARGET = 0.98
F1_TARGET = 0.97
SETS = ("real", "real-2", "real-3")


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
    rec, t = run.record.to_json(), run.facts.tables
    decode = t["decode_batch"]
    err = rec["capture_error"]
    return {
        "graph_enabled": {"enabled": True, "disabled": False}.get(rec["graph_mode"], "unknown"),
        "capture_error": err["class"] if err else None,
        "capture_time_s": rec["capture_time_s"],
        "capture_mem_gib": rec["capture_mem_gib"],
        "cuda_graph_max_bs": rec["cuda_graph_max_bs"],
        "capture_sizes": rec["graph_capture_sizes"],
        # labels hold the printed figure; a kv_tokens derived from GPU blocks (vLLM V0) says so
        "kv_tokens": rec["kv_tokens"] if run.facts.kv_tokens_source == "logged" else None,
        "gpu_blocks": rec["gpu_blocks"],
        "decode_batches_cuda_graph_true": int((decode["cuda_graph"] == True).sum()),  # noqa: E712
        "decode_batches_cuda_graph_false": int((decode["cuda_graph"] == False).sum()),  # noqa: E712
        "capture_sizes_count": captured_size_count(t),
        "prefill_batches": len(t["prefill_batch"]),
        "max_concurrency": rec["max_concurrency"],
        "available_kv_cache_gib": rec["kv_cache_gib"],
        "estimated_cudagraph_mem_gib": sizing(t, "graph_mem_est_gib"),
        "decode_batches_no_cg_field": int(decode["cuda_graph"].isna().sum()),
        # beside the record: captures other than the decode graphs (record keys are decode's)
        "draft_capture_time_s": total(run.record.graphs, model="draft")[0],
        "draft_capture_mem_gib": total(run.record.graphs, model="draft")[1],
        "piecewise_capture_time_s": total(run.record.graphs, "target", "prefill")[0],
        "piecewise_capture_mem_gib": total(run.record.graphs, "target", "prefill")[1],
    }


def compare(label: dict[str, Any], got: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    mismatches = []
    for key, want in label.items():
        if key not in got:
            continue
        have = got[key]
        if key == "capture_error":
            ok = label_class(want) == have
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


CLASSES = ("oom", "stream_capture_invalid", "unsupported_op", "distributed", "other")


def label_class(want: Any) -> str | None:
    """The class a ``capture_error`` label names. Labels are written two ways: a bare class
    (real/) or ``'class: message'`` / ``'class (prose): message'`` text (real-2/). The class is
    the first word when it is one of the five classes; a label that names none is kept whole
    (and so can only mismatch, never pass by accident)."""
    if want is None:
        return None
    head = re.split(r"[\s:(]", str(want).strip(), maxsplit=1)[0]
    return head if head in CLASSES else str(want)


def something_to_find(case: dict[str, Any]) -> bool:
    """Whether a label expects a run: a capture error, or a measured value (a number or a
    size list) that is neither null nor zero. ``graph_enabled`` alone does not: it describes
    the server the excerpt came from (e.g. an unmerged PR's own log wording), not a line of
    the excerpt a released engine prints; such a file without a run is printed, not failed."""
    if case.get("capture_error") is not None:
        return True
    skip = {"file", "source_url", "backend", "version", "kind", "notes", "truncated"}
    return any(
        v not in (None, 0, []) and not isinstance(v, bool) and isinstance(v, int | float | list)
        for k, v in case.items()
        if k not in skip and k != "graph_enabled"
    )


def f1(tp: int, fp: int, fn: int) -> float:
    """Capture-error F1; 1.0 for a set with nothing to find and nothing found."""
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


@pytest.mark.slow
@pytest.mark.parametrize("name", SETS)
def test_corpus_matches_labels(name: str) -> None:
    """One set: >= 98 % of labelled fields, capture-error F1 >= 0.97, no crash, a run wherever
    the label has something to find. Per-field figures print with -s."""
    total = matched = 0
    tp = fp = fn = 0
    per_field: dict[str, list[int]] = {}
    no_run: list[str] = []
    report_lines = []
    corpus = need_corpus(name)
    labels = yaml.safe_load((corpus / "labels.yaml").read_text())["cases"]
    for case in labels:
        path = corpus / case["file"]
        want = label_class(case.get("capture_error"))
        report = analyze([str(path)], generated_at="fixed")
        if not report.runs:
            fn += want is not None
            if something_to_find(case):
                no_run.append(f"{name}/{case['file']}")
            else:
                report_lines.append(f"NO RUN (label expects none) {name}/{case['file']}")
            continue
        got = observed(str(path))
        fields = {k: v for k, v in case.items() if k in got}
        bad = compare(fields, got)
        bad_keys = {k for k, _, _ in bad}
        for k in fields:
            tally = per_field.setdefault(k, [0, 0])
            tally[0] += k not in bad_keys
            tally[1] += 1
        total += len(fields)
        matched += len(fields) - len(bad)
        have = got["capture_error"]
        tp += want is not None and have == want
        fn += want is not None and have != want
        fp += have is not None and have != want
        for key, w, h in bad:
            report_lines.append(f"MISMATCH {name}/{case['file']}: {key}: label={w!r} got={h!r}")
    score = matched / total
    print("\n".join(report_lines))
    for key, (ok, n) in sorted(per_field.items()):
        print(f"  {name}:{key:40s} {ok:3d}/{n:3d} = {ok / n:.1%}")
    print(
        f"conformance {name}: {matched}/{total} labelled fields = {score:.1%}; capture errors "
        f"tp={tp} fp={fp} fn={fn} F1={f1(tp, fp, fn):.3f}"
    )
    assert score >= TARGET, f"{name}: conformance {score:.1%} < {TARGET:.0%}"
    assert f1(tp, fp, fn) >= F1_TARGET, f"{name}: capture-error F1 {f1(tp, fp, fn):.3f}"
    assert not no_run, f"no run where the label has something to find: {no_run}"


@pytest.mark.parametrize(
    "name", ["sglang-kr-study-retract-decode.log", "sglang-jdgenie197-tp0-decode-cg-true.log"]
)
def test_decode_flags_are_logged_truth(name: str) -> None:
    corpus = need_corpus("real")
    report = analyze([str(corpus / name)], generated_at="fixed")
    batches = report.runs[0].record.to_json()["batches"]
    assert batches["source"] == "logged"
    assert batches["graph"] + batches["eager"] > 0
