"""The HTML page's plumbing: the Jinja2 environment, script embedding, CSP hashes, and the
page state that collects plot data blocks (number formats: :mod:`diag.render.numbers`)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
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


#: a figure's JSON longer than this is embedded gzip-compressed in base64 (``{"gzip": ...}``),
#: which report.js inflates with the browser's DecompressionStream: a binned timeline repeats
#: its time axis in every trace and shrinks 20-40x, so a fleet page stays attachable
COMPRESS_ABOVE = 16_384


def figure_block(data: str) -> str:
    """A figure's JSON as the text of its data block: as it is, or packed when large (the
    packing is deterministic: no time stamp in the gzip header)."""
    if len(data) <= COMPRESS_ABOVE:
        return json_for_script(data)
    packed = base64.b64encode(gzip.compress(data.encode("utf-8"), mtime=0)).decode("ascii")
    return json.dumps({"gzip": packed})


def unpack_figure(text: str) -> Any:
    """The figure a data block holds, packed or not (what report.js does, for tests/tools)."""
    spec = json.loads(text)
    if isinstance(spec, dict) and set(spec) == {"gzip"}:
        return json.loads(gzip.decompress(base64.b64decode(spec["gzip"])))
    return spec


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
    """plotly.js's basic partial bundle (scatter, bar, pie), vendored in ``render/vendor``
    (README there): a page inlines 1.2 MB of script, not the full bundle's 4.8 MB."""
    js = Path(package_file("render", "vendor", "plotly-basic.min.js")).read_text(encoding="utf-8")
    js = js.replace("\r\n", "\n").replace("\r", "\n")
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
        self.figures: list[tuple[str, str]] = []  # registered, not yet written
        self.made = 0

    def chart(self, fig: Any, label: str, kind: str) -> Chart:
        self.made += 1
        fid = f"fig-{self.made}"
        data = (
            fig.to_json()
            if isinstance(fig, Spec)
            else pio.to_json(fig, validate=False, pretty=False, remove_uids=True)
        )
        self.figures.append((fid, figure_block(data)))
        return Chart(id=fid, label=label, kind=kind, height=figure_height(fig))
