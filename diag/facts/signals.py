"""What a run's own lines say beyond its record, read once for the rules (facts layer).

The engine's graph-memory advisories, the KV pool's peak use, retractions and preemptions,
the user's own eager setting against the engine's downgrades, the frame cause of the capture
error and the "Possible solutions" the engine printed with it: each read from the run's event
tables here, so the rules read facts, never event tables (issue 33 item 3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from diag.engines import EngineConfig, spec_for
from diag.events import EventTables
from diag.facts.access import as_floats, box_value, col, is_in, is_true, sizing
from diag.facts.advisories import Advisory
from diag.facts.capture_totals import captured_size_count


class RunLines(Protocol):
    """What the signals read of a run's facts (:class:`diag.facts.record.RunFacts`, which
    carries them: it is built with them, so this module cannot import it)."""

    @property
    def tables(self) -> EventTables: ...

    @property
    def config(self) -> EngineConfig: ...

    @property
    def backend(self) -> str: ...

    @property
    def capture_error_at(self) -> tuple[str, int] | None: ...


@dataclass(frozen=True)
class LineSignals:
    """The run's lines, read for the rules (:func:`line_signals`)."""

    memory_advisories: tuple[Advisory, ...]
    advisory_topics: frozenset[str]
    nccl_load_failure: str | None
    kv_peak_usage: float | None  # 0-1
    retractions: int
    preemptions: int
    captured_size_count: int | None
    graph_mem_est_gib: float | None
    user_eager: str | None
    engine_downgrades: tuple[str, ...]
    refused_by: str
    capture_error_frame_cause: str | None
    memory_pressure: bool
    engine_solutions: tuple[str, ...]


def line_signals(facts: RunLines) -> LineSignals:
    t = facts.tables
    adv = t["advisory"]
    topics = col(adv, "topic")
    memory_advisories = tuple(
        Advisory(str(topic), None if pd.isna(value) else float(value), str(text))
        for topic, value, text in _rows(
            adv, is_in(topics, NUMERIC_MEMORY_ADVISORIES), "topic", "value", "text"
        )
    )
    stats = t["stats"]
    decode = t["decode_batch"]
    kv_peak = None
    usage = as_floats(col(decode, "token_usage")) if len(decode) > 0 else None
    if usage is not None and not np.isnan(usage).all():
        kv_peak = float(np.nanmax(usage))
    usage = as_floats(col(stats, "kv_usage")) if len(stats) > 0 else None
    if usage is not None and not np.isnan(usage).all():
        kv_peak = max(kv_peak or 0.0, float(np.nanmax(usage)) / 100.0)
    return LineSignals(
        memory_advisories=memory_advisories,
        advisory_topics=frozenset(str(x) for x in topics) if len(adv) > 0 else frozenset(),
        nccl_load_failure=first_advisory_text(adv, "nccl_load_failed"),
        kv_peak_usage=kv_peak,
        retractions=int(t["retract"]["count"].fillna(1).sum()) if len(t["retract"]) > 0 else 0,
        preemptions=_preemptions(stats),
        captured_size_count=captured_size_count(t),
        graph_mem_est_gib=sizing(t, "graph_mem_est_gib"),
        user_eager=user_eager(facts),
        engine_downgrades=engine_downgrades(facts),
        refused_by=refused_by(facts),
        capture_error_frame_cause=frame_cause_at(t, facts.capture_error_at),
        memory_pressure=memory_pressure(t),
        engine_solutions=printed_solutions(t),
    )


# graph_disabled reasons that mean "the model/backend cannot run graphs", not "user turned them off"
MODEL_LIMIT_REASONS = frozenset(
    {
        "torch_native_attention",
        "flex_attention",
        "dual_chunk_attention",
        "deepep",
        "deepep_normal",
        "double_sparsity",
        "bitsandbytes",
        "rocm_unsupported",
        "dispatch_keys_uninitialized",
        "dp_attention",
    }
)
# advisories that carry the engine's own numbers about graph memory against the KV pool
NUMERIC_MEMORY_ADVISORIES = ("graph_memory_profiling", "capping_capture_sizes")


def _rows(frame: pd.DataFrame, mask: np.ndarray, *names: str) -> list[tuple[Any, ...]]:
    """The values (boxed as :func:`~diag.facts.access.box_rows` boxes them) of these columns
    at the rows ``mask`` keeps: no filtered copy of the frame (~0.5 ms on a few rows)."""
    at = np.flatnonzero(mask)
    if not len(at):
        return []
    columns = [col(frame, name) for name in names]
    return [tuple(box_value(c, int(i)) for c in columns) for i in at]


def _preemptions(stats: pd.DataFrame) -> int:
    """The preemptions the stats lines count (missing: 0)."""
    if len(stats) == 0:
        return 0
    counts = col(stats, "preemptions")
    return int(pd.Series(counts, copy=False).fillna(0).sum())


def frame_cause_at(t: EventTables, at: tuple[str, int] | None) -> str | None:
    """The frame cause of the error event at (path, line), None where it has none."""
    errors = t["error"]
    if at is None or len(errors) == 0 or "frame_cause" not in errors.columns:
        return None
    rows = errors[(errors["source"] == at[0]) & (errors["line"] == at[1])]
    causes = [str(c) for c in rows["frame_cause"] if isinstance(c, str) and c]
    return causes[0] if causes else None


def memory_pressure(t: EventTables) -> bool:
    """Does the run show memory running short: an OOM error anywhere, retractions, or
    preemptions? (Memory remedies for an error of class ``other`` need this.)"""
    errors = t["error"]
    if len(errors) > 0 and bool(np.any(np.asarray(col(errors, "error_class") == "oom"))):
        return True
    if len(t["retract"]) > 0:
        return True
    return _preemptions(t["stats"]) > 0


_SOLUTION = re.compile(r"^\s*\d+\.\s+(.+?)\s*$", re.M)


def printed_solutions(t: EventTables) -> tuple[str, ...]:
    """The numbered "Possible solutions:" items the engine printed after a capture error
    (in the raised message: sglang==0.3.0:srt/model_executor/model_runner.py:514;
    sglang==0.5.2:srt/model_executor/cuda_graph_runner.py:392), in its order."""
    errors = t["error"]
    if len(errors) == 0:
        return ()
    messages = col(errors, "message")
    for message in messages[~pd.isna(messages)]:
        _, sep, tail = str(message).partition("Possible solutions:")
        if sep:
            return tuple(m.group(1) for m in _SOLUTION.finditer(tail))
    return ()


def first_advisory_text(adv: pd.DataFrame, topic: str) -> str | None:
    if len(adv) == 0:
        return None
    rows = adv[adv["topic"] == topic]
    return None if len(rows) == 0 else str(rows["text"].iloc[0])


def user_eager(facts: RunLines) -> str | None:
    """The user's own eager setting (GD131), never an engine downgrade (GD160).

    The user's own args (vLLM's "non-default args" / args echo) decide first: what the user
    typed is the user's whatever the engine warns next. Then a model/backend limit the
    engine printed rules the user out (the config echo may show the engine's own change);
    a consequence of graphs being off (vLLM's "dispatching keys are not initialized",
    printed whenever cudagraph_mode ends NONE) is never such a limit on its own."""
    cfg = facts.config
    disabled = facts.tables["graph_disabled"]
    reasons = set(disabled["reason"]) if len(disabled) > 0 else set()
    if cfg.typed_eager is not None:
        return cfg.typed_eager
    if reasons & (MODEL_LIMIT_REASONS - CONSEQUENCE_REASONS):
        return None
    if "enforce_eager" in reasons:
        return "--enforce-eager"
    spec = spec_for(facts.backend)
    if spec is not None and cfg.graphs_off:
        return spec.eager_flag
    if _user_set_mode_none(facts, reasons):
        return "cudagraph_mode=NONE"
    if "tensor_dump" in reasons:
        return "tensor dump mode"
    if "skipping_capture" in reasons:
        return "a setting that skips capture"
    return None


# graph_disabled reasons that follow from graphs being off, whoever turned them off:
# vLLM's dispatcher warns once whenever cudagraph_mode is NONE
# (vllm==0.10.2:vllm/v1/cudagraph_dispatcher.py, "cudagraph dispatching keys are not
# initialized. No cudagraph will be used.")
CONSEQUENCE_REASONS = frozenset({"dispatch_keys_uninitialized"})


def _user_set_mode_none(facts: RunLines, reasons: set[str]) -> bool:
    """cudagraph_mode NONE is the user's when the user's own args say so (vLLM 0.10.1+
    "non-default args"), or the config echo says so and the engine printed no override to
    NONE (an engine override is GD160's, even though the echo then shows NONE too)."""
    cfg = facts.config
    if cfg.user_mode_none is not None:
        return cfg.user_mode_none
    if not (cfg.mode_none_echoed or "mode_none" in reasons):
        return False
    modes = facts.tables["graph_mode"]
    overridden = (
        len(modes) > 0
        and (
            (modes["downgraded"] == True)  # noqa: E712
            & (modes["mode"].astype(str).str.upper() == "NONE")
        ).any()
    )
    return not overridden


def engine_downgrades(facts: RunLines) -> tuple[str, ...]:
    """Engine-chosen mode changes and model/backend disables. A change to NONE that follows
    the user's own eager mode is the user's choice, not a downgrade."""
    out: list[str] = []
    user = user_eager(facts)
    modes = facts.tables["graph_mode"]
    if len(modes) > 0:
        said = is_true(col(modes, "downgraded"))
        for mode, text in _rows(modes, said, "mode", "text"):
            if user is not None and str(mode).upper() == "NONE":
                continue
            out.append(str(text))
    disabled = facts.tables["graph_disabled"]
    if len(disabled) > 0:
        # with the user's own eager mode nothing was overridden: a limit or a consequence
        # the engine prints then is not a downgrade of a mode the user asked for
        limits = MODEL_LIMIT_REASONS if user is None else frozenset()
        lim = disabled[disabled["reason"].isin(limits)]
        out += [str(x) for x in lim["text"]]
    return tuple(out)


def refused_by(facts: RunLines) -> str:
    """The attention backend the engine named refusing a graph mode (vLLM's downgrade line)."""
    modes = facts.tables["graph_mode"]
    if len(modes) == 0 or "backend" not in modes.columns:
        return ""
    backends = col(modes, "backend")
    named = [str(b) for b in backends[~pd.isna(backends)] if str(b)]
    return named[0] if named else ""
