"""`gemma-fit recommend` and `gemma-fit buy`: the two questions people ask, on the command line.

Registered in app.py; the work is gemma_fit.jobs.recommend / gemma_fit.jobs.buy, the rendering
gemma_fit.present.recommend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gemma_fit.base.errors import BadInput
from gemma_fit.cli import state
from gemma_fit.cli.options import (
    BATCH,
    FLASH_ATTN,
    PARALLEL,
    UBATCH,
    BackendOpt,
    BatchOpt,
    CoresOpt,
    CpuOpt,
    DiskOpt,
    EngineOpt,
    FlashOpt,
    GpuOpt,
    HardwareOpt,
    JsonOpt,
    MarginOpt,
    ParallelOpt,
    RamChannelsOpt,
    RamOpt,
    RamTypeOpt,
    ReserveOpt,
    ThreadsOpt,
    UbatchOpt,
    machine_flags,
    run_settings,
)

NeedCtxOpt = Annotated[int, typer.Option("--ctx", "-c", help="The context you need, in tokens per sequence.")]
MinTpsOpt = Annotated[float | None, typer.Option("--min-tps", help="Least decode speed, tokens/s (default 10).")]
VisionOpt = Annotated[bool, typer.Option("--vision", help="Only models that read images, with room for one.")]
PreferOpt = Annotated[str, typer.Option("--prefer", help="quality, speed or context.")]
TopOpt = Annotated[int, typer.Option("--top", help="How many configurations to show.")]


def recommend_command(
    gpu: GpuOpt = None,
    hardware: HardwareOpt = None,
    ctx: NeedCtxOpt = 8192,
    min_tps: MinTpsOpt = None,
    vision: VisionOpt = False,
    parallel: ParallelOpt = PARALLEL,
    engine: EngineOpt = "llama.cpp",
    prefer: PreferOpt = "quality",
    top: TopOpt = 5,
    margin: MarginOpt = None,
    ubatch: UbatchOpt = UBATCH,
    batch: BatchOpt = BATCH,
    flash_attn: FlashOpt = FLASH_ATTN,
    backend: BackendOpt = None,
    ram: RamOpt = None,
    ram_type: RamTypeOpt = None,
    ram_channels: RamChannelsOpt = None,
    cpu: CpuOpt = None,
    cores: CoresOpt = None,
    threads: ThreadsOpt = None,
    disk: DiskOpt = None,
    reserve: ReserveOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The best Gemma configurations for this hardware and need, ranked: model, quant, KV cache, placement."""
    from gemma_fit.jobs.check import hardware_of, margin_bytes
    from gemma_fit.jobs.recommend import Needs, recommend, recommend_document
    from gemma_fit.present.recommend import render_recommend

    flags = machine_flags(ram=ram, ram_type=ram_type, ram_channels=ram_channels, cores=cores, threads=threads,
                          disk=disk, reserve=reserve, cpu=cpu)
    hw = hardware_of(hardware if hardware is not None else list(gpu or []), backend, state.hardware_dirs(), flags)
    settings = run_settings(batch=batch, ubatch=ubatch, flash_attn=flash_attn)
    needs = Needs(n_ctx=ctx, min_tps=min_tps, vision=vision, n_parallel=parallel, prefer=prefer.strip().lower(),
                  top=top, margin_bytes=margin_bytes(margin))
    doc = recommend_document(recommend(hw, needs, settings, engine, state.model_dirs()))
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    from gemma_fit.present.terminal import console

    render_recommend(console(), doc)





BudgetOpt = Annotated[float | None, typer.Option("--budget", help="Most you will spend, US dollars.")]
MaxGpusOpt = Annotated[int, typer.Option("--max-gpus", help="Cards in one machine (1 to 4).")]
SegmentOpt = Annotated[list[str] | None, typer.Option(
    "--segment", help="consumer, workstation, datacenter, apple, embedded or all (repeatable; default all).")]
UsedOpt = Annotated[bool, typer.Option("--used", help="Count used prices too.")]
PricesOpt = Annotated[Path | None, typer.Option("--prices", help="A prices YAML (hardware_db/prices schema) "
                                                                  "replacing the database's for today's market.")]
BuyModelOpt = Annotated[list[str] | None, typer.Option("--model", "-m", help="Model id or alias (repeatable: any).")]
BuyQuantOpt = Annotated[str, typer.Option("--quant", "-q", help="A file type, or auto (each option's best, "
                                                                 "BF16 down to Q4_K_M).")]


def buy_command(
    model: BuyModelOpt = None,
    quant: BuyQuantOpt = "Q4_K_M",
    ctx: NeedCtxOpt = 8192,
    min_tps: MinTpsOpt = None,
    budget: BudgetOpt = None,
    max_gpus: MaxGpusOpt = 2,
    segment: SegmentOpt = None,
    used: UsedOpt = False,
    vision: VisionOpt = False,
    prices: PricesOpt = None,
    allow_offload: Annotated[bool, typer.Option("--allow-offload", help="Count plans that leave layers or "
                                                                        "experts in the host's memory.")] = False,
    top: TopOpt = 10,
    margin: MarginOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The hardware to buy for a Gemma model, context and speed: cheapest first, with price, power and speed."""
    from gemma_fit.jobs.buy import DEFAULT_MIN_TPS, SEGMENTS, BuyNeeds, buy, buy_document
    from gemma_fit.jobs.check import margin_bytes
    from gemma_fit.jobs.report import expand_models
    from gemma_fit.present.recommend import render_buy

    if not model:
        raise BadInput("--model is required (an id or alias; repeat it for several)")
    segments = [s.strip().lower() for s in segment or ["all"]]
    needs = BuyNeeds(n_ctx=ctx, min_tps=DEFAULT_MIN_TPS if min_tps is None else min_tps, budget_usd=budget,
                     max_gpus=max_gpus, segments=SEGMENTS if "all" in segments else tuple(segments), used=used,
                     vision=vision, top=top, margin_bytes=margin_bytes(margin), allow_offload=allow_offload)
    doc = buy_document(buy(expand_models(model, state.model_dirs()), quant, needs,
                           hardware_dirs=state.hardware_dirs(), prices_file=prices))
    if as_json:
        print(json.dumps(doc, indent=2))
        return
    from gemma_fit.present.terminal import console

    render_buy(console(), doc)
