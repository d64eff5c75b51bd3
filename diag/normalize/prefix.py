"""Wrapper and engine prefixes: what stands before the message on a log line.

Order of peeling, outermost first:

1. wrapper prefixes added by whatever collected or pasted the log (markdown ``> `` quotes,
   k8s/k9s box borders, CI timestamps, docker ``--timestamps``, Docker-Desktop local
   timestamps, compose ``svc  | ``, ``kubectl --prefix``, torchrun ``[rankN]:``), kept as
   metadata;
2. process prefixes ``(EngineCore_DP0 pid=N)``, ``(VllmWorker rank=1 pid=N)``,
   ``(RayWorkerWrapper pid=N, ip=...)``, ``(pid=N, ip=...)``, vllm-omni ``[Stage-N]``;
3. the engine logger header: SGLang ``[date time TP0]`` / ``[date time DP0 TP1 EP1]`` /
   ``[time]``, vLLM ``LEVEL mm-dd hh:mm:ss [file.py:N]`` (with or without the bracket),
   python-logging ``date time,ms - LEVEL - file:N -`` and ``date time LEVEL pid [file:N]``,
   glog ``W0911 10:24:17.065000 224 file:N]``.

The result is a :class:`LogLine` with timestamp, level, rank and the bare message.

A launcher no row lists (journald, Rust tracing relaying a child's output, ...) is found by
structure: when no engine header starts the line, the first one further in is the header and
what stands before it is an ``unlisted`` prefix (``LogLine.unlisted``); the scanner then learns
its shape and strips it from the stream's header-less lines too (``diag.normalize.shape``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

from diag.lines import headers as h
from diag.sources.readers import COMPOSE_PREFIX, KUBECTL_PREFIX

# vLLM prints no year; lines without one are placed in this (leap) year so that Feb 29
# parses and ordering within a log holds. Documented in README.
NO_YEAR = 2000


@dataclass(slots=True)
class LogLine:
    """One logical log line after normalisation."""

    source: str
    lineno: int
    text: str  # the whole logical line, escapes removed, wrappers stripped
    msg: str  # the message after every prefix
    ts: float | None = None
    level: str | None = None
    rank: str | None = None
    proc: str | None = None
    header: str | None = None  # "sglang" | "vllm" | "pylog" | "glog" | None
    wrapper: str | None = None
    repeat: int = 1  # ray "[repeated Nx across cluster]"
    instance: str = ""  # compose service / k8s pod named by the collector's prefix
    unlisted: str | None = None  # a prefix no row names, found before an engine header

    @property
    def key(self) -> str:
        """Which writer produced the line: process/rank, for block continuation."""
        return self.proc or self.rank or ""


# ---------------------------------------------------------------- wrappers
_BOX = re.compile(r"^\s*[│|┃]\s?(.*?)\s*[│|┃]\s*$")
_ISO_TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
_WRAPPERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("quote", re.compile(r"^(?:>[ \t]?)+(?=[^>]|$)")),
    ("ci", re.compile(r"^\[(" + _ISO_TS + r")\]\s?")),
    # docker's json-file stamp; a CRI runtime's file (/var/log/pods) adds the stream and a
    # full/partial tag before the line, which may begin with spaces (kubernetes
    # pkg/kubelet/kuberuntime/logs/logs.go parseCRILog: "<RFC3339Nano> stdout F <log>")
    ("docker", re.compile(r"^(" + _ISO_TS + r")\s+(?:(?:stdout|stderr) [FP] |(?=\S))")),
    ("docker-desktop", re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\s+|$)(?=\[|\S|$)")),
    ("kubectl", re.compile("^" + KUBECTL_PREFIX)),
    ("compose", re.compile("^" + COMPOSE_PREFIX)),
    # torch.distributed.elastic's per-rank tee (torchrun --tee / --local-ranks-filter)
    ("torchrun", re.compile(r"^\[(?:rank|default)(\d+)\]:[ \t]?")),
)
# wrappers that stand in front of the others: a quote wraps what was pasted, CI stamps
# what the job printed; torchrun's tag may follow a collector's
_STACKING = frozenset({"quote", "ci"})
_RAY_REPEAT = re.compile(r"\s*\[repeated (\d+)x across cluster\]\s*$")

# ---------------------------------------------------------------- process prefixes
# "(EngineCore_DP0 pid=1)", "(VllmWorker rank=1 pid=2)", "(VllmWorker PP0_TP0 pid=3)",
# "(RayWorkerWrapper pid=4, ip=...)", "(pid=5)": a name, qualifiers, then pid
PROCESS_HEADER = re.compile(
    r"^\((?P<proc>[A-Za-z_]\w*(?: (?!pid=)[\w=-]+)*|) ?pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)\s*"
)
_STAGE = re.compile(r"^\[Stage-(\d+)\]\s*")
_UNRANKED_WORKER = re.compile(r"^(?:VllmWorkerProcess|RayWorker\w*|pid=\d+)$")

# ---------------------------------------------------------------- engine headers
SGLANG_HEADER = re.compile(
    "^" + h.SGLANG_BRACKET + " ?",
    re.ASCII,  # (\d, \s: ASCII digits and spaces only, as the C scanner reads them)
)
VLLM_HEADER = re.compile(
    rf"^{h.VLLM_LEVEL}\s+{h.VLLM_STAMP}\s+\[?(?P<file>[^\]\s:]+):(?P<ln>\d+)\] ?",
    re.ASCII,
)
_PYLOG = re.compile(
    r"^(?P<date>\d{4}-\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d)(?:[.,](?P<ms>\d+))?"
    rf"(?: - | ){h.PYLOG_LEVEL}(?: - | \d+ )"
    # SGLang's rank prefix (sglang==0.5.5:sglang/srt/utils/common.py:1153 puts it after the
    # time, "[%(asctime)s{prefix}]") in the bracket of a SGLANG_LOGGING_CONFIG_PATH format,
    # before the file: "[DP3 TP3 EP3 scheduler_metrics_mixin.py:222]"
    rf"(?:\[(?P<ranks>(?:{h.RANK_WORD} )*))?(?P<file>[^\]\s:]+):(?P<ln>\d+)\]?(?: - )?\s?",
    re.ASCII,  # a U+00A0 in "file.py:N" is part of the name on every path (issue 36)
)
_GLOG = re.compile(r"^(?P<lvl>[IWEF])(?P<md>\d{4}) (?P<hms>\d\d:\d\d:\d\d)\.\d+\s+\d+ \S+:\d+\] ")
_OLD_SGLANG_TAG = re.compile(r"^\[gpu(?:_id)?=(\d+)\] ")
_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL", "WARN": "WARNING"}


def _epoch(year: int, month: int, day: int, hms: str, frac: str | None = None) -> float | None:
    try:
        h, m, s = (int(x) for x in hms.split(":"))
        dt = datetime(year, month, day, h, m, s, tzinfo=timezone.utc)
    except ValueError:
        return None
    ts = dt.timestamp()
    if frac:
        ts += float("0." + frac)
    return ts


def sglang_epoch(date: str, time: str, ms: str | None = None) -> float | None:
    """The epoch of an SGLang header's "YYYY-MM-DD" and "HH:MM:SS" (UTC, as every header
    here), None when no such day or time: what ``peel_engine_header`` reads, and the hot path's
    header cache (diag/ingest/hotpath/extract.py) for the C scanner's date|time keys."""
    return _epoch(int(date[:4]), int(date[5:7]), int(date[8:10]), time, ms)


def _iso_epoch(text: str) -> float | None:
    try:
        return datetime.fromisoformat(
            text.replace("Z", "+00:00")[:26] if "." in text else text.replace("Z", "+00:00")
        ).timestamp()
    except ValueError:
        return None


def _normalise_ranks(ranks: str) -> str | None:
    parts = ranks.split()
    return "-".join(parts) if parts else None


def proc_rank(proc: str) -> str | None:
    """Map a vLLM/ray process name to a rank tag ("TP1", "DP0-TP1-EP1", "DP0")."""
    m = re.match(r"^(?:VllmWorker|Worker) rank=(\d+)$", proc)
    if m:
        return f"TP{m.group(1)}"
    m = re.match(r"^(?:VllmWorker|Worker|EngineCore)((?:[ _][A-Z]+\d+)+)$", proc)
    if m:
        return "-".join(p for p in re.split(r"[ _]", m.group(1)) if p)
    return None


def peel(source: str, lineno: int, text: str) -> LogLine:
    """Parse one logical line (escapes already removed) into a :class:`LogLine`."""
    rest, wrapper, wrapper_ts, instance, tee = _wrappers(text)
    repeat = 1
    if "repeated" in rest:
        rm = _RAY_REPEAT.search(rest)
        if rm:
            repeat = int(rm.group(1))
            rest = rest[: rm.start()]
    line = LogLine(
        source, lineno, rest, rest, ts=wrapper_ts, wrapper=wrapper, repeat=repeat, instance=instance
    )
    if tee is not None:
        line.proc = f"rank{tee}"  # the launcher's rank: the process, until a header names it
    peel_engine_header(line, rest)
    if line.header is None and rest:
        _unlisted_prefix(line, rest)
    return line


# where an engine header may begin (checked by the full header regexes at that point)
_HEADER_START = re.compile(
    r"\((?:[A-Za-z_][\w =-]*? )?pid=\d+|\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d"
    r"|\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) +\d\d-\d\d \d\d:\d\d:\d\d"
    r"|\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|\b[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ "
)
MAX_UNLISTED = 120  # an unlisted prefix is a launcher's tag, not a sentence


def _unlisted_prefix(line: LogLine, rest: str) -> None:
    """An engine header after a prefix no row lists: take it, and keep the prefix."""
    for m in _HEADER_START.finditer(rest, 1, MAX_UNLISTED + 40):
        if m.start() > MAX_UNLISTED:
            return
        trial = LogLine(line.source, line.lineno, line.text, line.msg, ts=line.ts)
        trial.proc = line.proc
        peel_engine_header(trial, rest[m.start() :])
        if trial.header is None:
            continue
        line.unlisted = rest[: m.start()]
        line.wrapper = "unlisted" if line.wrapper is None else f"{line.wrapper}+unlisted"
        for name in ("msg", "ts", "level", "rank", "proc", "header"):
            setattr(line, name, getattr(trial, name))
        return


def wrapper_prefix(text: str) -> str:
    """The collector prefix at the start of ``text`` (docker/CI timestamp, compose service,
    kubectl pod) exactly as :func:`peel` strips it; "" when there is none or it is a k9s box.

    A collector prefixes physical lines, so the logical lines after a ``\\r`` inside one
    need it copied to keep their timestamp and instance.
    """
    rest, wrapper, _, _, _ = _wrappers(text)
    if wrapper is None or wrapper.startswith("k9s"):
        return ""
    return text[: len(text) - len(rest)]


def _wrappers(text: str) -> tuple[str, str | None, float | None, str, str | None]:
    """(text after the wrapper prefixes, wrapper names, wrapper timestamp, instance,
    torchrun rank)."""
    wrapper: str | None = None
    wrapper_ts: float | None = None
    instance = ""
    tee: str | None = None
    rest = text
    box = _BOX.match(rest)
    if box and ("│" in rest or "┃" in rest):
        rest, wrapper = box.group(1), "k9s"
    for name, rx in _WRAPPERS:
        m = rx.match(rest)
        if not m:
            continue
        if name == "compose" and not (
            re.search(r"[-_]\d+$", m.group(1)) or _looks_like_log(rest[m.end() :])
        ):
            continue  # "word | text" is a compose prefix only with compose's name-N shape or a log after it
        if name in ("ci", "docker"):
            wrapper_ts = _iso_epoch(m.group(1))
        elif name in ("compose", "kubectl"):
            instance = m.group(1)
        elif name == "torchrun":
            tee = m.group(1)
        elif name == "docker-desktop":
            if _PYLOG.match(rest):
                continue
            after = rest[m.end() :]
            if after and not after.startswith("[") and not _looks_like_log(after):
                # "2025-02-04 21:29:17 INFO 12345 [file:N]" is python logging, not a wrapper
                continue
            wrapper_ts = _epoch(
                int(m.group(1)[:4]), int(m.group(1)[5:7]), int(m.group(1)[8:10]), m.group(1)[11:]
            )
        wrapper = name if wrapper is None else f"{wrapper}+{name}"
        rest = rest[m.end() :]
        if name not in _STACKING:
            break
    if tee is None:
        t = _WRAPPERS[-1][1].match(rest)  # torchrun's tag inside a collector's prefix
        if t:
            tee, rest = t.group(1), rest[t.end() :]
            wrapper = "torchrun" if wrapper is None else f"{wrapper}+torchrun"
    return rest, wrapper, wrapper_ts, instance, tee


_TRACEBACK_PART = re.compile(
    r"^\s*(?:Traceback \(most recent call last\)|File \"|During handling of the above|"
    r"The above exception was|(?:[A-Za-z_][\w.]*)?(?:Error|Exception)(?::\s|$))"
)


def _looks_like_log(text: str) -> bool:
    return bool(text) and (
        text[0] in "[("
        or VLLM_HEADER.match(text) is not None
        or text.startswith(("INFO", "WARNING", "ERROR", "DEBUG"))
        or _TRACEBACK_PART.match(text) is not None  # a traceback a collector prefixed
    )


def peel_engine_header(line: LogLine, rest: str) -> None:
    pid_rank = None  # a rank made from the process prefix's pid alone
    # vllm-omni stage tag may stand before or after the process prefix
    for _ in range(2):
        m = _STAGE.match(rest)
        if m:
            rest = rest[m.end() :]
        p = PROCESS_HEADER.match(rest)
        if p:
            line.proc = p.group("proc") or f"pid={p.group('pid')}"
            if pid_rank is not None and line.rank == pid_rank:
                # a second process prefix inside a pid-only one: the outer is a wrapper around
                # the whole stream (a Ray actor / task); the inner names the worker
                line.rank = pid_rank = None
            # V0 non-driver workers / ray actors name no rank: keep them apart from the driver (rank 0)
            named = line.rank or proc_rank(p.group("proc") or "")
            if not named and _UNRANKED_WORKER.match(line.proc):
                named = pid_rank = f"pid{p.group('pid')}"
            line.rank = named
            rest = rest[p.end() :]
    if not rest:
        line.msg = ""
        return
    c = rest[0]
    if c == "[":
        m = SGLANG_HEADER.match(rest)
        if m:
            line.header = "sglang"
            if m.group("date"):
                ts = sglang_epoch(m.group("date"), m.group("time"), m.group("ms"))
            else:
                ts = line.ts
            line.ts = ts if ts is not None else line.ts
            # SGLang names its ranks in its header; a Ray actor's "(pid=N, ip=...)" around
            # the whole server (every line, ranked or not) is the process, not a rank
            own = None if pid_rank is not None and line.rank == pid_rank else line.rank
            line.rank = _normalise_ranks(m.group("ranks")) or own
            rest = rest[m.end() :]
            t = _OLD_SGLANG_TAG.match(rest)
            if t:
                line.rank = line.rank or f"TP{t.group(1)}"
                rest = rest[t.end() :]
            line.msg = rest
            return
        t = _OLD_SGLANG_TAG.match(rest)
        if t:
            line.header = "sglang"
            line.rank = f"TP{t.group(1)}"
            line.msg = rest[t.end() :]
            return
    elif c in "DIWEC":
        m = VLLM_HEADER.match(rest)
        if m:
            line.header = "vllm"
            line.level = _LEVELS.get(m.group("lvl"), m.group("lvl"))
            md = m.group("md")
            year = _year_of(line.ts)
            line.ts = _epoch(year, int(md[:2]), int(md[3:]), m.group("hms")) or line.ts
            line.msg = rest[m.end() :]
            # vllm-omni: "(EngineCore_DP0 pid=1) [Stage-0] INFO ..." handled above
            return
        g = _GLOG.match(rest)
        if g:
            line.header = "glog"
            line.level = _LEVELS[g.group("lvl")]
            md = g.group("md")
            line.ts = _epoch(_year_of(line.ts), int(md[:2]), int(md[2:]), g.group("hms")) or line.ts
            line.msg = rest[g.end() :]
            return
    elif c.isdigit():
        m = _PYLOG.match(rest)
        if m:
            line.header = "pylog"
            line.level = m.group("lvl")
            line.rank = _normalise_ranks(m.group("ranks") or "") or line.rank
            d = m.group("date")
            line.ts = _epoch(int(d[:4]), int(d[5:7]), int(d[8:10]), m.group("time")) or line.ts
            line.msg = rest[m.end() :]
            return
    # SGLang's "[aiter] ..." or tqdm or traceback lines: message is the whole rest
    line.msg = rest


def _year_of(ts: float | None) -> int:
    if ts is None:
        return NO_YEAR
    return datetime.fromtimestamp(ts, tz=timezone.utc).year
