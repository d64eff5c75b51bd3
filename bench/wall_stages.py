"""Wall time of each stage of ``graphdiag analyze LOG --format json --no-html``, in one process.

The same calls the command makes, timed from interpreter start: imports, ingest (auto jobs:
worker processes above the parallel threshold), then inside ``diag.api.analyze`` split_runs,
build_facts, advise_runs, evidence and recommendations, then the JSON and text renderers.
With ``--segments``, also each worker segment's start and end and the parent's frame building
(the parallel timeline: where workers wait and what runs serially after them).

Usage: python bench/wall_stages.py LOG [--segments]
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the command line does (diag/entry.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import diag.api as api  # noqa: E402
import diag.cli.analyze  # noqa: E402, F401  (the command's own imports)
import diag.ingest as ingest_mod  # noqa: E402
import diag.ingest.parallel as parallel  # noqa: E402
import diag.pipeline as pipeline  # noqa: E402
from diag.sources.discover import discover  # noqa: E402

#: the analysis steps timed, where the pipeline's stages import them from (they load while
#: the workers read: diag.pipeline.LATER_STAGES)
STEPS = {
    "split_runs": "diag.facts.runs",
    "build_facts": "diag.facts.record",
    "advise_runs": "diag.advise.run_advice",
    "fleet_run": "diag.advise.fleet",
    "resolve_evidence": "diag.evidence",
    "attach_recommendations": "diag.advise.recommend",
}

EVENTS: list[str] = []


def since_start() -> float:
    return time.perf_counter() - T0


def timed(name: str, fn: Any, totals: dict[str, float]) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - start

    return wrapper


SEGMENT_LOG = Path(f"/tmp/wall_stages-{os.getpid()}.txt")
_SCAN = parallel._scan_segment


def traced_scan(task: Any) -> Any:
    """Runs in the (forked) workers: module level, so the pool pickles it by name."""
    start = since_start()
    result = _SCAN(task)
    with SEGMENT_LOG.open("a") as fh:
        fh.write(f"  worker {os.getpid()} segment {task.k}: {start:.2f}-{since_start():.2f} s\n")
    return result


def trace_segments() -> None:
    SEGMENT_LOG.unlink(missing_ok=True)
    parallel._scan_segment = traced_scan
    frames = ingest_mod._to_tables

    def to_tables(sink: Any) -> Any:
        start = since_start()
        out = frames(sink)
        EVENTS.append(f"  parent frame building: {start:.2f}-{since_start():.2f} s")
        return out

    ingest_mod._to_tables = to_tables


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--segments", action="store_true")
    args = ap.parse_args()
    if args.segments:
        trace_segments()
    t_imports = since_start()
    files, problems = discover([args.log])
    ing = ingest_mod.ingest_files(files, problems, meanwhile=pipeline.load_later_stages)
    t_ingest = since_start()
    totals: dict[str, float] = {}
    # the analysis steps where the pipeline's stages import them from
    import importlib

    for name, home in STEPS.items():
        mod = importlib.import_module(home)
        setattr(mod, name, timed(name, getattr(mod, name), totals))
    report = api.analyze([], ingested=ing)
    t_analyze = since_start()
    from diag.render.serialize import to_json
    from diag.render.text import render_text

    to_json(report)
    render_text(report)
    t_out = since_start()
    inner = ", ".join(f"{k} {v:.2f}" for k, v in totals.items())
    print(
        f"imports {t_imports:.2f} s, ingest {t_ingest - t_imports:.2f} s, analyze "
        f"{t_analyze - t_ingest:.2f} s ({inner}), json+text {t_out - t_analyze:.2f} s, "
        f"total {t_out:.2f} s"
    )
    from import_time import cached_bytecode  # (after the timing: bench/ is on sys.path)

    fresh, total = cached_bytecode()
    print(f"bytecode cached for {fresh} of {total} diag modules (none: imports compile them)")
    if args.segments:
        if SEGMENT_LOG.exists():
            print(SEGMENT_LOG.read_text().rstrip())
            SEGMENT_LOG.unlink()
        print("\n".join(EVENTS))


if __name__ == "__main__":
    main()
