"""`gemma-fit recommend` in the terminal, from its gemma-fit.recommend/1 document."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gemma_fit.base.units import fmt_bytes

if TYPE_CHECKING:
    from rich.console import Console


def render_recommend(out: Console, doc: dict[str, Any]) -> None:
    from rich.table import Table

    n = doc["needs"]
    out.print(f"[bold]Best Gemma for {doc['hardware']}[/bold]: {n['n_ctx']:,}-token context, at least "
              f"{n['min_tps']:g} tok/s, ranked by {n['prefer']}" + (", with vision" if n["vision"] else ""))
    if doc["note"]:
        out.print(f"  [yellow]{doc['note']}[/yellow]")
    if not doc["candidates"]:
        out.print("  nothing fits with the margin: a smaller context, or more memory")
        return
    table = Table("#", "model", "quant", "KV", "verdict", "quality", "decode tok/s", "largest ctx", "free")
    for c in doc["candidates"]:
        q = c["quality"]
        table.add_row(str(c["rank"]), c["model"], c["quant"], c["kv_cache_type"], c["verdict"].upper(),
                      f"{q:.1f}" if q is not None else "-",
                      f"{c['decode_tokens_per_s']:.1f}" if c["decode_tokens_per_s"] is not None else "-",
                      f"{c['max_ctx_fit']:,}",
                      fmt_bytes(c["min_headroom_bytes"]) if c["min_headroom_bytes"] is not None else "-")
    out.print(table)
    for c in doc["candidates"]:
        out.print(f"  {c['rank']}. {c['why']}")
        out.print(f"     run it: {c['command']}", soft_wrap=True)
        if c["ollama_command"]:
            out.print(f"     or: {c['ollama_command']}", soft_wrap=True)
    out.print(f"  quality: {doc['method']}", soft_wrap=True)


def render_buy(out: Console, doc: dict[str, Any]) -> None:
    from rich.table import Table

    n = doc["needs"]
    budget = f", budget {n['budget_usd']:,.0f} USD" if n["budget_usd"] else ""
    out.print(f"[bold]What to buy for {', '.join(doc['models'])}[/bold] ({doc['quant']}): {n['n_ctx']:,}-token "
              f"context, at least {n['min_tps']:g} tok/s{budget}; cheapest first")
    if doc["note"]:
        out.print(f"  [yellow]{doc['note']}[/yellow]")
    if not doc["options"]:
        out.print("  no priced option fits: raise --budget or --max-gpus, or widen --segment")
        return
    table = Table("#", "hardware", "price USD", "dated", "tok/s", "tok/s per 1k USD", "TDP W", "plan", "largest ctx")
    for o in doc["options"]:
        names = " + ".join(o["names"]) if len(set(o["names"])) > 1 else (
            f"{len(o['names'])} x {o['names'][0]}" if len(o["names"]) > 1 else o["names"][0])
        table.add_row(str(o["rank"]), o["machine"] or names,
                      f"{o['price_usd']:,.0f} ({o['price_kind']})", o["price_date"], f"{o['decode_tokens_per_s']:.1f}",
                      f"{o['tokens_per_s_per_1000_usd']:.1f}" if o["tokens_per_s_per_1000_usd"] else "-",
                      f"{o['tdp_w']:.0f}" if o["tdp_w"] else "-",
                      f"{o['model']} {o['quant']} {o['verdict'].upper()}" if o["model"] else "-",
                      f"{o['max_ctx_fit']:,}")
    out.print(table)
    best = doc["options"][0]
    if best["command"]:
        out.print(f"  #1 runs: {best['command']}", soft_wrap=True)
    out.print(f"  {doc['n_options']} options checked, {doc['n_unpriced']} parts without a price left out. "
              f"{doc['method']}", soft_wrap=True)
