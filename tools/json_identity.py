"""Write the JSON (and text / Markdown) report of every fixture incident and every shared
corpus input into a folder, so a refactor can be checked byte for byte against a baseline.

    python tools/json_identity.py /tmp/pipeline/base            # before
    python tools/json_identity.py /tmp/pipeline/now             # after
    diff -r /tmp/pipeline/base /tmp/pipeline/now

Inputs: each folder of ``fixtures/incidents``; each file of ``../shared/corpus/real*/`` alone
and each such folder whole (``--corpus`` elsewhere). ``generated_at`` is fixed, so nothing
but the analysis differs between two runs. Why: issue 33's refactors must keep every report
identical except where a change is deliberate; this is cheaper than the test suite.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from diag.api import analyze  # noqa: E402
from diag.render.serialize import to_json  # noqa: E402
from diag.render.text import render_markdown, render_text  # noqa: E402


def inputs(corpus: Path) -> list[tuple[str, list[str]]]:
    """(output stem, paths) of every input analysed."""
    out = []
    for folder in sorted((ROOT / "fixtures" / "incidents").iterdir()):
        if folder.is_dir():
            out.append((f"incident__{folder.name}", [str(folder)]))
    for folder in sorted(corpus.glob("real*")):
        if not folder.is_dir():
            continue
        out.append((f"{folder.name}__WHOLE", [str(folder)]))
        for f in sorted(folder.iterdir()):
            if f.is_file() and f.name not in ("labels.yaml", "README.md"):
                out.append((f"{folder.name}__{f.name}", [str(f)]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="folder for <input>.json / .txt / .md")
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--only", default="", help="analyse only inputs whose stem has this text")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    done = 0
    for stem, paths in inputs(args.corpus):
        if args.only and args.only not in stem:
            continue
        report = analyze(paths, generated_at="fixed")
        (args.out / f"{stem}.json").write_text(to_json(report))
        (args.out / f"{stem}.txt").write_text(render_text(report))
        (args.out / f"{stem}.md").write_text(render_markdown(report))
        done += 1
    print(f"{done} inputs written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
