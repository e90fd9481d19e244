"""The `gemma-fit` command line: typer commands over the public API (gemma_fit.api) and the presenters. Argument
handling, rendering and exit statuses only; every rule lives below the API."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from gemma_fit import api
from gemma_fit.base.errors import BadInput
from gemma_fit.base.units import fmt_bytes
from gemma_fit.base.version import __version__
from gemma_fit.cli import state
from gemma_fit.cli.answer import answer, console, run_check
from gemma_fit.cli.bench import bench_command
from gemma_fit.cli.cost import cost_command
from gemma_fit.cli.hardware import db_app, list_app, probe_command
from gemma_fit.cli.numbers import ascii_numbers
from gemma_fit.cli.options import (
    ENGINES,
    AcceptanceOpt,
    BackendOpt,
    BatchOpt,
    CoresOpt,
    CpuMoeOpt,
    CpuOpt,
    CtkOpt,
    CtvOpt,
    CtxOpt,
    DiskOpt,
    DraftMaxOpt,
    DraftOpt,
    EngineCtxOpt,
    EngineOpt,
    EngineParallelOpt,
    EngineVersionOpt,
    FlashOpt,
    GpuOpt,
    HardwareOpt,
    HtmlOpt,
    JsonOpt,
    MarginOpt,
    MmprojOpt,
    ModelOpt,
    MtpOpt,
    NCpuMoeOpt,
    NglOpt,
    NumaOpt,
    OutputOpt,
    OverrideOpt,
    ParallelOpt,
    PowerModeOpt,
    PromptOpt,
    QuantOpt,
    RamChannelsOpt,
    RamOpt,
    RamTypeOpt,
    RateOpt,
    ReserveOpt,
    SocketsOpt,
    SwaOpt,
    ThreadsOpt,
    UbatchOpt,
    UnifiedOpt,
    VulkanDriverOpt,
    tokens,
)
from gemma_fit.cli.recommend import buy_command, recommend_command
from gemma_fit.cli.report import report_command
from gemma_fit.cli.serve import serve_plan_command
from gemma_fit.cli.smoke import smoke_command
from gemma_fit.cli.values import (
    BATCH,
    CACHE_TYPE_K,
    CACHE_TYPE_V,
    CTX,
    FLASH_ATTN,
    N_GPU_LAYERS,
    PARALLEL,
    PROMPT_TOKENS,
    UBATCH,
    run_settings,
)

ascii_numbers()  # '١٠' and '1_0' are not 10 to llama.cpp or any engine
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Will a Gemma model run on this hardware? Memory, context and speed, as llama.cpp, Ollama, vLLM and "
         "transformers really allocate them.",
)
app.add_typer(list_app, name="list")
app.command("probe", help="What this machine has: GPUs (NVML), RAM, CPU, disks.")(probe_command)
app.add_typer(db_app, name="db")
app.command("report", help="The verdict over several GPUs, models, quants and contexts.")(report_command)
app.command("smoke", help="Run llama.cpp and set measured memory and speed beside the estimate.")(smoke_command)
app.command("bench", help="Run llama-bench here, set the speed model beside it, keep a calibration (--save)."
            )(bench_command)
app.command("cost", help="Buy vs rent vs a hosted API: cost per million tokens at your volume.")(cost_command)
app.command("recommend", help="The best Gemma configurations for this hardware, ranked.")(recommend_command)
app.command("buy", help="The hardware to buy for a Gemma model, cheapest first.")(buy_command)
app.command("serve-plan", help="Does this hardware (or a cluster file) hold N concurrent requests or a "
            "request rate: tokens/s, TTFT, replicas; llama.cpp RPC and vLLM on Ray.")(serve_plan_command)


GLOBAL_VALUE_OPTIONS = ("--model-db", "--hardware-db")  # the callback's options that take a value


def _command_name(args: Sequence[str]) -> str | None:
    """The command `args` run (the first word after the global options), or None (help, --version, nothing)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in GLOBAL_VALUE_OPTIONS:
            i += 2
        elif arg.startswith(tuple(f"{o}=" for o in GLOBAL_VALUE_OPTIONS)):
            i += 1
        elif arg.startswith("-"):
            return None
        else:
            return arg
    return None


def _registered_name(c: Any) -> str:
    return str(c.name or c.callback.__name__.lower().replace("_", "-"))  # typer's own naming of a function


def app_for(args: Sequence[str]) -> typer.Typer:
    """The app that runs `args`: when they name a command, one that holds only it. Typer builds the click
    parameters of every registered command (their annotations evaluated, 30 functions) before it parses a word:
    most of a cold `check`'s command-line time. The whole app for anything else (help, no command, a typo)."""
    name = _command_name(args)
    commands = [c for c in app.registered_commands if _registered_name(c) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if name is None or not (commands or groups):
        return app
    one = typer.Typer(add_completion=False, no_args_is_help=True, help=app.info.help)
    one.registered_callback = app.registered_callback
    one.registered_commands = commands
    one.registered_groups = groups
    return one


@app.callback()
def _global(
    model_db: Annotated[  # str, not Path: typer reads "" as Path("."), the current folder
        list[str] | None, typer.Option("--model-db", help="An extra model database folder (repeatable).")
    ] = None,
    hardware_db: Annotated[
        list[str] | None, typer.Option("--hardware-db", help="An extra hardware database folder (repeatable).")
    ] = None,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:  # `gemma-fit --version` alone is answered before typer loads (cli.entry); this is the rest
        print(f"gemma-fit {__version__}")
        raise typer.Exit(0)
    state.set_extra_dirs(_folders("--model-db", model_db), _folders("--hardware-db", hardware_db))


def _folders(option: str, values: list[str] | None) -> tuple[Path, ...]:
    if any(not v.strip() for v in values or ()):
        raise BadInput(f"{option} needs a folder (an empty path would read the current folder)")
    return tuple(Path(v) for v in values or ())


@app.command()
def check(
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="Model id (gemma-3-12b), alias (12b, e4b), Ollama tag (gemma3:12b) or config.json.")
    ] = None,
    gpu: GpuOpt = None,
    quant: Annotated[str | None, typer.Option(
        "--quant", "-q", help="File type (Q4_K_M; gemma-fit list quants) or, for vLLM and transformers, "
                              "bf16/fp16/fp8/awq/gptq/nvfp4/bnb-8bit/bnb-4bit. \\[default: Q4_K_M; vLLM and "
                              "transformers: bf16]")] = None,
    gguf: Annotated[Path | None, typer.Option("--gguf", help="Answer for a real GGUF file (its header only is "
                                              "read), instead of --model.")] = None,
    ctx: EngineCtxOpt = None,
    ubatch: UbatchOpt = UBATCH,
    batch: BatchOpt = BATCH,
    parallel: EngineParallelOpt = None,
    flash_attn: FlashOpt = FLASH_ATTN,
    cache_type_k: CtkOpt = CACHE_TYPE_K,
    cache_type_v: CtvOpt = CACHE_TYPE_V,
    n_gpu_layers: NglOpt = N_GPU_LAYERS,
    swa_full: SwaOpt = False,
    kv_unified: UnifiedOpt = False,
    n_cpu_moe: NCpuMoeOpt = 0,
    cpu_moe: CpuMoeOpt = False,
    override_tensor: OverrideOpt = None,
    margin: MarginOpt = None,
    hardware: HardwareOpt = None,
    mmproj: MmprojOpt = None,
    images: Annotated[int | None, typer.Option("--images", help="Images per prompt: counts the vision projector "
                                               "and the context the images take.")] = None,
    prompt_tokens: PromptOpt = PROMPT_TOKENS,
    output_tokens: OutputOpt = None,
    rate: RateOpt = None,
    as_json: JsonOpt = False,
    html: HtmlOpt = None,
    engine: EngineOpt = "llama.cpp",
    engine_version: EngineVersionOpt = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option(
        "--gpu-memory-utilization", help="vLLM: the share of each GPU it takes. \\[default: 0.92]",
        rich_help_panel=ENGINES)] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(
        "--max-num-batched-tokens", parser=tokens, metavar="N[k]",
        help="vLLM: tokens per scheduler step (k = x1024). \\[default: by GPU]", rich_help_panel=ENGINES)] = None,
    tensor_parallel_size: Annotated[int | None, typer.Option(
        "--tensor-parallel-size", help="vLLM: GPUs one model is split over. \\[default: 1]",
        rich_help_panel=ENGINES)] = None,
    enforce_eager: Annotated[bool, typer.Option(
        "--enforce-eager", help="vLLM: no CUDA graphs (less memory, slower).", rich_help_panel=ENGINES)] = False,
    kv_cache_dtype: Annotated[str | None, typer.Option(
        "--kv-cache-dtype", help="vLLM, transformers, Ollama: the KV cache type (auto, fp8; Ollama f16, q8_0).",
        rich_help_panel=ENGINES)] = None,
    batch_size: Annotated[int | None, typer.Option(
        "--batch-size", help="transformers: generate()'s batch. \\[default: --parallel]", rich_help_panel=ENGINES)
    ] = None,
    max_new_tokens: Annotated[int | None, typer.Option(
        "--max-new-tokens", parser=tokens, metavar="N[k]",
        help="transformers: tokens generate() adds (k = x1024). \\[default: 512]", rich_help_panel=ENGINES)] = None,
    cache_implementation: Annotated[str | None, typer.Option(
        "--cache-implementation", help="transformers: dynamic or static KV cache. \\[default: dynamic]",
        rich_help_panel=ENGINES)] = None,
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
    mtp: MtpOpt = False,
    draft: DraftOpt = None,
    draft_max: DraftMaxOpt = None,
    acceptance: AcceptanceOpt = None,
) -> None:
    """The go/no-go answer for one model, quant, context and hardware."""
    raise typer.Exit(run_check(**locals()))  # every parameter, by name (cli.quick runs it before typer loads)


@app.command()
def inspect(
    file: Annotated[Path, typer.Argument(help="A GGUF file (the first shard of a split model).")],
    gpu: GpuOpt = None,
    hardware: HardwareOpt = None,
    ctx: CtxOpt = CTX,
    ubatch: UbatchOpt = UBATCH,
    batch: BatchOpt = BATCH,
    parallel: ParallelOpt = PARALLEL,
    flash_attn: FlashOpt = FLASH_ATTN,
    cache_type_k: CtkOpt = CACHE_TYPE_K,
    cache_type_v: CtvOpt = CACHE_TYPE_V,
    n_gpu_layers: NglOpt = N_GPU_LAYERS,
    swa_full: SwaOpt = False,
    kv_unified: UnifiedOpt = False,
    mmproj: MmprojOpt = None,
    prompt_tokens: PromptOpt = PROMPT_TOKENS,
    as_json: JsonOpt = False,
    html: HtmlOpt = None,
    backend: BackendOpt = None,
) -> None:
    """What a GGUF holds (header only) and, with --gpu or --hardware, what it needs there."""
    target = hardware if hardware is not None else (list(gpu) if gpu else None)
    settings = run_settings(ctx=ctx, batch=batch, ubatch=ubatch, parallel=parallel, kv_unified=kv_unified,
                            flash_attn=flash_attn, cache_type_k=cache_type_k, cache_type_v=cache_type_v,
                            n_gpu_layers=n_gpu_layers, swa_full=swa_full)
    info = api.inspect(file, target, settings=settings, prompt_tokens=prompt_tokens, mmproj=mmproj, backend=backend,
                       catalog=state.catalog())
    header = api.to_json(info)
    if info.check is None:
        if as_json:
            print(json.dumps(header, indent=2, allow_nan=False))
        else:
            from gemma_fit.present.terminal import render_inspect

            render_inspect(console(), header)
        return
    raise typer.Exit(answer(info.check, as_json, html, extra=header))  # the check's document, with the header's figures


@app.command()
def synth(
    out: Annotated[Path, typer.Argument(help="The .gguf file to write.")],
    model: ModelOpt,
    quant: QuantOpt = "Q4_K_M",
) -> None:
    """Write a zero-weight GGUF of the model's exact layout (sparse: no disk space, no download)."""
    from gemma_fit.base.text import printable

    model_id, quant_name, n_tensors, size = api.synth(out, model, quant, state.catalog())
    print(f"wrote {printable(str(out), 400)}: {model_id} {quant_name}, {n_tensors} tensors, {fmt_bytes(size)} "
          "apparent size (sparse)", file=sys.stderr)


# `gemma-fit --help` in the order a newcomer needs it: the questions first (check before all), then files, this
# machine and the databases (typer lists a panel's commands in registration order, groups after commands).
_ANSWERS, _TOOLS = "Will it run, and on what?", "Files, this machine, the databases"
_ORDER = ("check", "recommend", "buy", "cost", "report", "serve-plan", "inspect", "synth", "smoke", "bench", "probe")
app.registered_commands.sort(key=lambda c: _ORDER.index(_registered_name(c)))
for _c in app.registered_commands:
    _c.rich_help_panel = _ANSWERS if _ORDER.index(_registered_name(_c)) < _ORDER.index("inspect") else _TOOLS
for _g in app.registered_groups:
    _g.rich_help_panel = _TOOLS
