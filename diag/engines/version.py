"""Engine versions, parsed loosely ("0.4.6.post3", "0.11.1rc6.dev115+g...", "v0.10.0")."""

from __future__ import annotations

import re

Version = tuple[int, ...]


def parse_version(text: str | None) -> Version | None:
    """'0.4.6.post3' -> (0, 4, 6, 3); 'v0.11.1rc6.dev1' -> (0, 11, 1, 0)."""
    if not text:
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?(?:\.post(\d+))?", text)
    if not m:
        return None
    return tuple(int(g) if g else 0 for g in m.groups())
