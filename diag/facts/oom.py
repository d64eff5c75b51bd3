"""The figures of torch's CUDA out-of-memory message, as the log prints them.

torch's caching allocator raises ``CUDA out of memory. Tried to allocate X. GPU N has a
total capacity of Y of which Z is free. [Process P has W memory in use.] Including
non-PyTorch memory, this process has W memory in use.`` with sizes from its
``format_size`` (bytes, KiB, MiB, GiB) (torch==2.5.1:c10/cuda/CUDACachingAllocator.cpp,
``malloc``'s OutOfMemoryError text; the exact line is to be cited from the wheel). The
memory chart of a capture OOM shows these figures; none is derived.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SIZE = r"([\d.]+)\s*(bytes|KiB|MiB|GiB|TiB)"
_TRIED = re.compile(r"Tried to allocate " + _SIZE)
_CAPACITY = re.compile(r"total capacity of " + _SIZE + r" of which " + _SIZE + r" is free")
_IN_USE = re.compile(r"this process has " + _SIZE + r" memory in use")
_GPU = re.compile(r"\bGPU (\d+) has a total capacity")
_UNIT = {"bytes": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "TiB": 2.0**10}


@dataclass(frozen=True)
class OomFigures:
    """What the OOM message says, in GiB (None where it does not say it)."""

    tried_gib: float | None
    capacity_gib: float | None
    free_gib: float | None
    in_use_gib: float | None
    gpu: int | None

    def any(self) -> bool:
        return any(v is not None for v in (self.tried_gib, self.capacity_gib, self.free_gib))


def _gib(number: str, unit: str) -> float | None:
    try:
        return float(number) * _UNIT[unit]
    except (ValueError, KeyError):
        return None


def oom_figures(message: str) -> OomFigures | None:
    """The figures of a torch CUDA OOM message; None when the text is not one."""
    tried = _TRIED.search(message)
    cap = _CAPACITY.search(message)
    use = _IN_USE.search(message)
    gpu = _GPU.search(message)
    if not (tried or cap):
        return None
    return OomFigures(
        tried_gib=_gib(*tried.groups()) if tried else None,
        capacity_gib=_gib(cap.group(1), cap.group(2)) if cap else None,
        free_gib=_gib(cap.group(3), cap.group(4)) if cap else None,
        in_use_gib=_gib(*use.groups()) if use else None,
        gpu=int(gpu.group(1)) if gpu else None,
    )
