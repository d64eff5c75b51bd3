"""What every command shares: the exit conventions, signals, progress, warnings, options.

Exit codes as ruff/sqlfluff: 0 analysed, no finding at or above --fail-on; 1 such
findings; 2 usage error or no input could be read at all. stdout carries the chosen
output only; progress and warnings go to stderr.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from diag.cli.progress import Progress
from diag.model import InputStatus

if TYPE_CHECKING:  # pragma: no cover - the report layer loads with the command
    from diag.render.inputs import InputLine

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["Progress", "warn", "report_inputs", "report_input_lines"]

_received: list[int] = []


def terminate(signum: int, _frame: Any) -> None:
    """SIGINT/SIGTERM -> KeyboardInterrupt, so atomic writers remove their temporary files.

    The signal is also remembered: an exception raised inside a fork or a finaliser can be
    swallowed, so writers check :func:`check_interrupted` before renaming anything."""
    _received.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def check_interrupted() -> None:
    if _received:
        raise KeyboardInterrupt(f"signal {_received[0]}")


def exit_interrupted(written: Sequence[object] = ()) -> NoReturn:
    """Exit as shells expect after a signal: 128 + signal number (130 SIGINT, 143 SIGTERM),
    saying exactly which reports exist (``written``: the whole set, or none)."""
    if written:
        warn("interrupted; the reports were written whole: " + ", ".join(map(str, written)))
    else:
        warn("interrupted; no report written")
    sys.exit(128 + (_received[0] if _received else signal.SIGINT))


def warn(msg: str) -> None:
    """One line on stderr, prefixed like every graphdiag message."""
    click.echo(f"graphdiag: {msg}", err=True)


def report_inputs(
    inputs: Iterable[InputStatus], prefix: str = "", all_inputs: bool = False
) -> None:
    """One line per input not fully read. Non-log files met in folders stay in the report
    only, unless ``all_inputs`` (recommend/compare name every input they could not use)."""
    for item in inputs:
        if item.status == "ok":
            continue
        if not all_inputs and (item.reason or "").startswith("not a log"):
            continue
        warn(f"{prefix}{item.status}: {item.path}: {item.reason}")


#: stderr names this many inputs, then how many more the report lists
MAX_INPUT_LINES = 10


def report_input_lines(lines: Sequence[InputLine]) -> None:
    """Skipped, partly read and run-less inputs on stderr, one line each with its reason;
    past :data:`MAX_INPUT_LINES` a count (the report lists them all)."""
    for item in lines[:MAX_INPUT_LINES]:
        warn(item.text())
    if len(lines) > MAX_INPUT_LINES:
        more = len(lines) - MAX_INPUT_LINES
        warn(f"and {more} more input{'s' if more != 1 else ''} (listed in the report's inputs)")


def install_signal_handlers() -> None:
    _received.clear()
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)


# ------------------------------------------------------------------ shared options
def jobs_option(f: F) -> F:
    return click.option(
        "--jobs",
        "-j",
        type=click.IntRange(min=0),
        default=0,
        show_default="0 = auto",
        help="Worker processes for reading logs: 0 = auto (one per core, up to 8, when inputs "
        "exceed 64 MiB), 1 = none.",
    )(f)


def quiet_option(help: str | None = "No progress on stderr.") -> Callable[[F], F]:
    def deco(f: F) -> F:
        return click.option("--quiet", "-q", is_flag=True, help=help)(f)

    return deco


def starts_option(f: F) -> F:
    """``--starts-per-day R``: how often the server starts; capture time is paid on every
    start, and no log says how often that is (autoscaling, rolling deploys, restarts)."""
    return click.option(
        "--starts-per-day",
        "starts_per_day",
        type=click.FloatRange(min=0.0, min_open=True, max=1e6),
        default=None,
        metavar="R",
        help="Server starts a day (restarts, autoscaling, rolling deploys): each pays the "
        "whole capture, which the bucket advice prices (default: 1).",
    )(f)


FORMAT_HELP = {
    "text": "text: a terminal summary",
    "json": "json: the JSON report",
    "yaml": "yaml: the ticket records",
    "markdown": "markdown: a ticket body (GitHub/Jira)",
    "html": "html: a page",
}


#: the short names users type for a format (``--format md``)
FORMAT_ALIASES = {
    "md": "markdown",
    "yml": "yaml",
    "txt": "text",
    "htm": "html",
    "jsonlines": "jsonl",
    "ndjson": "jsonl",
    "pq": "parquet",
}


class FormatChoice(click.Choice):
    """A format name, any case, or its usual short name (md, yml, txt, ...)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            low = value.strip().lower()
            low = FORMAT_ALIASES.get(low, low)
            if low in self.choices:
                return low
        return super().convert(value, param, ctx)


def format_option(choices: list[str], default: str = "text") -> Callable[[F], F]:
    def deco(f: F) -> F:
        aliases = [a for a, full in FORMAT_ALIASES.items() if full in choices]
        return click.option(
            "--format",
            "fmt",
            type=FormatChoice(choices),
            default=default,
            show_default=True,
            help="What stdout gets; "
            + "; ".join(FORMAT_HELP.get(c, c) for c in choices)
            + (f" (also: {', '.join(aliases)})" if aliases else "")
            + ".",
        )(f)

    return deco
