"""Import time of ``graphdiag analyze LOG --format json --no-html``: what it loads, by package.

Every module the command imports before its scan is serial time ahead of the workers (issue
22). Runs the command N times under ``python -X importtime`` (each in a fresh interpreter,
from this checkout) and prints, per run, the total self time; then, from the fastest time of
each module over the runs (a shared machine's noise mostly adds), the modules loaded, the
self time by top-level package and the diag modules with the most module-level work.
``-X importtime`` itself adds time per module: compare figures of this script with each
other, and the wall of the command with ``wall_stages.py``.

Bytecode: with ``PYTHONDONTWRITEBYTECODE=1`` (set in some shells) and no ``__pycache__`` in
the checkout, every run compiles diag's ~140 modules from source again (~0.17 s CPU here),
which an installed wheel never does (pip compiles at install). The script says how many of
diag's modules have cached bytecode; ``--compiled`` compiles them first (``compileall``, into
the checkout's ignored ``__pycache__``), the installed package's condition.

Usage: python bench/import_time.py LOG [--runs 5] [--top 20] [--format json] [--compiled]
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")
HTML_SIDE = ("plotly", "_plotly_utils", "narwhals", "jinja2")


def one_run(log: str, fmt: str) -> dict[str, int]:
    """Self time in microseconds of each module one command run imported."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-X", "importtime", "-m", "diag", "analyze", log]
        cmd += ["--format", fmt, "--no-html", "-o", out]
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if res.returncode not in (0, 1):  # 1: a finding at --fail-on's level, the report is there
        sys.exit(f"the command failed ({res.returncode}): {res.stderr.strip()[-500:]}")
    return {m[4]: int(m[1]) for m in map(LINE.match, res.stderr.splitlines()) if m}


def cached_bytecode() -> tuple[int, int]:
    """(diag modules whose bytecode is cached and not older than the source, modules)."""
    sources = sorted((ROOT / "diag").rglob("*.py"))
    fresh = 0
    for src in sources:
        pyc = Path(importlib.util.cache_from_source(str(src)))
        fresh += pyc.is_file() and pyc.stat().st_mtime >= src.stat().st_mtime
    return fresh, len(sources)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--format", default="json", choices=["json", "text", "markdown", "yaml"])
    ap.add_argument("--compiled", action="store_true", help="compile diag's bytecode first")
    args = ap.parse_args()
    if args.compiled:
        compileall.compile_dir(ROOT / "diag", quiet=1)
    fresh, total = cached_bytecode()
    print(f"bytecode cached for {fresh} of {total} diag modules")
    best: dict[str, int] = {}
    for i in range(args.runs):
        run = one_run(args.log, args.format)
        print(f"run {i + 1}: {len(run)} modules, {sum(run.values()) / 1000:.0f} ms self time")
        for name, us in run.items():
            best[name] = min(us, best.get(name, us))
    packages: Counter[str] = Counter()
    for name, us in best.items():
        packages[name.split(".")[0]] += us
    print(f"fastest per module: {sum(best.values()) / 1000:.0f} ms over {len(best)} modules")
    print("by package: " + ", ".join(f"{p} {us / 1000:.1f}" for p, us in packages.most_common(8)))
    loaded = sorted({p for p in packages if p in HTML_SIDE})
    print("HTML side loaded: " + (", ".join(loaded) if loaded else "none"))
    ours = sorted(((us, n) for n, us in best.items() if n.split(".")[0] == "diag"), reverse=True)
    print(f"diag modules with the most self time (ms, of {len(ours)}):")
    for us, name in ours[: args.top]:
        print(f"  {us / 1000:5.1f}  {name}")


if __name__ == "__main__":
    main()
