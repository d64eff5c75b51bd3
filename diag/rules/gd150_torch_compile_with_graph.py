"""GD150 torch-compile-with-graph."""

from __future__ import annotations

from diag.rules.base import Remedy, Rule
from diag.rules.metrics import RunMetrics


def _match(m: RunMetrics) -> str | None:
    if (
        m.settings.torch_compile_max_bs is None
        or m.window.ceiling is None
        or m.settings.torch_compile_max_bs <= m.window.ceiling
    ):
        return None
    return (
        f"If kept, lower --torch-compile-max-bs from {m.settings.torch_compile_max_bs} to the graph "
        f"ceiling {m.window.ceiling} or below: compiled sizes above it are never replayed."
    )


class GD150(Rule):
    """torch.compile on top of CUDA graphs: little extra gain once graphs are on, a frequent
    cause of capture failures, and a compile ceiling (--torch-compile-max-bs) that can
    disagree with the graph ceiling.

    Fires::

        incident: sglang-slow-capture-torch-compile

    Near miss (graphs on, no torch.compile)::

        incident: sglang-healthy
    """

    code = "GD150"
    name = "torch-compile-with-graph"
    severity = "info"
    trigger = "graphs on and --enable-torch-compile on"
    impact = 5
    evidence = "config"
    reads = ("settings.torch_compile", "settings.torch_compile_max_bs", "window.ceiling")
    remedies = (
        Remedy(
            "Measure without --enable-torch-compile: with graphs on the gain is often negligible.",
            engine="sglang",
            flags=("--enable-torch-compile",),
        ),
        Remedy(
            "If kept, keep --torch-compile-max-bs at or below the graph ceiling.",
            engine="sglang",
            flags=("--torch-compile-max-bs",),
            when=lambda m: _match(m) is not None,
            specific=_match,
        ),
        Remedy(
            "Measure without torch.compile: with graphs on the gain is often negligible.",
            engine="vllm",
        ),
    )

    def fires(self, m: RunMetrics) -> bool:
        return m.graph_on and m.settings.torch_compile

    def message(self, m: RunMetrics) -> str:
        parts = []
        if m.settings.torch_compile_max_bs is not None:
            parts.append(f"torch_compile_max_bs {m.settings.torch_compile_max_bs}")
        if m.window.ceiling is not None:
            parts.append(f"graph ceiling {m.window.ceiling}")
        return "--enable-torch-compile with CUDA graphs" + (
            f" ({', '.join(parts)})" if parts else ""
        )
