"""The geometry of the cost chart (cost per million tokens against daily volume, log scales): pixels and ticks only,
for the cost page and the buy page's templates to lay out."""

from __future__ import annotations

import math
from typing import Any

CHART_W, CHART_H, PAD_L, PAD_B, PAD_T, PAD_R = 720, 320, 64, 40, 12, 16
SERIES_COLORS = {"buy": "#0969da", "rent": "#8250df", "api": "#1a7f37"}


def _axis(values: list[float]) -> tuple[int, int]:
    """The decades (powers of ten) that hold the values."""
    lo, hi = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    return lo, max(hi, lo + 1)


def _short(n: int) -> str:
    """1k, 10M, 1G: a decade tick's label."""
    for div, unit in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
        if n >= div:
            return f"{n // div:,}{unit}"
    return str(n)


def chart(doc: dict[str, Any]) -> dict[str, Any]:
    """Polylines of the cheapest option of each kind, in pixels, and the axes' decade ticks."""
    best: dict[str, dict[str, Any]] = {}
    for o in doc["options"]:  # cheapest first: the first of each kind
        best.setdefault(o["kind"], o)
    rows = doc["chart"]
    xs: list[float] = [r["tokens_per_day"] for r in rows]
    ys = [r[o["label"]] for r in rows for o in best.values() if r.get(o["label"])]
    if not xs or not ys:
        return {"series": [], "xticks": [], "yticks": [], "w": CHART_W, "h": CHART_H}
    x0, x1 = _axis(xs)
    y0, y1 = _axis(ys)
    w, h = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B

    def px(x: float) -> float:
        return PAD_L + (math.log10(x) - x0) / (x1 - x0) * w

    def py(y: float) -> float:
        return PAD_T + h - (math.log10(y) - y0) / (y1 - y0) * h

    series = [{"label": o["label"], "color": SERIES_COLORS.get(o["kind"], "#57606a"),
               "points": " ".join(f"{px(r['tokens_per_day']):.1f},{py(r[o['label']]):.1f}" for r in rows
                                  if r.get(o["label"]))} for o in best.values()]
    xticks = [{"x": px(10**e), "label": _short(10**e)} for e in range(x0, x1 + 1)]
    yticks = [{"y": py(10**e), "label": f"${10**e:g}"} for e in range(y0, y1 + 1)]
    marker = {"x": px(doc["workload"]["tokens_per_day"])} if xs[0] <= doc["workload"]["tokens_per_day"] <= xs[-1] \
        else None
    return {"series": series, "xticks": xticks, "yticks": yticks, "w": CHART_W, "h": CHART_H, "pad_l": PAD_L,
            "pad_t": PAD_T, "bottom": CHART_H - PAD_B, "right": CHART_W - PAD_R, "marker": marker}
