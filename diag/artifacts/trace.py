"""Per step of a torch-profiler trace: did it replay a CUDA/HIP graph, piecewise, or eagerly?

HTA style: the analysis returns DataFrames (``steps``, ``captures``) and one summary
dict (the report's ``traces`` entry); renderers only read them.

GPU ops are joined to their launch by ``args.correlation``, never by flow events: a graph
launch starts a flow to its first kernel only, while every node it runs carries its
correlation id (torch-traces.md §1). Launches are placed in the step span of their
process that holds their start time.

Where the line between a graph step and a piecewise one is drawn, and why: eager
launches *before the first or after the last* graph launch of a step are the forward
pass's surroundings (input preparation, sampling, logits processing), which both engines
run eagerly after the replay (vLLM splits ``execute_model`` from ``sample_tokens``,
``vllm==0.33.0:vllm/v1/worker/gpu_worker.py:988``; the SGLang decode trace in the corpus
has 11 eager sampling ops around its one replay), so they do not make a step eager. An
eager launch *between* two graph launches means the forward pass itself was cut into
pieces (vLLM PIECEWISE runs attention eagerly between the captured pieces). So a step is

* ``graph`` when it has graph launches, no eager kernel launch between the first and the
  last of them, and its graph launches ran more GPU ops than its eager launches did;
* ``piecewise`` when it has graph launches with eager launches between them, or more
  eager ops than graph ops beside them (graph pieces in a mostly eager step);
* ``eager`` when it launched kernels and no graph;
* ``unverified`` when it has graph launches but not one GPU op carries their correlation
  (CUPTI lost them, or the profiler recorded no CUDA activity): nothing proves the replay;
* ``no_launches`` when its span holds no kernel launch at all.

The position test is structural, so it holds for any model size and sampler; a count
threshold ("at most N eager ops") would not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from diag.artifacts.trace_reader import RawTrace, Span

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd  # (imported where used: the scan workers never load it)

Verdict = Literal["graph", "piecewise", "eager", "unverified", "no_launches"]
VERDICTS: tuple[Verdict, ...] = ("graph", "piecewise", "eager", "unverified", "no_launches")
TraceKind = Literal["step_trace", "capture_trace"]

# vllm==0.33.0:vllm/v1/worker/gpu_worker.py:1282-1321 (annotate_profile): the detailed form
# execute_{tokens}_context_{n}(sq..sk..)_generation_{m}(sq..sk..), the plain one
# execute_context_{n}({tokens})_generation_{m}({tokens})
VLLM_STEP = re.compile(
    r"^execute_(?:(?P<tokens>\d+)_)?context_(?P<ctx>\d+)\((?:sq)?(?P<ctx_tok>\d+)[^)]*\)"
    r"_generation_(?P<gen>\d+)\((?:sq)?(?P<gen_tok>\d+)[^)]*\)"
)
# sglang==0.5.23:sglang/srt/utils/profile_utils.py:491-500: step[{MODE} bs={bs}( toks={n})?...]
# and step[DRAFT_LOOP raw_bs=.. bs=.. topk=..] (speculative/frozen_kv_mtp_cuda_graph_runner.py:461)
SGLANG_STEP = re.compile(
    r"^step\[(?P<mode>[A-Z_]+)\b[^\]]*?\bbs=(?P<bs>\d+)(?: toks=(?P<toks>\d+))?"
)
PROFILER_STEP = re.compile(r"^ProfilerStep#(?P<n>\d+)$")
# vllm==0.33.0:vllm/v1/worker/gpu_model_runner.py:6556 capture_{num_tokens}_{FULL|PIECEWISE};
# SGLang's capture traces name theirs capture_{bs}_{MODE} (corpus: capture_32_DECODE)
CAPTURE_SPAN = re.compile(r"^capture_(?P<size>\d+)_(?P<mode>[A-Z_]+)$")
# rank in file names: vLLM {instance}-rank-{r}.{ns}.pt.trace.json.gz, graph_capture_rank_{r};
# SGLang {time}-TP-{r}[-DECODE|-EXTEND].trace.json.gz, {runner}_bs_{bs}_rank{r}.json.gz
RANK_IN_NAME = re.compile(r"(?:-rank-|_rank_|_rank|-TP-)(\d+)(?=[-_.]|$)")
ABSOLUTE_TS_US = 1e14  # µs: older traces stamp epoch µs (~1.7e15); relative ones are far below

STEP_COLUMNS = [
    "step",
    "engine",
    "mode",
    "batch_size",
    "tokens",
    "pid",
    "start_us",
    "dur_us",
    "epoch_s",
    "graph_launches",
    "eager_launches",
    "eager_between",
    "ops_on_graphs",
    "ops_eager",
    "gpu_us_graphs",
    "gpu_us_eager",
    "launch_cpu_us",
    "verdict",
]


@dataclass
class TraceAnalysis:
    """One trace, analysed: the per-step and per-capture frames and the summary."""

    path: str
    kind: TraceKind
    rank: int | None
    steps: pd.DataFrame
    captures: pd.DataFrame
    summary: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    run: str | None = None
    # the joined run's capture sizes as its log printed them (None: no run, or no list)
    log_capture_sizes: list[int] | None = None

    def in_log(self, size: int) -> bool | None:
        """Is a captured size among those the joined run's log captured (None: no list)?"""
        return None if self.log_capture_sizes is None else int(size) in self.log_capture_sizes

    def to_dict(self) -> dict[str, Any]:
        """The report's ``traces`` entry (INTERFACE.md keys first, then ours)."""
        out = {"path": self.path, "kind": self.kind, "rank": self.rank}
        out.update(self.summary)
        out["run"] = self.run
        caps = self.captures.to_dict("records")
        if self.log_capture_sizes is not None:  # side by side with the log's capture lines
            for c in caps:
                c["in_log_capture_sizes"] = self.in_log(c["size"])
        out["captures"] = caps
        return out


def step_info(name: str) -> dict[str, Any]:
    """Engine, mode, batch size and tokens from a step span's name (None where not shown)."""
    m = VLLM_STEP.match(name)
    if m:
        ctx, gen = int(m["ctx"]), int(m["gen"])
        tokens = int(m["tokens"]) if m["tokens"] else int(m["ctx_tok"]) + int(m["gen_tok"])
        mode = "DECODE" if ctx == 0 else "PREFILL" if gen == 0 else "MIXED"
        return {"engine": "vllm", "mode": mode, "batch_size": ctx + gen, "tokens": tokens}
    m = SGLANG_STEP.match(name)
    if m:
        toks = int(m["toks"]) if m["toks"] else None
        return {"engine": "sglang", "mode": m["mode"], "batch_size": int(m["bs"]), "tokens": toks}
    if PROFILER_STEP.match(name):
        return {"engine": "torch", "mode": None, "batch_size": None, "tokens": None}
    return {}


def rank_of(raw: RawTrace) -> int | None:
    """``distributedInfo.rank``, else the rank in the file name."""
    info = raw.meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    m = RANK_IN_NAME.search(raw.path.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def epoch_offset_s(raw: RawTrace, ts_sample: float | None) -> float | None:
    """Seconds to add to ``ts / 1e6`` for wall-clock epoch seconds, None if not knowable."""
    base = raw.meta.get("baseTimeNanoseconds")
    if isinstance(base, int) and base > 0:
        return base / 1e9
    if ts_sample is not None and ts_sample > ABSOLUTE_TS_US:
        return 0.0
    return None


def _step_spans(spans: list[Span]) -> list[tuple[Span, dict[str, Any]]]:
    """Engine step spans (vLLM, SGLang) where there are any, else ProfilerStep#N; a span
    inside another of the same process is folded into it (SGLang's step[...] runs inside an
    execute_* span when both annotate), the inner name filling what the outer lacks."""
    named = [(s, step_info(s.name)) for s in spans]
    engine = [(s, i) for s, i in named if i.get("engine") in ("vllm", "sglang")]
    chosen = engine or [(s, i) for s, i in named if i.get("engine") == "torch"]
    chosen.sort(key=lambda si: (si[0].pid, si[0].ts, -si[0].dur))
    out: list[tuple[Span, dict[str, Any]]] = []
    for s, info in chosen:
        if out:
            top, top_info = out[-1]
            if top.pid == s.pid and s.ts + s.dur <= top.ts + top.dur:
                if info.get("engine") == "sglang":  # SGLang's own mode and bs are the batch
                    top_info.update({k: v for k, v in info.items() if v is not None})
                continue
        out.append((s, dict(info)))
    return out


def analyse(raw: RawTrace) -> TraceAnalysis:
    """The steps, captures and summary of one trace."""
    import pandas as pd

    corr = np.frombuffer(raw.l_corr, dtype=np.int64) if raw.l_corr else np.zeros(0, np.int64)
    graph = (
        np.frombuffer(raw.l_graph, dtype=np.int8).astype(bool) if raw.l_graph else np.zeros(0, bool)
    )
    l_ts = _f(raw.l_ts)
    l_pid = np.frombuffer(raw.l_pid, dtype=np.int64) if raw.l_pid else np.zeros(0, np.int64)
    o_corr = np.frombuffer(raw.o_corr, dtype=np.int64) if raw.o_corr else np.zeros(0, np.int64)
    o_dur = _f(raw.o_dur)
    # ops -> launch index by correlation (sorted search; the first launch wins a duplicate id)
    order = np.argsort(corr, kind="stable")
    sorted_corr = corr[order]
    at = np.searchsorted(sorted_corr, o_corr)
    at_c = np.minimum(at, max(len(sorted_corr) - 1, 0))
    joined = (
        (at < len(sorted_corr)) & (sorted_corr[at_c] == o_corr)
        if len(corr)
        else np.zeros(len(o_corr), bool)
    )
    launch_of_op = np.where(joined, order[at_c] if len(corr) else 0, -1)
    n = len(corr)
    ops_per_launch = np.bincount(launch_of_op[joined], minlength=n) if n else np.zeros(0, np.int64)
    gpu_per_launch = (
        np.bincount(launch_of_op[joined], weights=o_dur[joined], minlength=n) if n else np.zeros(0)
    )
    duplicates = int(len(sorted_corr) - len(np.unique(sorted_corr))) if n else 0

    captures = _captures(raw)
    kind: TraceKind = "capture_trace" if not captures.empty else "step_trace"
    # a capture trace profiles start-up: its ProfilerStep spans wrap captures, not serving
    steps = (
        _steps(raw, l_ts, l_pid, graph, ops_per_launch, gpu_per_launch)
        if kind == "step_trace"
        else pd.DataFrame(columns=STEP_COLUMNS)
    )
    counts = steps["verdict"].value_counts() if not steps.empty else pd.Series(dtype=int)
    summary: dict[str, Any] = {
        "graph_launches": int(graph.sum()),
        "eager_launches": int((~graph).sum()),
        "gpu_ops_on_graphs": int(ops_per_launch[graph].sum()) if n else 0,
        "gpu_ops_eager": int(ops_per_launch[~graph].sum()) if n else 0,
        "steps": {v: int(counts.get(v, 0)) for v in VERDICTS},
        # ours, beside INTERFACE's keys
        "gpu_ops": len(o_corr),
        "gpu_ops_other": int((~joined).sum() + 0),
        "graph_launches_without_ops": int((graph & (ops_per_launch == 0)).sum()) if n else 0,
        "ops_per_graph_launch": _spread(ops_per_launch[graph]) if n else None,
        "gpu_us_graphs": round(float(gpu_per_launch[graph].sum()), 3) if n else 0.0,
        "gpu_us_eager": round(float(gpu_per_launch[~graph].sum()), 3) if n else 0.0,
        "events": raw.events,
        "devices": sorted(set(raw.device_names)),
        "duplicate_correlations": duplicates,
    }
    problems = list(raw.problems)
    if raw.missing:
        parts = ", ".join(f"{n} {what}" for what, n in sorted(raw.missing.items()))
        problems.append(f"events skipped for missing fields: {parts}")
    return TraceAnalysis(raw.path, kind, rank_of(raw), steps, captures, summary, problems)


def _f(a: Any) -> np.ndarray:
    return np.frombuffer(a, dtype=np.float64) if len(a) else np.zeros(0)


def _spread(values: np.ndarray) -> dict[str, int] | None:
    if not len(values):
        return None
    return {"min": int(values.min()), "p50": int(np.median(values)), "max": int(values.max())}


def _steps(
    raw: RawTrace,
    l_ts: np.ndarray,
    l_pid: np.ndarray,
    graph: np.ndarray,
    ops_per_launch: np.ndarray,
    gpu_per_launch: np.ndarray,
) -> pd.DataFrame:
    import pandas as pd

    chosen = _step_spans(raw.spans)
    if not chosen:
        return pd.DataFrame(columns=STEP_COLUMNS)
    k = len(chosen)
    s_pid = np.array([s.pid for s, _ in chosen], dtype=np.int64)
    s_ts = np.array([s.ts for s, _ in chosen])
    s_end = s_ts + np.array([s.dur for s, _ in chosen])
    # the step of each launch: same process, start inside the span (spans sorted per pid)
    step_of = np.full(len(l_ts), -1, dtype=np.int64)
    for pid in np.unique(s_pid):
        idx = np.flatnonzero(s_pid == pid)
        sel = np.flatnonzero(l_pid == pid)
        j = np.searchsorted(s_ts[idx], l_ts[sel], side="right") - 1
        ok = j >= 0
        j_ok = idx[j[ok]]
        inside = l_ts[sel][ok] <= s_end[j_ok]
        step_of[sel[ok][inside]] = j_ok[inside]
    m = step_of >= 0
    st, g, ts = step_of[m], graph[m], l_ts[m]
    ops, gpu = ops_per_launch[m], gpu_per_launch[m]
    dur = np.frombuffer(raw.l_dur, dtype=np.float64)[m] if len(raw.l_dur) else np.zeros(0)

    def count(mask: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(st[mask], weights=None if w is None else w[mask], minlength=k)

    graph_n = count(g)
    eager_n = count(~g)
    ops_g, ops_e = count(g, ops), count(~g, ops)
    first = np.full(k, np.inf)
    last = np.full(k, -np.inf)
    np.minimum.at(first, st[g], ts[g])
    np.maximum.at(last, st[g], ts[g])
    between = count(~g & (ts > first[st]) & (ts < last[st]))
    graph_ops_n = count(g & (ops > 0))
    verdict = np.where(
        graph_n == 0,
        np.where(eager_n > 0, "eager", "no_launches"),
        np.where(
            graph_ops_n == 0,
            "unverified",
            np.where((between > 0) | (ops_e > ops_g), "piecewise", "graph"),
        ),
    )
    ts0 = float(s_ts.min())
    offset = epoch_offset_s(raw, ts0)
    infos = [i for _, i in chosen]
    frame = pd.DataFrame(
        {
            "step": [s.name for s, _ in chosen],
            "engine": [i.get("engine") for i in infos],
            "mode": [i.get("mode") for i in infos],
            "batch_size": pd.array([i.get("batch_size") for i in infos], dtype="Int64"),
            "tokens": pd.array([i.get("tokens") for i in infos], dtype="Int64"),
            "pid": s_pid,
            "start_us": s_ts,
            "dur_us": s_end - s_ts,
            "epoch_s": s_ts / 1e6 + offset if offset is not None else np.full(k, np.nan),
            "graph_launches": graph_n.astype(np.int64),
            "eager_launches": eager_n.astype(np.int64),
            "eager_between": between.astype(np.int64),
            "ops_on_graphs": ops_g.astype(np.int64),
            "ops_eager": ops_e.astype(np.int64),
            "gpu_us_graphs": count(g, gpu).round(3),
            "gpu_us_eager": count(~g, gpu).round(3),
            "launch_cpu_us": count(np.ones(len(st), bool), dur).round(3),
            "verdict": pd.Categorical(verdict, categories=list(VERDICTS)),
        }
    )
    return frame[STEP_COLUMNS]


def _captures(raw: RawTrace) -> pd.DataFrame:
    """One row per capture span: size, mode, time, graphs captured and instantiated, and
    the kernel launches recorded between each stream-capture begin and end (the nodes a
    graph was built from: a launch under capture runs nothing, so this is the only count)."""
    import pandas as pd

    cols = ["size", "mode", "dur_ms", "graphs", "instantiated", "nodes_per_graph"]
    spans = [(s, m) for s in raw.spans if (m := CAPTURE_SPAN.match(s.name)) is not None]
    if not spans:
        return pd.DataFrame(columns=cols)
    l_ts = _f(raw.l_ts)
    l_pid = np.frombuffer(raw.l_pid, dtype=np.int64) if raw.l_pid else np.zeros(0, np.int64)
    eager = (
        ~(np.frombuffer(raw.l_graph, dtype=np.int8).astype(bool))
        if raw.l_graph
        else np.zeros(0, bool)
    )
    rows = []
    for s, m in spans:
        end = s.ts + s.dur
        calls = sorted(
            (ts, k) for k, pid, ts in raw.capture_calls if pid == s.pid and s.ts <= ts <= end
        )
        nodes: list[int] = []
        begin: float | None = None
        for ts, k in calls:
            if k == "begin":
                begin = ts
            elif k == "end" and begin is not None:
                sel = eager & (l_pid == s.pid) & (l_ts > begin) & (l_ts < ts)
                nodes.append(int(sel.sum()))
                begin = None
        rows.append(
            {
                "size": int(m["size"]),
                "mode": m["mode"],
                "dur_ms": round(s.dur / 1000, 3),
                "graphs": len(nodes),
                "instantiated": sum(1 for _, k in calls if k == "instantiate"),
                "nodes_per_graph": nodes,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def step_table(traces: list[TraceAnalysis]) -> pd.DataFrame:
    """Every step of every trace in one frame (``parse`` exports it): trace path and rank
    first, then :data:`STEP_COLUMNS`."""
    import pandas as pd

    parts = []
    for t in traces:
        if t.steps.empty:
            continue
        part = t.steps.copy()
        part.insert(0, "rank", pd.array([t.rank] * len(part), dtype="Int64"))
        part.insert(0, "trace", t.path)
        part["verdict"] = part["verdict"].astype(str)
        parts.append(part)
    if not parts:
        return pd.DataFrame(columns=["trace", "rank", *STEP_COLUMNS])
    return pd.concat(parts, ignore_index=True)
