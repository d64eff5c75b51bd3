"""GD131 graph-disabled."""

from __future__ import annotations

from diag.rules.base import Remedy, Rule
from diag.rules.metrics import RunMetrics


def _remove(m: RunMetrics) -> str | None:
    if m.settings.user_eager is None:
        return None
    return (
        f"Remove {m.settings.user_eager} (a diagnostic setting) from this serving node and re-measure "
        "with graphs on."
    )


class GD131(Rule):
    """Capture is off on a serving node by the user's own setting: the diagnostic state left
    in production. Every decode step runs op by op; numbers measured here are not the graph
    path's.

    Judgement: the user's own eager mode (--enforce-eager, disable_cuda_graph=True,
    cudagraph_mode=NONE set by the user; vLLM's "Cudagraph is disabled under eager mode")
    is GD131, never GD160: GD160 is the engine overriding a request. What the user typed
    decides first (vLLM's "non-default args" echo), even where the engine then prints
    downgrade-like warnings (V1's "cudagraph dispatching keys are not initialized. No
    cudagraph will be used.", a consequence of mode NONE). A prefill node with graphs off is
    the recommended setting, and a model/backend that cannot run graphs (the engine's own
    fallback, with no eager setting in the typed args) is GD160's.

    Fires::

        INFO 10-18 10:03:11 [utils.py:233] non-default args: {'model': 'm', 'max_num_seqs': 8, 'enforce_eager': True}
        INFO 10-18 10:03:20 [__init__.py:3620] Cudagraph is disabled under eager mode

    Near miss (a prefill node with graphs off is the recommended setting)::

        [2025-11-03 09:00:00] server_args=ServerArgs(model_path='m', tp_size=1, cuda_graph_max_bs=64, disable_cuda_graph=True, disaggregation_mode='prefill')
        [2025-11-03 09:00:10] Prefill batch, #new-seq: 1, #new-token: 4096, #cached-token: 0, token usage: 0.10, #running-req: 0, #queue-req: 0,
    """

    code = "GD131"
    name = "graph-disabled"
    severity = "warning"
    trigger = "graphs off by the user's own setting on a node that is not a prefill node"
    impact = 70
    evidence = "config"
    reads = ("graph_mode", "prefill_node", "settings.user_eager", "window.batches_eager")
    remedies = (
        Remedy(
            "Remove --disable-cuda-graph (a diagnostic setting) from serving nodes and re-measure "
            "with graphs on; keep it only on prefill nodes.",
            engine="sglang",
            specific=_remove,
        ),
        Remedy(
            "Remove --enforce-eager, or cudagraph_mode NONE in --compilation-config (a diagnostic "
            "setting), and re-measure with graphs on.",
            engine="vllm",
            specific=_remove,
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        return (
            m.graph_mode == "disabled"
            and m.prefill_node is not True
            and m.settings.user_eager is not None
        )

    def message(self, m: RunMetrics) -> str:
        n = m.window.batches_eager
        ran = f" ({n} decode batch{'es' if n != 1 else ''} ran eagerly)" if n else ""
        return (
            f"CUDA graphs are off on this serving node by the user's own {m.settings.user_eager}{ran}; "
            "its throughput is not the graph path's"
        )
