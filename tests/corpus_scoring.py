"""Scoring labelled excerpts against graphdiag's answer: one place for the conformance test
(tests/test_corpus_conformance.py) and the scoring script (bench/score_corpus.py).

A set is a folder holding ``labels.yaml`` (``cases:``, one entry per excerpt, the fields of
``../shared/corpus/real-2/README.md``) beside the excerpts: the shared sets ``real`` ..
``real-4`` and the project's own mined set ``tests/corpus/mined``. Labels say what the text
shows; :func:`observed` reads the same fields from the report and :func:`compare` lists the
fields that differ.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from diag.api import analyze
from diag.facts.graphs import total
from diag.facts.record import captured_size_count, sizing

ROOT = Path(__file__).resolve().parents[1]
#: the project's own mined set (tests/corpus/mined/README.md says how it was gathered)
MINED = ROOT / "tests" / "corpus" / "mined"
SHARED_SETS = ("real", "real-2", "real-3", "real-4")
SETS = (*SHARED_SETS, "mined")
CLASSES = ("oom", "stream_capture_invalid", "unsupported_op", "distributed", "other")


def set_dir(name: str, shared_corpus: Path) -> Path:
    """Where set ``name`` lives: ``mined`` in this repository, the others in the shared corpus."""
    return MINED if name == "mined" else shared_corpus / name


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


@dataclass
class SetScore:
    """One set's figures: labelled fields matched, capture errors found, and what differed.
    ``misses`` are labelled capture errors not found with their class (``got`` is what the
    report said: ``None``, another class, or ``"no run"``); ``false`` are capture errors the
    report gave where the label has none or another class."""

    name: str
    matched: int = 0
    total: int = 0
    tp: int = 0
    fp: int = 0
    fn: int = 0
    per_field: dict[str, list[int]] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)
    misses: list[tuple[str, str, str | None]] = field(default_factory=list)
    false: list[tuple[str, str | None, str]] = field(default_factory=list)
    no_run: list[str] = field(default_factory=list)
    no_run_expected: list[str] = field(default_factory=list)

    @property
    def fields(self) -> float:
        return self.matched / self.total if self.total else 1.0

    @property
    def f1(self) -> float:
        return f1(self.tp, self.fp, self.fn)

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    def misses_by_class(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for file, want, got in self.misses:
            out.setdefault(want, []).append(f"{file} (got {got})")
        return out

    def summary(self) -> str:
        return (
            f"{self.name}: {self.matched}/{self.total} labelled fields = {self.fields:.1%}; "
            f"capture errors tp={self.tp} fp={self.fp} fn={self.fn} precision={self.precision:.3f} "
            f"recall={self.recall:.3f} F1={self.f1:.3f}"
        )


def labels(folder: Path) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = yaml.safe_load((folder / "labels.yaml").read_text())["cases"]
    return cases


def score_set(name: str, folder: Path) -> SetScore:
    """Analyse every excerpt of ``folder`` and compare with its label."""
    score = SetScore(name)
    for case in labels(folder):
        path = folder / case["file"]
        want = label_class(case.get("capture_error"))
        report = analyze([str(path)], generated_at="fixed")
        if not report.runs:
            if want is not None:
                score.fn += 1
                score.misses.append((case["file"], want, "no run"))
            (score.no_run if something_to_find(case) else score.no_run_expected).append(
                f"{name}/{case['file']}"
            )
            continue
        got = observed(str(path))
        fields = {k: v for k, v in case.items() if k in got}
        bad = compare(fields, got)
        bad_keys = {k for k, _, _ in bad}
        for k in fields:
            tally = score.per_field.setdefault(k, [0, 0])
            tally[0] += k not in bad_keys
            tally[1] += 1
        score.total += len(fields)
        score.matched += len(fields) - len(bad)
        have = got["capture_error"]
        if want is not None and have == want:
            score.tp += 1
        if want is not None and have != want:
            score.fn += 1
            score.misses.append((case["file"], want, have))
        if have is not None and have != want:
            score.fp += 1
            score.false.append((case["file"], want, have))
        score.mismatches += [
            f"{name}/{case['file']}: {k}: label={w!r} got={h!r}" for k, w, h in bad
        ]
    return score


def classes_of(folder: Path) -> Counter[str]:
    """How many labelled capture errors of each class a set holds."""
    return Counter(
        c for c in (label_class(case.get("capture_error")) for case in labels(folder)) if c
    )
