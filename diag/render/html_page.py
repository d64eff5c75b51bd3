"""The HTML page's plumbing: escaping, script embedding, CSP hashes, number formats,
and the page state that collects plot data blocks."""

from __future__ import annotations

import base64
import hashlib
import html
import math
from collections.abc import Sequence
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import plotly.io as pio

from diag.render.text import HEAD
from diag.resources import package_file

SEV_CLASS = {"error": "sev-error", "warning": "sev-warning", "info": "sev-info", None: "sev-ok"}


def e(value: Any) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def json_for_script(text: str) -> str:
    """JSON text made safe inside ``<script type="application/json">``: no ``</script>``,
    no ``<!--``, no entity, no JS line separators can appear in it."""
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def csp_hash(script: str) -> str:
    return (
        "'sha256-"
        + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
        + "'"
    )


@cache
def template(name: str) -> str:
    return Path(package_file("render", "templates", name)).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs().replace("\r\n", "\n").replace("\r", "\n")
    if "</script" in js.lower():  # pragma: no cover - would break the page
        raise RuntimeError("plotly.js contains '</script'; cannot inline it")
    return js


# ------------------------------------------------------------------ formatting
def fmt_num(v: Any, digits: int = 2, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        text = f"{v:,}"
    elif isinstance(v, float):
        text = f"{v:,.{digits}f}".rstrip("0").rstrip(".") if abs(v) < 1e6 else f"{v:,.0f}"
    else:
        text = str(v)
    return text + (f" {unit}" if unit else "")


def fmt_pct(v: Any) -> str:
    return "n/a" if v is None else f"{float(v):.0%}"


def fmt_sizes(sizes: Sequence[int] | None) -> str:
    if not sizes:
        return "n/a"
    if len(sizes) <= 16:
        return ", ".join(str(s) for s in sizes)
    return f"{', '.join(str(s) for s in sizes[:8])}, … {sizes[-1]} ({len(sizes)} sizes)"


def fmt_bytes(v: Any) -> str:
    if v is None:
        return "n/a"
    return f"{float(v) / 2**30:,.2f} GiB"


def badge(sev: str | None) -> str:
    return f'<span class="badge {SEV_CLASS[sev]}">{HEAD[sev]}</span>'


# ------------------------------------------------------------------ page state
class Page:
    """Collects figures while the body is written; figures become JSON data blocks."""

    def __init__(self) -> None:
        self.figures: list[tuple[str, str]] = []

    def plot(self, fig: Any, absent: str, label: str) -> str:
        """The figure's div plus its data, or a one-line note when there is nothing to draw."""
        if fig is None:
            return f'<p class="absent">{e(label)}: not in the logs ({e(absent)}).</p>'
        fid = f"fig-{len(self.figures) + 1}"
        data = pio.to_json(fig, validate=False, pretty=False, remove_uids=True)
        self.figures.append((fid, json_for_script(data)))
        return (
            f'<div class="plot" id="{fid}" role="img" aria-label="{e(label)}">'
            f'<p class="nojs">{e(label)}: interactive plot, needs JavaScript.</p></div>'
        )

    def data_blocks(self) -> str:
        return "\n".join(
            f'<script type="application/json" class="gd-figure" data-target="{fid}">{data}</script>'
            for fid, data in self.figures
        )
