"""graphdiag against grep on big generated logs: wall time, lines/s, peak memory, ratio.

    python bench/run_bench.py                   # ~700 MB SGLang + ~700 MB vLLM log
    python bench/run_bench.py --size 100e6      # smaller, quicker
    python bench/run_bench.py --jobs 1          # the single-process path
    python bench/run_bench.py --stages          # also the in-process stage breakdown
    python bench/run_bench.py --repeat 3        # medians of 3 (the machine is shared)
    python bench/run_bench.py --folder 10000    # also a folder of 10,000 small logs (default)
    python bench/run_bench.py --repeat 3 --folder 0 --engines sglang-real vllm-real --out /tmp/gd
                                                # the real line shapes of issue 22, logs under /tmp

Logs are generated into bench/out/ (kept between runs; regenerated when the size or the
generator changes). For each log it runs, one after the other:

* ``LC_ALL=C grep -c -F -f ANCHORS LOG``: the literal anchors graphdiag's own prefilter
  uses (taken from the parsers' ``anchors``), counting matching lines (``-c``: grep must
  read everything; writing to /dev/null would let GNU grep stop at the first match);
* ``python -m diag analyze LOG --format json --no-html -q``;
* ``python -m diag analyze LOG -q -o DIR``: the command as typed, writing the HTML and JSON
  reports (single logs only; reported as its own row and ratio).

Per child: wall time, CPU time (user+sys of the whole process tree, from wait4), peak RSS
of the largest process, and peak total PSS of the process tree (sampled from
/proc/PID/smaps_rollup every 50 ms; counts pages shared by forked workers once).
See bench/README.md for figures and the stage breakdown.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: where logs, anchors and reports go (``--out``; default bench/out/, git-ignored)
OUT = Path(os.environ.get("GRAPHDIAG_BENCH_OUT", ROOT / "bench" / "out"))
TIME = "/usr/bin/time"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import gen_logs  # noqa: E402


@dataclass
class Run:
    name: str
    wall: float
    cpu: float
    max_rss_mb: float
    tree_pss_mb: float
    rc: int
    stdout: bytes


def _tree_pss_kb(root: int) -> int:
    """Total PSS of a process and its descendants (kB), 0 when it is gone."""
    pids = [root]
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, i = 0, 0
    while i < len(pids):
        pid = pids[i]
        i += 1
        pids.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total


def measure(name: str, cmd: list[str], env: dict[str, str] | None = None) -> Run:
    """Run ``cmd`` under /usr/bin/time; wall, CPU and memory of its whole process tree."""
    timing = OUT / f".time-{os.getpid()}"
    if Path(TIME).exists():
        cmd = [TIME, "-o", str(timing), "-f", "%e %U %S %M", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})}
    )
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _tree_pss_kb(proc.pid))
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out_chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    err = proc.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        sys.stderr.write(err.decode(errors="replace")[-2000:])
    cpu, max_rss = usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
    if timing.exists():  # /usr/bin/time sees the command itself, not the forked Python parent
        _, user, system, rss_kb = timing.read_text().split()[-4:]
        cpu, max_rss = float(user) + float(system), int(rss_kb) / 1024
        timing.unlink()
    return Run(name, wall, cpu, max_rss, peak[0] / 1024, proc.returncode, b"".join(out_chunks))


def _generator_hash() -> str:
    return hashlib.sha256((ROOT / "bench" / "gen_logs.py").read_bytes()).hexdigest()[:12]


def ensure_log(engine: str, size: int) -> Path:
    """bench/out/<engine>-<size>.log, generated unless an identical one is there."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{engine}-{size // 1_000_000}MB.log"
    meta_path = path.with_suffix(".meta.json")
    meta = {"engine": engine, "size": size, "seed": 0, "generator": _generator_hash()}
    if path.exists() and meta_path.exists():
        old = json.loads(meta_path.read_text())
        if {k: old.get(k) for k in meta} == meta and "lines" in old:
            return path
    t0 = time.perf_counter()
    print(f"generating {path.name} ...", flush=True)
    lines = gen_logs.write_log(
        path, gen_logs.GENERATORS[engine](size, seed=0, restarts=1, tracebacks=2)
    )
    meta["lines"] = lines
    meta_path.write_text(json.dumps(meta))
    print(
        f"  {lines:,} lines, {path.stat().st_size / 1e6:,.0f} MB in {time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    return path


def anchors_file(engine: str) -> Path:
    from diag.ingest import parsers_for

    anchors = sorted({a for p in parsers_for(engine.split("-")[0]) for a in p.anchors})
    path = OUT / f"{engine}.anchors"
    path.write_text("\n".join(anchors) + "\n")
    return path


def ensure_folder(count: int, lines_per_file: int = 60) -> tuple[Path, int]:
    """bench/out/folder-<count>/pod-NNNNN/server.log: small SGLang logs, one run each."""
    from itertools import islice

    folder = OUT / f"folder-{count}"
    body = "\n".join(islice(gen_logs.sglang_lines(10**9, seed=1, tracebacks=0), lines_per_file))
    body += "\n"
    last = folder / f"pod-{count - 1:05d}" / "server.log"
    if not (last.exists() and last.read_text() == body):
        print(f"writing {count:,} files into {folder} ...", flush=True)
        for i in range(count):
            pod = folder / f"pod-{i:05d}"
            pod.mkdir(parents=True, exist_ok=True)
            (pod / "server.log").write_text(body)
    return folder, count * body.count("\n")


def _median(runs: list[Run]) -> Run:
    """The run of median wall time (its CPU and memory figures with it)."""
    return sorted(runs, key=lambda r: r.wall)[len(runs) // 2]


def bench_one(
    engine: str, size: int, jobs: int | None, repeat: int = 1, folder: int = 0
) -> dict[str, object]:
    if folder:
        log, lines = ensure_folder(folder)
        anchors = anchors_file(engine)
        grep_cmd = ["grep", "-r", "-c", "-F", "-f", str(anchors), str(log)]
        size_bytes = sum(f.stat().st_size for f in log.rglob("*.log"))
    else:
        log = ensure_log(engine, size)
        lines = json.loads(log.with_suffix(".meta.json").read_text())["lines"]
        anchors = anchors_file(engine)
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the cache
        grep_cmd = ["grep", "-c", "-F", "-f", str(anchors), str(log)]
        size_bytes = log.stat().st_size
    cmd = [
        sys.executable,
        "-m",
        "diag",
        "analyze",
        str(log),
        "--format",
        "json",
        "--no-html",
        "-q",
        "-o",
        str(OUT / "reports"),
    ]
    env = {"PYTHONPATH": str(ROOT)}
    if jobs is not None:
        cmd += ["--jobs", str(jobs)]
    # the command as a user types it: HTML + JSON files and the text summary (not for the
    # folder: one HTML section per pod is a different question)
    html_cmd = [sys.executable, "-m", "diag", "analyze", str(log), "-q", "-o", str(OUT / "html")]
    if jobs is not None:
        html_cmd += ["--jobs", str(jobs)]
    greps, gds, htmls = [], [], []
    for _ in range(repeat):  # each graphdiag run paired with a grep run just before it
        greps.append(measure("grep -F", grep_cmd, {"LC_ALL": "C"}))
        gds.append(measure("graphdiag", cmd, env))
        if not folder:
            htmls.append(measure("+ HTML", html_cmd, env))
    grep, gd = _median(greps), _median(gds)
    ratios = sorted(g.wall / max(r.wall, 1e-9) for g, r in zip(gds, greps, strict=True))
    try:  # (a fleet's report can outgrow what a pipe hands back whole: 5.9 GB for 10,000 pods)
        report = json.loads(gd.stdout) if gd.stdout.strip().startswith(b"{") else {}
    except ValueError:
        print(
            f"  graphdiag's JSON on stdout ({len(gd.stdout):,} bytes) did not parse: events not counted"
        )
        report = {}
    events = sum(i.get("events") or 0 for i in report.get("inputs", []))
    if folder:
        grep.stdout = str(sum(int(x.rsplit(b":", 1)[1]) for x in grep.stdout.split())).encode()
    rows = []
    for r in (grep, gd, *([_median(htmls)] if htmls else [])):
        rows.append(
            f"  {r.name:10s} {r.wall:8.2f} s wall {r.cpu:8.2f} s CPU {lines / r.wall / 1e6:7.3f} M lines/s "
            f"{size_bytes / r.wall / 1e6:8.1f} MB/s  peak RSS {r.max_rss_mb:7.0f} MB "
            f"(tree PSS {r.tree_pss_mb:6.0f} MB)  rc={r.rc}"
        )
    print(
        f"{log.name}: {engine}, {size_bytes / 1e6:,.0f} MB, {lines:,} lines, "
        f"grep matched {int(grep.stdout or 0):,} lines, graphdiag {events:,} events"
    )
    print("\n".join(rows))
    print(
        f"  ratio graphdiag/grep: {gd.wall / grep.wall:.1f}x wall (medians of {repeat}; paired "
        f"ratios {', '.join(f'{x:.1f}' for x in ratios)}), {gd.cpu / max(grep.cpu, 1e-9):.1f}x CPU"
    )
    if htmls:
        html = _median(htmls)
        print(
            f"  ratio with the HTML report (analyze's default): {html.wall / grep.wall:.1f}x wall, "
            f"{html.cpu / max(grep.cpu, 1e-9):.1f}x CPU"
        )
    return {
        "engine": engine,
        "bytes": size_bytes,
        "lines": lines,
        "events": events,
        "grep": grep.__dict__ | {"stdout": None},
        "graphdiag": gd.__dict__ | {"stdout": None},
        "graphdiag_html": _median(htmls).__dict__ | {"stdout": None} if htmls else None,
    }


def stage_breakdown(engine: str, size: int, jobs: int | None) -> None:
    """Wall time of each stage of one real run, in this process: ingest (parallel or not),
    frames inside ingest, runs/facts/rules, JSON."""
    from diag.api import analyze
    from diag.ingest import ingest
    from diag.render.serialize import to_json

    log = ensure_log(engine, size)
    t0 = time.perf_counter()
    ing = ingest([str(log)], jobs=jobs)
    t1 = time.perf_counter()
    report = analyze([str(log)], ingested=ing, generated_at="x")
    t2 = time.perf_counter()
    to_json(report)
    t3 = time.perf_counter()
    print(
        f"  stages ({engine}, jobs={jobs or 'auto'}): ingest {t1 - t0:.2f} s, analyze {t2 - t1:.2f} s, "
        f"json {t3 - t2:.2f} s"
    )
    sample = ensure_log(engine, min(size, 70_000_000))  # the single-core breakdown, on <= 70 MB
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "stages.py"), str(sample), "--repeat", "1"],
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=float, default=700e6, help="bytes per log (default 700e6)")
    ap.add_argument(
        "--engines",
        nargs="+",
        default=["sglang,vllm"],
        help=f"logs to measure, space or comma separated: {', '.join(gen_logs.GENERATORS)}",
    )
    ap.add_argument(
        "--jobs", type=int, default=None, help="graphdiag worker processes (default auto)"
    )
    ap.add_argument("--stages", action="store_true", help="also print the per-stage breakdown")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each, medians reported")
    ap.add_argument("--folder", type=int, default=10_000, help="files in the folder (0: none)")
    ap.add_argument(
        "--out", type=Path, default=None, help="logs and reports here (default bench/out/)"
    )
    args = ap.parse_args()
    if args.out is not None:
        global OUT
        OUT = args.out
    # graphdiag runs from this tree (PYTHONPATH): compile its bytecode first, as `pip install`
    # does for an installed package; without it every run compiles ~120 modules from source
    # (~0.3 s; this machine sets PYTHONDONTWRITEBYTECODE, so nothing is cached between runs)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "diag")], check=True)
    results = []
    for engine in [e for arg in args.engines for e in arg.split(",") if e]:
        results.append(bench_one(engine, int(args.size), args.jobs, args.repeat))
        if args.stages:
            stage_breakdown(engine, int(args.size), args.jobs)
    if args.folder:
        results.append(bench_one("sglang", 0, args.jobs, args.repeat, folder=args.folder))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
