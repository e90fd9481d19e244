"""`gemma-fit recommend` and `gemma-fit buy`: the best Gemma for a machine, and the machine to buy for a Gemma."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from gemma_fit import api
from gemma_fit.base.files import write_text
from gemma_fit.cli import state
from gemma_fit.cli.options import (
    AcceptanceOpt,
    BackendOpt,
    BatchOpt,
    CoresOpt,
    CpuOpt,
    DiskOpt,
    DraftMaxOpt,
    DraftOpt,
    FlashOpt,
    GpuOpt,
    HardwareOpt,
    HtmlOpt,
    JsonOpt,
    MarginOpt,
    MtpOpt,
    NumaOpt,
    ParallelOpt,
    PowerModeOpt,
    RamChannelsOpt,
    RamOpt,
    RamTypeOpt,
    ReserveOpt,
    SocketsOpt,
    ThreadsOpt,
    UbatchOpt,
    VulkanDriverOpt,
    tokens,
    volume,
)
from gemma_fit.cli.values import (
    BATCH,
    FLASH_ATTN,
    PARALLEL,
    UBATCH,
    machine_flags,
    run_settings,
    speculative_ask,
)

NeedCtxOpt = Annotated[int, typer.Option("--ctx", "-c", parser=tokens, metavar="N[k]",
                                         help="The context you need, in tokens per request (k = x1024).")]
VisionOpt = Annotated[bool, typer.Option("--vision", help="Only models that read images, with room for one.")]
PreferOpt = Annotated[str, typer.Option("--prefer", help="Rank by quality, speed or context.")]
TopOpt = Annotated[int, typer.Option("--top", help="How many to show.")]
RECOMMEND, BUY = api.Needs(), api.BuyNeeds()  # the jobs' own defaults, shown by --help as they are used


def _json(doc: object) -> None:
    print(json.dumps(doc, indent=2, allow_nan=False))


def recommend_command(
    gpu: GpuOpt = None,
    hardware: HardwareOpt = None,
    ctx: NeedCtxOpt = RECOMMEND.n_ctx,
    min_tps: Annotated[float, typer.Option("--min-tps", help="The least decode speed, tokens/s.")] = RECOMMEND.min_tps,
    vision: VisionOpt = False,
    parallel: ParallelOpt = PARALLEL,
    engine: Annotated[str, typer.Option("--engine", help="llama.cpp, or ollama (the same plans, with the Ollama "
                                        "tag to pull).")] = "llama.cpp",
    prefer: PreferOpt = RECOMMEND.prefer,
    top: TopOpt = RECOMMEND.top,
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
    sockets: SocketsOpt = None,
    numa: NumaOpt = None,
    power_mode: PowerModeOpt = None,
    vulkan_driver: VulkanDriverOpt = None,
    disk: DiskOpt = None,
    reserve: ReserveOpt = None,
    as_json: JsonOpt = False,
    mtp: MtpOpt = False,
    draft: DraftOpt = None,
    draft_max: DraftMaxOpt = None,
    acceptance: AcceptanceOpt = None,
) -> None:
    """The best Gemma configurations for this hardware and need, ranked: model, quant, KV cache, placement."""
    from gemma_fit.present.terminal import console

    needs = api.Needs(n_ctx=ctx, min_tps=min_tps, vision=vision, n_parallel=parallel, prefer=prefer.strip().lower(),
                      top=top, margin_bytes=api.margin_bytes(margin))
    rec = api.recommend(hardware if hardware is not None else list(gpu or []), needs,
                        settings=replace(run_settings(batch=batch, ubatch=ubatch, flash_attn=flash_attn),
                                         speculative=speculative_ask(mtp, draft, draft_max, acceptance)),
                        engine=engine,
                        backend=backend, machine=machine_flags(ram=ram, ram_type=ram_type, ram_channels=ram_channels,
                                                               cores=cores, threads=threads, sockets=sockets,
                                                               numa=numa, power_mode=power_mode, disk=disk,
                                                               reserve=reserve, cpu=cpu,
                                                               vulkan_driver=vulkan_driver),
                        catalog=state.catalog())
    doc = api.to_json(rec)
    if as_json:
        _json(doc)
        return
    from gemma_fit.present.recommend import render_recommend

    render_recommend(console(), doc)


def buy_command(
    model: Annotated[list[str] | None, typer.Option("--model", "-m", help="Model id or alias; repeat for several "
                                                    "(any of them will do).")] = None,
    quant: Annotated[str, typer.Option("--quant", "-q", help="A file type, or auto (each option's best, BF16 down "
                                       "to Q4_K_M).")] = "Q4_K_M",
    ctx: NeedCtxOpt = BUY.n_ctx,
    min_tps: Annotated[float, typer.Option("--min-tps", help="The least decode speed, tokens/s.")] = BUY.min_tps,
    budget: Annotated[float | None, typer.Option("--budget", help="The most you will spend, US dollars.")] = None,
    max_gpus: Annotated[int, typer.Option("--max-gpus", help="Cards in one machine (1 to 4).")] = BUY.max_gpus,
    segment: Annotated[list[str] | None, typer.Option(
        "--segment", help="consumer, workstation, datacenter, apple, embedded or all (repeatable). "
                          "\\[default: all]")] = None,
    used: Annotated[bool, typer.Option("--used", help="Count used prices too.")] = False,
    vision: VisionOpt = False,
    prices: Annotated[Path | None, typer.Option("--prices", help="A prices YAML (hardware_db/prices schema) "
                                                "replacing the database's, for today's market.")] = None,
    allow_offload: Annotated[bool, typer.Option("--allow-offload", help="Count plans that leave layers or "
                                                "experts in the host's memory.")] = False,
    top: TopOpt = BUY.top,
    margin: MarginOpt = None,
    as_json: JsonOpt = False,
    html: HtmlOpt = None,
    tokens_per_day: Annotated[int | None, typer.Option(
        "--tokens-per-day", parser=volume, metavar="N[k|M]",
        help="A daily volume (k = x1000, M = x1,000,000): the first option's whole cost beside renting and hosted APIs "
                                 "(as gemma-fit cost), first in the answer and the --html page.")] = None,
) -> None:
    """The hardware to buy for a Gemma model, context and speed: cheapest first, with price, power and speed."""
    from gemma_fit.present.terminal import console

    segments = [s.strip().lower() for s in segment or ["all"]]
    needs = api.BuyNeeds(n_ctx=ctx, min_tps=min_tps, budget_usd=budget, max_gpus=max_gpus,
                         segments=api.SEGMENTS if "all" in segments else tuple(segments), used=used, vision=vision,
                         top=top, margin_bytes=api.margin_bytes(margin), allow_offload=allow_offload)
    doc = api.to_json(api.buy(model or [], quant, needs, prices=prices, catalog=state.catalog()))
    first = next((o for o in doc["options"] if o.get("model")), None)
    if tokens_per_day is not None and first is not None:  # the pre-purchase answer leads with what it costs all in
        doc["cost"] = api.cost(first["model"], first["quant"], first["gpus"],
                               api.CostAsk(tokens_per_day=tokens_per_day, prices_file=prices), catalog=state.catalog())
    if html is not None:
        write_text(html, api.buy_page(doc))
    if as_json:
        _json(doc)
        return
    from gemma_fit.present.recommend import render_buy

    render_buy(console(), doc)
