"""vLLM's log lines (0.4 -> 0.33): patterns, start-up, capture, runtime, the metrics table.

:class:`VLLMParser` (parser.py) dispatches each line to the readers of startup.py,
capture.py and runtime.py; patterns.py holds the regexes and per-stream state keys;
metrics_table.py the lark-parsed R-3 table. The config-echo parser is shared with SGLang's
in :mod:`diag.parsers.configs`.
"""

from __future__ import annotations

from diag.parsers.configs import parse_config_echo
from diag.parsers.vllm.metrics_table import MetricsItem, MetricsTableBlock, parse_metrics_table
from diag.parsers.vllm.parser import VLLMParser
from diag.parsers.vllm.patterns import MODES, mode_name

__all__ = [
    "MODES",
    "MetricsItem",
    "MetricsTableBlock",
    "VLLMParser",
    "mode_name",
    "parse_config_echo",
    "parse_metrics_table",
]
