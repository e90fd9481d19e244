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
