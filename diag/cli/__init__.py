"""The ``graphdiag`` command line (thin: everything real lives in :mod:`diag.api`).

One click group (:mod:`diag.cli.group`); each command is a module here and is added to the
group below, so there is exactly one place that lists the commands. Shared options,
warnings, progress and signal handling are in :mod:`diag.cli.common`.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from diag.cli.advise import compare, recommend
from diag.cli.analyze import analyze
from diag.cli.group import main
from diag.cli.parse import parse
from diag.cli.rules import rules

for command in (analyze, parse, rules, recommend, compare):
    main.add_command(command)

__all__ = ["main", "run"]


def run() -> NoReturn:
    """The program's entry point: :func:`main`, then out without tearing the heap down.

    Every report is written (atomically) and flushed by then, and the workers are gone, so
    interpreter teardown has nothing left to do but free the event tables object by object
    (0.2 s after a 700 MB log). Tests call :func:`main` itself, which returns as click does."""
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if code is not None and not isinstance(code, int):  # sys.exit("message")
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say
            pass
    os._exit(code or 0)
