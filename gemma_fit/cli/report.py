"""`gemma-fit report` and `check --html`: the command-line side of reports people share.

Registered in cli.py with `app.command("report")(report_command)`; `check --html FILE` calls
`write_check_html`. The global --model-db / --hardware-db folders are read from cli.state.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer

from gemma_fit.base.errors import BadInput
from gemma_fit.base.text import printable
from gemma_fit.base.units import fmt_bytes
from gemma_fit.cli import state
from gemma_fit.cli.options import (
    BATCH,
    CACHE_TYPE_K,
    CACHE_TYPE_V,
    FLASH_ATTN,
    N_GPU_LAYERS,
    PARALLEL,
    UBATCH,
    BatchOpt,
    CoresOpt,
    CpuMoeOpt,
    CpuOpt,
    CtkOpt,
    CtvOpt,
    DiskOpt,
    EngineOpt,
    FlashOpt,
    NCpuMoeOpt,
    NglOpt,
    OverrideOpt,
    ParallelOpt,
    RamChannelsOpt,
    RamOpt,
    RamTypeOpt,
    ReserveOpt,
    SwaOpt,
    ThreadsOpt,
    UbatchOpt,
    UnifiedOpt,
    machine_flags,
    run_settings,
    with_overrides,
)
from gemma_fit.memory.settings import RunSettings

if TYPE_CHECKING:  # rich and the report module load when a report runs, not on every start
    from rich.console import Console
    from rich.text import Text

    from gemma_fit.hardware.select import Hardware
    from gemma_fit.model.catalog import ResolvedModel

PROGRESS_MIN_CELLS = 200  # smaller matrices finish before a progress bar would be seen
TABLE_CHUNK_ROWS = 2000  # the table is printed this many lines at a time, never built whole
_STYLE = {"go": "bold green", "tight": "bold yellow", "offload": "bold dark_orange", "no-go": "bold red",
          "error": "bold magenta"}


def gpu_configs(values: list[str], hardware_dirs: tuple[Path, ...] = ()) -> list[list[str]]:
    """Each --gpu value is one hardware config: `a4000`; `rtx-4090+rtx-4090` is one two-GPU machine;
    `a4000,rtx-4090` is two configs; `all` is every GPU in the hardware database, one config each."""
    from gemma_fit.hardware.catalog import load_gpus

    out: list[list[str]] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            if part.lower() == "all":
                out.extend([gid] for gid in load_gpus(hardware_dirs))
            else:
                out.append([p.strip() for p in part.split("+")])
    return out


def _tps(x: float | None) -> str:
    return "-" if x is None else (f"{x:.1f}" if x < 100 else f"{x:.0f}")


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


_COLUMNS = (("model", "<"), ("quant", "<"), ("ctx", ">"), ("verdict", "<"), ("headroom", ">"), ("max ctx", ">"),
            ("tok/s", ">"), ("prefill", ">"), ("layers", ">"))


def _row(c: dict[str, Any]) -> list[str]:
    room = c.get("min_headroom_bytes")
    layers = f"{c['n_gpu_layers']}/{c['n_layers_total']}" if c.get("n_layers_total") is not None else "-"
    return [printable(str(c["model"]), 80), printable(str(c["quant"]), 40), f"{c['ctx']:,}", c["verdict"],
            "-" if room is None else fmt_bytes(room),
            "-" if c.get("max_ctx_fit") is None else f"{c['max_ctx_fit']:,}", _tps(c.get("decode_tokens_per_s")),
            _tps(c.get("prefill_tokens_per_s")), layers]


def report_tables(report: dict[str, Any]) -> Iterator[Text | None]:
    """One table per hardware config, one line per (model, quant, context), verdicts coloured; yields each
    table in pieces of at most TABLE_CHUNK_ROWS lines, and None before each table (a blank line).

    Laid out here rather than with rich.Table, which takes about 0.5 ms a row: 3400 rows would double the
    report's time. Lines never wrap inside rich (the terminal wraps them if it must). The rows are made twice
    (once for the column widths, once to print), never all held: a matrix of any size prints in bounded memory.
    """
    from rich.text import Text

    by_hw: dict[str, list[int]] = {h["key"]: [] for h in report["hardware"]}
    cells = report["cells"]
    for i, c in enumerate(cells):
        by_hw[c["hardware"]].append(i)
    widths = [len(name) for name, _ in _COLUMNS]
    for c in cells:
        widths = [max(w, len(v)) for w, v in zip(widths, _row(c), strict=True)]

    def line(text: Text, values: list[str], verdict: str | None = None) -> None:
        for i, ((_, align), value, width) in enumerate(zip(_COLUMNS, values, widths, strict=True)):
            cell = f"{value:{align}{width}}"
            text.append(cell, style=_STYLE[verdict] if verdict is not None and i == 3 else "")
            if i < len(_COLUMNS) - 1:
                text.append("  ")

    for h in report["hardware"]:
        title = printable(h["key"] if h["key"] == h["name"] else f"{h['key']}: {h['name']}", 400)
        body = Text(title, style="bold")
        body.append("\n")
        line(body, [name for name, _ in _COLUMNS])
        body.append("\n" + "-" * (sum(widths) + 2 * (len(widths) - 1)))
        yield None
        n = 0
        for i in by_hw[h["key"]]:
            if n == TABLE_CHUNK_ROWS:
                yield body
                body, n = Text(), 0
            else:
                body.append("\n")
            r = _row(cells[i])
            line(body, r, r[3])
            n += 1
        yield body


ANSWER_ROWS = 10  # the ranked answer shows this many hardware configs; the tables below have them all


def print_report_answer(out: Console, report: dict[str, Any]) -> None:
    """The report's answer first: hardware configs ranked by their best cell (quality, then speed), and each
    model's cheapest configuration of the report that holds it on the GPU."""
    ans = report.get("answer") or {}
    best = sorted(ans.get("best_per_hardware", []),
                  key=lambda b: (-(b["quality"] if b["quality"] is not None else -1), -(b["decode_tokens_per_s"] or 0)))
    if best:
        out.print("[bold]The best of this report per hardware[/bold] (quality: MMLU-Pro x the quant's retention):")
        for i, b in enumerate(best[:ANSWER_ROWS], 1):
            price = (ans.get("prices") or {}).get(b["key"])
            q = f"quality {b['quality']:.1f}, " if b["quality"] is not None else ""
            out.print(printable(f"  {i}. {b['key']}: {b['model']} {b['quant']} at {b['ctx']:,}, {b['verdict']}, {q}"
                                f"{_tps(b['decode_tokens_per_s'])} tok/s" + (f", {price:,.0f} USD" if price else ""),
                                2000), markup=False)
        if len(best) > ANSWER_ROWS:
            out.print(f"  ... and {len(best) - ANSWER_ROWS} more in the tables below")
    for c in ans.get("cheapest_per_model", [])[:ANSWER_ROWS]:
        out.print(printable(f"  cheapest for {c['model']} {c['quant']} at {c['ctx']:,} on the GPU: {c['hardware']}, "
                            f"{c['price_usd']:,.0f} USD ({c['price_date']}), {_tps(c['decode_tokens_per_s'])} tok/s",
                            2000), markup=False)


def print_report_tables(out: Console, report: dict[str, Any]) -> None:
    for piece in report_tables(report):
        if piece is None:
            out.print()
        else:
            out.print(piece, soft_wrap=True)


def dump_report_json(report: dict[str, Any], fp: IO[str]) -> None:
    """`report --json`: the same bytes as print(json.dumps(report, indent=2)), written as it is encoded (a large
    report is never one string in memory)."""
    json.dump(report, fp, indent=2)
    fp.write("\n")


def _summary_line(report: dict[str, Any]) -> str:
    from gemma_fit.jobs.report import VERDICTS

    parts = [f"[{_STYLE[v]}]{report['summary'][v]} {v}[/]" for v in VERDICTS if report["summary"][v]]
    return ", ".join(parts) + f" of {_plural(len(report['cells']), 'combination')}"


def report_command(
    model: Annotated[list[str] | None, typer.Option(
        "--model", "-m", help="Model id, alias (9b, e4b), config.json path or 'all'; repeatable.")] = None,
    gpu: Annotated[list[str] | None, typer.Option(
        "--gpu", "-g", help="One hardware config per value: a GPU id, ids joined by '+' for one multi-GPU "
                            "machine (rtx-4090+rtx-4090), commas for several configs, or 'all'; repeatable.")] = None,
    hardware: Annotated[list[Path] | None, typer.Option(
        "--hardware", help="Machine file (YAML), one config each; repeatable.")] = None,
    quant: Annotated[list[str] | None, typer.Option(
        "--quant", "-q", help="llama.cpp file type or 'all'; repeatable (default Q4_K_M).")] = None,
    ctx: Annotated[list[int] | None, typer.Option(
        "--ctx", "-c", help="Context size, 0 = trained context; repeatable (default 4096).")] = None,
    ubatch: UbatchOpt = UBATCH,
    batch: BatchOpt = BATCH,
    parallel: ParallelOpt = PARALLEL,
    flash_attn: FlashOpt = FLASH_ATTN,
    cache_type_k: CtkOpt = CACHE_TYPE_K,
    cache_type_v: CtvOpt = CACHE_TYPE_V,
    n_gpu_layers: NglOpt = N_GPU_LAYERS,
    swa_full: SwaOpt = False,
    kv_unified: UnifiedOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="The report as one JSON object on stdout.")] = False,
    html: Annotated[Path | None, typer.Option(
        "--html", help="Write a self-contained HTML report (with a what-to-buy ranking) to this file.")] = None,
    engine: EngineOpt = "llama.cpp",
    quiet: Annotated[bool, typer.Option(
        "--quiet", help="No table (still --json if asked, and --html); the exit status says it ran.")] = False,
    ram: RamOpt = None,
    ram_type: RamTypeOpt = None,
    ram_channels: RamChannelsOpt = None,
    cpu: CpuOpt = None,
    cores: CoresOpt = None,
    threads: ThreadsOpt = None,
    disk: DiskOpt = None,
    reserve: ReserveOpt = None,
    n_cpu_moe: NCpuMoeOpt = 0,
    cpu_moe: CpuMoeOpt = False,
    override_tensor: OverrideOpt = None,
) -> None:
    """The check over several GPUs, models, quants and contexts: a table, --json or --html FILE.

    Exit status 0 when the report has an answer; 2 (bad input, one line on stderr, nothing on stdout and no
    file written) for an unknown engine or id, an impossible setting, more than 1,000,000 cells, or a matrix
    whose every cell is an error. Above 1,000 cells each cell's "check" in --json is a compact document.
    """
    from rich.console import Console

    from gemma_fit.jobs.report import canonical_engine, run_report
    from gemma_fit.present.html import render_report_html, write_html
    from gemma_fit.present.terminal import console

    model_dirs, hardware_dirs = state.model_dirs(), state.hardware_dirs()
    engine = canonical_engine(engine)
    if not model:
        raise BadInput("--model is required (repeatable: an id, an alias such as 9b, or 'all')")
    configs = gpu_configs(gpu or [], hardware_dirs)
    if not configs and not hardware:
        raise BadInput("--gpu or --hardware is required (repeatable; see gemma-fit list gpus)")
    settings = run_settings(batch=batch, ubatch=ubatch, parallel=parallel, kv_unified=kv_unified,
                            flash_attn=flash_attn, cache_type_k=cache_type_k, cache_type_v=cache_type_v,
                            n_gpu_layers=n_gpu_layers, swa_full=swa_full)
    settings = with_overrides(settings, override_tensor=override_tensor, cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe)
    if html is not None and html.is_dir():
        raise BadInput(f"cannot write {html}: is a directory")
    err = Console(stderr=True)
    show_progress = err.is_terminal and not quiet
    task: list[Any] = []

    with (_progress(err) if show_progress else nullcontext()) as bar:
        def on_progress(done: int, total: int) -> None:
            if bar is None or total < PROGRESS_MIN_CELLS:
                return
            if not task:
                task.append(bar.add_task("checking", total=total))
            bar.update(task[0], completed=done)

        report = run_report(model, quant or [], configs, ctx or [], settings, hardware_files=hardware or [],
                            model_dirs=model_dirs, hardware_dirs=hardware_dirs, what_to_buy=html is not None,
                            progress=on_progress, engine=engine,
                            machine=machine_flags(ram=ram, ram_type=ram_type, ram_channels=ram_channels, cores=cores,
                                                  threads=threads, disk=disk, reserve=reserve, cpu=cpu))
    if html is not None:
        write_html(html, render_report_html(report))
        if not quiet:
            print(f"wrote {html}", file=sys.stderr)
    if as_json:
        dump_report_json(report, sys.stdout)
    elif not quiet:
        out = console()
        out.print(f"[bold]gemma-fit report[/bold]: {_plural(len(report['cells']), 'combination')}, llama.cpp "
                  f"{report['llama_cpp']}; headroom is the smallest over the devices, tok/s the estimated decode "
                  "speed, prefill the prompt tokens/s",
                  soft_wrap=True)
        print_report_answer(out, report)
        print_report_tables(out, report)
        out.print(_summary_line(report))
        for c in report["cells"]:
            if c["verdict"] == "error":
                out.print(printable(f"  error: {c['hardware']} {c['model']} {c['quant']} ctx {c['ctx']:,}: "
                                    f"{c['error']}", 2000), markup=False)


def _progress(console: Console) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


def write_check_html(doc: dict[str, Any], resolved: ResolvedModel, quant: str, settings: RunSettings, path: Path,
                     hardware: Hardware | None = None) -> None:
    """`check --html FILE`: the check document with a what-to-buy ranking of every database GPU."""
    from gemma_fit.hardware.catalog import load_gpus
    from gemma_fit.jobs.report import gpu_ranking, sources
    from gemma_fit.present.html import render_check_html, write_html

    hardware_dirs = state.hardware_dirs()
    if hardware is not None:
        gpus = list(hardware.gpus)
    else:
        table = load_gpus(hardware_dirs)
        gpus = [table[g] for g in doc.get("hardware", {}).get("gpus", []) if g in table]
    ranking = gpu_ranking(resolved, quant, settings, hardware_dirs)
    rec, purchase = answers(resolved, quant, settings, hardware)
    write_html(Path(path), render_check_html(doc, ranking, sources([resolved], gpus, hardware_dirs), rec, purchase))


def answers(resolved: ResolvedModel, quant: str, settings: RunSettings, hardware: Hardware | None,
            ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """What a pre-purchase page opens with: the best Gemma for this hardware at this context, and the cheapest
    hardware for this model, quant and context. Either is left out (None) when it cannot be answered."""
    from gemma_fit.base.errors import GemmaFitError
    from gemma_fit.jobs.buy import BuyNeeds, buy, buy_document
    from gemma_fit.jobs.recommend import Needs, recommend, recommend_document

    n_ctx = settings.n_ctx or resolved.spec.n_ctx_train
    rec = purchase = None
    try:
        if hardware is not None:
            rec = recommend_document(recommend(hardware, Needs(n_ctx=n_ctx, top=3), settings,
                                               model_dirs=state.model_dirs()))
        purchase = buy_document(buy([resolved], quant, BuyNeeds(n_ctx=n_ctx, top=3), settings,
                                    hardware_dirs=state.hardware_dirs()))
    except GemmaFitError:
        pass  # the page still has the check; the answer section says nothing it cannot back
    return rec, purchase
