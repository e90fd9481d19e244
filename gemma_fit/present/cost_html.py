"""The self-contained cost page (`gemma-fit cost --html`): the answer first, then one chart of cost per million tokens
against daily volume for the cheapest option of each kind (log scales, inline SVG), then every option and its
sources."""

from __future__ import annotations

from typing import Any

from gemma_fit.present.cost_chart import chart
from gemma_fit.present.html import _env


def render_cost_html(doc: dict[str, Any]) -> str:
    return _env().get_template("cost.html.j2").render(doc=doc, chart=chart(doc),
                                                      title=f"{doc['model']} {doc['quant']}")
