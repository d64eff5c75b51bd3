"""Pieces several rules quote: the run's bucket advice and the engine unit, in words.

The advice (``metrics.flags.advice``) is computed from facts before the rules run; these helpers
only read it, so GD110, GD111, GD112, GD120 and ``recommend`` name the same ceiling and set.
"""

from __future__ import annotations

from diag.rules.base import num, pct
from diag.rules.metrics import RunMetrics


def unit(m: RunMetrics) -> str:
    """What a capture size counts in this engine."""
    return "tokens" if m.window.token_window else "requests"


def advised_set(m: RunMetrics) -> str | None:
    """'the advised 12-size set ending at 96 (held-out coverage 99%): <flags>', or None."""
    a = m.sizing
    if a is None or not m.flags.advised_flags:
        return None
    r = a.recommended
    return (
        f"the advised {len(r.sizes)}-size set up to {a.ceiling} {a.unit} "
        f"(promised coverage {pct(a.promised_coverage)}): {m.flags.advised_flags}"
    )


def start_rate(m: RunMetrics) -> str:
    """' Priced at 1 start a day: keeping the current set would win below 0.22 starts a day
    (...); graphdiag's --starts-per-day sets the rate.', or '' where the advice compares no
    set (the sentence follows a remedy's own)."""
    d = m.flags.advice.decision if m.flags.advice is not None else None
    if d is None or d.rate is None or d.start_rate_words is None or d.baseline is None:
        return ""
    what = "the current set" if d.baseline == "current" else "the engine's default set"
    r = d.rate.starts_per_day
    return (
        f" Priced at {r:g} start{'s' if r != 1 else ''} a day: {d.rate.words(what)}; "
        "graphdiag's starts-per-day option sets your rate."
    )


def advised_ceiling(m: RunMetrics) -> str | None:
    """'96 requests (<flag>)', or None without advice that changes the set."""
    a = m.sizing
    if a is None:
        return None
    flag = f" ({m.flags.advised_ceiling_flag})" if m.flags.advised_ceiling_flag else ""
    return f"{a.ceiling} {a.unit}{flag}"


def advice_withheld(m: RunMetrics) -> str | None:
    """Why the advice changes no bucket: its decision sentence, or None where it changes."""
    a = m.flags.advice
    if a is None or a.changes or a.decision is None:
        return None
    d = a.decision
    if d.kind == "keep":
        what = "the current set" if d.baseline == "current" else "the engine's default set"
        return f"the bucket advice keeps {what} ({d.why})"
    return f"the bucket advice sizes no set ({d.why})"


def withheld_lead(m: RunMetrics, verb: str) -> str:
    """How a remedy that changes the ceiling opens where the advice withholds it: 'Raising the
    capture ceiling is not advised' (the set is kept) or 'No capture ceiling can be advised
    yet' (too little traffic); ``verb`` is 'Raising' or 'Lowering'."""
    d = m.flags.advice.decision if m.flags.advice is not None else None
    if d is not None and d.kind == "insufficient":
        return "No capture ceiling can be advised yet"
    return f"{verb} the capture ceiling is not advised"


def comparative(new: float, old: float, less: str, more: str, same: str, tol: float) -> str:
    """The comparative word the two figures bear out ('pads less' only where it does):
    ``less`` where new < old by more than ``tol``, ``more`` where new > old by more, else
    ``same``."""
    if new < old - tol:
        return less
    if new > old + tol:
        return more
    return same


def decode_capture_cost(m: RunMetrics) -> str | None:
    """'5.2 s and 0.6 GiB' of the decode graphs, the part known, or None."""
    parts = []
    if m.capture.capture_time_s is not None:
        parts.append(f"{num(m.capture.capture_time_s)} s")
    if m.capture.capture_mem_gib is not None:
        parts.append(f"{num(m.capture.capture_mem_gib)} GiB")
    return " and ".join(parts) or None
