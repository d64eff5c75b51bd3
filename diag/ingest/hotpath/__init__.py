"""The columnar hot path: the high-volume periodic lines of SGLang and vLLM logs located and
extracted in bulk by compiled code (a C scanner, ``_cscan*.c``; pyarrow's RE2 kernels where
it is not built), the per-line parsers kept for everything else and as the oracle
(``tests/test_hotpath_oracle.py``).

* :mod:`.kinds`: the line shapes read in bulk (RE2 patterns) and their column builders;
* :mod:`.native`: the C scanner's wrapper: its strict matchers, locator and anchor pass;
* :mod:`.extract`: one byte block in, typed columns plus the lines left over out;
* :mod:`.scanner`: the stream scanner that combines both, row for row as the per-line path.

``GRAPHDIAG_HOTPATH=0`` (or ``ingest(..., hotpath=False)``) reads everything per line;
``GRAPHDIAG_NATIVE=0`` keeps the hot path on RE2.
"""

from __future__ import annotations

from diag.ingest.hotpath.extract import BlockResult, HotPath
from diag.ingest.hotpath.scanner import (
    BULK_KINDS,
    ENV_SWITCH,
    HotScanner,
    hotpath_enabled,
    make_scanner,
)

__all__ = [
    "BULK_KINDS",
    "ENV_SWITCH",
    "BlockResult",
    "HotPath",
    "HotScanner",
    "hotpath_enabled",
    "make_scanner",
]
