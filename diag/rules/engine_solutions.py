"""SGLang's own "Possible solutions" list, followed in its printed order (issue 34 point 3).

SGLang prints the list after a failed capture (sglang==0.5.3:srt/model_executor/
cuda_graph_runner.py:392; sglang==0.3.0:srt/model_executor/model_runner.py:514). The log
holds the engine's own advice for the version that ran, whatever version the log names or
fails to name, so where it is printed GD100 follows it item by item: each item quotes the
value in effect (``--mem-fraction-static 0.94 -> 0.8``), an item already in effect (torch
compile off, a ceiling already at the example) is left out, and memory items serve only a
failure that is about memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from diag.rules.metrics import RunMetrics

_FLAG = re.compile(r"--[a-z][a-z0-9-]+")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")

Item = Callable[[RunMetrics, str], str | None]


def _examples(item: str) -> list[float]:
    """The example values an item gives ('(e.g., 0.8 or 0.7)', '(e.g., 16)')."""
    _, sep, tail = item.partition("e.g.")
    return [float(v) for v in _NUMBER.findall(tail)] if sep else []


def _fmt(v: float) -> str:
    return f"{v:g}"


def _mem_fraction(m: RunMetrics, item: str) -> str | None:
    now = m.settings.mem_fraction_static
    lower = [v for v in _examples(item) if now is None or v < now]
    if now is None:
        to = _fmt(lower[0]) if lower else "a smaller value"
        return f"Lower --mem-fraction-static (to {to}; SGLang's own first solution: '{item}')."
    if not lower:
        return None  # already at or below the engine's examples
    return (
        f"Lower --mem-fraction-static {_fmt(now)} -> {_fmt(max(lower))}: capture memory comes "
        f"out of what the KV pool leaves (SGLang's own advice: '{item}')."
    )


def _max_bs(m: RunMetrics, item: str) -> str | None:
    flag = m.flags.ceiling_flag
    if not flag:
        return None  # the version names no ceiling flag
    now = m.window.ceiling
    lower = [int(v) for v in _examples(item) if now is None or v < now]
    if now is not None and not lower:
        return None
    to = str(max(lower)) if lower else "a smaller value"
    now_s = f" {now}" if now is not None else ""
    return (
        f"Lower {flag}{now_s} -> {to}: fewer and smaller graphs need less memory "
        f"(SGLang's own advice: '{item}')."
    )


def _torch_compile(m: RunMetrics, item: str) -> str | None:
    if not m.settings.torch_compile:
        return None  # not on in this run
    return (
        "Drop --enable-torch-compile (it is on in this run): compiled graphs add capture "
        f"memory and often break capture (SGLang's own advice: '{item}')."
    )


def _graphs_off(m: RunMetrics, item: str) -> str | None:
    flag = m.flags.graphs_off_flag
    if not flag:
        return None
    return f"Only as a last resort {flag} (SGLang's own words: '{item}')."


# (flag an item names, what it says in this run, does it serve only a memory failure)
_ITEMS: tuple[tuple[str, Item, bool], ...] = (
    ("--mem-fraction-static", _mem_fraction, True),
    ("--cuda-graph-max-bs", _max_bs, True),
    ("--enable-torch-compile", _torch_compile, False),
    ("--disable-cuda-graph", _graphs_off, False),
)


def printed_remedies(m: RunMetrics, memory: bool) -> tuple[list[str], set[str]]:
    """The engine's printed items as remedies, in its order, and every flag the list names
    (remedies naming them are replaced by these). ``memory``: the failure is about memory."""
    out: list[str] = []
    named: set[str] = set()
    for item in m.capture.engine_solutions:
        flags = set(_FLAG.findall(item))
        named |= flags
        for flag, render, memory_only in _ITEMS:
            if flag in flags or any(f.startswith(flag) for f in flags):
                text = render(m, item) if (memory or not memory_only) else None
                if text is not None and text not in out:
                    out.append(text)
                break
        else:
            if flags:
                out.append(f"SGLang's own advice: '{item}'.")
    return out, named


def follow_printed(remedies: list[str], m: RunMetrics, memory: bool) -> list[str]:
    """The remedies with the engine's printed list in its place: the steps before the first
    one naming a flag of the list (a cause's own first step) stay first, then the list in
    its order, then the remaining steps that name none of its flags."""
    printed, named = printed_remedies(m, memory)
    if not printed:
        return remedies

    def names(text: str) -> bool:
        return any(f in named or any(f.startswith(n) for n in named) for f in _FLAG.findall(text))

    first = next((i for i, r in enumerate(remedies) if names(r)), len(remedies))
    head = remedies[:first]
    tail = [r for r in remedies[first:] if not names(r)]
    last = [p for p in printed if "last resort" in p]
    body = [p for p in printed if p not in last]
    return head + body + tail + last
