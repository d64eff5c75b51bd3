"""GD130 prefill-node-graph-on."""

from __future__ import annotations

from diag.engines.flags import since
from diag.rules.base import Remedy, Rule, num
from diag.rules.metrics import RunMetrics
from diag.rules.quotes import decode_capture_cost


def _off(m: RunMetrics) -> str | None:
    if not m.flags.graphs_off_flag:
        return None
    return (
        f"Start the prefill node with {m.flags.graphs_off_flag} (decode graphs only); keep graphs on "
        "the decode nodes."
    )


class GD130(Rule):
    """A disaggregated prefill node captured decode graphs.

    Prefill batches are large and shape-varying; decode graphs do not serve them, and their
    memory is taken from the KV pool (SGLang's tuning guide: graphs off on prefill nodes, on
    on decode nodes). The cost quoted is the decode graphs' capture only: what turning them
    off on the prefill node recovers. A piecewise prefill capture serves prefill and stays;
    it is named apart and not counted. The remedy is the version's decode-phase switch
    (SGLang --cuda-graph-backend-decode=disabled from 0.5.15, --disable-cuda-graph before;
    vLLM cudagraph_mode NONE from 0.10.1, --enforce-eager before).

    Fires::

        incident: sglang-prefill-node

    Near miss (a prefill node with graphs off: the recommended setting)::

        [2025-11-03 09:00:00] server_args=ServerArgs(model_path='m', tp_size=1, cuda_graph_max_bs=64, disable_cuda_graph=True, disaggregation_mode='prefill')
        [2025-11-03 09:00:10] Prefill batch, #new-seq: 1, #new-token: 4096, #cached-token: 0, token usage: 0.10, #running-req: 0, #queue-req: 0,
    """

    code = "GD130"
    name = "prefill-node-graph-on"
    severity = "warning"
    trigger = "a disaggregated prefill node with graphs on"
    impact = 50
    evidence = "config"
    reads = (
        "capture.piecewise_capture_mem_gib",
        "capture.piecewise_capture_time_s",
        "flags.graphs_off_flag",
        "prefill_node",
    )
    remedies = (
        Remedy(
            "Start the prefill node with decode graphs off (SGLang --disable-cuda-graph, "
            f"--cuda-graph-backend-decode=disabled from "
            f"{since('sglang', '--cuda-graph-backend-decode')}); keep graphs on decode nodes.",
            engine="sglang",
            specific=_off,
        ),
        Remedy(
            "Start the prefill (kv_producer) instance with decode graphs off (vLLM "
            f"cudagraph_mode NONE from {since('vllm', 'cudagraph_mode')}, --enforce-eager "
            "before); keep graphs on decode instances.",
            engine="vllm",
            specific=_off,
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        return m.prefill_node is True and m.graph_on

    def message(self, m: RunMetrics) -> str:
        cost = decode_capture_cost(m)
        out = "Prefill node (disaggregated) with decode graph capture on"
        out += (
            f": the decode graphs took {cost}, which turning them off recovers"
            if cost
            else ": the decode capture's time and memory are not in the log"
        )
        if (
            m.capture.piecewise_capture_time_s is not None
            or m.capture.piecewise_capture_mem_gib is not None
        ):
            parts = [
                f"{num(v)} {u}"
                for v, u in (
                    (m.capture.piecewise_capture_time_s, "s"),
                    (m.capture.piecewise_capture_mem_gib, "GiB"),
                )
                if v is not None
            ]
            out += f" (the piecewise prefill capture, {' / '.join(parts)}, serves prefill and is not counted)"
        return out
