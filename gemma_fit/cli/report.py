"""`gemma-fit report`: the check over several GPUs, models, quants and contexts, as a table, --json or --html."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from gemma_fit import api
from gemma_fit.base.files import output_target, write_text
from gemma_fit.base.text import printable
from gemma_fit.cli import state
from gemma_fit.cli.options import (
    OUTPUT,
    AcceptanceOpt,
    BatchOpt,
    CoresOpt,
    CpuMoeOpt,
    CpuOpt,
    CtkOpt,
    CtvOpt,
    DiskOpt,
    DraftMaxOpt,
    DraftOpt,
    EngineOpt,
    FlashOpt,
    MtpOpt,
    NCpuMoeOpt,
    NglOpt,
    NumaOpt,
    OverrideOpt,
    ParallelOpt,
    PowerModeOpt,
    RamChannelsOpt,
    RamOpt,
    RamTypeOpt,
    ReserveOpt,
    SocketsOpt,
    SwaOpt,
    ThreadsOpt,
    UbatchOpt,
    UnifiedOpt,
    tokens,
)
from gemma_fit.cli.values import (
    BATCH,
    CACHE_TYPE_K,
    CACHE_TYPE_V,
    FLASH_ATTN,
    N_GPU_LAYERS,
    PARALLEL,
    UBATCH,
    machine_flags,
    run_settings,
    speculative_ask,
)

PROGRESS_MIN_CELLS = 200  # smaller matrices finish before a progress bar would be seen


def report_command(
    model: Annotated[list[str] | None, typer.Option(
        "--model", "-m", help="Model id, alias (9b, e4b), config.json path or 'all'; repeatable.")] = None,
    gpu: Annotated[list[str] | None, typer.Option(
        "--gpu", "-g", help="One hardware config per value: a GPU id, ids joined by '+' for one multi-GPU "
                            "machine (rtx-4090+rtx-4090), commas for several configs, or 'all'; repeatable.")] = None,
    hardware: Annotated[list[Path] | None, typer.Option(
        "--hardware", help="A machine file (YAML), one config each; repeatable.")] = None,
    quant: Annotated[list[str] | None, typer.Option(
        "--quant", "-q", help="llama.cpp file type or 'all'; repeatable. \\[default: Q4_K_M]")] = None,
    ctx: Annotated[list[int] | None, typer.Option(
        "--ctx", "-c", parser=tokens, metavar="N[k]",
        help="Context in tokens (k = x1024), 0 = the trained context; repeatable. \\[default: 4096]")] = None,
    ubatch: UbatchOpt = UBATCH,
    batch: BatchOpt = BATCH,
    parallel: ParallelOpt = PARALLEL,
    flash_attn: FlashOpt = FLASH_ATTN,
    cache_type_k: CtkOpt = CACHE_TYPE_K,
    cache_type_v: CtvOpt = CACHE_TYPE_V,
    n_gpu_layers: NglOpt = N_GPU_LAYERS,
    swa_full: SwaOpt = False,
    kv_unified: UnifiedOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="The report as one JSON object on stdout.",
                                          rich_help_panel=OUTPUT)] = False,
    html: Annotated[Path | None, typer.Option(
        "--html", help="Also write a self-contained HTML report (with a what-to-buy ranking) to this file.",
        rich_help_panel=OUTPUT)] = None,
    engine: EngineOpt = "llama.cpp",
    quiet: Annotated[bool, typer.Option(
        "--quiet", help="No table (still --json if asked, and --html); the exit status says it ran.",
        rich_help_panel=OUTPUT)] = False,
    ram: RamOpt = None,
    ram_type: RamTypeOpt = None,
    ram_channels: RamChannelsOpt = None,
    cpu: CpuOpt = None,
    cores: CoresOpt = None,
    threads: ThreadsOpt = None,
    sockets: SocketsOpt = None,
    numa: NumaOpt = None,
    power_mode: PowerModeOpt = None,
    disk: DiskOpt = None,
    reserve: ReserveOpt = None,
    n_cpu_moe: NCpuMoeOpt = 0,
    cpu_moe: CpuMoeOpt = False,
    override_tensor: OverrideOpt = None,
    mtp: MtpOpt = False,
    draft: DraftOpt = None,
    draft_max: DraftMaxOpt = None,
    acceptance: AcceptanceOpt = None,
) -> None:
    """The check over several GPUs, models, quants and contexts: a table, --json or --html FILE.

    Exit status 0 when the report has an answer; 2 (bad input, one line on stderr, nothing on stdout and no
    file written) for an unknown engine or id, an impossible setting, more than 1,000,000 cells, or a matrix
    whose every cell is an error. Above 1,000 cells each cell's "check" in --json is a compact document.
    """
    from rich.console import Console

    if not model:
        raise api.BadInput("--model is required (repeatable: an id, an alias such as 9b, or 'all')")
    if not gpu and not hardware:
        raise api.BadInput("--gpu or --hardware is required (repeatable; see gemma-fit list gpus)")
    settings = run_settings(batch=batch, ubatch=ubatch, parallel=parallel, kv_unified=kv_unified,
                            flash_attn=flash_attn, cache_type_k=cache_type_k, cache_type_v=cache_type_v,
                            n_gpu_layers=n_gpu_layers, swa_full=swa_full, override_tensor=override_tensor,
                            cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe)
    settings = replace(settings, speculative=speculative_ask(mtp, draft, draft_max, acceptance))
    if html is not None:
        output_target(html)  # a folder, an input or an impossible name: refused before the matrix, not after
    err = Console(stderr=True)
    show_progress = err.is_terminal and not quiet
    task: list[Any] = []
    from gemma_fit.present.report_view import progress_bar, write_report_json

    with (progress_bar(err) if show_progress else nullcontext()) as bar:
        def on_progress(done: int, total: int) -> None:
            if bar is None or total < PROGRESS_MIN_CELLS:
                return
            if not task:
                task.append(bar.add_task("checking", total=total))
            bar.update(task[0], completed=done)

        report = api.report(model, gpu or [], quants=quant or [], contexts=ctx or [], settings=settings,
                            hardware_files=hardware or [], engine=engine, what_to_buy=html is not None,
                            machine=machine_flags(ram=ram, ram_type=ram_type, ram_channels=ram_channels, cores=cores,
                                                  threads=threads, sockets=sockets, numa=numa, disk=disk,
                                                  reserve=reserve, cpu=cpu, power_mode=power_mode),
                            progress=on_progress, catalog=state.catalog())
    if html is not None:
        write_text(html, api.report_page(report))
        if not quiet:
            print(f"wrote {printable(str(html), 400)}", file=sys.stderr)
    if as_json:
        write_report_json(report, sys.stdout)
    elif not quiet:
        from gemma_fit.present.report_view import render_report
        from gemma_fit.present.terminal import console

        render_report(console(), report)
