"""vLLM's native check sites: data in ``data/native_sites.json`` (``tools/gen_native_sites.py``).

A ``CUDACHECK`` in vLLM's C++/CUDA sources prints ``Failed: Cuda error FILE:LINE 'MESSAGE'``
and exits the worker, so the printed FILE:LINE is often the only evidence of where a worker
died. The table holds every such check of every released sdist (its first line, function,
CUDA call and what it does: ``capture`` for the graph buffers' IPC registration, run as the
custom all-reduce's capture context exits; ``init``, ``shutdown`` or ``either``). A printed
line is read as capture only when every release with a check starting on it agrees.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "native_sites.json"

# The macro's printed form (vllm==0.3.0:csrc/custom_all_reduce.cuh:14, vllm==0.30.0:
# csrc/custom_collective_common.cuh:24), and the patched builds' form without "Cuda error "
# (errors.yaml printed.cuda): the FILE as __FILE__ gives it, any folder before the name; the
# quoted message may be wrapped onto the next line.
_PRINTED = re.compile(r"Failed: (?:Cuda error )?\S*?([\w.-]+\.(?:cuh|cu|h)):(\d+)\b")


@dataclass(frozen=True)
class NativeSite:
    """One check: where it is, what it calls, and in which releases."""

    file: str  # csrc/...
    line: int  # the check's first line: what __LINE__ prints
    func: str
    call: str
    role: str  # capture | init | shutdown | either
    versions: str  # release ranges, "0.10.2-0.26.0"

    @property
    def source(self) -> str:
        return f"vllm=={self.versions}:{self.file}:{self.line} ({self.func}: {self.call})"


@dataclass(frozen=True)
class NativeVerdict:
    """What the table says of one printed FILE:LINE."""

    capture: bool  # every release with a check on that line runs it during capture
    sites: tuple[NativeSite, ...]

    @property
    def source(self) -> str:
        return "; ".join(s.source for s in self.sites)


@cache
def _index() -> dict[tuple[str, int], tuple[NativeSite, ...]]:
    raw = json.loads(DATA.read_text(encoding="utf-8"))
    out: dict[tuple[str, int], list[NativeSite]] = {}
    for s in raw["sites"]:
        site = NativeSite(s["file"], s["lines"][0], s["func"], s["call"], s["role"], s["versions"])
        out.setdefault((site.file.rsplit("/", 1)[-1], site.line), []).append(site)
    return {k: tuple(v) for k, v in out.items()}


def judge_printed(text: str) -> NativeVerdict | None:
    """The check a ``Failed: Cuda error FILE:LINE`` line names, or None when the text prints
    none or names a line no release has a check on (a fork or a build of its own)."""
    if "Failed: " not in text:
        return None
    for m in _PRINTED.finditer(text):
        sites = _index().get((m.group(1), int(m.group(2))))
        if sites:
            return NativeVerdict(all(s.role == "capture" for s in sites), sites)
    return None
