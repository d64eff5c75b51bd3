"""Benchmark summaries printed into the same logs (``sglang.bench_serving``, vLLM
``benchmark_serving.py`` / ``vllm bench serve``): TTFT, ITL and throughput figures.

They fill the record's ``perf`` block when an incident folder holds the benchmark output.
"""

from __future__ import annotations

import re

from diag.normalize.prefix import LogLine
from diag.parsers.base import Block, Context, LineParser

_LINE = re.compile(
    r"^(?P<stat>Mean|Median|P\d+(?:\.\d+)?|Std) (?P<what>TTFT|ITL|TPOT|E2EL|E2E Latency) \(ms\):\s+(?P<v>[\d.]+)"
)
_TPUT = re.compile(
    r"^(?P<what>Output token throughput|Request throughput|Total [Tt]oken throughput)"
    r" \((?:tok|req)/s\):\s+(?P<v>[\d.]+)"
)
_NAMES = {"TTFT": "ttft", "ITL": "itl", "TPOT": "tpot", "E2EL": "e2el", "E2E Latency": "e2el"}


class BenchmarkParser(LineParser):
    engine = "common"
    anchors = (
        "TTFT (ms):",
        "ITL (ms):",
        "TPOT (ms):",
        "E2EL (ms):",
        "throughput (tok/s):",
        "throughput (req/s):",
    )

    def feed(self, line: LogLine, ctx: Context) -> Block | None:
        text = line.msg.strip()
        m = _LINE.match(text)
        if m:
            stat = m.group("stat").lower()
            stat = "p50" if stat == "median" else stat
            name = f"{_NAMES[m.group('what')]}_s_{stat}"
            ctx.emit(
                "benchmark",
                line,
                engine=ctx.backend,
                name=name,
                value=round(float(m.group("v")) / 1000.0, 6),
            )
            return None
        t = _TPUT.match(text)
        if t:
            what = t.group("what").lower().replace(" ", "_")
            ctx.emit("benchmark", line, engine=ctx.backend, name=what, value=float(t.group("v")))
        return None
