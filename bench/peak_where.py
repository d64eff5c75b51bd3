"""Where the RSS peak of an analysis is: the Python stack at the highest RSS sample.

The log is ingested (``--jobs``, default 1), then ``diag.api.analyze`` runs on the ingested
tables and the JSON and text renderers run on its report, as ``graphdiag analyze`` does. A
thread samples RSS every 3 ms and keeps the main thread's stack at the highest sample, so the
line that holds the peak is named, not guessed (tracemalloc misses Arrow's allocator and
glibc's retained pages, which is where RSS and traced memory part ways).

Usage: python bench/peak_where.py LOG [--jobs N] [--html]  (--html: the HTML report too, as
``graphdiag analyze`` writes it by default)
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag import api  # noqa: E402
from diag.ingest import ingest  # noqa: E402
from diag.render.serialize import to_json  # noqa: E402
from diag.render.text import render_text  # noqa: E402


def rss_mb() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 // (1 << 20)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--html", action="store_true", help="render the HTML report too")
    args = ap.parse_args()
    ing = ingest([args.log], jobs=args.jobs)
    print(f"RSS after ingest: {rss_mb()} MB")
    main_thread = threading.get_ident()
    best: list = [0, []]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            now = rss_mb()
            if now > best[0]:
                frame = sys._current_frames().get(main_thread)
                best[:] = [now, traceback.extract_stack(frame)[-8:] if frame else []]
            time.sleep(0.003)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    report = api.analyze([], ingested=ing)
    to_json(report)
    render_text(report)
    if args.html:
        from diag.render.html import render_html

        render_html(report)
    done.set()
    sampler.join()
    print(f"peak RSS during analysis and rendering: {best[0]} MB, at")
    for fs in best[1]:
        print(f"  {fs.filename}:{fs.lineno} {fs.name}: {fs.line}")


if __name__ == "__main__":
    main()
