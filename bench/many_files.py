"""Seconds per file for folders of many small server logs (1,000 / 3,000 / 10,000 files).

Each file is a small SGLang server log of its own (start-up, capture, a few dozen decode
batches; ~8 KB), as a fleet's per-pod log folder holds them, so every file is a stream
and a run: the cost that grows with the number of streams is what this measures. A
per-stream pass over all event frames makes the time per file grow with the folder;
with one grouped pass it stays flat (linear total time).

Prints, per folder size: files, total seconds of ``analyze``, seconds per file, the same in
CPU seconds of this process (steadier than wall time on a shared machine), the CPU
seconds spent splitting the event tables into streams/runs (``split_runs``), and the peak
RSS of the process (each size is measured in a fresh child process: the peak is its own).

With ``--cluster local:2`` (or a scheduler address) the folder is analysed by a Dask
cluster's tasks (``analyze --cluster``): the peak RSS is then the client's (with a
LocalCluster, the scheduler runs in the client process too; the workers are not counted).

Usage: python bench/many_files.py [--counts 1000 3000 10000] [--lines 60] [--cluster local:2]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gen_logs import sglang_lines  # noqa: E402
from diag.api import analyze  # noqa: E402
from diag.fleet import partial  # noqa: E402


def write_folder(folder: Path, count: int, lines: int) -> None:
    body = "\n".join(islice(sglang_lines(10**9, seed=1, tracebacks=0), lines)) + "\n"
    for i in range(count):
        pod = folder / f"pod-{i:05d}"
        pod.mkdir(parents=True)
        (pod / "server.log").write_text(body)


def measure(count: int, lines: int, cluster: str | None = None) -> None:
    """One folder size, in this process: prints its row."""
    split_time = [0.0]
    real_split = partial.split_runs

    def timed_split(*a, **k):  # type: ignore[no-untyped-def]
        t = time.process_time()
        try:
            return real_split(*a, **k)
        finally:
            split_time[0] += time.process_time() - t

    partial.split_runs = timed_split  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "fleet"
        write_folder(folder, count, lines)
        conn = None
        if cluster is not None:
            from diag.fleet.cluster import analyze_on_cluster, connect

            conn = connect(cluster)  # (workers started before the clock)
        start, cpu_start = time.perf_counter(), time.process_time()
        if conn is None:
            report = analyze([str(folder)], generated_at="bench", jobs=1)
        else:
            report = analyze_on_cluster([str(folder)], conn.client, generated_at="bench")
        total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        if conn is not None:
            conn.close()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"{count:>7} {total:>9.2f} {total / count:>9.5f} {cpu:>9.2f} {cpu / count:>11.5f}"
            f" {split_time[0]:>13.2f} {len(report.runs):>6} {peak:>13,.0f}",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", nargs="+", default=["1000", "3000", "10000"])
    ap.add_argument("--lines", type=int, default=60, help="lines per log file")
    ap.add_argument("--cluster", help="a Dask scheduler address or local[:N]")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child's one folder size
    args = ap.parse_args()
    if args.one:
        measure(args.one, args.lines, args.cluster)
        return
    print(
        f"{'files':>7} {'total s':>9} {'s/file':>9} {'CPU s':>9} {'CPU s/file':>11}"
        f" {'split CPU s':>13} {'runs':>6} {'peak RSS MB':>13}",
        flush=True,
    )
    for count in (int(c) for arg in args.counts for c in arg.split(",")):
        cmd = [sys.executable, __file__, "--one", str(count), "--lines", str(args.lines)]
        cmd += ["--cluster", args.cluster] if args.cluster else []
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
