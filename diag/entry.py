"""The program's entry point, kept free of imports so it runs before numpy loads.

numpy's OpenBLAS starts a thread per core that spins after each call (a least-squares fit
of a few hundred points in the advice): on a machine whose cores the scan workers already
fill, the spinning is CPU taken from them. graphdiag does no large linear algebra, so the
command line runs OpenBLAS single-threaded unless the user says otherwise.
"""

from __future__ import annotations

import os
from typing import NoReturn


def run() -> NoReturn:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from diag.cli import run as cli_run

    cli_run()
