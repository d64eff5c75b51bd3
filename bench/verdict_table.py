"""Every shared real excerpt with its run verdict: a table a reviewer can scan (issue 24).

    python bench/verdict_table.py [../shared/corpus] [--markdown]

One row per input of ``real``, ``real-2`` and ``real-3`` (a log that made no run gets a
row with its input reason), with the labels' kind beside the verdict, the findings and the
reason; then the counts per verdict. Rows where a labelled capture error is ``ok``, or a
run with an error line is ``ok``, are marked ``!!`` (the done-when of issue 24 says none).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from diag.api import analyze  # noqa: E402

SUBS = ("real", "real-2", "real-3")


def rows(corpus: Path) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for sub in SUBS:
        folder = corpus / sub
        if not folder.is_dir():
            continue
        labels = {
            c["file"]: c for c in yaml.safe_load((folder / "labels.yaml").read_text())["cases"]
        }
        report = analyze([str(folder)], generated_at="fixed")
        seen: set[str] = set()
        for run in report.runs:
            name = Path(run.facts.run.sources[0]).name
            seen.update(Path(s).name for s in run.facts.run.sources)
            label = labels.get(name, {})
            kind = ",".join(label.get("kind") or [])
            errored = bool(label.get("capture_error")) or not run.facts.tables["error"].empty
            out.append(
                {
                    "corpus": sub,
                    "file": name + (f"#{run.id.rsplit('#', 1)[1]}" if "#" in run.id else ""),
                    "kind": kind,
                    "verdict": run.verdict,
                    "findings": " ".join(sorted({f.code for f in run.findings})),
                    "reason": run.verdict_reason,
                    "flag": "!!" if errored and run.verdict == "ok" else "",
                }
            )
        for item in report.inputs:
            name = Path(item.path).name
            if item.kind == "log" and name not in seen:
                out.append(
                    {
                        "corpus": sub,
                        "file": name,
                        "kind": ",".join(labels.get(name, {}).get("kind") or []),
                        "verdict": "(no run)",
                        "findings": "",
                        "reason": item.reason or "",
                        "flag": "" if item.reason else "!!",
                    }
                )
    return out


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        raise SystemExit(0)
    args = [a for a in argv[1:] if not a.startswith("--")]
    corpus = Path(args[0]) if args else ROOT.parent / "shared" / "corpus"
    table = rows(corpus)
    if "--markdown" in argv:
        print("| corpus | excerpt | labels' kind | verdict | findings | reason |")
        print("|---|---|---|---|---|---|")
        for r in table:
            reason = r["reason"].replace("|", "\\|").replace(str(corpus) + "/", "")[:160]
            print(
                f"| {r['corpus']} | {r['flag']}{r['file']} | {r['kind']} | {r['verdict']} | "
                f"{r['findings']} | {reason} |"
            )
    else:
        for r in table:
            print(
                f"{r['flag']:2} {r['corpus']:6} {r['verdict']:15} {r['findings']:18} "
                f"{r['file'][:70]:70} {r['kind']}"
            )
    counts = Counter(r["verdict"] for r in table)
    print()
    print(f"{len(table)} rows: " + ", ".join(f"{v} {n}" for v, n in counts.most_common()))
    print(f"flagged (!!): {sum(1 for r in table if r['flag'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
