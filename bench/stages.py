"""Per-stage timings of graphdiag on one log, in this process (CPU seconds, best of N).

Each stage adds one step of the real pipeline to the previous one, so differences are
what that step costs:

  read      read the file in 8 MiB blocks and count newlines
  prefilter + find candidate lines with the anchor regex (lines cut out, nothing decoded)
  normalise + decode candidates, split logical lines, peel prefixes (FastPeel or peel)
  parse     + parsers (events go to a sink that drops them)
  emit      + events stored in the columnar EventSink (= ingest without the report)
  frames    EventSink -> pandas DataFrames
  analyze   runs, facts, rules, evidence, JSON text (given the ingested tables)

Usage: python bench/stages.py FILE [--repeat N]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag.events import EventSink  # noqa: E402
from diag.ingest import ingest, parsers_for  # noqa: E402
from diag.parsers.scan import StreamScanner  # noqa: E402
from diag.sources.readers import detect_backend, iter_range  # noqa: E402


class _NullSink(EventSink):
    """Drops events: the parse stage without the cost of storing them."""

    def emit(self, *args: Any, **fields: Any) -> None:  # type: ignore[override]
        return None


def _scanner(backend: str, sink: EventSink) -> StreamScanner:
    return StreamScanner(parsers_for(backend), sink, backend)


def stage_read(path: str, backend: str) -> int:
    return sum(b.count(b"\n") for b in iter_range(path, 0, None))


def stage_prefilter(path: str, backend: str) -> int:
    sc = _scanner(backend, _NullSink())
    n = 0

    def handle(source: str, lineno: int, raw: bytes) -> None:
        nonlocal n
        n += 1

    sc._handle = handle  # type: ignore[method-assign]
    sc.scan_blocks(path, iter_range(path, 0, None))
    return n


def stage_normalise(path: str, backend: str) -> int:
    sc = _scanner(backend, _NullSink())
    sc._feed = lambda line: None  # type: ignore[method-assign]
    return sc.scan_blocks(path, iter_range(path, 0, None))


def stage_parse(path: str, backend: str) -> int:
    sc = _scanner(backend, _NullSink())
    return sc.scan_blocks(path, iter_range(path, 0, None))


def stage_emit(path: str, backend: str) -> EventSink:
    sink = EventSink()
    sc = _scanner(backend, sink)
    sc.scan_blocks(path, iter_range(path, 0, None))
    sc.close()
    return sink


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    out: Any = None
    times = []
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    path = args.file
    with open(path, "rb") as fh:
        backend = detect_backend(fh.read(256 * 1024))
    size = Path(path).stat().st_size
    rows: list[tuple[str, float]] = []
    steps: list[tuple[str, Callable[[str, str], Any]]] = [
        ("read", stage_read),
        ("prefilter", stage_prefilter),
        ("normalise", stage_normalise),
        ("parse", stage_parse),
        ("emit", stage_emit),
    ]
    for name, fn in steps:
        t, out = best(functools.partial(fn, path, backend), args.repeat)
        rows.append((name, t))
        if name == "read":
            lines = out
        if name == "prefilter":
            candidates = out
        if name == "emit":
            events = out.count()
            t2, _ = best(out.to_tables, args.repeat)
            rows.append(("frames", t2))
    from diag.api import analyze
    from diag.render.serialize import to_json

    ing = ingest([path], jobs=1)
    t, _ = best(lambda: to_json(analyze([path], ingested=ing, generated_at="x")), 1)
    rows.append(("analyze", t))
    print(
        f"{path}: {backend}, {size / 1e6:.0f} MB, {lines:,} lines, {candidates:,} candidate lines, "
        f"{events:,} events"
    )
    prev = 0.0
    for name, t in rows:
        if name in ("frames", "analyze"):
            print(f"  {name:10s} {t:7.2f} s")
            continue
        print(
            f"  {name:10s} {t:7.2f} s cumulative, +{t - prev:6.2f} s for this step"
            f"  ({lines / t / 1e6 if t else 0:5.2f} M lines/s)"
        )
        prev = t


if __name__ == "__main__":
    main()
