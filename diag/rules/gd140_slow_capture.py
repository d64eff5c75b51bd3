"""GD140 slow-capture."""

from __future__ import annotations

from diag.rules.base import Remedy, Rule, Standstill, Threshold, num, pct
from diag.rules.metrics import RunMetrics
from diag.rules.quotes import advice_withheld, advised_set, start_rate


def _fewer(m: RunMetrics) -> str | None:
    """The bucket advice's answer, the one GD112 and `recommend` give: its set, or why it
    keeps today's; None without advice (the generic remedy then)."""
    withheld = advice_withheld(m)
    if withheld is not None:
        return Standstill(f"Capturing fewer sizes is not advised: {withheld}.{start_rate(m)}")
    s = advised_set(m)
    return f"Capture fewer sizes: {s}.{start_rate(m)}" if s else None


def _phases(m: RunMetrics) -> list[tuple[str, float]]:
    return [
        (label, v)
        for label, v in (
            ("decode graphs", m.capture.capture_time_s),
            ("piecewise prefill", m.capture.piecewise_capture_time_s),
            ("draft", m.capture.draft_capture_time_s),
        )
        if v is not None
    ]


class GD140(Rule):
    """Capture time delays first availability, and every restart.

    The message gives the capture's share of the start-up timeline (first line to first
    request served) where the log shows both. Counts every capture phase of the start-up (decode graphs, piecewise prefill, draft
    model) since all of them delay serving, and names each. Time grows with the number of
    sizes, torch.compile and the profiler (--enable-profile-cuda-graph inflates it); those
    remedies are offered only when the log shows them on. Capturing fewer sizes is the bucket
    advice's answer, the set ``graphdiag recommend`` and GD112 name (or its reason to keep
    today's), priced at the server's start rate, with the rate at which keeping would win.

    Fires::

        incident: sglang-slow-capture-torch-compile

    Near miss (a 6 s capture)::

        incident: sglang-healthy
    """

    code = "GD140"
    name = "slow-capture"
    severity = "info"
    trigger = "all capture phases together take at least max_seconds"
    impact = 10
    evidence = "capture_time"
    reads = (
        "capture.capture_time_s",
        "capture.draft_capture_time_s",
        "capture.n_buckets",
        "capture.piecewise_capture_time_s",
        "capture.startup_capture",
        "settings.profile_cuda_graph",
        "settings.torch_compile",
    )
    thresholds = {
        "max_seconds": Threshold(
            60,
            "A minute of capture on every (re)start is where operators notice; typical "
            "captures take 5-30 s.",
        )
    }
    remedies = (
        Remedy(
            "Turn --enable-profile-cuda-graph off outside profiling sessions: it inflates capture time.",
            engine="sglang",
            flags=("--enable-profile-cuda-graph",),
            when=lambda m: m.settings.profile_cuda_graph,
        ),
        Remedy(
            "Drop --enable-torch-compile, or lower --torch-compile-max-bs: compiling every size "
            "dominates capture.",
            engine="sglang",
            flags=("--enable-torch-compile",),
            when=lambda m: m.settings.torch_compile,
        ),
        Remedy(
            "Capture fewer sizes with --cuda-graph-bs; `graphdiag recommend` gives the set.",
            engine="sglang",
            flags=("--cuda-graph-bs",),
            specific=_fewer,
        ),
        Remedy(
            "Capture fewer sizes with a cudagraph_capture_sizes list in --compilation-config, "
            "and keep the compile cache (VLLM_CACHE_ROOT) across restarts.",
            engine="vllm",
            flags=("cudagraph_capture_sizes",),
            specific=_fewer,
        ),
    )

    def total(self, m: RunMetrics) -> float | None:
        phases = _phases(m)
        return sum(v for _, v in phases) if phases else None

    def fires(self, m: RunMetrics) -> bool:
        total = self.total(m)
        return total is not None and total >= self.t("max_seconds")

    def message(self, m: RunMetrics) -> str:
        parts = ", ".join(f"{label} {num(v)} s" for label, v in _phases(m))
        sizes = f" over {m.capture.n_buckets} decode sizes" if m.capture.n_buckets else ""
        boot = ""
        if m.capture.startup_capture is not None:
            cap, whole = m.capture.startup_capture
            boot = f"; capture is {pct(cap / whole)} of the {num(whole)} s start-up to the first request"
        return f"Capture took {num(self.total(m) or 0)} s ({parts}){sizes}{boot}"
