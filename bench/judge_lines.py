"""Microseconds per call of ``diag.engines.errors.judge`` on the kinds of line it is handed.

judge runs on every error-looking line, so its cost per line (a miss, a runtime code, a
hand-written message, a line both name) is the figure to watch when the vocabulary grows.
Prints the best of five repeats per line kind; also the cost of loading the vocabulary.
"""

from __future__ import annotations

import sys
import time
import timeit

LINES = {
    "miss (an ERROR word, nothing known)": "INFO 01-01 12:00:00 [core.py:1] some Error in a graph",
    "runtime code": "RuntimeError: CUDA error: an illegal memory access was encountered",
    "hand row": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "both": "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:432 'invalid argument'",
    "capture code, NCCL": "NCCL WARN Cuda failure 'capturing stream has unjoined work'",
}


def main() -> None:
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        raise SystemExit(0)
    t0 = time.perf_counter()
    from diag.engines import errors

    errors.judge("warm up")
    print(f"vocabulary loaded in {(time.perf_counter() - t0) * 1e3:.0f} ms")
    n = 2000
    for kind, line in LINES.items():
        errors.judge(line)
        best = min(timeit.repeat(lambda line=line: errors.judge(line), number=n, repeat=5))
        print(f"{best / n * 1e6:8.1f} us  {kind}")


if __name__ == "__main__":
    main()
