"""Terminal rendering of check results (rich). Reads the JSON document, so both views agree."""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gemma_fit.base.text import printable, printable_doc
from gemma_fit.base.units import fmt_bytes
from gemma_fit.present.documents import serving_basis

_STYLE = {"go": "bold green", "tight": "bold yellow", "offload": "bold dark_orange", "no-go": "bold red"}
_TERMS = ("weights_bytes", "kv_cache_bytes", "compute_bytes", "overhead_bytes", "output_bytes", "total_bytes",
          "capacity_bytes", "headroom_bytes")
_LABEL = {"weights_bytes": "weights", "kv_cache_bytes": "KV cache", "compute_bytes": "compute buffer",
          "overhead_bytes": "runtime overhead", "output_bytes": "output buffer", "total_bytes": "total",
          "capacity_bytes": "capacity", "headroom_bytes": "headroom"}


# In a pipe rich would wrap and cut at 80 columns; ids people copy from `list gpus | grep` must be whole.
_PIPE_WIDTH = 240


def console() -> Console:
    """The console every command prints to: the terminal's width, or a wide one in a pipe."""
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(highlight=False, soft_wrap=True, width=_PIPE_WIDTH if wide else None)


def shown(value: Any, limit: int = 400) -> str:
    """The one door for text from outside (files, databases, probes, what the user typed) into a terminal view:
    control and bidi characters escaped, rich markup escaped (a machine named "[bold]x[/zz]" is text)."""
    return escape(printable(str(value), limit))


def for_terminal(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with every string made inert, as `shown` makes one string."""
    return dict(printable_doc(doc, then=escape))


def _cell(value: Any) -> str:
    return "-" if value is None else fmt_bytes(int(value))


def memory_table(doc: dict[str, Any]) -> Table:
    devices = doc["memory"]["devices"]
    host = doc["memory"]["host"]
    table = Table(title="Memory (binary units: MiB = 2^20 bytes, GiB = 2^30 bytes)", title_justify="left")
    table.add_column("term")
    for d in devices:
        table.add_column(f"{d['name']} [{d['id']}]", justify="right")
    pool = doc["memory"].get("unified_pool")
    table.add_column("host side (same memory)" if pool else "host RAM", justify="right")
    if pool:  # one memory: the GPU side's column holds its own limit, the pool column the sum
        table.add_column("unified memory", justify="right")
    for term in _TERMS:
        row = [_cell(d.get(term)) if term in d else "-" for d in devices]
        host_value = host.get(term)
        if term == "headroom_bytes" and host.get("capacity_bytes") is not None:
            host_value = host["capacity_bytes"] - host["total_bytes"]
        row.append(_cell(host_value) if term in host or term == "headroom_bytes" else "-")
        if pool:
            row.append(_cell(pool[term]) if term in ("total_bytes", "capacity_bytes", "headroom_bytes") else "")
        style = "bold" if term == "total_bytes" else None
        table.add_row(_LABEL[term], *row, style=style)
    return table


def render_check(out: Console, doc: dict[str, Any]) -> None:
    doc = for_terminal(doc)
    m, s = doc["model"], doc["settings"]
    verdict = doc["verdict"]
    out.print(f"[{_STYLE[verdict]}]{verdict.upper()}[/] {m['id']} {m['quant']} on {doc['hardware']['name']}: "
              f"{doc['reasons'][0]}")
    size = fmt_bytes(m["file_size_bytes"])
    out.print(f"  model: {m['resolved']}; {m['n_params'] / 1e9:.2f} B parameters, file {size}")
    out.print(f"  settings: ctx {s['n_ctx']:,}, ubatch {s['n_ubatch']}, batch {s['n_batch']}, "
              f"parallel {s['n_parallel']}, flash-attn {s['flash_attn']}, KV {s['cache_type_k']}/{s['cache_type_v']}, "
              f"{s['n_gpu_layers']}/{s['n_layers_total']} layers on GPU")
    machine_notes = doc["hardware"].get("notes") or []
    assumed = [n for n in (doc.get("performance") or {}).get("notes", []) if "assumed" in n]
    if machine_notes or assumed:  # what was probed, given or assumed about the machine
        out.print("  machine: " + "; ".join([*machine_notes, *assumed]))
    out.print(memory_table(doc))
    for reason in dict.fromkeys(doc["reasons"][1:]):  # each once, in order
        out.print(f"  - {reason}")
    if f"up to --ctx {doc['max_ctx_fit']:,}" not in (doc.get("suggestion") or ""):  # the suggestion said it
        limit = " (the trained context, not memory)" if doc.get("max_ctx_fit_limit") == "n_ctx_train" else (
            " (memory)" if doc["max_ctx_fit"] else "")
        out.print(f"  largest context that fits entirely: {doc['max_ctx_fit']:,} tokens{limit}")
    perf = doc.get("performance")
    if perf:
        render_speed(out, perf)
        if perf.get("load_bottleneck"):
            out.print(f"  load: {perf['load_bottleneck']}")
        for note in perf.get("notes", []):  # what a drafter does, or would do, for this plan
            if note.startswith(("speculative decoding", "faster: add --mtp")):
                out.print(f"  {note}", markup=False, highlight=False)
        if perf.get("per_offloaded_layer_ms") and doc["settings"]["n_gpu_layers"] < doc["settings"]["n_layers_total"]:
            out.print(f"  each layer left on the CPU costs {perf['per_offloaded_layer_ms']:.2f} ms per token")
        modes = perf.get("split_modes_decode_tokens_per_s") or {}
        if modes:
            shown = ", ".join(f"{k} {v:.1f}" for k, v in modes.items())
            out.print(f"  split over {perf['interconnect']}: decode tok/s by -sm mode: {shown}")
    out.print(f"  run it: [bold]{doc['llama_server_command']}[/bold]")
    fit = doc.get("llamacpp_fit")
    if fit:
        out.print(f"  llama.cpp's own fit (the same command without -c and -ngl) {fit['summary']}")
    _render_advice(out, doc.get("advice") or [])


def render_speed(out: Console, perf: dict[str, Any]) -> None:
    """The speed lines every engine shares: one stream, then many requests at once."""
    warm = f" ({perf['load_warm_s']:.1f} s from the page cache)" if perf.get("load_warm_s") is not None else ""
    out.print(f"  speed: decode {perf['decode_tokens_per_s']:.1f} tok/s, "
              f"prefill {perf['prefill_tokens_per_s']:.0f} tok/s, time to first token {perf['ttft_s']:.2f} s "
              f"({perf['prompt_tokens']:,}-token prompt), load {perf['load_s']:.1f} s{warm}")
    out.print(f"  bottleneck: {perf['bottleneck']}")
    sv = perf.get("serving")
    if not sv:
        return
    if sv["n_parallel"] > 1 or sv.get("output_tokens"):
        out.print(f"  {_serving_line(sv)}")
    t = sv.get("traffic")
    if t:
        ttft = (f", time to first token p50 {t['ttft_p50_s']:.2f} s / p95 {t['ttft_p95_s']:.2f} s"
                if t.get("ttft_p50_s") is not None else "")
        verdict = "holds" if t["holds"] else "does NOT hold"
        user = f", {t['per_user_tokens_per_s']:.1f} tok/s per user" if t["holds"] else ""
        out.print(f"  at {t['rate_per_s']:g} requests/s: {verdict} ({t['reason']}){ttft}{user}; "
                  f"servers like this needed: {t['replicas']}")


def _serving_line(sv: dict[str, Any]) -> str:
    """N requests at once: together and each (one request: its own rate), and how many the KV cache holds."""
    what = serving_basis(sv)
    held = sv.get("max_concurrency")
    kv = "" if held is None else \
        f"; the KV cache holds {held} such request{'' if held == 1 else 's'}{'' if held == 1 else ' at once'}"
    if sv["n_parallel"] == 1:
        return f"one request at a time: {sv['aggregate_tokens_per_s']:.1f} tok/s ({what}), {sv['bound']}-bound{kv}"
    return (f"{sv['n_parallel']} concurrent requests: {sv['aggregate_tokens_per_s']:.1f} tok/s together ({what}), "
            f"{sv['per_user_tokens_per_s']:.1f} tok/s each, {sv['bound']}-bound{kv}")


def _render_advice(out: Console, advice: list[dict[str, Any]]) -> None:
    if not advice:
        return
    out.print("  what would change it (best first):")
    for i, a in enumerate(advice, 1):
        speed = f", decode {a['decode_tokens_per_s']:.1f} tok/s" if a.get("decode_tokens_per_s") else ""
        out.print(f"    {i}. {a['change']}: [bold]{a['flags']}[/bold] -> {a['verdict'].upper()}, "
                  f"largest context {a['max_ctx_fit']:,}{speed}")


def render_smoke(out: Console, doc: dict[str, Any]) -> None:
    doc = for_terminal(doc)
    m = doc["model"]
    out.print(f"[bold]smoke[/bold] {m['id']} {m['quant']}: llama.cpp measured vs gemma-fit's estimate")
    table = Table("device", "term", "estimate", "measured", "error", title_justify="left")
    est_devs = doc["estimate"]["devices"] or [doc["estimate"]["host"]]
    mea_devs = doc["measured"]["devices"] or [doc["measured"]["host"]]
    names = [d.get("name", "host") for d in doc["estimate"]["devices"]] or ["host"]
    for name, e, me in zip(names, est_devs, mea_devs, strict=False):
        for term in ("weights_bytes", "kv_cache_bytes", "compute_bytes", "total_bytes"):
            ev, mv = e.get(term), me.get(term)
            err = f"{100 * (ev - mv) / mv:+.1f}%" if ev is not None and mv else "-"
            table.add_row(name, _LABEL[term], _cell(ev), _cell(mv), err)
    out.print(table)
    mes = doc["measured"]
    est = doc.get("estimated_speed") or {}
    if mes.get("decode_tokens_per_s") is not None:
        out.print(f"  decode: measured {mes['decode_tokens_per_s']:.1f} tok/s"
                  + (f", estimated {est['decode_tokens_per_s']:.1f}" if est else ""))
    if mes.get("prefill_tokens_per_s") is not None:
        out.print(f"  prefill: measured {mes['prefill_tokens_per_s']:.1f} tok/s"
                  + (f", estimated {est['prefill_tokens_per_s']:.1f}" if est else ""))
    host = doc["measured"]["host"]
    out.print(f"  peak RSS of llama.cpp: {_cell(host.get('peak_rss_bytes'))}")


COST_ROWS = 6


def render_cost(out: Console, doc: dict[str, Any]) -> None:
    doc = for_terminal(doc)
    v = doc["workload"]["tokens_per_day"]
    out.print(f"[bold]cost[/bold] {doc['model']} {doc['quant']} at {v:,} generated tokens a day "
              f"(hardware: {doc['hardware']}); cheapest first")
    table = Table("option", "$/M tokens", "$/day", "upfront $", "$/hour", "break-even", title_justify="left")
    # the cheapest of each kind first, then the next cheapest overall: a page, not every provider
    best_of_kind = {o["kind"]: o for o in reversed(doc["options"])}
    shown = [o for o in doc["options"] if o in best_of_kind.values() or doc["options"].index(o) < COST_ROWS]
    for o in shown[:COST_ROWS + len(best_of_kind)]:
        months = o["breakeven_months"]
        be = ("-" if months is None else f"{months:g} months" if months <= 120 else "over 10 years")
        table.add_row(o["label"], f"{o['usd_per_mtok']:,.3f}", f"{o['usd_per_day']:,.2f}",
                      f"{o['upfront_usd']:,.0f}" if o["upfront_usd"] is not None else "-",
                      f"{o['hourly_usd']:,.2f}" if o["hourly_usd"] is not None else "-", be)
    out.print(table)
    if len(doc["options"]) > len(shown):
        out.print(f"  {len(doc['options']) - len(shown)} more options in --json")
    for c in doc["changes"]:
        out.print(f"  from {c['from_tokens_per_day']:,} tokens a day: {c['cheapest']}", markup=False, highlight=False)
    for note in doc["notes"]:
        out.print(f"  - {note}", markup=False, highlight=False)
    out.print("  sources: " + "; ".join(f"{s['what']} ({s['date']}) {s['url']}" for o in doc["options"][:3]
                                        for s in o["sources"]), markup=False, highlight=False)


def render_bench(out: Console, doc: dict[str, Any]) -> None:
    doc = for_terminal(doc)
    out.print(f"[bold]bench[/bold] {doc['model']} {doc['quant']} on {doc['hardware']}: {doc['source']} vs "
              "gemma-fit's speed model (uncalibrated)")
    table = Table("test", "predicted tok/s", "measured tok/s", "error", title_justify="left")
    for row in doc["rows"]:
        table.add_row(row["test"], f"{row['predicted']:,.1f}", f"{row['measured']:,.1f}", f"{row['error_pct']:+.1f}%")
    out.print(table)
    for command in doc["commands"]:
        out.print(f"  ran: {command}", markup=False, highlight=False)
    if not doc["calibration_file"]:
        out.print("  not saved: --save keeps these as this machine's calibration for later answers")


def render_inspect(out: Console, info: dict[str, Any]) -> None:
    info = for_terminal(info)
    out.print(f"[bold]{info['name']}[/bold] ({info['file']})")
    table = Table(show_header=False, box=None)
    table.add_row("architecture", info["arch"])
    table.add_row("file type", info["file_type"])
    table.add_row("parameters", f"{info['n_params']:,}")
    table.add_row("file size", f"{fmt_bytes(info['file_size_bytes'])} ({info['shards']} file(s))")
    table.add_row("layers / tensors", f"{info['n_layers']} / {info['n_tensors']}")
    table.add_row("trained context", f"{info['n_ctx_train']:,} tokens")
    table.add_row("tensor types", ", ".join(f"{k} {v}" for k, v in sorted(info["tensor_types"].items())))
    out.print(table)
    out.print("  add --gpu ID (or --hardware FILE) for what it needs there")


def render_engine(out: Console, doc: dict[str, Any]) -> None:
    """check --engine vllm|ollama|transformers: the same memory table, the engine's own numbers."""
    command = doc.get("command")
    doc = for_terminal(doc)
    m = doc["model"]
    verdict = doc["verdict"]
    out.print(f"[{_STYLE.get(verdict, 'bold')}]{verdict.upper()}[/] {m['id']} {m.get('quant', '')} with "
              f"{doc.get('engine', '?')}: {doc['reasons'][0] if doc['reasons'] else ''}")
    if doc["memory"]["devices"]:
        out.print(memory_table({"memory": {"devices": doc["memory"]["devices"], "host": doc["memory"]["host"]}}))
    for reason in doc["reasons"][1:]:
        out.print(f"  - {reason}")
    if doc.get("performance"):
        render_speed(out, doc["performance"])
    if command:
        render_command(out, str(command))


def render_command(out: Console, command: str, label: str = "run it:") -> None:
    """A command to run: one shell line, or a Python snippet printed line by line at the left margin, as it
    pastes into a file or a REPL (escaped line by line: a newline of its own is not a character to hide)."""
    lines = command.splitlines() or [""]
    if len(lines) == 1:
        out.print(f"  {label} [bold]{shown(lines[0], 2000)}[/bold]")
        return
    out.print(f"  {label[:-1]} (Python):" if label.endswith(":") else f"  {label} Python:")
    for line in lines:
        out.print(shown(line, 2000))


def render_answer(out: Console, doc: dict[str, Any]) -> None:
    """A check's answer on any engine: llama.cpp's plan with its advice, or another engine's accounting."""
    if "llama_server_command" in doc:
        render_check(out, doc)
    else:
        render_engine(out, doc)
