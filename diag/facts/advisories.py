"""The engine's graph-memory advisories as the facts read them: the topic, the number, the text,
and vLLM's numeric advice on --gpu-memory-utilization read in every wording it printed."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["GMU_ADVICE_WORDINGS", "Advisory"]


# vLLM's numeric advice on --gpu-memory-utilization in each wording it printed
# (../shared/formats/vllm-log-formats.md M-4a..M-4d, read from the wheels): "increase[ing]
# --gpu-memory-utilization from A to B" (M-4a ~0.17-0.19, M-4d 0.20+ with profiling off) and
# "The current --gpu-memory-utilization=A is equivalent to ... increase
# --gpu-memory-utilization to B" (M-4b ~0.17-0.19 with the flag, M-4c 0.20+ default)
_NUM = r"(\d+(?:\.\d+)?)"
GMU_ADVICE_WORDINGS = (
    re.compile(rf"--gpu-memory-utilization from {_NUM} to {_NUM}"),
    re.compile(
        rf"current --gpu-memory-utilization={_NUM}\b.*?increase --gpu-memory-utilization to {_NUM}"
    ),
)


@dataclass(frozen=True)
class Advisory:
    """One engine advisory line about graph memory: its topic, number and text."""

    topic: str
    value: float | None
    text: str

    @property
    def advised_increase(self) -> tuple[float, float] | None:
        """vLLM's advice to raise --gpu-memory-utilization from A to B, in any of its
        wordings (:data:`GMU_ADVICE_WORDINGS`): (A, B)."""
        for wording in GMU_ADVICE_WORDINGS:
            m = wording.search(self.text)
            if m:
                return float(m.group(1)), float(m.group(2))
        return None
