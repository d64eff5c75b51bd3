"""Transformations real pastes go through, and the verdict they must keep (issue 21, point 6).

Each :class:`Transform` rewrites an excerpt's physical lines with parameters drawn by
hypothesis and says which original lines survive (``kept``: original 1-based line number per
output line, 0 for lines it added). :func:`expected` decides, from what was dropped and
nothing else, which verdict fields must stay as they were: a field whose evidence lines all
survive must be unchanged; a capture error whose exception line was cut away while capture
frames survive must turn into class ``other``; anything whose evidence was dropped is free.
Negatives (no capture error before) must stay without one under every transformation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from diag.engines.phases import CAPTURE_PHASES, place
from diag.facts.record import build_facts
from diag.facts.runs import split_runs
from diag.ingest import ingest

# ------------------------------------------------------------------ the verdict
NUMBERS = ("capture_time_s", "capture_mem_gib", "kv_tokens", "gpu_blocks", "cuda_graph_max_bs")
# the event kinds each field is read from: its evidence lines (see ``expected``)
EVIDENCE_KINDS: dict[str, tuple[str, ...]] = {
    "capture_time_s": ("capture_end",),
    "capture_mem_gib": ("capture_end",),
    "kv_tokens": ("sizing",),
    "gpu_blocks": ("sizing",),
    "cuda_graph_max_bs": ("capture_sizes", "config"),
    "graph_capture_sizes": ("capture_sizes", "config"),
}
FIELDS = ("run", "capture_error", "graph_mode", *NUMBERS, "graph_capture_sizes")


@dataclass(frozen=True)
class Verdict:
    """What a user reads off an analysis: a run or not, the capture error's class, the graph
    mode and the record's numbers; plus where they came from (for ``expected``)."""

    values: dict[str, Any]
    error_line: int | None = None  # the capture error's first line
    error_message: str | None = None
    error_placed_by: str | None = None
    evidence: dict[str, frozenset[int]] = field(default_factory=dict)
    event_lines: frozenset[int] = frozenset()
    context_lines: frozenset[int] = frozenset()  # capture begin/progress/phase lines


def verdict_of(path: Path) -> Verdict:
    ing = ingest([str(path)])
    runs = split_runs(ing.tables, ing.streams)
    facts = [build_facts(r) for r in runs]
    if not facts:
        return Verdict(
            {"run": False, "capture_error": None, "graph_mode": None}
            | dict.fromkeys(NUMBERS)
            | {"graph_capture_sizes": ()}
        )
    first = facts[0]
    err_facts = next((f for f in facts if f.record.capture_error), None)
    err = err_facts.record.to_json()["capture_error"] if err_facts else None
    rec = first.record.to_json()
    values: dict[str, Any] = {
        "run": True,
        "capture_error": err["class"] if err else None,
        "graph_mode": rec["graph_mode"],
        **{k: rec[k] for k in NUMBERS},
        "graph_capture_sizes": tuple(rec["graph_capture_sizes"] or ()),
    }
    tables = ing.tables
    evidence = {
        k: frozenset(int(x) for kind in kinds for x in tables[kind]["line"])
        for k, kinds in EVIDENCE_KINDS.items()
    }
    all_lines = frozenset(
        int(x) for kind in tables._frames for x in tables[kind]["line"] if kind != "input_note"
    )
    context = frozenset(
        int(x)
        for kind in ("capture_begin", "capture_progress", "phase")
        for x in tables[kind]["line"]
    )
    return Verdict(
        values,
        err["line"] if err else None,
        err["message"] if err else None,
        err["placed_by"] if err else None,
        evidence,
        all_lines,
        context,
    )


# ------------------------------------------------------------------ transformations
Lines = list[str]
Kept = list[int]


@dataclass(frozen=True)
class Transform:
    """One way a paste differs from the log: ``apply(lines, params) -> (lines, kept)``."""

    name: str
    params: Callable[[int], st.SearchStrategy[Any]]  # strategy from the excerpt's line count
    apply: Callable[[Lines, Any], tuple[Lines, Kept]]
    crlf: bool = False  # written with CRLF line ends
    drawn: bool = True  # False: no parameters, one pass over every excerpt


def _each(fn: Callable[[int, str], str]) -> Callable[[Lines, Any], tuple[Lines, Kept]]:
    def apply(lines: Lines, _: Any) -> tuple[Lines, Kept]:
        return [fn(i, ln) for i, ln in enumerate(lines)], list(range(1, len(lines) + 1))

    return apply


_NAME = st.from_regex(r"\A[a-z][a-z0-9]{1,8}\Z", fullmatch=True)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class Prefix:
    """A collector/launcher prefix family: the text it puts before physical line ``i``."""

    family: str
    make: Callable[[int], str]


def _iso(base: int, i: int, frac_digits: int) -> str:
    s = base + i // 10
    frac = f"{(i % 10) * 10 ** (frac_digits - 1):0{frac_digits}d}"
    return f"2025-03-{1 + s // 86400 % 28:02d}T{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{frac}Z"


def prefix_families() -> st.SearchStrategy[Prefix]:
    """Every family a real paste carries, with hypothesis drawing its names and numbers."""
    compose = st.builds(
        lambda svc, n, pad: Prefix("compose", lambda i: f"{svc}-{n}{' ' * pad}| "),
        _NAME,
        st.integers(1, 3),
        st.integers(1, 4),
    )
    stamp = st.builds(
        lambda base, digits: Prefix("docker/k8s stamp", lambda i: _iso(base, i, digits) + " "),
        st.integers(0, 10**6),
        st.sampled_from((3, 6, 9)),
    )
    # a CRI runtime's pod log file (/var/log/pods/...): stamp, stream, full/partial tag
    cri = st.builds(
        lambda base, stream: Prefix(
            "CRI pod log file", lambda i: f"{_iso(base, i, 9)} {stream} F "
        ),
        st.integers(0, 10**6),
        st.sampled_from(("stdout", "stderr")),
    )
    kubectl = st.builds(
        lambda pod: Prefix("kubectl --prefix", lambda i: f"[pod/{pod}-0/main] "), _NAME
    )
    rank = st.builds(
        lambda r, sp: Prefix("torchrun [rankN]:", lambda i: f"[rank{r}]:{' ' if sp else ''}"),
        st.integers(0, 7),
        st.booleans(),
    )
    ray = st.builds(
        lambda pid, ip: Prefix("ray (pid=, ip=)", lambda i: f"(pid={pid}, ip=10.0.{ip}.1) "),
        st.integers(100, 99999),
        st.integers(0, 255),
    )
    journal = st.builds(
        lambda mon, host, pid: Prefix(
            "journal",
            lambda i: (
                f"{mon} 0{1 + i // 86400 % 9} {i // 3600 % 24:02d}:{i // 60 % 60:02d}:"
                f"{i % 60:02d} {host} python3[{pid}]: "
            ),
        ),
        st.sampled_from(_MONTHS),
        _NAME,
        st.integers(100, 99999),
    )
    # a launcher nobody listed: Rust tracing as Dynamo writes it, before a relayed line
    tracing = st.builds(
        lambda base, crate, tag: Prefix(
            "unlisted (rust tracing)",
            lambda i: f"{_iso(base, i, 3)}  INFO {crate}::worker: {tag}: ",
        ),
        st.integers(0, 10**6),
        _NAME,
        st.sampled_from(("VLLM", "SGLANG", "stderr")),
    )
    return st.one_of(compose, stamp, cri, kubectl, rank, ray, journal, tracing)


def _prefixed(p: Prefix) -> Callable[[Lines, Any], tuple[Lines, Kept]]:
    return _each(lambda i, ln: p.make(i) + ln)


def _nested(pair: tuple[Prefix, Prefix]) -> Prefix:
    outer, inner = pair
    return Prefix(f"{outer.family} + {inner.family}", lambda i: outer.make(i) + inner.make(i))


def _drop_first(lines: Lines, k: int) -> tuple[Lines, Kept]:
    k = min(k, len(lines) - 1)
    return lines[k:], list(range(k + 1, len(lines) + 1))


def _drop_last(lines: Lines, k: int) -> tuple[Lines, Kept]:
    k = min(k, len(lines) - 1)
    return lines[: len(lines) - k], list(range(1, len(lines) - k + 1))


def _prefix_then_drop(lines: Lines, params: tuple[Prefix, int]) -> tuple[Lines, Kept]:
    """A launcher's prefix on every line, and the window starting mid-log (mid-traceback)."""
    p, k = params
    prefixed, _ = _prefixed(p)(lines, p)
    return _drop_first(prefixed, k)


_ENTITIES = {"<": "&lt;", ">": "&gt;", '"': "&quot;", "&": "&amp;"}


def _entities(lines: Lines, apos: str) -> tuple[Lines, Kept]:
    """As a web page's source shows the text (GitHub: &#39;, Python's html.escape: &#x27;)."""
    table = {**_ENTITIES, "'": apos}
    return ["".join(table.get(c, c) for c in ln) for ln in lines], list(range(1, len(lines) + 1))


# another process's line printed between two of ours, with the header of the line before it
_SG_HEAD = re.compile(
    r"^\[(\d{4}-\d\d-\d\d )?(\d\d:\d\d:\d\d(?:[.,]\d+)?)(?: [A-Z][A-Z_]*-?\d+)*\] "
)
_VL_HEAD = re.compile(
    r"^(?:\([^)]*pid=\d+[^)]*\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +(\d\d-\d\d \d\d:\d\d:\d\d)"
)


def _interleave(lines: Lines, every: int) -> tuple[Lines, Kept]:
    out: Lines = []
    kept: Kept = []
    for i, ln in enumerate(lines, 1):
        out.append(ln)
        kept.append(i)
        if i % every:
            continue
        m = _SG_HEAD.match(ln)
        if m:
            out.append(f"[{m.group(1) or ''}{m.group(2)} TP7] Heartbeat from another rank.")
            kept.append(0)
            continue
        v = _VL_HEAD.match(ln)
        if v:
            out.append(
                f"(VllmWorker rank=7 pid=77777) INFO {v.group(1)} [heartbeat.py:1] "
                "Heartbeat from another rank."
            )
            kept.append(0)
    return out, kept


def _other_engine(lines: Lines) -> str:
    """The engine the excerpt does not mention most (the test's own crude count of names)."""
    text = "\n".join(lines).lower()
    return "vllm" if text.count("sglang") > text.count("vllm") else "sglang"


def _named_after_other(lines: Lines, shape: str) -> tuple[Lines, Kept]:
    """A collector prefix naming the other engine (a server in a container called after it):
    the content decides the engine, the name is only a hint (issue 32, point 5)."""
    other = _other_engine(lines)
    make = {
        "compose": lambda i: f"{other}-server-1  | ",
        "kubectl": lambda i: f"[pod/{other}-7d9f6c-x2k4p/{other}] ",
    }[shape]
    return _each(lambda i, ln: make(i) + ln)(lines, shape)


def transforms() -> tuple[Transform, ...]:
    """The families of issue 21, point 6."""
    ident: Callable[[int], st.SearchStrategy[Any]] = lambda n: st.none()  # noqa: E731
    return (
        Transform("prefix family", lambda n: prefix_families(), lambda ls, p: _prefixed(p)(ls, p)),
        Transform(
            "two prefixes nested",
            lambda n: st.tuples(prefix_families(), prefix_families()).map(_nested),
            lambda ls, p: _prefixed(p)(ls, p),
        ),
        Transform(
            "trailing whitespace stripped",
            ident,
            _each(lambda i, ln: ln.rstrip(" \t")),
            drawn=False,
        ),
        Transform(
            "trailing whitespace added",
            lambda n: st.sampled_from((" ", "  ", "\t", " \t ")),
            lambda ls, ws: _each(lambda i, ln: ln + ws)(ls, ws),
        ),
        Transform("CRLF line ends", ident, _each(lambda i, ln: ln), crlf=True, drawn=False),
        Transform("drop first K lines", lambda n: st.integers(1, max(1, n - 1)), _drop_first),
        Transform("drop last K lines", lambda n: st.integers(1, max(1, n - 1)), _drop_last),
        Transform(
            "prefix family, then first K dropped",
            lambda n: st.tuples(prefix_families(), st.integers(1, max(1, n - 1))),
            _prefix_then_drop,
        ),
        Transform(
            "markdown quote",
            lambda n: st.sampled_from(("> ", ">", "> > ")),
            lambda ls, q: _each(lambda i, ln: q + ln)(ls, q),
        ),
        Transform("HTML entities", lambda n: st.sampled_from(("&#39;", "&#x27;")), _entities),
        Transform("another rank interleaved", lambda n: st.integers(1, 4), _interleave),
        Transform(
            "prefix named after the other engine",
            lambda n: st.sampled_from(("compose", "kubectl")),
            _named_after_other,
        ),
    )


def read_lines(path: Path) -> Lines:
    text = path.read_bytes().decode("utf-8", "replace")
    if text.endswith("\n"):
        text = text[:-1]
    return text.split("\n")


def write_lines(path: Path, lines: Lines, crlf: bool) -> None:
    path.write_bytes(("\r\n" if crlf else "\n").join(lines).encode() + b"\n")


# ------------------------------------------------------------------ what must hold
_FRAME = re.compile(r'File "[^"]+", line \d+, in \S+')


def _exception_line(lines: Lines, v: Verdict) -> int | None:
    """The original line holding the capture error's message (its first words)."""
    if v.error_line is None or not v.error_message:
        return None
    words = v.error_message.strip()[:40]
    for n in range(v.error_line, len(lines) + 1):
        if words and words in lines[n - 1]:
            return n
    return None


def expected(before: Verdict, lines: Lines, kept: Kept) -> dict[str, Any]:
    """The fields that must hold after a transformation, computed from what it dropped:
    ``{field: value}``; a field left out is free. ``capture_error`` of a negative is always
    required to stay None."""
    survived = set(kept) - {0}
    dropped = set(range(1, len(lines) + 1)) - survived
    want: dict[str, Any] = {}
    if not dropped:
        return dict(before.values)
    vals = before.values
    if not vals["run"]:
        return {}
    for name in NUMBERS + ("graph_capture_sizes",):
        if not before.evidence.get(name, frozenset()) & dropped:
            want[name] = vals[name]
    err = vals["capture_error"]
    block: set[int] = set()
    if err is not None:
        assert before.error_line is not None
        # its lines: up to its exception line; to the end where that is not found (a cut
        # traceback, whose message graphdiag words itself)
        exc = _exception_line(lines, before) or len(lines)
        block = set(range(before.error_line, exc + 1))
    if not (before.event_lines | block) & dropped:  # (an event's lines: its first and block)
        want["graph_mode"] = vals["graph_mode"]
        want["run"] = True
    if err is None:
        want["capture_error"] = None  # a negative stays quiet, whatever was dropped
        return want
    context = set(before.context_lines)  # (anywhere: a log may be pasted newest first)
    if before.error_placed_by != "frames":
        if not (block | context) & dropped:
            want["capture_error"] = err
        return want
    # placed by its frames: what the kept frames say, by the phase vocabulary (the data the
    # structure under test consults, not the structure)
    kept_frames = [
        m.group(0) for n in sorted(block & survived) if (m := _FRAME.search(lines[n - 1]))
    ]
    if place(kept_frames) not in CAPTURE_PHASES:
        return want
    if exc in survived:
        want["capture_error"] = err
    elif before.error_line in survived:
        want["capture_error"] = "other"  # the exception line cut away, capture frames kept
    return want


def sweep_settings(examples: int) -> settings:
    """Hypothesis settings of a sweep over the excerpts: ``examples`` derandomized draws,
    generation only (no shrinking, no database), so every run deals the same parameters
    (``tests/test_metamorphic.py``, ``bench/acceptance.py --variants``)."""
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
