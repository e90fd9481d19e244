"""What a report opens with: for each hardware configuration its best cell (quality from published data, then
speed), and for each model, quant and context the cheapest configuration of the report that runs it entirely on
the GPU (prices from hardware_db/prices). Pure, from the report's cells."""

from __future__ import annotations

from datetime import date
from functools import cache
from typing import Any

from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.gguf.quality import quality
from gemma_fit.gguf.types import file_type
from gemma_fit.hardware.prices import current_price, price_table, prices_as_of

RUNS = ("go", "tight")  # the cells whose plan keeps the whole model on the GPU(s)


def _quality(cell: dict[str, Any]) -> float | None:
    return _score(cell["model"], cell["quant"])


@cache
def _score(model: str, quant: str) -> float | None:
    try:
        return quality(model, file_type(quant)).score
    except Exception:  # noqa: BLE001 - a quant the quality table cannot place (an engine's format): no score
        return None


def _config_price(gpus: list[str], table: dict[str, Any], today: date) -> tuple[float, str] | None:
    total, dates = 0.0, []
    for g in gpus:
        entry = table.get(g)
        p = current_price(entry, today) if entry is not None else None
        if p is None:
            return None
        total += p.usd
        dates.append(p.date)
    return (total, max(dates)) if gpus else None


def report_answer(report: dict[str, Any], catalog: Catalog = BUILTIN) -> dict[str, Any]:
    table = price_table(catalog.hardware_dirs)
    today = prices_as_of(table)
    price = {h["key"]: _config_price(h["gpus"], table, today) for h in report["hardware"]}
    priced = {k: v for k, v in price.items() if v is not None}
    by_hardware: dict[str, list[dict[str, Any]]] = {}
    by_combo: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for c in report["cells"]:  # one pass: a report may hold a million cells
        if c["verdict"] in (*RUNS, "offload"):
            by_hardware.setdefault(c["hardware"], []).append(c)
        if c["verdict"] in RUNS and c["hardware"] in priced:
            by_combo.setdefault((c["model"], c["quant"], c["ctx"]), []).append(c)
    best = []
    for h in report["hardware"]:
        cells = by_hardware.get(h["key"], [])
        if cells:
            c = max(cells, key=lambda c: ((_quality(c) or -1), (c.get("decode_tokens_per_s") or 0)))
            best.append({"hardware": h["name"], "key": h["key"], "model": c["model"], "quant": c["quant"],
                         "ctx": c["ctx"], "verdict": c["verdict"], "quality": _quality(c),
                         "decode_tokens_per_s": c.get("decode_tokens_per_s")})
    cheapest = []
    for m in report["models"]:
        for q in report["quants"]:
            for ctx in report["contexts"]:
                runs = by_combo.get((m["id"], q, ctx), [])
                if runs:
                    c = min(runs, key=lambda c: (priced[c["hardware"]][0], -(c.get("decode_tokens_per_s") or 0)))
                    usd, dated = priced[c["hardware"]]
                    cheapest.append({"model": m["id"], "quant": q, "ctx": ctx, "hardware": c["hardware"],
                                     "price_usd": usd, "price_date": dated,
                                     "decode_tokens_per_s": c.get("decode_tokens_per_s"), "verdict": c["verdict"]})
    return {"best_per_hardware": best, "cheapest_per_model": cheapest,
            "prices": {k: v[0] if v else None for k, v in price.items()}}
