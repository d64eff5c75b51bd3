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

With ``--shapes fleet`` the pods are the fleet bar of issue 37: start-up and 40 decode lines
each (~6 KB), four ``cuda_graph_max_bs`` values across them.

With ``--shapes mixed`` the pods are of many shapes instead of one: every fixture incident's
files (both engines, capture failures, OOMs, restarts, eager and disabled graphs, multi-rank,
profiler tables) for half of them, and for the other half generated real-shape SGLang and vLLM
logs of 4-60 KB, each with its own seed (so no two are alike), some with a restart or a
traceback. ``--command`` measures the whole ``graphdiag analyze FOLDER`` (JSON and HTML
written, as a user runs it) in a child process: its CPU seconds and peak RSS.

Usage: python bench/many_files.py [--counts 1000 3000 10000] [--lines 60] [--cluster local:2]
       python bench/many_files.py --shapes mixed --command [--counts 1000 3000]
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

import diag.facts.runs as runs_mod  # noqa: E402  (the pipeline's runs stage imports from it)
from bench.gen_logs import GENERATORS, sglang_lines, write_log  # noqa: E402
from diag.api import analyze  # noqa: E402

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"


def write_folder(folder: Path, count: int, lines: int, shapes: str = "one") -> None:
    if shapes == "mixed":
        write_mixed(folder, count)
        return
    if shapes == "fleet":
        write_fleet(folder, count)
        return
    body = "\n".join(islice(sglang_lines(10**9, seed=1, tracebacks=0), lines)) + "\n"
    for i in range(count):
        pod = folder / f"pod-{i:05d}"
        pod.mkdir(parents=True)
        (pod / "server.log").write_text(body)


#: the fleet bar's pods differ in their ``cuda_graph_max_bs``
FLEET_MAX_BS = (64, 96, 128, 160)


def write_fleet(folder: Path, count: int, decode_lines: int = 40) -> None:
    """The fleet bar of issue 37: small SGLang pod logs (server_args echo, KV and capture
    lines, ``decode_lines`` decode lines; ~6 KB), four ``cuda_graph_max_bs`` values across pods."""
    for i in range(count):
        max_bs = FLEET_MAX_BS[i % len(FLEET_MAX_BS)]
        body, decodes = [], 0
        for line in sglang_lines(10**9, seed=i, tracebacks=0, max_bs=max_bs):
            if "Decode batch" in line:
                decodes += 1
                if decodes > decode_lines:
                    break
            elif decodes:
                continue  # past start-up: decode lines only
            body.append(line)
        pod = folder / f"pod-{i:05d}"
        pod.mkdir(parents=True)
        (pod / "server.log").write_text("\n".join(body) + "\n")


def write_mixed(folder: Path, count: int) -> None:
    """Pods of many shapes: fixture incidents (every file of one, in turn) and generated logs
    of both engines, each with its own seed, size, restarts and tracebacks."""
    incidents = sorted(p for p in INCIDENTS.iterdir() if p.is_dir())
    for i in range(count):
        pod = folder / f"pod-{i:05d}"
        pod.mkdir(parents=True)
        if i % 2 == 0:
            for f in sorted(incidents[(i // 2) % len(incidents)].iterdir()):
                if f.is_file() and f.suffix != ".yaml":
                    (pod / f.name).write_bytes(f.read_bytes())
            continue
        engine = ("sglang-real", "vllm-real", "sglang", "vllm")[(i // 2) % 4]
        size = 4_000 + (i * 7919) % 56_000
        lines = GENERATORS[engine](size, seed=i, restarts=int(i % 10 == 1), tracebacks=i % 3 == 0)
        write_log(pod / "server.log", lines)


def measure_command(count: int, lines: int, shapes: str) -> None:
    """The whole command in a child process: CPU seconds and peak RSS of that child."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "fleet"
        write_folder(folder, count, lines, shapes)
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        cmd = [sys.executable, "-m", "diag", "analyze", str(folder), "-o", str(Path(tmp) / "out")]
        start = time.perf_counter()
        subprocess.run([*cmd, "-q", "--fail-on", "never"], check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        use = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = use.ru_utime + use.ru_stime
        out = {p.suffix: p.stat().st_size for p in (Path(tmp) / "out").iterdir()}
        print(
            f"{count:>7} {size / 1e6:>8.1f} {wall:>9.1f} {cpu:>9.1f} {1000 * cpu / count:>11.1f}"
            f" {use.ru_maxrss / 1024:>13,.0f} {out.get('.json', 0) / count / 1e3:>10.1f}"
            f" {out.get('.html', 0) / 1e6:>9.1f}",
            flush=True,
        )


def measure(count: int, lines: int, cluster: str | None = None, shapes: str = "one") -> None:
    """One folder size, in this process: prints its row."""
    split_time = [0.0]
    real_split = runs_mod.split_runs

    def timed_split(*a, **k):  # type: ignore[no-untyped-def]
        t = time.process_time()
        try:
            return real_split(*a, **k)
        finally:
            split_time[0] += time.process_time() - t

    runs_mod.split_runs = timed_split
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "fleet"
        write_folder(folder, count, lines, shapes)
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", nargs="+", default=["1000", "3000", "10000"])
    ap.add_argument("--lines", type=int, default=60, help="lines per log file (--shapes one)")
    ap.add_argument("--cluster", help="a Dask scheduler address or local[:N]")
    ap.add_argument(
        "--shapes", choices=("one", "fleet", "mixed"), default="one", help="pod log shapes"
    )
    ap.add_argument("--command", action="store_true", help="time the whole CLI command")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child's one folder size
    args = ap.parse_args()
    if args.command:
        print(
            f"{'files':>7} {'MB':>8} {'wall s':>9} {'CPU s':>9} {'CPU ms/file':>11}"
            f" {'peak RSS MB':>13} {'JSON KB/run':>10} {'HTML MB':>9}",
            flush=True,
        )
        for count in (int(c) for arg in args.counts for c in arg.split(",")):
            measure_command(count, args.lines, args.shapes)
        return
    if args.one:
        measure(args.one, args.lines, args.cluster, args.shapes)
        return
    print(
        f"{'files':>7} {'total s':>9} {'s/file':>9} {'CPU s':>9} {'CPU s/file':>11}"
        f" {'split CPU s':>13} {'runs':>6} {'peak RSS MB':>13}",
        flush=True,
    )
    for count in (int(c) for arg in args.counts for c in arg.split(",")):
        cmd = [sys.executable, __file__, "--one", str(count), "--lines", str(args.lines)]
        cmd += ["--shapes", args.shapes]
        cmd += ["--cluster", args.cluster] if args.cluster else []
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
