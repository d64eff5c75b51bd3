"""Where ingest memory goes: RSS after the imports, before the frames are built (the sink),
after ingest, the peak, and the real bytes of each big frame.

    python bench/memory.py bench/out/sglang-700MB.log            # one process
    python bench/memory.py bench/out/sglang-700MB.log --jobs 2   # worker processes

RSS from /proc/self/status, peaks from getrusage (the workers' peak is the largest child's).
Frame bytes count each distinct str object once (``memory_usage(deep=True)`` counts a shared
str on every row), categories once, Arrow buffers by their size. See bench/README.md.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rss_mb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return 0


def peak_mb(who: int = resource.RUSAGE_SELF) -> int:
    return resource.getrusage(who).ru_maxrss // 1024


def column_bytes(col: Any) -> int:
    import pandas as pd

    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = col.cat.categories
        return col.cat.codes.nbytes + sum(sys.getsizeof(c) for c in cats) + 8 * len(cats)
    if col.dtype == object:
        distinct = {id(v): v for v in col.array}
        return 8 * len(col) + sum(sys.getsizeof(v) for v in distinct.values())
    return int(col.array.nbytes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()

    import diag.api  # noqa: F401  (what the CLI imports)
    import diag.ingest as ingest_mod

    print(f"imports: RSS {rss_mb()} MB")
    to_tables = ingest_mod._to_tables

    def measured(sink: Any) -> Any:
        gc.collect()
        print(f"before the frames (the sink, {sink.count():,} rows): RSS {rss_mb()} MB")
        return to_tables(sink)

    ingest_mod._to_tables = measured
    ing = ingest_mod.ingest([args.log], jobs=args.jobs)
    gc.collect()
    workers = peak_mb(resource.RUSAGE_CHILDREN)
    print(
        f"after ingest (jobs={args.jobs}): RSS {rss_mb()} MB, peak {peak_mb()} MB"
        + (f", largest worker {workers} MB" if workers else "")
    )
    total = 0
    for kind, frame in ing.tables.items():
        if len(frame) < 10_000:
            continue
        sizes = {c: column_bytes(frame[c]) for c in frame.columns}
        total += sum(sizes.values())
        big = ", ".join(f"{c} {b / 1e6:.1f}" for c, b in sizes.items() if b > 5e6)
        print(f"  {kind}: {len(frame):,} rows, {sum(sizes.values()) / 1e6:.1f} MB ({big})")
    print(f"  frames: {total / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
