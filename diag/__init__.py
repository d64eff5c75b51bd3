"""graphdiag: diagnose CUDA-graph capture in vLLM and SGLang serving logs.

>>> from diag import analyze
>>> report = analyze(["logs/"])
>>> report.runs[0].record.captured_share  # typed (diag.facts.run_record); .to_json() for the dict
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diag.about import __version__

if TYPE_CHECKING:  # pragma: no cover
    from diag.api import analyze, parse_events
    from diag.report import Report

__all__ = ["__version__", "analyze", "parse_events", "Report"]


def __getattr__(name: str) -> Any:
    # lazy: `import diag` stays cheap for the CLI's --version and for worker processes
    if name in ("analyze", "parse_events"):
        from diag import api

        return getattr(api, name)
    if name == "Report":
        from diag.report import Report

        return Report
    raise AttributeError(name)
