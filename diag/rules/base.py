"""What a rule is: a class per finding code, its docstring the documentation (sqlfluff style).

A rule has typed thresholds (each with the reason for its value), ``fires(metrics)`` in
plain Python over :class:`~diag.rules.metrics.RunMetrics`, a message built from the run's
own numbers, an evidence selector, and remediation as data (:class:`Remedy`: engine,
version range, cause, the flags it names, and what shows it is already in effect).

The docstring holds a firing example and a near miss as ``Fires::`` / ``Near miss::``
blocks (log lines, or ``incident: <fixture name>``); tests/test_rule_docs.py runs them.
"""

from __future__ import annotations

import inspect
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from diag.engines.flags import accepts, cite
from diag.engines.version import Version, parse_version
from diag.figures import number, share
from diag.model import Finding
from diag.rules.metrics import RunMetrics

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")


class Standstill(str):
    """A remedy that changes nothing on the server (keep the set, check, wait for more
    traffic): said, but a finding whose every remedy is one is no warning (issue 34: a
    warning carries a change to make; :meth:`diag.rules.engine.RuleEngine` lowers it)."""

    __slots__ = ()


def acts(remedy: str) -> bool:
    """Does this remedy text change something (not a :class:`Standstill`)?"""
    return not isinstance(remedy, Standstill)


@dataclass(frozen=True)
class Threshold:
    value: float
    why: str


@dataclass(frozen=True)
class Remedy:
    """One remediation step, in the engine's own flags for a version range.

    ``text`` is what the catalogue prints: generic, concrete, no placeholders. ``specific``
    may say the same with the run's own numbers (it returns None when they are unknown, and
    ``text`` is used). ``flags`` are checked against :mod:`diag.engines.flags` for the run's
    version; ``in_effect`` names the log evidence that the remedy is already applied (then
    it is never offered).
    """

    text: str
    engine: str | None = None  # None: any engine
    since: Version | None = None
    until: Version | None = None  # exclusive
    causes: tuple[str, ...] = ()  # empty: any cause
    flags: tuple[str, ...] = ()
    when: Callable[[RunMetrics], bool] | None = None  # applies only where the log shows this
    in_effect: Callable[[RunMetrics], bool] | None = None
    specific: Callable[[RunMetrics], str | None] | None = None
    source: str = ""  # where the engine documents it, when not a flag cite
    acts: bool = True  # False: a check or a keep, no change to make (a Standstill)

    def applies(self, m: RunMetrics, cause: str | None) -> bool:
        if self.engine is not None and self.engine != m.backend:
            return False
        if self.causes and (cause or "other") not in self.causes:
            return False
        if self.when is not None and not self.when(m):
            return False
        ver = parse_version(m.engine_version)
        if ver is not None:
            if self.since is not None and ver < self.since:
                return False
            if self.until is not None and ver >= self.until:
                return False
        elif self.until is not None:
            return False  # unknown version: only what the newest release still takes
        if not all(accepts(m.backend, f, m.engine_version) for f in self.flags):
            return False
        return not (self.in_effect is not None and self.in_effect(m))

    def render(self, m: RunMetrics) -> str:
        if self.specific is not None:
            text = self.specific(m)
            if text:
                return text if self.acts else Standstill(text)
        return self.text if self.acts else Standstill(self.text)

    def catalogue(self) -> dict[str, Any]:
        rng = ""
        if self.since or self.until:
            lo = ".".join(map(str, self.since)) if self.since else ""
            hi = ".".join(map(str, self.until)) if self.until else ""
            rng = f">={lo}" if lo and not hi else f"<{hi}" if hi and not lo else f">={lo},<{hi}"
        return {
            "engine": self.engine or "any",
            "versions": rng or "all",
            "causes": list(self.causes) or ["any"],
            "text": self.text,
            "flags": {f: cite(self.engine or "", f) for f in self.flags},
            "source": self.source,
        }


class Rule(ABC):
    """Base class: subclasses set the class attributes and implement :meth:`fires` and
    :meth:`message`."""

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity]
    trigger: ClassVar[str]  # when it fires, in words (the catalogue's "what triggers it")
    # rank among findings of the same severity for "first change": higher acts first
    impact: ClassVar[int] = 0
    thresholds: ClassVar[Mapping[str, Threshold]] = {}
    evidence: ClassVar[str]  # a selector of diag.rules.selectors
    # the facts it reads: the RunMetrics fields its module uses, "graph_mode" or a concern's
    # "memory.kv_peak_usage" (tests/test_rules_read.py holds the list to the code, so a rule
    # never reads a fact it does not declare)
    reads: ClassVar[tuple[str, ...]] = ()
    remedies: ClassVar[tuple[Remedy, ...]] = ()

    def __init__(
        self, overrides: Mapping[str, float] | None = None, severity: Severity | None = None
    ) -> None:
        self.values = {k: t.value for k, t in self.thresholds.items()}
        self.values.update(overrides or {})
        self.active_severity: Severity = severity or self.severity

    def t(self, name: str) -> float:
        return self.values[name]

    @abstractmethod
    def fires(self, m: RunMetrics) -> bool:
        """Does the rule fire on this run?"""

    @abstractmethod
    def message(self, m: RunMetrics) -> str:
        """The finding's message, from the run's own numbers."""

    def held_back(self, m: RunMetrics) -> str | None:
        """Why the rule does not fire on a run that shows its signal (a run note, so that a
        signal the rule cannot attribute is never silent); None: nothing to say."""
        return None

    def cause(self, m: RunMetrics) -> str | None:
        """The cause that picks remedies (e.g. the capture error class)."""
        return None

    def adjust(self, m: RunMetrics, fired: Mapping[str, Finding], remedies: list[str]) -> list[str]:
        """Remedies once the other findings of the run are known (so that two findings never
        advise opposite things); by default unchanged."""
        return remedies

    def remediation(self, m: RunMetrics) -> list[str]:
        cause = self.cause(m)
        out: list[str] = []
        for r in self.remedies:
            if r.applies(m, cause):
                text = r.render(m)
                if text not in out:
                    out.append(text)
        return out

    @classmethod
    def doc(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def user_doc(cls) -> str:
        """The docstring for users: without the developers' notes (the ``Fires::`` /
        ``Near miss::`` examples the docs test runs, ``(detection: module ...)`` pointers)."""
        doc = re.sub(
            r"^(Fires|Near miss)[^\n]*::\n\n(?:    [^\n]*\n?|\n)+", "", cls.doc(), flags=re.M
        )
        doc = re.sub(r"\s*\(detection: [^)]*\)", "", doc)
        return re.sub(r"\n{3,}", "\n\n", doc).strip()

    @classmethod
    def summary(cls) -> str:
        return cls.doc().split("\n\n", 1)[0].replace("\n", " ")

    @classmethod
    def examples(cls) -> list[tuple[bool, str, str]]:
        """(fires?, title, block) for each ``Fires::`` / ``Near miss ...::`` block."""
        out = []
        doc = cls.doc()
        for m in re.finditer(r"^(Fires|Near miss)([^\n]*)::\n\n((?:    [^\n]*\n?|\n)+)", doc, re.M):
            block = inspect.cleandoc(m.group(3))
            out.append((m.group(1) == "Fires", (m.group(1) + m.group(2)).strip(), block + "\n"))
        return out

    @classmethod
    def catalogue(cls) -> dict[str, Any]:
        return {
            "code": cls.code,
            "name": cls.name,
            "severity": cls.severity,
            "summary": cls.summary(),
            "trigger": cls.trigger,
            "doc": cls.user_doc(),
            "thresholds": {k: t.value for k, t in cls.thresholds.items()},
            "threshold_reasons": {k: t.why for k, t in cls.thresholds.items()},
            "evidence": cls.evidence,
            "remediation": [r.catalogue() for r in cls.remedies],
        }


# rule messages format figures as every other output does (diag.figures)
pct = share
num = number
