"""Which line parsers read a stream: its engine's (from the engine spec), then the
engine-neutral ones (tracebacks/errors, benchmark summaries, launch command lines). An
``unknown`` stream gets every engine's parser, so nothing is lost to a wrong sniff."""

from __future__ import annotations

import importlib

from diag.engines import ENGINES, spec_for
from diag.parsers.base import LineParser


def _engine_parser(path: str) -> LineParser:
    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    parser: LineParser = cls()
    return parser


def parsers_for(backend: str) -> list[LineParser]:
    from diag.parsers.benchmark import BenchmarkParser
    from diag.parsers.cmdline import CmdlineParser
    from diag.parsers.traceback import ErrorParser

    spec = spec_for(backend)
    specs = [spec] if spec is not None else list(ENGINES.values())
    out: list[LineParser] = [_engine_parser(s.parser) for s in specs]
    out.append(ErrorParser())
    out.append(BenchmarkParser())
    out.append(CmdlineParser())
    return out
