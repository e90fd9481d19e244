"""`gemma-fit serve-plan` in the terminal, from its gemma-fit.serve-plan/1 document."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gemma_fit.base.units import fmt_bytes
from gemma_fit.present.terminal import for_terminal, render_command, render_speed

if TYPE_CHECKING:
    from rich.console import Console


def render_serve_plan(out: Console, doc: dict[str, Any]) -> None:
    commands = [str(c) for c in doc["commands"]]  # escaped line by line (a Python snippet's lines are lines)
    doc = for_terminal(doc)  # names from cluster files are text, never terminal codes or markup
    out.print(f"[bold]{doc['verdict'].upper()}[/bold] {doc['model']} {doc['quant']} with {doc['engine']} on "
              f"{doc['hardware']}")
    for d in doc["devices"]:
        where = f"{d['node']} ({d['host']}) " if d.get("node") else ""
        out.print(f"  {where}{d['name']}: {fmt_bytes(d['total_bytes'])} of {fmt_bytes(d['capacity_bytes'])} "
                  f"(weights {fmt_bytes(d['weights_bytes'])}, KV {fmt_bytes(d['kv_cache_bytes'])})")
    net = doc.get("network")
    if net:
        per_token = (f"{net['round_trips_per_token']} round trips and "
                     f"{net['bytes_per_token_per_sequence'] / 1024:,.0f} KiB per token"
                     if "round_trips_per_token" in net
                     else f"{net['boundaries_crossing_network']} boundaries per token")  # vLLM on Ray
        out.print(f"  network: {net['bandwidth_gbit']:g} Gbit/s, {net['latency_us']:g} us one way; {per_token}, "
                  f"{net['seconds_per_token'] * 1e3:.2f} ms per token")
    perf = doc.get("performance")
    if perf:
        render_speed(out, perf)
        traffic = (perf.get("serving") or {}).get("traffic")
        if traffic and not traffic["holds"]:
            more = doc.get("more_parallel")
            if more:
                out.print(f"  or on this hardware with --parallel {more['parallel']} ({more['verdict']}, time to first "
                          f"token p95 {more['ttft_p95_s']:.2f} s, {more['per_user_tokens_per_s']:.1f} tok/s per "
                          f"user): [bold]{more['commands'][0]}[/bold]")
            out.print(f"  to hold it: {traffic['replicas']} servers like this one, {traffic['gpus_needed']} GPUs")
    for reason in doc["reasons"]:
        out.print(f"  - {reason}")
    for i, command in enumerate(commands, 1):
        render_command(out, command, f"{i}.")
