"""diag.render.figspec builds figure dicts without plotly's per-call validation (issue 15):
each call must leave the layout plotly's own call would, and the page's JSON must be the
JSON of the validated go.Figure."""

from __future__ import annotations

import json
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
import pytest
from plotly.subplots import make_subplots

from diag.render import html_page
from diag.render.figspec import TEMPLATES, Spec
from diag.render.html import render_html
from tests.test_html_report import serving_report  # noqa: F401  (module fixture)


def plain(obj: Any) -> Any:
    return json.loads(pio.to_json(obj, validate=False, remove_uids=True))


@pytest.mark.parametrize(
    "rows, heights, spacing",
    [
        (2, [0.55, 0.45], 0.08),
        (3, [0.42, 0.32, 0.26], 0.08),
        (3, [0.45, 0.3, 0.25], 0.1),
        (2, [0.78, 0.22], 0.12),
    ],
)
def test_stacked_spec_is_make_subplots(rows: int, heights: list[float], spacing: float) -> None:
    """make_subplots' domains, anchors and matches; but every subplot keeps its x tick
    labels (make_subplots hides the upper ones, which left the upper panels unreadable)."""
    ref = make_subplots(
        rows=rows, cols=1, shared_xaxes=True, vertical_spacing=spacing, row_heights=heights
    )
    for r in range(1, rows):
        ref.update_xaxes(showticklabels=None, row=r, col=1)
    spec = Spec(rows, row_heights=heights, vertical_spacing=spacing)
    assert spec.layout == {k: v for k, v in plain(ref)["layout"].items() if k != "template"}


def test_shapes_and_notes_are_plotlys() -> None:
    """The same calls on a go.Figure and on a Spec, one row and stacked."""
    for rows in (1, 3):
        ref = make_subplots(rows=rows, cols=1, shared_xaxes=True) if rows > 1 else go.Figure()
        for r in range(1, rows):  # Spec keeps the upper subplots' x labels
            ref.update_xaxes(showticklabels=None, row=r, col=1)
        spec = Spec(rows) if rows > 1 else Spec()
        for fig in (ref, spec):
            where: dict[str, Any] = {"row": rows, "col": 1} if rows > 1 else {}
            fig.add_trace(
                go.Scatter(x=[1, 2], y=[3, 4], name="a")
                if fig is ref
                else {"type": "scatter", "x": [1, 2], "y": [3, 4], "name": "a"},
                **where,
            )
            fig.add_hline(y=5, line={"color": "#111", "dash": "dot", "width": 1}, **where)
            fig.add_hline(
                y=7,
                line={"color": "#222"},
                annotation_text="ceiling 7",
                **({"annotation_position": "top left"} if fig is ref else {}),
                annotation_font_color="#333",
                **where,
            )
            fig.add_vline(x=1.5, line={"color": "#444", "width": 1.5}, **where)
            fig.add_hrect(y0=1, y1=2, fillcolor="#555", opacity=0.5, line_width=0, **where)
            fig.add_vrect(x0=0.5, x1=1.5, fillcolor="#666", line_width=0, layer="below", **where)
            fig.add_annotation(x=1, y=1, yref="y domain", text="t", showarrow=False, **where)
            fig.add_shape(type="line", x0=1, x1=1, y0=0, y1=0.05, yref="y domain")
            fig.update_layout(template="none", title={"text": "T", "x": 0.01}, height=300)
            fig.update_layout(title={"font": {"size": 15}}, paper_bgcolor="white")
            fig.update_xaxes(title_text="x (s)", showgrid=True)
            fig.update_yaxes(tickformat=",d", **where)
        assert plain(spec.to_dict()) == plain(ref)


def test_page_figures_validate_and_match(
    serving_report: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every figure the page writes validates as a go.Figure with the same JSON."""
    specs: list[Any] = []
    chart = html_page.Page.chart

    def keep(self: html_page.Page, fig: Any, label: str, kind: str) -> Any:
        specs.append(fig)
        return chart(self, fig, label, kind)

    monkeypatch.setattr(html_page.Page, "chart", keep)
    render_html(serving_report)
    assert len(specs) >= 4 and all(isinstance(s, Spec) for s in specs)
    for spec in specs:
        assert json.loads(spec.to_json()) == plain(spec.figure())


def test_template_table_is_plotlys() -> None:
    for name, content in TEMPLATES.items():
        assert content == pio.templates[name].to_plotly_json()
