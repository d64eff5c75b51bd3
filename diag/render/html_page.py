"""The HTML page's plumbing: the Jinja2 environment, script embedding, CSP hashes, and the
page state that collects plot data blocks (number formats: :mod:`diag.render.numbers`)."""

from __future__ import annotations

import base64
import hashlib
import re
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import plotly.io as pio
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from diag.render.axes import figure_height
from diag.render.figspec import Spec
from diag.render.view import Chart
from diag.resources import package_file


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


# ------------------------------------------------------------------ templates
@cache
def environment() -> Environment:
    """Jinja2 with autoescape on for every template: each ``{{ value }}`` is HTML-escaped,
    log text included; ``StrictUndefined`` makes an unfilled placeholder a render error.
    Raw HTML only through :class:`markupsafe.Markup`, made in :mod:`diag.render.html` for the
    fixed scripts, the fixed CSS and figure JSON after :func:`json_for_script`, and by the
    ``breakable`` filter (escaped text plus ``<wbr>`` tags)."""
    env = Environment(
        loader=FileSystemLoader(package_file("render", "templates")),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["breakable"] = breakable
    return env


#: where a long name may wrap: after a path separator, an underscore, a ``::`` or a ``#``
#: (hyphens and spaces already are break opportunities); never inside a word or a number
BREAK_AFTER = re.compile(r"([/\\_#]|::)(?=.)")


def breakable(value: object) -> Markup:
    """``value`` escaped, with a ``<wbr>`` after each :data:`BREAK_AFTER` match: a path or
    run name wraps at its separators, and the page's CSS never breaks a word (copying the
    text copies no invisible character, unlike a zero-width space)."""
    text = str(value)
    cuts = [m.end() for m in BREAK_AFTER.finditer(text)]
    parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    return Markup("<wbr>").join(escape(part) for part in parts)


# ------------------------------------------------------------------ page state
class Page:
    """Collects figures while the view is built; figures become JSON data blocks."""

    def __init__(self) -> None:
        self.figures: list[tuple[str, str]] = []

    def chart(self, fig: Any, label: str, kind: str) -> Chart:
        fid = f"fig-{len(self.figures) + 1}"
        data = (
            fig.to_json()
            if isinstance(fig, Spec)
            else pio.to_json(fig, validate=False, pretty=False, remove_uids=True)
        )
        self.figures.append((fid, json_for_script(data)))
        return Chart(id=fid, label=label, kind=kind, height=figure_height(fig))
