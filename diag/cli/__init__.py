"""The ``graphdiag`` command line (thin: everything real lives in :mod:`diag.api`).

One click group (:mod:`diag.cli.group`); each command is a module here and is added to the
group below, so there is exactly one place that lists the commands. Shared options,
warnings, progress and signal handling are in :mod:`diag.cli.common`.
"""

from __future__ import annotations

from diag.cli.advise import compare, recommend
from diag.cli.analyze import analyze
from diag.cli.group import main
from diag.cli.parse import parse
from diag.cli.rules import rules

for command in (analyze, parse, rules, recommend, compare):
    main.add_command(command)

__all__ = ["main"]
