"""What the report says about its inputs, the same in the text summary, the HTML page and
on stderr: inputs not (fully) read with their reason, logs that made no run and why (the
reason :func:`diag.report.note_inputs_without_runs` gave them), and the notes reading left
on an input (NUL bytes dropped, a log cut inside a traceback)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from diag.model import InputStatus
from diag.report import Report

Problem = Literal["skipped", "partial", "no run"]


@dataclass(frozen=True)
class InputLine:
    """One input the reader should hear about: what happened to it and why."""

    path: str
    status: str  # the input's own (ok | partial | skipped)
    problem: Problem
    reason: str

    def text(self) -> str:
        """``status: path: reason`` (a run-less log is ``ok: x.log: read, but made no run:
        ...``: it was read without error)."""
        return f"{self.status}: {self.path}: {self.reason}"


def _line(item: InputStatus) -> InputLine:
    reason = item.reason or "not read"
    problem: Problem = (
        "skipped"
        if item.status == "skipped"
        else "partial"
        if item.status == "partial"
        else "no run"
    )
    return InputLine(item.path, item.status, problem, reason)


def input_lines(report: Report, with_non_logs: bool = True) -> list[InputLine]:
    """Inputs skipped, partly read or read without making a run, each with why;
    ``with_non_logs``: also the files skipped for not being logs (a README in a folder)."""
    if with_non_logs:
        items = [i for i in report.inputs if i.status != "ok" or i.reason]
    else:
        items = report.inputs_to_show()
    return [_line(i) for i in items]


#: why an input made nothing, in the words of its reason (first match wins)
_KINDS = (
    ("not a log", "not a log"),
    ("empty folder", "empty folder"),
    ("empty file", "empty"),
    ("only NUL", "empty"),
    ("binary", "binary"),
    ("read, but made no run", "read but no engine line"),
)


def why_nothing(report: Report) -> str:
    """Why an analysis found nothing, in one line: how many inputs and what each kind of
    failure counted (``3 inputs: 2 not a log (.py), 1 empty``)."""
    counts: dict[str, int] = {}
    suffixes: dict[str, int] = {}
    for item in report.inputs:
        reason = item.reason or ""
        kind = next((k for key, k in _KINDS if key in reason), None)
        if kind is None:
            kind = "unreadable" if item.status == "skipped" else "read but no engine line"
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "not a log":
            suffix = "." + item.path.rsplit(".", 1)[-1] if "." in item.path else "no suffix"
            suffixes[suffix] = suffixes.get(suffix, 0) + 1
    if not counts:
        return "no input given"
    parts = []
    for kind, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        text = f"{n} {kind}"
        if kind == "not a log":
            text += " (" + ", ".join(sorted(suffixes)) + ")"
        parts.append(text)
    n = len(report.inputs)
    return f"{n} input{'s' if n != 1 else ''}: " + ", ".join(parts)


def input_notes(report: Report) -> dict[str, list[str]]:
    """The notes reading left on each input file, by path (built once for all runs)."""
    return {i.path: i.notes for i in report.inputs}


def run_input_notes(notes: Mapping[str, list[str]], sources: Sequence[str]) -> list[str]:
    """The notes reading left on a run's own input files (:func:`input_notes`), each with
    its file."""
    return [f"{src}: {note}" for src in sources for note in notes.get(src, ())]
