"""Where the peak RSS of ``analyze LOG --format json --no-html`` falls, stage by stage.

Runs the command in this process with the pipeline's stages (and the steps inside them
that held big peaks before) wrapped; at each stage's start and end it prints the RSS and
the peak RSS since the previous mark, then resets the kernel's peak (``VmHWM``, by writing
5 to ``/proc/self/clear_refs``; Linux 4.0+). No sampler thread: the worker pool still forks
(a thread would make it use forkserver, another memory picture). The last lines name the
interval that held the whole run's peak.

    python bench/big_log_peaks.py LOG [--jobs N] [--trim] [--also module:function ...]

``--trim`` gives freed memory back (``malloc_trim``, Arrow's pool) at each stage start: the
peaks then show what a stage allocates, not what the allocators kept of earlier ones.
``--also`` wraps more functions (the name as the wrapped module sees it).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: (module, function) wrapped by default: the stages, and the steps inside them that held
#: the vLLM 700 MB log's peaks (settle_years, the first run's facts, the fleet summary)
WRAPPED: tuple[str, ...] = (
    "diag.pipeline:ingest_stage",
    "diag.ingest:_to_tables",
    "diag.ingest:settle_years",
    "diag.pipeline:runs_stage",
    "diag.pipeline:build_facts",
    "diag.pipeline:advice_stage",
    "diag.pipeline:rules_stage",
    "diag.pipeline:report_stage",
    "diag.report:fleet_summary",
    "diag.output:write_set",
)

_T0 = time.perf_counter()
_MARKS: list[tuple[str, int, int]] = []  # (label, rss MB, peak MB since the mark before)
_TRIM = [False]


def _status() -> tuple[int, int]:
    """(VmRSS, VmHWM) in MB."""
    got = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                got[line[:5]] = int(line.split()[1]) // 1024
    return got["VmRSS"], got["VmHWM"]


def mark(label: str) -> None:
    rss, peak = _status()
    _MARKS.append((label, rss, peak))
    print(
        f"{time.perf_counter() - _T0:7.2f} s  {label:<34} rss {rss:5d} MB  peak {peak:5d} MB",
        file=sys.stderr,
        flush=True,
    )
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def _wrap(spec: str) -> None:
    module_name, name = spec.rsplit(":", 1)
    module = importlib.import_module(module_name)
    fn: Callable[..., Any] = getattr(module, name)

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if _TRIM[0]:
            from diag.event_frames import release_freed_memory

            release_freed_memory()
        mark(f"> {name}")
        try:
            return fn(*args, **kwargs)
        finally:
            mark(f"< {name}")

    setattr(module, name, wrapped)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--trim", action="store_true", help="malloc_trim at each stage start")
    ap.add_argument("--also", nargs="*", default=[], help="more module:function to wrap")
    args = ap.parse_args()
    if not Path("/proc/self/clear_refs").exists():
        raise SystemExit("big_log_peaks.py: needs Linux (/proc/self/clear_refs)")
    _TRIM[0] = args.trim
    for spec in (*WRAPPED, *args.also):
        _wrap(spec)
    mark("imports")
    from diag.cli import main as cli_main  # (``run`` ends the process with os._exit)

    tmp = tempfile.TemporaryDirectory(prefix="graphdiag-peaks-")
    out = tmp.name
    argv = ["graphdiag", "analyze", args.log, "--format", "json", "--no-html", "-q", "-o", out]
    if args.jobs is not None:
        argv += ["--jobs", str(args.jobs)]
    sys.argv = argv
    stdout = sys.stdout
    try:
        sys.stdout = open("/dev/null", "w")  # the JSON report  # noqa: SIM115
        cli_main()
    except SystemExit:
        pass
    finally:
        sys.stdout.close()
        sys.stdout = stdout
        tmp.cleanup()
    mark("end")
    i = max(range(len(_MARKS)), key=lambda k: _MARKS[k][2])
    before = _MARKS[i - 1][0] if i else "start"
    print(f"highest peak {_MARKS[i][2]} MB, between '{before}' and '{_MARKS[i][0]}'")
    print("(peak: the highest RSS since the line before; the JSON report went to /dev/null)")


if __name__ == "__main__":
    main()
