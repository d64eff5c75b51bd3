"""GD120 kv-squeeze."""

from __future__ import annotations

import re
from collections.abc import Mapping

from diag.model import Finding
from diag.rules.base import Remedy, Rule, Standstill, Threshold, acts, num, pct
from diag.rules.metrics import RunMetrics
from diag.rules.quotes import advice_withheld, advised_set

# the remedies that win KV memory back by a memory setting (see GD120.adjust)
MEMORY_SETTING = re.compile(r"--mem-fraction-static|--gpu-memory-utilization|--kv-cache-memory")
KEEP = "Keep the bucket set"
FREES_AT_LEAST_GIB = 0.01  # less than this is no memory freed at the figures' precision


def _shrink(m: RunMetrics) -> str | None:
    a = m.flags.advice
    if a is None:
        return None
    withheld = advice_withheld(m)
    if withheld is not None:
        return Standstill(
            f"{KEEP}: {withheld}; dropping buckets is not where KV memory comes back."
        )
    s = advised_set(m)
    if s is None:
        return None
    freed = (a.current.capture_gib - a.recommended.cost.capture_gib) if a.current else None
    if freed is not None and freed < FREES_AT_LEAST_GIB:
        # the advice prices graph memory against this pool and still keeps (or grows) it
        mem = (
            f"it takes {num(-freed)} GiB more graph memory than today's"
            if freed <= -FREES_AT_LEAST_GIB
            else f"its graph memory is within {FREES_AT_LEAST_GIB:g} GiB of today's"
        )
        return (
            f"{KEEP} at the recommended one, {s}: it is priced with its graph memory against "
            f"this KV pool and is the cheapest set the advice found for this traffic ({mem}, "
            "estimated)."
        )
    out = f"Shrink the bucket set first: capture {s}"
    if freed is not None:
        out += f"; it frees about {num(freed)} GiB of graph memory for the KV pool (estimated)"
    return out + "."


def _engine_advice(m: RunMetrics) -> str | None:
    for adv in m.memory.memory_advisories:
        if adv.advised_increase is not None:
            lo, hi = adv.advised_increase
            return (
                f"Follow vLLM's own advice: raise --gpu-memory-utilization from {lo:g} to {hi:g} "
                "to keep the KV pool's size once graph memory is counted."
            )
    return None


class GD120(Rule):
    """Graph capture memory competes with the KV-cache pool, on evidence of a squeeze, in a
    pool under pressure.

    Evidence, each in numbers the log prints: the decode graphs' capture memory as a share
    of the KV pool (at least ``max_share``); the engine's own graph-memory estimate as a
    share of KV pool plus estimate; the engine's numeric advisory to raise
    --gpu-memory-utilization by at least ``max_share`` of its value; or a saturated pool
    (retractions, preemptions) while graphs hold at least ``large_capture_gib``. Never on
    boilerplate text such as vLLM's "CUDA graphs can take additional 1~3 GiB memory per
    GPU": a line without numbers is no squeeze. Only where the pool is under pressure: a run
    whose token usage peaked below ``pressure_usage`` with nothing retracted or preempted
    gets a run note instead (its graph memory was not missed); a log that shows no usage is
    judged on the memory figures alone. The message names only the figures the log shows and
    says which of the others are missing.

    Fires::

        incident: sglang-kv-squeeze

    Near miss (vLLM's boilerplate line and a 0.3 % advisory, no squeeze)::

        (EngineCore_DP0 pid=387) INFO 03-08 16:44:28 [gpu_model_runner.py:5651] Estimated CUDA graph memory: 0.26 GiB total
        (EngineCore_DP0 pid=387) INFO 03-08 16:44:28 [gpu_worker.py:456] Available KV cache memory: 17.36 GiB
        (EngineCore_DP0 pid=387) INFO 03-08 16:44:28 [gpu_worker.py:490] In v0.19, CUDA graph memory profiling will be enabled by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), which more accurately accounts for CUDA graph memory during KV cache allocation. To try it now, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase --gpu-memory-utilization from 0.7000 to 0.7021 to maintain the same effective KV cache size.
        (EngineCore_DP0 pid=387) INFO 03-08 16:44:28 [kv_cache_utils.py:1314] GPU KV cache size: 188,640 tokens
        (EngineCore_DP0 pid=387) INFO 03-08 16:44:30 [model_runner.py:1077] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of memory, consider decreasing `gpu_memory_utilization` or switching to eager mode.
        (EngineCore_DP0 pid=387) INFO 03-08 16:44:40 [gpu_model_runner.py:3480] Graph capturing finished in 12 secs, took 0.26 GiB
    """

    code = "GD120"
    name = "kv-squeeze"
    severity = "warning"
    trigger = "graphs on and numeric evidence of a squeeze: capture memory or the engine's estimate at max_share of the KV pool, the engine's numeric advisory, or saturation with large_capture_gib of graphs"
    impact = 80
    evidence = "kv"
    reads = (
        "capture.capture_mem_gib",
        "flags.advice",
        "graph_mode",
        "memory.capture_mem_share",
        "memory.graph_mem_est_gib",
        "memory.kv_cache_gib",
        "memory.kv_peak_usage",
        "memory.kv_tokens",
        "memory.kv_tokens_source",
        "memory.memory_advisories",
        "memory.preemptions",
        "memory.retractions",
        "memory.snapshot_graph_gib",
    )
    thresholds = {
        "max_share": Threshold(
            0.10,
            "10 % of the KV pool is roughly 10 % fewer concurrent tokens; the point where "
            "dropping buckets pays.",
        ),
        "large_capture_gib": Threshold(
            1.0, "Capture memory above 1 GiB is worth reclaiming when the pool is saturated."
        ),
        "pressure_usage": Threshold(
            0.8,
            "A pool whose token usage stayed below 80 % with nothing retracted or preempted "
            "never missed the memory the graphs hold: no squeeze to act on.",
        ),
    }
    remedies = (
        Remedy(
            "Follow vLLM's own numeric advice on --gpu-memory-utilization when it printed one.",
            engine="vllm",
            flags=("--gpu-memory-utilization",),
            when=lambda m: _engine_advice(m) is not None,
            specific=_engine_advice,
        ),
        Remedy(
            "Shrink the bucket set first: capture only the sizes the batches use (the version's "
            "bucket flags); `graphdiag recommend` gives the set and the KV tokens regained.",
            engine="sglang",
            flags=("--cuda-graph-bs",),
            specific=_shrink,
        ),
        Remedy(
            "Then re-check --mem-fraction-static: graph memory comes out of what it leaves.",
            engine="sglang",
            flags=("--mem-fraction-static",),
            acts=False,
        ),
        Remedy(
            "Shrink the bucket set first with a cudagraph_capture_sizes list in "
            "--compilation-config; `graphdiag recommend` gives the set and the KV tokens "
            "regained.",
            engine="vllm",
            flags=("cudagraph_capture_sizes",),
            specific=_shrink,
        ),
    )

    def adjust(self, m: RunMetrics, fired: Mapping[str, Finding], remedies: list[str]) -> list[str]:
        """A "keep the set" remedy points at the memory setting that wins KV back, by where it
        stands in the list, and only when there is one."""
        out = list(remedies)
        for i, text in enumerate(out):
            if not text.startswith(KEEP):
                continue
            mem = [j for j, r in enumerate(out) if j != i and acts(r) and MEMORY_SETTING.search(r)]
            if mem:
                where = "above" if mem[0] < i else "below"
                said = text + f" Win KV memory back with the memory setting {where} instead."
                out[i] = said if acts(text) else Standstill(said)
        return out

    def evidence_found(self, m: RunMetrics) -> list[str]:
        """The squeeze evidence in words; empty: no squeeze shown."""
        out = []
        kv = (
            f"the {num(m.memory.kv_cache_gib)} GiB KV pool"
            if m.memory.kv_cache_gib
            else "the KV pool"
        )
        share = m.memory.capture_mem_share
        if share is not None and share >= self.t("max_share"):
            out.append(
                f"decode graphs hold {num(m.capture.capture_mem_gib or 0)} GiB (measured at capture), "
                f"{pct(share)} of {kv}"
            )
        est = m.memory.graph_mem_est_share
        if est is not None and est >= self.t("max_share"):
            out.append(
                f"the engine estimates {num(m.memory.graph_mem_est_gib or 0)} GiB of graph memory, "
                f"{pct(est)} of the memory shared with {kv}"
            )
        for adv in m.memory.memory_advisories:
            inc = adv.advised_increase
            if inc is not None and inc[0] > 0 and (inc[1] - inc[0]) / inc[0] >= self.t("max_share"):
                out.append(
                    f"the engine advises raising --gpu-memory-utilization from {inc[0]:g} to {inc[1]:g}"
                )
        big = m.largest_graph_gib
        if (
            (m.memory.retractions or m.memory.preemptions)
            and big is not None
            and big >= self.t("large_capture_gib")
        ):
            what = m.largest_graph[1] if m.largest_graph else ""
            held = f"{num(big)} GiB ({what})"
            # the figure said once: a clause above that named it is referred to, not repeated
            said = any(f"{num(big)} GiB (measured at capture)" in o for o in out) and (
                what == "measured at capture"
            )
            out.append(
                f"the pool saturated ({m.memory.retractions} retractions, {m.memory.preemptions} preemptions) "
                + ("while those graphs hold that memory" if said else f"while graphs hold {held}")
            )
        return out

    def fires(self, m: RunMetrics) -> bool:
        return m.graph_on and bool(self.evidence_found(m)) and self._idle_pool(m) is None

    def _idle_pool(self, m: RunMetrics) -> str | None:
        """Why the pool shows no pressure (serving seen, usage low, nothing retracted or
        preempted); None: under pressure, or the log does not show its usage."""
        peak = m.memory.kv_peak_usage
        if (
            m.memory.retractions
            or m.memory.preemptions
            or peak is None
            or peak >= self.t("pressure_usage")
        ):
            return None
        return (
            f"the KV pool's token usage peaked at {pct(peak)} with nothing retracted or "
            "preempted, so the memory graphs hold was not missed"
        )

    def held_back(self, m: RunMetrics) -> str | None:
        """A saturated pool that cannot be laid at the graphs' door is still said, and so is
        graph memory that would be a squeeze on a pool under pressure."""
        idle = self._idle_pool(m) if m.graph_on and self.evidence_found(m) else None
        if idle is not None:
            return (
                f"Graph memory is large beside the KV pool ({'; '.join(self.evidence_found(m))}); "
                f"not reported as {self.code} {self.name}: {idle}"
            )
        if not (m.memory.retractions or m.memory.preemptions):
            return None
        big = m.largest_graph_gib
        if m.graph_mode == "disabled":
            why = "CUDA graphs are off in this run"
        elif not m.graph_on:
            why = "the log does not say whether CUDA graphs are on"
        elif big is None:
            why = "the log shows no graph memory (capture, estimate or snapshot)"
        elif big < self.t("large_capture_gib"):
            why = f"graphs hold only {num(big)} GiB"
        else:
            return None
        return (
            f"KV pool saturated ({m.memory.retractions} retractions, {m.memory.preemptions} preemptions); "
            f"not reported as {self.code} {self.name}: {why}"
        )

    def message(self, m: RunMetrics) -> str:
        out = "Graph memory squeezes the KV pool: " + "; ".join(self.evidence_found(m))
        known = []
        if m.memory.kv_tokens is not None:
            derived = (
                " (derived from GPU blocks)"
                if (m.memory.kv_tokens_source or "").startswith("derived")
                else ""
            )
            known.append(f"KV pool {m.memory.kv_tokens} tokens{derived}")
        if m.memory.kv_peak_usage is not None:
            known.append(f"peak KV usage {pct(m.memory.kv_peak_usage)}")
        if m.memory.snapshot_graph_gib is not None:
            known.append(f"snapshot graph pools {num(m.memory.snapshot_graph_gib)} GiB")
        if known:
            out += " (" + ", ".join(known) + ")"
        return out
