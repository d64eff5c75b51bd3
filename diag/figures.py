"""How a figure reads, once for every output: a share, a number at log precision, GiB, seconds.

Why: the same fact printed as 30 % by the text summary, 29.7 % by ``compare`` and 29.3 % by
``recommend`` reads as three facts (issue 24 point 5). Every output (analyze text, Markdown,
HTML, rule messages, ``recommend``, ``compare``) formats a record figure with these, so one
value reads one way everywhere; which value is the fact is the record's business.
"""

from __future__ import annotations

__all__ = ["gib", "number", "seconds", "share"]


def share(x: float) -> str:
    """A share as a whole percent, one decimal below 1 % (so 0.4 % is not printed as 0 %)."""
    return f"{x:.0%}" if x >= 0.01 or x == 0 else f"{x:.1%}"


def number(x: float) -> str:
    """A measured figure at the precision logs carry: 3 significant digits, whole above 100."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}" if abs(x) >= 0.01 else f"{x:.3f}"


def gib(x: float) -> str:
    return f"{number(x)} GiB"


def seconds(x: float) -> str:
    return f"{number(x)} s"
