"""An engine's ``/metrics`` scrape (Prometheus text exposition) read as events.

The graph counters: SGLang ``sglang:cuda_graph_passes_total{..., tp_rank="0", mode=
"decode_cuda_graph"|"decode_none"|"prefill_cuda_graph"|"prefill_none"}`` (one increment per
forward pass: sglang==0.5.23:sglang/srt/observability/metrics_collector.py:737-741 and
1527-1533), and vLLM's proposed ``vllm:cudagraph_iterations{runtime_mode=NONE|PIECEWISE|FULL}``
(vllm-project/vllm PR 37576, read when present). A dump holds one scrape or several
concatenated (``curl :30000/metrics >> metrics.txt``): a series seen again starts the next
scrape, so counters give totals since start and deltas between scrapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from diag.normalize.prefix import LogLine
from diag.parsers.base import Context, num

#: the counters read, per engine: metric name -> the label that carries the mode
GRAPH_COUNTERS = {
    "sglang:cuda_graph_passes_total": "mode",
    "vllm:cudagraph_iterations_total": "runtime_mode",
    "vllm:cudagraph_iterations": "runtime_mode",
}
ANCHORS = ("cuda_graph_passes_total", "cudagraph_iterations")
_SAMPLE = re.compile(
    r"^(?P<name>(?:sglang|vllm):[A-Za-z_][\w:]*)(?:\{(?P<labels>[^}]*)\})?[ \t]+"
    r"(?P<value>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass
class ScrapeState:
    """Per-stream: how often each series was seen (its next sample is that scrape's)."""

    seen: dict[tuple[str, str], int] = field(default_factory=dict)


def read_metric(line: LogLine, ctx: Context, engine: str) -> bool:
    """A graph counter sample -> a ``metric`` event (other samples and comments: False)."""
    m = _SAMPLE.match(line.msg.strip())
    if m is None or m.group("name") not in GRAPH_COUNTERS:
        return False
    labels = dict(_LABEL.findall(m.group("labels") or ""))
    mode = labels.get(GRAPH_COUNTERS[m.group("name")])
    if mode is None:
        return False
    series = (m.group("name"), ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    state = ctx.state_of(ScrapeState)
    scrape = state.seen.get(series, 0)
    state.seen[series] = scrape + 1
    rank = labels.get("tp_rank")
    ctx.emit(
        "metric",
        line,
        engine=engine,
        name=m.group("name"),
        mode=mode,
        tp_rank=int(rank) if rank is not None and rank.isdigit() else None,
        value=num(m.group("value")),
        scrape=scrape,
    )
    return True
