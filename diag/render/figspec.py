"""A figure built as the plain dict plotly.js reads.

Why: plotly's incremental API (``add_trace``, ``update_xaxes``, ``add_shape``,
``make_subplots``) re-validates and deep-copies the figure tree on every call, which was
most of the HTML report's render time (a vLLM run with 60 capture sizes: 60 ``add_shape``
calls, each re-validating every shape before it, ~1 s), and even one validated
``go.Figure(dict)`` deep-copies and checks each of a timeline's 5000 x strings.
:class:`Spec` offers the few calls the report's figures make, with the same names and the
same resulting JSON, as plain dict updates. The page writes :meth:`Spec.to_dict` as it is;
:meth:`Spec.figure` is the validated ``go.Figure`` (tests build it for every figure, so
a property plotly does not know still fails there).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

# plotly is imported where a figure is written or validated, not here: the text and JSON
# reports build their tables through this module's users and never load plotly (~60 ms with
# the narwhals it pulls in, on every ``analyze --no-html``)

#: the content of plotly's templates by name, as ``pio.templates[name].to_plotly_json()``
#: gives it (tests/test_figspec.py holds them equal): reading ``pio.templates`` builds a
#: ``go.layout.Template``, which loads plotly's whole validator table on first use
TEMPLATES: dict[str, dict[str, Any]] = {"none": {"data": {"scatter": [{"type": "scatter"}]}}}

#: plotly property names that hold an underscore (never split)
LITERAL = {"paper_bgcolor", "plot_bgcolor"}


def _expand(props: dict[str, Any]) -> dict[str, Any]:
    """plotly's "magic underscores": ``title_text=..`` is ``title={"text": ..}``."""
    out: dict[str, Any] = {}
    for key, value in props.items():
        parts = [key] if key in LITERAL else key.split("_")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        if isinstance(value, dict):
            value = _expand(value)
        if isinstance(value, dict) and isinstance(node.get(parts[-1]), dict):
            _merge(node[parts[-1]], value)
        else:
            node[parts[-1]] = value
    return out


def _typed(obj: Any) -> Any:
    """``_plotly_utils.utils.convert_to_base64`` (what ``BaseFigure.to_dict`` applies: numeric
    arrays become base64 typed arrays) on a copy, so the spec is left as built, and without
    a call per element of a list of 5000 time stamps."""
    from _plotly_utils.utils import is_homogeneous_array, is_skipped_key, to_typed_array_spec

    if isinstance(obj, dict):
        return {
            k: v
            if is_skipped_key(k)
            else (to_typed_array_spec(v) if is_homogeneous_array(v) else _typed(v))
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [_typed(v) if isinstance(v, (dict, list, tuple)) else v for v in obj]
    return obj


def _merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
    """Nested dicts merged, any other value replaced (what plotly's ``update`` does)."""
    for key, value in src.items():
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            _merge(dst[key], value)
        else:
            dst[key] = value


class Spec:
    """One figure's traces and layout as dicts; ``rows`` > 1 stacks subplots sharing x
    (the domains, anchors and ``matches`` of ``make_subplots(rows, 1, shared_xaxes=True)``)."""

    def __init__(
        self,
        rows: int = 1,
        row_heights: list[float] | None = None,
        vertical_spacing: float | None = None,
    ) -> None:
        self.rows = rows
        self.data: list[dict[str, Any]] = []
        self.layout: dict[str, Any] = {}
        if rows == 1:
            self.layout.update(xaxis={}, yaxis={})
            return
        # make_subplots' own arithmetic (plotly/_subplots.py), top row first
        if vertical_spacing is None:
            vertical_spacing = 0.3 / rows  # make_subplots' default
        weights = row_heights or [1.0] * rows
        total = float(sum(weights))
        heights = [(1.0 - vertical_spacing * (rows - 1)) * (h / total) for h in weights]
        heights = list(reversed(heights))
        starts = [sum(heights[:r]) + r * vertical_spacing for r in range(rows)][::-1]
        bottom = self._ref("x", rows)
        for r in range(rows):
            y_s = min(max(starts[r], 0.0), 1.0)
            y_e = min(max(starts[r] + heights[-1 - r], 0.0), 1.0)
            x_axis: dict[str, Any] = {"anchor": self._ref("y", r + 1), "domain": [0.0, 1.0]}
            if r + 1 < rows:  # shared x, tick labels on every subplot (a reader of the upper
                x_axis.update(matches=bottom)  # panel needs no ruler to the bottom one)
            self.layout[self._name("x", r + 1)] = x_axis
            self.layout[self._name("y", r + 1)] = {
                "anchor": self._ref("x", r + 1),
                "domain": [y_s, y_e],
            }

    @staticmethod
    def _ref(letter: str, row: int) -> str:
        return letter if row == 1 else f"{letter}{row}"

    def _name(self, letter: str, row: int) -> str:
        return self._ref(letter, row).replace(letter, f"{letter}axis", 1)

    def _axes(self, letter: str, row: int | None) -> list[str]:
        if row is not None:
            return [self._name(letter, row)]
        return [self._name(letter, r) for r in range(1, self.rows + 1)]

    def axis_names(self) -> list[str]:
        """Every axis, x axes first (the order of ``select_xaxes``, ``select_yaxes``)."""
        return [n for letter in "xy" for n in self._axes(letter, None)]

    # ------------------------------------------------------------------ plotly's calls
    def add_trace(self, trace: dict[str, Any], row: int | None = None, col: int = 1) -> None:
        trace = _expand(trace)
        if self.rows > 1:
            trace.update(xaxis=self._ref("x", row or 1), yaxis=self._ref("y", row or 1))
        self.data.append(trace)

    def update_layout(self, **props: Any) -> None:
        _merge(self.layout, _expand(props))

    def update_xaxes(self, row: int | None = None, col: int = 1, **props: Any) -> None:
        for name in self._axes("x", row):
            _merge(self.layout.setdefault(name, {}), _expand(props))

    def update_yaxes(self, row: int | None = None, col: int = 1, **props: Any) -> None:
        for name in self._axes("y", row):
            _merge(self.layout.setdefault(name, {}), _expand(props))

    def add_shape(self, **props: Any) -> None:
        self.layout.setdefault("shapes", []).append(_expand(props))

    def add_annotation(self, row: int | None = None, col: int = 1, **props: Any) -> None:
        props = _expand(props)
        if row is not None:
            for letter in "xy":
                ref = props.get(f"{letter}ref", letter)
                domain = " domain" if ref.endswith(" domain") else ""
                props[f"{letter}ref"] = self._ref(letter, row) + domain
        self.layout.setdefault("annotations", []).append(props)

    # lines and rects without a row sit on row 1 (in a stack, name the row: plotly spreads
    # them over rows of its own choosing)
    def _line(self, letter: str, at: float, row: int | None, props: dict[str, Any]) -> None:
        other = "y" if letter == "x" else "x"
        r = row or 1
        self.add_shape(
            type="line",
            **{f"{letter}0": at, f"{letter}1": at, f"{letter}ref": self._ref(letter, r)},
            **{f"{other}0": 0, f"{other}1": 1, f"{other}ref": self._ref(other, r) + " domain"},
            **props,
        )

    def add_vline(self, x: float, row: int | None = None, col: int = 1, **props: Any) -> None:
        self._line("x", x, row, props)

    def add_hline(
        self,
        y: float,
        row: int | None = None,
        col: int = 1,
        annotation_text: str | None = None,
        annotation_font_color: str | None = None,
        **props: Any,
    ) -> None:
        """A horizontal line; its label at the top left (the only position used)."""
        self._line("y", y, row, props)
        if annotation_text is not None:
            r = row or 1
            note: dict[str, Any] = {
                "showarrow": False,
                "text": annotation_text,
                "x": 0,
                "xanchor": "left",
                "xref": self._ref("x", r) + " domain",
                "y": y,
                "yanchor": "bottom",
                "yref": self._ref("y", r),
            }
            if annotation_font_color is not None:
                note["font"] = {"color": annotation_font_color}
            self.layout.setdefault("annotations", []).append(note)

    def _rect(self, letter: str, lo: float, hi: float, row: int | None, props: Any) -> None:
        other = "y" if letter == "x" else "x"
        r = row or 1
        self.add_shape(
            type="rect",
            **{f"{letter}0": lo, f"{letter}1": hi, f"{letter}ref": self._ref(letter, r)},
            **{f"{other}0": 0, f"{other}1": 1, f"{other}ref": self._ref(other, r) + " domain"},
            **props,
        )

    def add_vrect(
        self, x0: float, x1: float, row: int | None = None, col: int = 1, **props: Any
    ) -> None:
        self._rect("x", x0, x1, row, props)

    def add_hrect(
        self, y0: float, y1: float, row: int | None = None, col: int = 1, **props: Any
    ) -> None:
        self._rect("y", y0, y1, row, props)

    @property
    def height(self) -> int:
        return int(self.layout.get("height") or 340)

    def to_dict(self) -> dict[str, Any]:
        """What ``go.Figure(..).to_dict()`` gives: a template named by a string is
        replaced by its content, the rest is the spec as built."""
        layout = dict(self.layout)
        name = layout.get("template")
        if isinstance(name, str):
            known = TEMPLATES.get(name)
            if known:
                layout["template"] = copy.deepcopy(known)
            else:
                import plotly.io as pio

                layout["template"] = pio.templates[name].to_plotly_json()
        return {"data": self.data, "layout": layout}

    def to_json(self) -> str:
        """The figure's JSON as ``pio.to_json(fig)`` writes it for a ``go.Figure``: numeric
        arrays as base64 typed arrays (what ``BaseFigure.to_dict`` does), no trace uid."""
        import plotly.io as pio

        spec = _typed(self.to_dict())
        return str(pio.to_json(spec, validate=False, pretty=False, remove_uids=True))

    def figure(self) -> go.Figure:
        """The ``go.Figure``, validated in one pass over the finished dict."""
        import plotly.graph_objects as go

        return go.Figure(self.to_dict())
