"""What a report opens with: for each hardware configuration its best cell by the one decision rule
(gemma_fit.engines.decision, at recommend's reading-speed floor), with why, the configurations in the order of
those cells; and for each model, quant and context the cheapest configuration of the report that runs it entirely on
the GPU (prices from hardware_db/prices). Pure, from the report's cells."""

from __future__ import annotations

from datetime import date
from functools import cache
from typing import Any

from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines.decision import LOW_BITS, QUALITY_RESOLUTION, Option, Ranked, best, best_sound, rank
from gemma_fit.gguf.quality import Quality, quality
from gemma_fit.gguf.types import file_type
from gemma_fit.hardware.prices import current_price, price_table, prices_as_of
from gemma_fit.jobs.needs import Needs

RUNS = ("go", "tight")  # the cells whose plan keeps the whole model on the GPU(s)
USABLE_TPS = Needs().min_tps  # the floor of the best answer: recommend's, about reading speed


def _quality(cell: dict[str, Any]) -> float | None:
    return _score(cell["model"], cell["quant"])[0].score


@cache
def _score(model: str, quant: str) -> tuple[Quality, float]:
    """The quality of a model at a file type and that type's bits per weight."""
    try:
        ft = file_type(quant)
        return quality(model, ft), ft.default_type.bits_per_weight
    except Exception:  # noqa: BLE001 - a quant the quality table cannot place (an engine's format): no score
        return Quality(None, None, 1.0, "not measured"), 16.0


def _rule_score(cell: dict[str, Any]) -> float:
    """The quality the decision rule compares (Option.score: -1 where there is none)."""
    score = _score(cell["model"], cell["quant"])[0].score
    return score if score is not None else -1.0


def _option(c: dict[str, Any], has_gpu: bool) -> Option[dict[str, Any]]:
    q, bits = _score(c["model"], c["quant"])
    return Option(c, c["model"], c["quant"], bits, c["verdict"] in RUNS, q, c.get("decode_tokens_per_s") or 0.0,
                  c.get("max_ctx_fit") or 0, c.get("min_headroom_bytes") or 0,
                  "the GPU" if has_gpu else "system memory")


def _best(cells: list[dict[str, Any]], has_gpu: bool) -> Ranked[dict[str, Any]] | None:
    """The best cell of a hardware config by the decision rule: among the cells that run on the GPU when one of them
    is sound and fast enough (then no offloaded cell can win or count), else among all (a report has ~2,600 a config).
    """
    # best_sound's own class (on the GPU, 4+ bits, at the floor) read off the cells before any option is built
    top = [c for c in cells if c["verdict"] in RUNS and (c.get("decode_tokens_per_s") or 0.0) >= USABLE_TPS
           and _score(c["model"], c["quant"])[1] >= LOW_BITS]
    if top:  # within that class the rule picks among the scores the data cannot tell from the best: only those
        scores = [_rule_score(c) for c in top]
        floor = max(scores) - QUALITY_RESOLUTION
        top = [c for c, score in zip(top, scores, strict=True) if score >= floor]
    runs = best_sound([_option(c, has_gpu) for c in top], USABLE_TPS)
    return runs if runs is not None else best([_option(c, has_gpu) for c in cells], USABLE_TPS)


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
    names = {h["key"]: h["name"] for h in report["hardware"]}
    tops = {id(b.option): b for h in report["hardware"]
            if (b := _best(by_hardware.get(h["key"], []), bool(h["gpus"]))) is not None}
    rows = []
    # the hardware in the order of their best cells by the same rule; each says why its cell is its best
    for r in rank([b.option for b in tops.values()], USABLE_TPS):
        c = r.option.item
        rows.append({"hardware": names[c["hardware"]], "key": c["hardware"], "model": c["model"], "quant": c["quant"],
                     "ctx": c["ctx"], "verdict": c["verdict"], "quality": _quality(c),
                     "decode_tokens_per_s": c.get("decode_tokens_per_s"), "why": tops[id(r.option)].why})
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
    return {"best_per_hardware": rows, "cheapest_per_model": cheapest,
            "prices": {k: v[0] if v else None for k, v in price.items()}}
