"""`gemma-fit report` in the terminal: the answer first, then one table per hardware config, from the
gemma-fit.report/1 document. Columns a narrow terminal cannot hold are dropped by priority (prefill first); the
model and quant are never cut."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from gemma_fit.base.text import printable
from gemma_fit.base.units import fmt_bytes
from gemma_fit.base.verdict import CELL_STATES

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

TABLE_CHUNK_ROWS = 2000  # the table is printed this many lines at a time, never built whole
ANSWER_ROWS = 10  # the ranked answer shows this many hardware configs; the tables below have them all
STYLE = {"go": "bold green", "tight": "bold yellow", "offload": "bold dark_orange", "no-go": "bold red",
         "error": "bold magenta"}
_COLUMNS = (("model", "<"), ("quant", "<"), ("ctx", ">"), ("verdict", "<"), ("headroom", ">"), ("max ctx", ">"),
            ("tok/s", ">"), ("prefill", ">"), ("layers", ">"))
_VERDICT = 3
_DROP_ORDER = ("prefill", "layers", "headroom", "max ctx")  # what a narrow terminal loses first
_GAP = 2


def tps(x: float | None) -> str:
    return "-" if x is None else (f"{x:.1f}" if x < 100 else f"{x:.0f}")


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _row(c: dict[str, Any]) -> list[str]:
    room = c.get("min_headroom_bytes")
    layers = f"{c['n_gpu_layers']}/{c['n_layers_total']}" if c.get("n_layers_total") is not None else "-"
    return [printable(str(c["model"]), 80), printable(str(c["quant"]), 40), f"{c['ctx']:,}", c["verdict"],
            "-" if room is None else fmt_bytes(room),
            "-" if c.get("max_ctx_fit") is None else f"{c['max_ctx_fit']:,}", tps(c.get("decode_tokens_per_s")),
            tps(c.get("prefill_tokens_per_s")), layers]


def _kept(widths: list[int], room: int) -> list[int]:
    """The columns that fit in `room` characters, dropping by priority; model, quant, context and verdict stay."""
    keep = list(range(len(_COLUMNS)))
    for name in _DROP_ORDER:
        if sum(widths[i] for i in keep) + _GAP * (len(keep) - 1) <= room:
            break
        keep.remove(next(i for i, (n, _) in enumerate(_COLUMNS) if n == name))
    return keep


def report_tables(report: dict[str, Any], room: int = 10_000) -> Iterator[Text | None]:
    """One table per hardware config, one line per (model, quant, context), verdicts coloured; yields each
    table in pieces of at most TABLE_CHUNK_ROWS lines, and None before each table (a blank line).

    Laid out here rather than with rich.Table, which takes about 0.5 ms a row: 3400 rows would double the
    report's time. The rows are made twice (once for the column widths, once to print), never all held: a matrix
    of any size prints in bounded memory.
    """
    from rich.text import Text

    by_hw: dict[str, list[int]] = {h["key"]: [] for h in report["hardware"]}
    cells = report["cells"]
    for i, c in enumerate(cells):
        by_hw[c["hardware"]].append(i)
    widths = [len(name) for name, _ in _COLUMNS]
    for c in cells:
        widths = [max(w, len(v)) for w, v in zip(widths, _row(c), strict=True)]
    keep = _kept(widths, room)

    def line(text: Text, values: list[str], verdict: str | None = None) -> None:
        for n, i in enumerate(keep):
            cell = f"{values[i]:{_COLUMNS[i][1]}{widths[i]}}"
            text.append(cell, style=STYLE[verdict] if verdict is not None and i == _VERDICT else "")
            if n < len(keep) - 1:
                text.append(" " * _GAP)

    for h in report["hardware"]:
        title = printable(h["key"] if h["key"] == h["name"] else f"{h['key']}: {h['name']}", 400)
        body = Text(title, style="bold")
        body.append("\n")
        line(body, [name for name, _ in _COLUMNS])
        body.append("\n" + "-" * (sum(widths[i] for i in keep) + _GAP * (len(keep) - 1)))
        yield None
        n = 0
        for i in by_hw[h["key"]]:
            if n == TABLE_CHUNK_ROWS:
                yield body
                body, n = Text(), 0
            else:
                body.append("\n")
            r = _row(cells[i])
            line(body, r, r[_VERDICT])
            n += 1
        yield body


def render_answer(out: Console, report: dict[str, Any]) -> None:
    """The report's answer first: hardware configs ranked by their best cell (the decision rule), and each
    model's cheapest configuration of the report that holds it on the GPU."""
    ans = report.get("answer") or {}
    best = ans.get("best_per_hardware", [])  # in the decision rule's order
    if best:
        out.print("[bold]The best of this report per hardware[/bold] (quality: MMLU-Pro x the quant's retention):")
        for i, b in enumerate(best[:ANSWER_ROWS], 1):
            price = (ans.get("prices") or {}).get(b["key"])
            q = f"quality {b['quality']:.1f}, " if b["quality"] is not None else ""
            out.print(printable(f"  {i}. {b['key']}: {b['model']} {b['quant']} at {b['ctx']:,}, {b['verdict']}, {q}"
                                f"{tps(b['decode_tokens_per_s'])} tok/s" + (f", {price:,.0f} USD" if price else "")
                                + (f": {b['why']}" if b.get("why") else ""), 2000), markup=False)
        if len(best) > ANSWER_ROWS:
            out.print(f"  ... and {len(best) - ANSWER_ROWS} more in the tables below")
    for c in ans.get("cheapest_per_model", [])[:ANSWER_ROWS]:
        out.print(printable(f"  cheapest for {c['model']} {c['quant']} at {c['ctx']:,} on the GPU: {c['hardware']}, "
                            f"{c['price_usd']:,.0f} USD ({c['price_date']}), {tps(c['decode_tokens_per_s'])} tok/s",
                            2000), markup=False)


def render_tables(out: Console, report: dict[str, Any]) -> None:
    for piece in report_tables(report, out.width):
        if piece is None:
            out.print()
        else:
            out.print(piece, soft_wrap=True)


def summary_line(report: dict[str, Any]) -> str:
    parts = [f"[{STYLE[v]}]{report['summary'][v]} {v}[/]" for v in CELL_STATES if report["summary"][v]]
    return ", ".join(parts) + f" of {plural(len(report['cells']), 'combination')}"


def render_report(out: Console, report: dict[str, Any]) -> None:
    """The whole terminal report: a heading, the answer, the tables, the summary and the cells in error."""
    out.print(f"[bold]gemma-fit report[/bold]: {plural(len(report['cells']), 'combination')}, llama.cpp "
              f"{report['llama_cpp']}; headroom is the smallest over the devices, tok/s the estimated decode "
              "speed, prefill the prompt tokens/s", soft_wrap=True)
    render_answer(out, report)
    render_tables(out, report)
    out.print(summary_line(report))
    for c in report["cells"]:
        if c["verdict"] == "error":
            out.print(printable(f"  error: {c['hardware']} {c['model']} {c['quant']} ctx {c['ctx']:,}: "
                                f"{c['error']}", 2000), markup=False)


def progress_bar(console: Console) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


def _cell_encoder() -> Callable[[dict[str, Any]], str]:
    """One compact cell as strict JSON: the C encoder made once and called per cell (JSONEncoder.encode makes one per
    call, a quarter of the time of ~430k cells), without the circular-reference check a cell of plain values needs
    not; the same text as json.dumps(cell, allow_nan=False)."""
    from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]

    plain = json.JSONEncoder(allow_nan=False)
    if c_make_encoder is None:  # a Python without the C speed-ups
        return plain.encode
    encode = c_make_encoder(None, plain.default, encode_basestring_ascii, None, ": ", ", ", False, False, False)
    return lambda cell: "".join(encode(cell, 0))


def write_report_json(report: dict[str, Any], fp: IO[str]) -> None:
    """The report as JSON, written as it is encoded (a large report is never one string in memory). A compact
    report (thousands of cells, "check_documents" says so) has one line per cell: the C encoder writes a cell
    about three times as fast as the indenting one, and a line per cell suits grep and jq -c alike. Strict JSON:
    a NaN or infinity is an error, never printed."""
    if "check_documents" not in report:
        json.dump(report, fp, indent=2, allow_nan=False)
        fp.write("\n")
        return
    encode = _cell_encoder()
    fp.write("{")
    for n, (key, value) in enumerate(report.items()):
        fp.write(f'{"," if n else ""}\n  {json.dumps(key)}: ')
        if key != "cells":
            fp.write(json.dumps(value, indent=2, allow_nan=False).replace("\n", "\n  "))
            continue
        fp.write("[")
        for i, cell in enumerate(value):
            fp.write(f'{"," if i else ""}\n    {encode(cell)}')
        fp.write("\n  ]" if value else "]")
    fp.write("\n}\n")
