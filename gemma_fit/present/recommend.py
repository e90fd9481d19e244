"""`gemma-fit recommend` in the terminal, from its gemma-fit.recommend/1 document."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gemma_fit.base.units import fmt_bytes
from gemma_fit.present.columns import Col, fitted_table
from gemma_fit.present.terminal import for_terminal

if TYPE_CHECKING:
    from rich.console import Console


def render_recommend(out: Console, doc: dict[str, Any]) -> None:
    doc = for_terminal(doc)
    n = doc["needs"]
    out.print(f"[bold]Best Gemma for {doc['hardware']}[/bold]: {n['n_ctx']:,}-token context, at least "
              f"{n['min_tps']:g} tok/s, ranked by {n['prefer']}" + (", with vision" if n["vision"] else ""))
    if doc["note"]:
        out.print(f"  [yellow]{doc['note']}[/yellow]")
    if not doc["candidates"]:
        out.print("  nothing fits with the margin: a smaller context, or more memory")
        return
    cols = (Col("#", right=True), Col("model"), Col("quant"), Col("verdict"), Col("tok/s", right=True),
            Col("quality", 2, right=True), Col("max ctx", 3, right=True), Col("KV", 4), Col("free", 5, right=True))
    rows = []
    for c in doc["candidates"]:
        q = c["quality"]
        rows.append([str(c["rank"]), c["model"], c["quant"], c["verdict"].upper(),
                     f"{c['decode_tokens_per_s']:.1f}" if c["decode_tokens_per_s"] is not None else "-",
                     f"{q:.1f}" if q is not None else "-", f"{c['max_ctx_fit']:,}", c["kv_cache_type"],
                     fmt_bytes(c["min_headroom_bytes"]) if c["min_headroom_bytes"] is not None else "-"])
    out.print(fitted_table(cols, rows, out.width))
    for c in doc["candidates"]:
        out.print(f"  {c['rank']}. {c['why']}")
        out.print(f"     run it: {c['command']}", soft_wrap=True)
        if c["ollama_command"] and c["ollama_command"] != c["command"]:
            out.print(f"     or: {c['ollama_command']}", soft_wrap=True)
    out.print(f"  quality: {doc['method']}", soft_wrap=True)


def _hardware(o: dict[str, Any]) -> str:
    """The option's GPU ids, as --gpu takes them: one, n x one, or a pair."""
    ids = o["gpus"]
    if len(set(ids)) > 1:
        return " + ".join(ids)
    return f"{len(ids)} x {ids[0]}" if len(ids) > 1 else ids[0]


def render_buy(out: Console, doc: dict[str, Any]) -> None:
    doc = for_terminal(doc)
    n = doc["needs"]
    budget = f", budget {n['budget_usd']:,.0f} USD" if n["budget_usd"] else ""
    out.print(f"[bold]What to buy for {', '.join(doc['models'])}[/bold] ({doc['quant']}): {n['n_ctx']:,}-token "
              f"context, at least {n['min_tps']:g} tok/s{budget}; cheapest first")
    k = doc.get("cost")
    if k:  # --tokens-per-day: the answer leads with what the first option costs all in
        buy = next((o for o in k["options"] if o["kind"] == "buy"), None)
        line = (f"  at {k['workload']['tokens_per_day']:,} tokens a day the cheapest is {k['options'][0]['label']} "
                f"({k['options'][0]['usd_per_mtok']:.3f} USD per million tokens)")
        if buy is not None:
            line += f"; buying {k['hardware']}: {buy['usd_per_mtok']:.3f}"
            if buy["breakeven_months"] is not None:
                line += f", paid back in {buy['breakeven_months']:g} months against {buy['breakeven_against']}"
        out.print(line + " (gemma-fit cost for the rest)", markup=False, highlight=False)
    out.print("  KV cache f16 as check plans it, or q8_0 where f16 does not fit with the margin (KV column, JSON); "
              "used prices beside new" + ("" if n["used"] else " (--used ranks by them)"), soft_wrap=True)
    if doc["note"]:
        out.print(f"  [yellow]{doc['note']}[/yellow]")
    if not doc["options"]:
        out.print("  no priced option fits: raise --budget or --max-gpus, or widen --segment")
        return
    cols = (Col("#", right=True), Col("hardware (--gpu)"), Col("USD", right=True), Col("price", 4),
            Col("dated", 3), Col("tok/s", right=True), Col("plan", 1), Col("KV", 2), Col("used USD", 4, right=True),
            Col("tok/s per 1k USD", 6, right=True), Col("TDP W", 7, right=True), Col("max ctx", 8, right=True),
            Col("what it is", 9, fold=True))
    rows = []
    one_model = len({o["model"] for o in doc["options"] if o["model"]}) <= 1  # the title names it: plans are quants
    for o in doc["options"]:
        names = " + ".join(dict.fromkeys(o["names"]))
        what = (o["machine"] or names) + (f" (no longer sold new since {o['discontinued']})" if o["discontinued"]
                                          else "")
        used = f"{o['used_price_usd']:,.0f} ({o['used_price_date'][:7]})" if o["used_price_usd"] else "-"
        rows.append([str(o["rank"]), _hardware(o), f"{o['price_usd']:,.0f}", o["price_kind"], o["price_date"],
                     f"{o['decode_tokens_per_s']:.1f}",
                     (f"{o['quant']} {o['verdict'].upper()}" if one_model else
                      f"{o['model']} {o['quant']} {o['verdict'].upper()}") if o["model"] else "-",
                     o["kv_cache_type"] or "-", used,
                     f"{o['tokens_per_s_per_1000_usd']:.1f}" if o["tokens_per_s_per_1000_usd"] else "-",
                     f"{o['tdp_w']:.0f}" if o["tdp_w"] else "-", f"{o['max_ctx_fit']:,}", what])
    out.print(fitted_table(cols, rows, out.width))
    best = doc["options"][0]
    if best["command"]:
        out.print(f"  #1 runs: {best['command']}", soft_wrap=True)
    out.print(f"  {doc['n_options']} options checked, {doc['n_unpriced']} parts without a price left out; prices "
              f"as of {doc['prices_as_of']}. {doc['method']}", soft_wrap=True)
