"""Time and peak memory of reading torch-profiler traces, against ``gzip -dc`` of the same files.

Generates, into a temporary folder (never the tree), a multi-rank trace set of the real
traces' structure (``fixtures/gen/traces.py``: one Kineto file per rank, serving steps of
every kind interleaved, python_function filler for a real trace's bulk), then prints per
run: uncompressed GB, events, seconds of ``gzip -dc FILES > /dev/null``, seconds and peak
RSS of reading and analysing them in a fresh process (``read_trace`` + ``analyse``, file
after file, as ``analyze`` does), and the ratio. Targets (issue 25): peak RSS < 400 MB on
1 GB uncompressed, time within 4x of ``gzip -dc``.

Each of the two is timed ``--repeat`` times, alternating, and the best of each is printed
(other jobs on a shared machine slow either at random).

Usage: python bench/trace_bench.py [--gb 1.0] [--ranks 4] [--filler N] [--keep DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "fixtures"))

from gen.traces import serving_steps, span_name, trace_chunks, write_trace  # noqa: E402

# python_function events per step: 1.5 per kernel of a full-graph step, the corpus's SGLang
# decode trace's mix (821 python_function beside 555 kernels); --filler 0 is the worst case
FILLER = 630
START_S = 1767225600.0
KINDS = ("graph", "graph", "piecewise", "eager", "lost")  # interleaved, every verdict

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from diag.artifacts.trace import analyse
from diag.artifacts.trace_reader import read_trace
events, steps = 0, {}
for p in sys.argv[1:]:
    a = analyse(read_trace(p))
    events += a.summary["events"]
    for k, v in a.summary["steps"].items():
        steps[k] = steps.get(k, 0) + v
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"s": time.perf_counter() - t0, "rss_mb": rss, "events": events, "steps": steps}))
"""


def generate(folder: Path, gb: float, ranks: int, filler: int) -> list[Path]:
    """One file per rank, ~gb/ranks uncompressed each."""
    probe = serving_steps(100, START_S, KINDS, filler=filler)
    per_step = sum(len(c.encode()) for c in trace_chunks(probe)) / len(probe)
    n_steps = max(1, int(gb * 1e9 / ranks / per_step))
    out = []
    for r in range(ranks):
        steps = serving_steps(n_steps, START_S + r * 0.001, KINDS, filler=filler)
        path = folder / f"bench-rank-{r}.{r}.pt.trace.json.gz"
        write_trace(path, trace_chunks(steps, rank=r, world=ranks))
        out.append(path)
    assert span_name(steps[0])  # the spans are the engine's
    return out


def gunzip_seconds(files: list[Path]) -> float:
    t = time.perf_counter()
    for f in files:
        subprocess.run(["gzip", "-dc", str(f)], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def raw_bytes(files: list[Path]) -> int:
    n = 0
    for f in files:
        p = subprocess.run(
            f"gzip -dc {f} | wc -c", shell=True, capture_output=True, text=True, check=True
        )
        n += int(p.stdout.strip())
    return n


def read_in_child(files: list[Path]) -> dict[str, object]:
    p = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, files)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    return json.loads(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="uncompressed size of the set")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--filler", type=int, default=FILLER, help="python_function events a step")
    ap.add_argument("--keep", help="write the traces here and keep them (default: a temp dir)")
    ap.add_argument(
        "--repeat", type=int, default=2, help="alternate gzip -dc and the read this often; min"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="trace-bench-") as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        files = generate(folder, args.gb, args.ranks, args.filler)
        print(
            f"generated {len(files)} rank files in {time.perf_counter() - t:.1f} s", file=sys.stderr
        )
        size = raw_bytes(files)
        gz = gunzip_seconds(files)
        res = read_in_child(files)
        print(
            f"uncompressed: {size / 1e9:.2f} GB in {len(files)} rank files, {res['events']:,} events"
        )
        print(f"gzip -dc > /dev/null: {gz:.1f} s")
        print(f"read + analyse: {res['s']:.1f} s ({res['s'] / gz:.1f}x gzip -dc; target <= 4x)")
        print(f"peak RSS: {res['rss_mb']:.0f} MB (target < 400 MB)")
        print(f"steps: {res['steps']}")


if __name__ == "__main__":
    main()
