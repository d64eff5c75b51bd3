"""Does `recommend` ever advise a set that costs more than today's, by its own prices?

For every incident folder under ``fixtures/incidents`` (or the paths given), the recommend
document is made as the CLI makes it and one row printed: the decision, the current and the
recommended set's cost (GPU-s per hour of the observed traffic, in sample, as `recommend`
prints them), the held-out figures the decision compared, and the regret (recommended minus
current; > 0 is advice worse than today). Not a test: it prints figures
(``tests/test_advice_regret.py`` holds the assertion).

    python bench/advice_regret.py [PATH ...] [--corpus [DIR]]

``--corpus`` adds every log of ``DIR/real*`` (default ``../shared/corpus``). Run it with another tree first on
``PYTHONPATH`` to get that tree's figures (a tree without decisions prints "-" for them).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _rows(paths: list[Path]) -> list[tuple[str, dict[str, Any] | str]]:
    from diag.advise.recommend import RecommendError, recommend
    from diag.api import analyze

    out: list[tuple[str, dict[str, Any] | str]] = []
    for p in paths:
        rep = analyze([str(p)], generated_at="bench")
        try:
            out.append((p.name, recommend(rep.runs, rep.snapshots)))
        except RecommendError as e:
            out.append((p.name, f"no advice: {e}"))
    return out


def _f(v: object) -> str:
    return "-" if v is None else f"{float(v):,.2f}"  # type: ignore[arg-type]


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        raise SystemExit(0)
    shared: Path | None = None
    if "--corpus" in argv:
        i = argv.index("--corpus")
        given = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else None
        shared = Path(given) if given else ROOT.parent / "shared" / "corpus"
        argv = argv[:i] + argv[i + (2 if given else 1) :]
    paths = [Path(a) for a in argv] or sorted(
        p for p in (ROOT / "fixtures" / "incidents").iterdir() if p.is_dir()
    )
    if shared is not None:
        paths += sorted(
            f for d in sorted(shared.glob("real*")) for f in d.iterdir() if f.suffix != ".yaml"
        )
    print(
        f"{'input':44s} {'decision':12s} {'current':>9s} {'recomm.':>9s} {'regret':>8s} "
        f"{'cur held':>9s} {'cand held':>9s}  sizes (current -> recommended)"
    )
    priced = worse = 0
    for name, rec in _rows(paths):
        if isinstance(rec, str):
            print(f"{name[:44]:44s} {rec[:100]}")
            continue
        if rec.get("node") == "prefill":
            print(f"{name[:44]:44s} {'prefill':12s} graphs off on a prefill node: {rec['flags']}")
            continue
        cur, new = rec["current"]["cost_s_h"], rec["recommended"]["cost_s_h"]
        d = rec.get("decision") or {}
        regret = new - cur
        priced += 1
        worse += regret > 1e-9
        cs, ns = rec["current"]["sizes"], rec["recommended"]["sizes"]
        sizes = (
            "same" if cs == ns else f"{len(cs)} sizes -> {ns[:8]}{' ...' if len(ns) > 8 else ''}"
        )
        print(
            f"{name[:44]:44s} {d.get('kind', '-'):12s} {_f(cur):>9s} {_f(new):>9s} "
            f"{regret:>+8.2f} {_f(d.get('current_cost_s_h')):>9s} "
            f"{_f(d.get('candidate_cost_s_h')):>9s}  {sizes}"
        )
    print(f"\n{priced} inputs priced; recommended set costs more than the current one in {worse}")
    return 0


if __name__ == "__main__":
    if not os.environ.get("PYTHONPATH"):  # this tree, unless another one is asked for
        sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
