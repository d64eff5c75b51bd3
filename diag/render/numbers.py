"""Number cells of the HTML and text views: a figure as the page writes it, or None when the
log did not give it (the caller leaves the field out, so no ``n/a`` or ``nan`` is shown).

Apart from :mod:`diag.render.html_page` so the text report (the trace panel) formats its
figures without loading the page's Jinja2 and plotly.
"""

from __future__ import annotations

import math
from typing import Any

from diag.figures import share


def known(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and (math.isnan(v) or math.isinf(v)))


def fmt_num(v: Any, digits: int = 2, unit: str = "") -> str | None:
    """A number for display, or None when unknown (callers leave the field out)."""
    if not known(v):
        return None
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        text = f"{v:,}"
    elif isinstance(v, float):
        text = f"{v:,.{digits}f}".rstrip("0").rstrip(".") if abs(v) < 1e6 else f"{v:,.0f}"
    else:
        text = str(v)
    return text + (f" {unit}" if unit else "")


def fmt_pct(v: Any) -> str | None:
    return share(float(v)) if known(v) else None


def fmt_bytes(v: Any) -> str | None:
    return f"{float(v) / 2**30:,.2f} GiB" if known(v) else None


def joined(*parts: str | None, sep: str = " · ") -> str | None:
    """Known parts joined; None when none is known."""
    kept = [p for p in parts if p]
    return sep.join(kept) if kept else None
