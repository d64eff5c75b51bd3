"""Time the bucket solver (BucketSolver.plan) on a large histogram (n=2000 distinct sizes, K=64); not a unit test."""

from __future__ import annotations

import sys
import time

import numpy as np

from diag.advise.buckets import BucketSolver


def main() -> None:
    """Print wall time for a realistic worst case: many distinct decode batch sizes."""
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        raise SystemExit(0)
    rng = np.random.default_rng(0)
    sizes = np.arange(1, 2001)
    counts = rng.integers(1, 1000, size=sizes.size) * np.exp(-sizes / 600.0)
    hist = {int(s): max(1, int(c)) for s, c in zip(sizes, counts, strict=True)}
    for q in (0.99, 1.0):
        t0 = time.perf_counter()
        plan = BucketSolver(hist, q).plan(64)
        dt = time.perf_counter() - t0
        print(
            f"n={len(hist)} K=64 Q={q}: {dt:.3f} s, {len(plan.sizes)} buckets, "
            f"ceiling={plan.sizes[-1]}, coverage={plan.coverage:.4f}, "
            f"padding_waste={plan.padding_waste:.4f}"
        )


if __name__ == "__main__":
    main()
