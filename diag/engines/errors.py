"""Error signatures, shared by every engine: data in ``data/errors.yaml``, one row per message.

Each row is a regex over an exception's text (or any error line), the capture-error class it
means, whether the text can only be raised while a stream is capturing (``capture``) and
whether it is a follow-on error (``secondary``, CUDA 901), with the source it was read from.
The runtimes' own codes (CUDA, HIP, NCCL, ACL) are the generated table
``data/runtime_codes.json``; ``errors.yaml`` says where in the order each class of them stands
and how each runtime prints a code (``printed:``), so a code is recognised in its printed form
only (a bare "invalid argument" is nothing). The first matching row with a class decides the
class; prefixes and phases play no part here. A native check's printed FILE:LINE is read
back to the check it names (``native_sites``): capture where every release agrees.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache, cached_property
from os.path import commonprefix
from pathlib import Path
from typing import Any, Literal

import yaml

from diag.engines import atlas, native_sites
from diag.engines.literals import required_literals

ErrorClass = Literal["oom", "stream_capture_invalid", "unsupported_op", "distributed", "other"]
ERROR_CLASSES: tuple[ErrorClass, ...] = (
    "oom",
    "stream_capture_invalid",
    "unsupported_op",
    "distributed",
    "other",
)
Runtime = Literal["cuda", "cu", "hip", "nccl", "acl"]
RUNTIMES: tuple[Runtime, ...] = ("cuda", "cu", "hip", "nccl", "acl")
DATA = Path(__file__).resolve().parent / "data"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 100x faster at start-up


@dataclass(frozen=True)
class Signature:
    """One error message as its library prints it (or one runtime code, in its printed forms)."""

    id: str
    error_class: ErrorClass | None  # None: marks the text as capture-explicit only
    pattern: str
    source: str
    capture: bool = False
    secondary: bool = False
    message: str | None = None  # the exact message, where the row is one message
    code: RuntimeCode | None = None  # the runtime code the row is (rows of runtime_codes.json)
    says: tuple[str, ...] = ()  # the texts its source prints (what the row is tested against)
    failure: bool = False  # a process saying it failed or died: an error line whatever its class

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """Compiled on first use: 400 code rows compiled up front would cost start-up 0.4 s."""
        return re.compile(self.pattern)


@dataclass(frozen=True)
class RuntimeCode:
    """One row of ``data/runtime_codes.json``: a code of a runtime and what it prints."""

    runtime: Runtime
    code: int
    name: str
    message: str | None  # the runtime's text for it (None: the runtime prints only the code)
    error_class: ErrorClass
    capture: bool
    source: str
    index: int  # its place in the table (the order among codes of one class)

    @property
    def id(self) -> str:
        return f"{self.runtime}_{self.code}"

    def value(self, key: Key) -> str | None:
        return {"message": self.message, "name": self.name, "code": str(self.code)}[key]

    def printed(self) -> tuple[str, ...]:
        """Every line this code is printed as, by the forms of its runtime (a sample path and
        line number in the file/line places)."""
        return tuple(
            f.text.format(
                message=self.message,
                name=self.name,
                code=self.code,
                file="/workspace/csrc/kernel.cu",
                line=432,
                n=self.code,
            )
            for f in _forms()[self.runtime]
            if f.holds(self)
        )


Key = Literal["message", "name", "code"]


@dataclass(frozen=True)
class Form:
    """How a runtime prints one of its codes in a line (``errors.yaml`` ``printed:``)."""

    runtime: Runtime
    text: str  # with {message} {name} {code} (the key) and {file} {line} {n} placeholders
    source: str
    capture_only: bool = False  # the form holds only capture codes (their texts stand alone)

    def holds(self, c: RuntimeCode) -> bool:
        return c.value(self.key()) is not None and (c.capture or not self.capture_only)

    def key(self) -> Key:
        for k in ("message", "name", "code"):
            if "{" + k + "}" in self.text:
                return k
        raise ValueError(f"errors.yaml: printed form {self.text!r} names no code")

    def pattern(self, key_rx: str) -> str:
        """The form as a regex, the code's place filled with ``key_rx``."""
        fill = {"file": r"\S+?", "line": r"\d+", "n": r"\d+", self.key(): key_rx}
        out, pos = [], 0
        for m in re.finditer(r"\{(\w+)\}", self.text):
            out += [re.escape(self.text[pos : m.start()]), fill[m.group(1)]]
            pos = m.end()
        out.append(re.escape(self.text[pos:]))
        rx = "".join(out)
        if self.key() != "message":  # a name or a number stands alone
            rx = rf"(?<![\w.]){rx}(?!\w)"
        return rx

    def anchors(self, table: dict[str, RuntimeCode]) -> tuple[str, ...]:
        """Literals one of which every line of this form holds: its longest literal, the names'
        common prefix, or (a form that is the message alone) the messages themselves."""
        if self.key() == "name":
            return (commonprefix(list(table)),)
        literal = max(re.split(r"\{\w+\}", self.text), key=len)
        return (literal,) if literal else tuple(sorted(table))


@dataclass(frozen=True)
class _Matcher:
    """One printed form of one runtime, with the codes its key is looked up in."""

    anchors: tuple[str, ...]
    pattern: str
    table: dict[str, RuntimeCode]

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """Compiled when a line first holds an anchor: most logs never quote most forms."""
        return re.compile(self.pattern)


@dataclass(frozen=True)
class Verdict:
    """What the signatures say of one text."""

    error_class: ErrorClass
    capture: bool  # some matching row is raised only during capture
    secondary: bool  # the class-giving row is a follow-on error
    signature: str | None  # id of the class-giving row
    code: str | None = None  # id of the first runtime code the text quotes (``cuda_1``), if any
    cause: str | None = None  # the cause the engine's raise site gives (``data/raise_atlas.json``)
    site: str | None = None  # that site, package==version:path:line
    failure: bool = False  # some matching row is a process saying it failed or died


@cache
def _errors_yaml() -> dict[str, Any]:
    text = (DATA / "errors.yaml").read_text(encoding="utf-8")
    data: dict[str, Any] = yaml.load(text, Loader=_LOADER)
    return data


@cache
def _forms() -> dict[Runtime, tuple[Form, ...]]:
    raw = _errors_yaml()["printed"]
    return {
        rt: tuple(Form(rt, f["form"], f["source"], f.get("only") == "capture") for f in raw[rt])
        for rt in RUNTIMES
    }


@cache
def runtime_codes() -> tuple[RuntimeCode, ...]:
    """Every code of ``data/runtime_codes.json`` (generated by ``tools/gen_runtime_codes.py``)."""
    out = []
    raw = json.loads((DATA / "runtime_codes.json").read_text(encoding="utf-8"))
    for i, row in enumerate(raw["codes"]):
        if row["runtime"] not in RUNTIMES or row["class"] not in ERROR_CLASSES:
            raise ValueError(f"runtime_codes.json: {row['name']}: unknown runtime or class")
        out.append(
            RuntimeCode(
                row["runtime"],
                int(row["code"]),
                row["name"],
                row.get("message"),
                row["class"],
                bool(row["capture"]),
                row["source"],
                i,
            )
        )
    return tuple(out)


@cache
def _matchers() -> tuple[_Matcher, ...]:
    """One matcher per printed form: a message is one of the runtime's texts after the form's
    literal; a name or number is any token there, looked up (so the regex stays small)."""
    out = []
    for rt, forms in _forms().items():
        codes = [c for c in runtime_codes() if c.runtime == rt]
        for form in forms:
            key = form.key()
            table: dict[str, RuntimeCode] = {}
            for c in codes:
                if form.holds(c):
                    table.setdefault(str(c.value(key)), c)
            anchors = form.anchors(table)
            if key == "message":
                alt = "|".join(re.escape(k) for k in sorted(table, key=len, reverse=True))
                key_rx = f"(?P<key>{alt})"
            elif key == "name":
                key_rx = rf"(?P<key>{re.escape(anchors[0])}\w*)"
            else:
                key_rx = r"(?P<key>\d+)"
            out.append(_Matcher(anchors, form.pattern(key_rx), table))
    return tuple(out)


@cache
def _any_anchor() -> re.Pattern[str]:
    """One regex over every form's anchors: a text that holds none quotes no code."""
    anchors = {a for m in _matchers() for a in m.anchors}
    return re.compile("|".join(re.escape(a) for a in sorted(anchors, key=len, reverse=True)))


def quoted_codes(text: str) -> list[RuntimeCode]:
    """The runtime codes a text quotes in one of their printed forms, in the order they appear."""
    if _any_anchor().search(text) is None:
        return []
    hits: list[tuple[int, RuntimeCode]] = []
    for m in _matchers():
        if any(a in text for a in m.anchors):
            for hit in m.regex.finditer(text):
                if (c := m.table.get(hit.group("key"))) is not None:
                    hits.append((hit.start(), c))
    first: dict[str, RuntimeCode] = {}
    for _, c in sorted(hits, key=lambda h: h[0]):
        first.setdefault(c.id, c)
    return list(first.values())


@dataclass(frozen=True)
class _Slot:
    """A ``codes: CLASS`` row: every runtime code of that class, at that place in the order."""

    error_class: ErrorClass


@dataclass(frozen=True)
class _AtlasSlot:
    """The ``atlas:`` row: the engines' raise sites (``data/raise_atlas.json``) at that place."""


@cache
def _order() -> tuple[Signature | _Slot | _AtlasSlot, ...]:
    out: list[Signature | _Slot | _AtlasSlot] = []
    for row in _errors_yaml()["signatures"]:
        if "atlas" in row:
            out.append(_AtlasSlot())
            continue
        cls = row.get("codes", row.get("class"))
        if cls is not None and cls not in ERROR_CLASSES:
            raise ValueError(f"errors.yaml: {row['id']}: unknown class {cls!r}")
        if "codes" in row:
            out.append(_Slot(cls))
            continue
        out.append(
            Signature(
                row["id"],
                cls,
                row["regex"],
                row["source"],
                bool(row.get("capture", False)),
                bool(row.get("secondary", False)),
                row.get("message"),
                None,
                tuple(row.get("says", ())),
                bool(row.get("failure", False)),
            )
        )
    return tuple(out)


@cache
def signatures() -> tuple[Signature, ...]:
    """Every row in order, each runtime code its own row at its class's place."""
    out: list[Signature] = []
    for row in _order():
        if isinstance(row, _Slot):
            out += [_code_signature(c) for c in runtime_codes() if c.error_class == row.error_class]
        elif isinstance(row, Signature):
            out.append(row)
    return tuple(out)


def signature(sig_id: str) -> Signature:
    """The row of that id. A hand-written row is found without building the runtime codes'
    ~500 rows (18 ms): the remedy table reads one such row when it is imported."""
    for row in _order():
        if isinstance(row, Signature) and row.id == sig_id:
            return row
    for sig in signatures():
        if sig.id == sig_id:
            return sig
    raise KeyError(f"errors.yaml has no signature {sig_id!r}")


def _code_signature(c: RuntimeCode) -> Signature:
    forms = [f for f in _forms()[c.runtime] if f.holds(c)]
    rx = "|".join(f"(?:{f.pattern(re.escape(str(c.value(f.key()))))})" for f in forms)
    return Signature(
        c.id, c.error_class, rx, c.source, c.capture, _secondary(c), c.message, c, c.printed()
    )


def _secondary(c: RuntimeCode) -> bool:
    """901 and its kin: the capture was already invalidated by an earlier error."""
    return c.name.endswith(("StreamCaptureInvalidated", "STREAM_CAPTURE_INVALIDATED"))


@cache
def _hand_any() -> tuple[re.Pattern[str], ...]:
    """The prefilter of the hand-written rows: one pattern over the case-sensitive rows and one
    over the (?i) ones (one alternation mixing both is slower than the two: 36 us vs 21 us a
    line here)."""
    rows = [r.pattern for r in _order() if isinstance(r, Signature)]
    groups = ([p for p in rows if "(?i" not in p], [p for p in rows if "(?i" in p])
    return tuple(re.compile("|".join(f"(?:{p})" for p in g)) for g in groups if g)


_WRAP = re.compile(r"[ \t]*\n[ \t]*")  # a hard line break and the indentation around it


def judge(text: str) -> Verdict:
    """The class of an error text (``other`` when no row names one) and its capture marks.

    A message hard-wrapped across lines (a terminal or a forum paste) is read as well with its
    line breaks closed, so a phrase split over two lines still matches its row."""
    if "\n" in text:
        text = text + "\n" + _WRAP.sub(" ", text)
    codes = quoted_codes(text)
    hand = any(rx.search(text) for rx in _hand_any())  # the hand-written rows' prefilter
    sites = atlas.matches(text)
    if not codes and not hand and not sites:
        return Verdict("other", False, False, None)
    cls: ErrorClass | None = None
    capture = any(c.capture for c in codes)
    secondary = failure = False
    sig_id = None
    cause = site = None
    for row in _order():
        if isinstance(row, _AtlasSlot):
            if sites:
                capture = capture or any(s.capture for s in sites)
                best = next((s for s in sites if s.capture), sites[0])
                site = best.source
                if cls is None:  # the class and cause of the site, where no row before said
                    cls, sig_id, cause = best.error_class, f"atlas:{site}", best.cause  # type: ignore[assignment]
            continue
        if isinstance(row, _Slot):
            if cls is not None:
                continue
            mine = [c for c in codes if c.error_class == row.error_class]
            if mine:
                first = min(mine, key=lambda c: c.index)
                cls, secondary, sig_id = first.error_class, _secondary(first), first.id
            continue
        if not hand or row.regex.search(text) is None:
            continue
        capture = capture or row.capture
        failure = failure or row.failure
        if cls is None and row.error_class is not None:
            cls, secondary, sig_id = row.error_class, row.secondary, row.id
    native = native_sites.judge_printed(text)  # a CUDACHECK's FILE:LINE, read back to its call
    if native is not None:
        capture = capture or native.capture
        site = site or native.source
    return Verdict(
        cls or "other",
        capture,
        secondary,
        sig_id,
        codes[0].id if codes else None,
        cause,
        site,
        failure,
    )


def capture_only(text: str) -> bool:
    """Whether the text names an error that is raised only while capturing."""
    return judge(text).capture


def recognised(text: str) -> bool:
    """Whether some row hits: a known error message, or a runtime code in its printed form
    (class ``other`` included: such a line is an error even with no log header)."""
    return judge(text).signature is not None


@cache
def line_anchors() -> tuple[str, ...]:
    """Literals one of which every line a runtime code is printed in holds, and every line a
    row's message can match (the literals its regex requires, else its own ``anchors:``): a
    parser that feeds only lines with an anchor feeds these, so a table text pasted with no
    error word around it ("Invalid capture.") still reaches the table."""
    rows: set[str] = set()
    for r in _errors_yaml()["signatures"]:
        rows.update(required_literals(r["regex"]) or () if "regex" in r else ())
        rows.update(r.get("anchors", ()))
    return tuple(sorted({*(a for m in _matchers() for a in m.anchors), *rows}))
