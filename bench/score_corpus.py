"""Score graphdiag on the labelled real sets: per set, the share of labelled fields read
right, capture-error precision / recall / F1, and the capture errors missed, by class.

    python bench/score_corpus.py [SET ...] [--shared DIR] [--mismatches]

SETs are ``real`` .. ``real-4`` (in the shared corpus, ``../shared/corpus`` beside the
checkout, or ``--shared``) and ``mined`` (tests/corpus/mined, in this repository); default:
every set present. The comparison is the conformance test's (tests/corpus_scoring.py), so
the figures here are the ones tests/test_corpus_conformance.py asserts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import CORPUS  # noqa: E402
from tests.corpus_scoring import SETS, SetScore, score_set, set_dir  # noqa: E402


def report(score: SetScore, mismatches: bool) -> list[str]:
    out = [score.summary()]
    if mismatches:
        out += [f"  mismatch {m}" for m in score.mismatches]
    by_class = score.misses_by_class()
    for cls in sorted(by_class):
        out.append(f"  missed {cls} ({len(by_class[cls])}):")
        out += [f"    {m}" for m in by_class[cls]]
    for file, want, got in score.false:
        out.append(f"  false {got} (label {want}): {file}")
    out += [f"  no run, label expects something: {f}" for f in score.no_run]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sets", nargs="*", metavar="SET", help=f"any of {', '.join(SETS)}")
    ap.add_argument("--shared", type=Path, default=CORPUS, help="the shared corpus folder")
    ap.add_argument("--mismatches", action="store_true", help="list every field that differs")
    args = ap.parse_args(argv)
    unknown = [s for s in args.sets if s not in SETS]
    if unknown:
        ap.error(f"unknown set {', '.join(unknown)} (sets: {', '.join(SETS)})")
    names = args.sets or [s for s in SETS if (set_dir(s, args.shared) / "labels.yaml").is_file()]
    missing = [s for s in names if not (set_dir(s, args.shared) / "labels.yaml").is_file()]
    if missing:
        print(f"score_corpus: no labels.yaml for {', '.join(missing)}", file=sys.stderr)
        return 2
    for name in names:
        print("\n".join(report(score_set(name, set_dir(name, args.shared)), args.mismatches)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
