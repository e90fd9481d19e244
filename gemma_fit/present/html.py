"""Reports people share: one self-contained HTML file for `check --html` and `report --html`.

Inline CSS and inline SVG only: no script, no stylesheet link, no font or image to fetch (a
Content-Security-Policy of default-src 'none' says so to the browser too). Source URLs appear as
plain <a> links that load nothing by themselves. Jinja2 with autoescape on: every name from a
database or from the command line renders as text.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from gemma_fit.base.files import write_text
from gemma_fit.base.units import GIB, fmt_bytes
from gemma_fit.base.version import LLAMA_CPP_LABEL
from gemma_fit.present.documents import RANKING_SORT, VERDICTS, serving_basis

__all__ = ["render_check_html", "render_report_html", "write_html"]

TEMPLATES = Path(__file__).resolve().parent / "templates"
BAR_LIMIT = 60  # memory bars and commands per report; a larger matrix shows its tables only
RANKING_CHART_ROWS = 24  # GPUs in the max-context and speed charts of `check` (the table has them all)
REPORT_RANKING_ROWS = 15  # GPUs per what-to-buy table in a report (the JSON has them all)
MATRIX_MAX_COLUMNS = 8  # up to this many (quant, context) pairs, a model's verdicts are one table

VERDICT_COLOR = {"go": "#1a7f37", "tight": "#9a6700", "offload": "#bc4c00", "no-go": "#cf222e", "error": "#57606a"}
TERMS = (("weights_bytes", "weights", "#0969da"), ("kv_cache_bytes", "KV cache", "#8250df"),
         ("compute_bytes", "compute", "#d4a72c"), ("overhead_bytes", "overhead", "#6e7781"))

# SVG geometry (px)
SVG_W = 760
BAR_X, BAR_W = 0, 660
CHART_LABEL_W, CHART_BAR_W, CHART_ROW_H = 330, 330, 20
CHART_LABEL_CHARS = 48  # longer labels are shortened in charts (the tables show them whole)


def gib(n: int | float | None) -> str:
    return "-" if n is None else f"{n / GIB:.2f} GiB"


def _ctx(n: int | None) -> str:
    return "-" if n is None else f"{int(n):,}"


def _tps(x: float | None) -> str:
    return "-" if x is None else (f"{x:.1f}" if x < 100 else f"{x:.0f}")


def _bytes(n: int | None) -> str:
    return "-" if n is None else fmt_bytes(int(n))


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _href(url: str) -> str | None:
    """Only plain web links become links; anything else is shown as text."""
    return url if url.startswith(("https://", "http://")) and not any(c.isspace() for c in url) else None


@cache
def _inert(value: Any) -> Any:
    """A printed value without control, bidi or zero-width characters; markup a filter made stays markup."""
    from markupsafe import Markup

    from gemma_fit.base.text import has_unsafe, inert

    if not isinstance(value, str) or not has_unsafe(value):
        return value
    return Markup(inert(str(value))) if isinstance(value, Markup) else inert(value)


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                      finalize=_inert)  # every value a page prints: no control, bidi or zero-width character
    env.filters.update(gib=gib, ctx=_ctx, tps=_tps, nbytes=_bytes, href=_href)
    env.globals.update(verdict_color=VERDICT_COLOR, terms=TERMS, llama_cpp=LLAMA_CPP_LABEL, svg_w=SVG_W,
                       verdicts=VERDICTS)
    return env


# --- view models: geometry and labels; the templates only lay them out -----------------------------


def memory_bars(devices: Sequence[dict[str, Any]], label_prefix: str = "") -> dict[str, Any]:
    """One stacked bar per device (weights / KV / compute / overhead) against its capacity, in GiB."""
    rows = []
    row_h = 70
    for i, d in enumerate(devices):
        cap = int(d["capacity_bytes"])
        total = int(d["total_bytes"])
        scale = max(cap, total, 1)
        x = float(BAR_X)
        segs = []
        for key, label, color in TERMS:
            value = int(d.get(key) or 0)
            w = BAR_W * value / scale
            text = f"{label} {value / GIB:.2f}"
            if w < 7 * len(text) + 8:  # too narrow for the label: the number alone, or nothing
                text = f"{value / GIB:.1f}" if w >= 30 else ""
            segs.append({"label": label, "bytes": value, "x": round(x, 2), "w": round(w, 2), "color": color,
                         "text": text, "tx": round(x + w / 2, 2)})
            x += w
        cap_x = BAR_X + BAR_W * cap / scale
        rows.append({
            "y": i * row_h, "name": d.get("label") or f"{label_prefix}{d['name']} [{d['id']}]", "segments": segs,
            "cap_x": round(cap_x, 2), "cap_text": f"capacity {cap / GIB:.2f} GiB",
            "summary": (f"uses {total / GIB:.2f} GiB of {cap / GIB:.2f} GiB; headroom "
                        f"{int(d['headroom_bytes']) / GIB:.2f} GiB"),
            "over": total > cap,
        })
    return {"rows": rows, "height": max(1, len(rows)) * row_h, "row_h": row_h}


def bar_chart(rows: Sequence[tuple[str, float | None, str, str]], scale_max: float | None = None) -> dict[str, Any]:
    """Horizontal bars: (label, value, value text, color) per row."""
    values = [v for _, v, _, _ in rows if v is not None]
    top = scale_max or (max(values) if values else 1.0) or 1.0
    out = []
    for i, (label, value, text, color) in enumerate(rows):
        w = 0.0 if value is None else CHART_BAR_W * min(value, top) / top
        short = label if len(label) <= CHART_LABEL_CHARS else label[:CHART_LABEL_CHARS - 1] + "\u2026"
        out.append({"y": i * CHART_ROW_H, "label": short, "full": label, "w": round(w, 2), "text": text,
                    "color": color,
                    "tx": round(CHART_LABEL_W + w + 6, 2)})
    return {"rows": out, "height": max(1, len(out)) * CHART_ROW_H + 4, "label_w": CHART_LABEL_W,
            "row_h": CHART_ROW_H, "bar_w": CHART_BAR_W}


def _ranking_view(ranking: Sequence[dict[str, Any]], n_ctx_train: int | None, limit: int | None = None,
                  ) -> dict[str, Any]:
    shown = list(ranking)[:limit] if limit else list(ranking)
    top = list(ranking)[:RANKING_CHART_ROWS]
    # the context chart shows the GPUs that cannot hold the whole trained context; the others are only counted
    short = [r for r in ranking if n_ctx_train is None or r["max_ctx_fit"] < n_ctx_train]
    ctx_chart = bar_chart([(f"{r['name']} [{r['id']}]", r["max_ctx_fit"], _ctx(r["max_ctx_fit"]),
                            VERDICT_COLOR[r["verdict"]]) for r in short], scale_max=n_ctx_train)
    has_speed = any(r.get("decode_tokens_per_s") is not None for r in ranking)
    speed_chart = bar_chart([(f"{r['name']} [{r['id']}]", r.get("decode_tokens_per_s"),
                              f"{_tps(r.get('decode_tokens_per_s'))} tok/s", VERDICT_COLOR[r["verdict"]])
                             for r in top]) if has_speed else None
    full = [r for r in ranking if r not in short]
    return {"rows": shown, "total": len(ranking), "ctx_chart": ctx_chart if short else None,
            "full_ctx": full, "n_ctx_train": n_ctx_train, "speed_chart": speed_chart,
            "has_speed": has_speed, "chart_rows": len(top)}


def _perf_rows(perf: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not perf:
        return []
    rows = [("decode", f"{_tps(perf.get('decode_tokens_per_s'))} tokens/s"),
            ("prefill", f"{_tps(perf.get('prefill_tokens_per_s'))} tokens/s")]
    if perf.get("ttft_s") is not None:
        prompt = f" ({perf['prompt_tokens']:,}-token prompt)" if perf.get("prompt_tokens") else ""
        rows.append(("time to first token", f"{perf['ttft_s']:.2f} s{prompt}"))
    if perf.get("load_s") is not None:
        warm = f" ({perf['load_warm_s']:.1f} s from the page cache)" if perf.get("load_warm_s") is not None else ""
        rows.append(("load", f"{perf['load_s']:.1f} s{warm}"))
    modes = perf.get("split_modes_decode_tokens_per_s") or {}
    if modes:
        rows.append((f"split over {perf.get('interconnect')}",
                     ", ".join(f"-sm {k}: {v:.1f} tokens/s" for k, v in modes.items())))
    if perf.get("bottleneck"):
        rows.append(("bottleneck", str(perf["bottleneck"])))
    return rows + _serving_rows(perf.get("serving"))


def _serving_rows(sv: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Many requests at once (docs/serving.md): the aggregate, and the traffic answer where a rate was given."""
    if not sv or (sv["n_parallel"] <= 1 and not sv.get("output_tokens")):
        return []
    what = serving_basis(sv)
    rows = [(f"{sv['n_parallel']} concurrent requests", f"{sv['aggregate_tokens_per_s']:.1f} tokens/s together "
             f"({what}), {sv['per_user_tokens_per_s']:.1f} each; the KV cache holds {sv['max_concurrency']}")]
    t = sv.get("traffic")
    if t:
        ttft = f", time to first token p50 {t['ttft_p50_s']:.2f} s / p95 {t['ttft_p95_s']:.2f} s" \
            if t.get("ttft_p50_s") is not None else ""
        rows.append((f"{t['rate_per_s']:g} requests/s", f"{'holds' if t['holds'] else 'does not hold'}: "
                     f"{t['reason']}{ttft}"))
    return rows


def _pool_bar(memory: dict[str, Any]) -> list[dict[str, Any]]:
    """Unified memory: one more bar, the GPU side and the host side together against the one pool."""
    pool = memory.get("unified_pool")
    if not pool:
        return []
    dev, host = memory["devices"][0], memory["host"]
    return [{"label": "unified memory (GPU side + host side)", "name": "unified memory", "id": "pool",
             "weights_bytes": dev["weights_bytes"] + host["weights_bytes"],
             "kv_cache_bytes": dev["kv_cache_bytes"] + host["kv_cache_bytes"],
             "compute_bytes": dev["compute_bytes"] + host["compute_bytes"] + host.get("output_bytes", 0),
             "overhead_bytes": dev["overhead_bytes"] + dev.get("mmproj_bytes", 0),
             "capacity_bytes": pool["capacity_bytes"], "total_bytes": pool["total_bytes"],
             "headroom_bytes": pool["headroom_bytes"]}]


def render_check_html(doc: dict[str, Any], ranking: list[dict[str, Any]],
                      doc_sources: list[dict[str, Any]], recommendation: dict[str, Any] | None = None,
                      purchase: dict[str, Any] | None = None) -> str:
    """One self-contained HTML page for a `gemma-fit.check/1` document and a GPU ranking (gpu_ranking); it opens
    with the answer: the best configurations for the hardware (gemma-fit.recommend/1) and the cheapest hardware
    for the model (gemma-fit.buy/1), where given."""
    srcs = doc_sources
    perf = doc.get("performance")
    view = {
        "doc": doc,
        "title": f"{doc['model']['id']} {doc['model']['quant']} on {doc['hardware']['name']}",
        "bars": memory_bars([*doc["memory"]["devices"], *_pool_bar(doc["memory"])]),
        "perf": _perf_rows(perf),
        "perf_notes": list((perf or {}).get("notes") or []),
        "ranking": _ranking_view(ranking, doc["model"].get("n_ctx_train")),
        "ranking_sort": RANKING_SORT,
        "sources": srcs,
        "assumptions": list(doc.get("assumptions") or []),
        "recommendation": recommendation, "purchase": purchase,
    }
    return _env().get_template("check.html.j2").render(**view)


def _cell_view(cell: dict[str, Any]) -> dict[str, Any]:
    layers = (f"{cell['n_gpu_layers']}/{cell['n_layers_total']}" if cell.get("n_layers_total") is not None
              else "-")
    return {"verdict": cell["verdict"], "headroom": _bytes(cell.get("min_headroom_bytes")),
            "max_ctx": _ctx(cell.get("max_ctx_fit")), "decode": cell.get("decode_tokens_per_s"),
            "layers": layers, "error": cell.get("error")}


def render_report_html(report: dict[str, Any]) -> str:
    """One self-contained HTML page for a `gemma-fit.report/1` document."""
    hw_by_key = {h["key"]: h for h in report["hardware"]}
    models = {m["id"]: m for m in report["models"]}
    index = {(c["hardware"], c["model"], c["quant"], c["ctx"]): c for c in report["cells"]}

    def hw_label(key: str) -> str:
        h = hw_by_key[key]
        return f"{h['name']} [{key}]"

    quants, contexts = report["quants"], report["contexts"]
    if len(quants) * len(contexts) <= MATRIX_MAX_COLUMNS:  # one table per model: a column per (context, quant)
        layouts = [(None, [(q, c) for c in contexts for q in quants])]
    else:  # one table per model and context: a column per quant
        layouts = [(c, [(q, c) for q in quants]) for c in contexts]
    matrix = []
    for m in report["models"]:
        tables = []
        for ctx, columns in layouts:
            heads = [q if ctx is not None else f"{q} @ {c:,}" if len(quants) > 1 else f"context {c:,}"
                     for q, c in columns]
            rows = [{"hardware": hw_label(h["key"]),
                     "cells": [_cell_view(index[(h["key"], m["id"], q, c)]) for q, c in columns]}
                    for h in report["hardware"]]
            caption = f"{m['id']} at context {ctx:,}" if ctx is not None else (
                f"{m['id']}" + (f" {quants[0]}" if len(quants) == 1 else ""))
            tables.append({"caption": caption, "heads": heads, "rows": rows})
        matrix.append({"model": m, "tables": tables})

    cells = report["cells"]
    detail = len(cells) <= BAR_LIMIT
    groups = []  # memory bars and speed per (model, quant, ctx), one bar row per hardware device
    if detail:
        for m in report["models"]:
            for q in report["quants"]:
                for ctx in report["contexts"]:
                    devs, rows_speed = [], []
                    for h in report["hardware"]:
                        c = index[(h["key"], m["id"], q, ctx)]
                        doc = c.get("check")
                        if doc is None:
                            continue
                        n_dev = len(doc["memory"]["devices"])
                        for i, d in enumerate(doc["memory"]["devices"]):
                            label = f"{hw_label(h['key'])}, GPU {i}: {d['name']}" if n_dev > 1 else None
                            devs.append({**d, "label": label})
                        rows_speed.append((hw_label(h["key"]), c.get("decode_tokens_per_s"),
                                           f"{_tps(c.get('decode_tokens_per_s'))} tok/s",
                                           VERDICT_COLOR[c["verdict"]]))
                    has_speed = any(v is not None for _, v, _, _ in rows_speed)
                    groups.append({"model": m["id"], "quant": q, "ctx": ctx, "bars": memory_bars(devs),
                                   "speed": bar_chart(rows_speed) if has_speed else None})
    ctx_charts = []  # the largest context that fits, per hardware, for each model and quant
    for m in report["models"]:
        for q in report["quants"]:
            ctx_rows: list[tuple[str, float | None, str, str]] = []
            for h in report["hardware"]:
                c = index[(h["key"], m["id"], q, report["contexts"][0])]
                ctx_rows.append((hw_label(h["key"]), c.get("max_ctx_fit"), _ctx(c.get("max_ctx_fit")),
                             VERDICT_COLOR[c["verdict"]]))
            ctx_charts.append({"model": m["id"], "quant": q, "chart": bar_chart(ctx_rows, scale_max=m["n_ctx_train"])})
    if len(ctx_charts) > BAR_LIMIT:
        ctx_charts = []
    assumptions: dict[str, None] = {}
    for c in cells:
        for a in (c.get("check") or {}).get("assumptions", []):
            assumptions.setdefault(a, None)
    buy = [{**w, "view": _ranking_view(w["ranking"], models[w["model"]]["n_ctx_train"], REPORT_RANKING_ROWS)}
           for w in report.get("what_to_buy", [])]
    commands = [{"cell": c, "hardware": hw_label(c["hardware"])} for c in cells if c.get("check")] if detail else []
    view = {
        "report": report,
        "title": "gemma-fit report: " + " \u00d7 ".join(
            _plural(len(report[k]), word) for k, word in (("models", "model"), ("quants", "quant"),
                                                          ("hardware", "hardware config"), ("contexts", "context"))),
        "matrix": matrix, "detail": detail, "groups": groups, "ctx_charts": ctx_charts,
        "assumptions": list(assumptions), "buy": buy, "commands": commands, "bar_limit": BAR_LIMIT,
        "ranking_sort": report.get("what_to_buy_sort", RANKING_SORT), "n_cells": len(cells),
        "check_documents": report.get("check_documents"),
    }
    return _env().get_template("report.html.j2").render(**view)


def render_buy_html(doc: dict[str, Any]) -> str:
    """One self-contained HTML page for a `gemma-fit.buy/1` document: every option with its dated, sourced price."""
    title = f"{', '.join(doc['models'])} {doc['quant']} at {doc['needs']['n_ctx']:,} tokens"
    cost_chart = None
    if doc.get("cost"):  # a workload was given: the page leads with what the first option costs all in
        from gemma_fit.present.cost_chart import chart

        cost_chart = chart(doc["cost"])
    return _env().get_template("buy.html.j2").render(doc=doc, title=title, cost_chart=cost_chart)


def write_html(path: Path, html: str) -> None:
    """Write the report (base.files.write_text: atomic for a regular file, in place for /dev/null or a pipe)."""
    write_text(Path(path), html)
