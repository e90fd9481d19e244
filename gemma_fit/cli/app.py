"""The `gemma-fit` command line. Rendering and argument handling only; the rules live elsewhere."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gemma_fit.base.errors import EXIT_BAD_INPUT, EXIT_NO_GO, EXIT_OFFLOAD, EXIT_OK, GemmaFitError
from gemma_fit.base.units import fmt_bytes
from gemma_fit.base.version import __version__
from gemma_fit.cli import state
from gemma_fit.cli.hardware import db_app, list_gpus, probe_command
from gemma_fit.cli.lists import list_cpus, list_models, list_quants
from gemma_fit.cli.options import (
    BATCH,
    CACHE_TYPE_K,
    CACHE_TYPE_V,
    CTX,
    FLASH_ATTN,
    N_GPU_LAYERS,
    PARALLEL,
    PROMPT_TOKENS,
    UBATCH,
    BackendOpt,
    BatchOpt,
    CoresOpt,
    CpuMoeOpt,
    CpuOpt,
    CtkOpt,
    CtvOpt,
    CtxOpt,
    DiskOpt,
    EngineCtxOpt,
    EngineOpt,
    FlashOpt,
    GpuOpt,
    HardwareOpt,
    HtmlOpt,
    JsonOpt,
    MarginOpt,
    MmprojOpt,
    ModelOpt,
    NCpuMoeOpt,
    NglOpt,
    OutputOpt,
    OverrideOpt,
    ParallelOpt,
    PromptOpt,
    QuantOpt,
    RamChannelsOpt,
    RamOpt,
    RamTypeOpt,
    RateOpt,
    ReserveOpt,
    SwaOpt,
    ThreadsOpt,
    UbatchOpt,
    UnifiedOpt,
    machine_flags,
    run_settings,
    with_overrides,
)
from gemma_fit.cli.recommend import buy_command, recommend_command
from gemma_fit.cli.report import report_command, write_check_html
from gemma_fit.cli.serve import serve_plan_command
from gemma_fit.cli.smoke import smoke_command
from gemma_fit.engines.llamacpp import CheckResult
from gemma_fit.hardware.flags import with_machine_flags
from gemma_fit.hardware.select import select_hardware, with_backend
from gemma_fit.jobs import check as checking
from gemma_fit.memory.settings import is_llama_cpp
from gemma_fit.speed.traffic import Traffic

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Will a Gemma model run on this hardware under llama.cpp? Memory, context and speed.",
)
list_app = typer.Typer(no_args_is_help=True, help="What the databases hold.")
app.add_typer(list_app, name="list")
app.command("probe", help="What this machine has: GPUs (NVML), RAM, CPU, disks.")(probe_command)
app.add_typer(db_app, name="db")
app.command("report", help="The verdict over several GPUs, models, quants and contexts.")(report_command)
list_app.command("gpus", help="Every GPU in the hardware database.")(list_gpus)
list_app.command("cpus", help="Every CPU in the hardware database (what --cpu accepts).")(list_cpus)
list_app.command("models", help="Every model in the database.")(list_models)
list_app.command("quants", help="The llama.cpp file types gemma-fit knows, with their base tensor type.")(list_quants)
app.command("smoke", help="Run llama.cpp and set measured memory and speed beside the estimate.")(smoke_command)
app.command("recommend", help="The best Gemma configurations for this hardware, ranked.")(recommend_command)
app.command("buy", help="The hardware to buy for a Gemma model, cheapest first.")(buy_command)
app.command("serve-plan", help="Does this hardware (or a cluster file) hold N concurrent requests or a "
            "request rate: tokens/s, TTFT, replicas; llama.cpp RPC and vLLM on Ray.")(serve_plan_command)

EXIT_BY_VERDICT = {"go": EXIT_OK, "tight": EXIT_OK, "offload": EXIT_OFFLOAD, "no-go": EXIT_NO_GO}


def _out() -> Console:
    from gemma_fit.present.terminal import console  # rich only when something is drawn: --json never imports it

    return console()


def _print_version(value: bool) -> None:
    """Eager, so that `gemma-fit --version` needs no command (as pip and llama.cpp answer it)."""
    if value:
        print(f"gemma-fit {__version__}")
        raise typer.Exit(0)


@app.callback()
def _global(
    model_db: Annotated[
        list[Path] | None, typer.Option("--model-db", help="Extra model database folder.")
    ] = None,
    hardware_db: Annotated[
        list[Path] | None, typer.Option("--hardware-db", help="Extra hardware database folder.")
    ] = None,
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print the version and exit.")] = False,
) -> None:
    state.set_extra_dirs(tuple(model_db or ()), tuple(hardware_db or ()))


def _print_check(result: CheckResult, as_json: bool, html: Path | None, extra: dict[str, object] | None = None,
                 ) -> None:
    from gemma_fit.present.documents import check_json

    if result.speed_error:
        print(f"gemma-fit: speed not predicted: {result.speed_error}", file=sys.stderr)
    doc = {**check_json(result), **(extra or {})}
    if html is not None:
        write_check_html(doc, result.resolved, result.plan.ftype.name, result.settings, html,
                         hardware=result.hardware)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        from gemma_fit.present.terminal import render_check

        render_check(_out(), doc)
    raise typer.Exit(EXIT_BY_VERDICT[result.verdict.verdict])


@app.command()
def check(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model id, alias or config.json.")] = None,
    gpu: GpuOpt = None,
    quant: Annotated[str | None, typer.Option("--quant", "-q", help="File type (Q4_K_M) or, for vLLM and "
                                              "transformers, bf16/fp16/fp8/awq/gptq/nvfp4/bnb-8bit/bnb-4bit.")] = None,
    gguf: Annotated[Path | None, typer.Option("--gguf", help="Estimate from a real GGUF file's header.")] = None,
    ctx: EngineCtxOpt = None,
    ubatch: UbatchOpt = UBATCH,
    batch: BatchOpt = BATCH,
    parallel: ParallelOpt = PARALLEL,
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
    prompt_tokens: PromptOpt = PROMPT_TOKENS,
    output_tokens: OutputOpt = None,
    rate: RateOpt = None,
    as_json: JsonOpt = False,
    html: HtmlOpt = None,
    engine: EngineOpt = "llama.cpp",
    gpu_memory_utilization: Annotated[float | None, typer.Option("--gpu-memory-utilization", help="vLLM.")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option("--max-num-batched-tokens", help="vLLM.")] = None,
    tensor_parallel_size: Annotated[int | None, typer.Option("--tensor-parallel-size", help="vLLM.")] = None,
    enforce_eager: Annotated[bool, typer.Option("--enforce-eager", help="vLLM: no CUDA graphs.")] = False,
    kv_cache_dtype: Annotated[str | None, typer.Option("--kv-cache-dtype", help="vLLM KV dtype.")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="transformers generate batch.")] = None,
    max_new_tokens: Annotated[int | None, typer.Option("--max-new-tokens", help="transformers.")] = None,
    cache_implementation: Annotated[str | None, typer.Option("--cache-implementation",
                                                             help="transformers: dynamic or static.")] = None,
    images: Annotated[int | None, typer.Option("--images", help="Images per prompt (multimodal).")] = None,
    backend: BackendOpt = None,
    ram: RamOpt = None,
    ram_type: RamTypeOpt = None,
    ram_channels: RamChannelsOpt = None,
    cpu: CpuOpt = None,
    cores: CoresOpt = None,
    threads: ThreadsOpt = None,
    disk: DiskOpt = None,
    reserve: ReserveOpt = None,
) -> None:
    """The go/no-go answer for one model, quant, context and hardware."""
    checking.check_model_source(model, gguf)
    flags = machine_flags(ram=ram, ram_type=ram_type, ram_channels=ram_channels, cores=cores, threads=threads,
                          disk=disk, reserve=reserve, cpu=cpu)
    hw = with_machine_flags(with_backend(select_hardware(gpu or [], hardware, state.hardware_dirs()), backend),
                            flags, state.hardware_dirs())
    # Unset, the context is llama-server's 4096 here and the engine's own default elsewhere (0 asks for it).
    n_ctx = ctx if ctx is not None else CTX if is_llama_cpp(engine) else 0
    settings = run_settings(ctx=n_ctx, batch=batch, ubatch=ubatch, parallel=parallel, kv_unified=kv_unified,
                            flash_attn=flash_attn, cache_type_k=cache_type_k, cache_type_v=cache_type_v,
                            n_gpu_layers=n_gpu_layers, swa_full=swa_full)
    settings = with_overrides(settings, override_tensor=override_tensor, cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe)
    engine_options: dict[str, Any] = {} if is_llama_cpp(engine) else dict(
        gpu_memory_utilization=gpu_memory_utilization, max_num_batched_tokens=max_num_batched_tokens,
        tensor_parallel_size=tensor_parallel_size, enforce_eager=enforce_eager or None,
        kv_cache_dtype=kv_cache_dtype, batch_size=batch_size, max_new_tokens=max_new_tokens,
        cache_implementation=cache_implementation)
    result = checking.check(model, hw, quant=quant, gguf=gguf, settings=settings, engine=engine,
                            prompt_tokens=prompt_tokens, mmproj=mmproj, model_dirs=state.model_dirs(),
                            margin_gib=margin, images=images, traffic=Traffic(output_tokens, rate), **engine_options)
    if isinstance(result, CheckResult):
        _print_check(result, as_json, html)
        return
    from gemma_fit.present.documents import engine_check_json

    doc = engine_check_json(result)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        from gemma_fit.present.terminal import render_engine

        render_engine(_out(), doc)
    raise typer.Exit(EXIT_BY_VERDICT[doc["verdict"]])


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
    from gemma_fit.jobs.inspect import check_file, read_file
    from gemma_fit.present.documents import inspect_json

    info = read_file(file)
    if not gpu and hardware is None:
        if as_json:
            print(json.dumps(inspect_json(info), indent=2))
        else:
            from gemma_fit.present.terminal import render_inspect

            render_inspect(_out(), inspect_json(info))
        return
    hw = with_backend(select_hardware(gpu or [], hardware, state.hardware_dirs()), backend)
    settings = run_settings(ctx=ctx, batch=batch, ubatch=ubatch, parallel=parallel, kv_unified=kv_unified,
                            flash_attn=flash_attn, cache_type_k=cache_type_k, cache_type_v=cache_type_v,
                            n_gpu_layers=n_gpu_layers, swa_full=swa_full,
                            mmproj_bytes=checking.projector_bytes(mmproj) if mmproj is not None else 0)
    checked = check_file(info, hw, settings, prompt_tokens)
    assert checked.check is not None
    _print_check(checked.check, as_json, html, extra=inspect_json(info))


@app.command()
def synth(
    out: Annotated[Path, typer.Argument(help="Output .gguf path.")],
    model: ModelOpt,
    quant: QuantOpt = "Q4_K_M",
) -> None:
    """Write a zero-weight GGUF of the model's exact layout (sparse: no disk space, no download)."""
    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.gguf.writer import write_synthetic_gguf  # imports gguf and numpy: only when writing
    from gemma_fit.model.catalog import resolve_model

    resolved = resolve_model(model, state.model_dirs())
    plan = build_plan(resolved.spec, quant)
    size = write_synthetic_gguf(plan, out)
    print(f"wrote {out}: {resolved.spec.id} {plan.ftype.name}, {len(plan.tensors)} tensors, "
          f"{fmt_bytes(size)} apparent size (sparse)", file=sys.stderr)


def _fail(message: str, code: int) -> None:
    """The one line a failure prints: control bytes escaped, so user input cannot drive the terminal."""
    from gemma_fit.base.text import printable

    print(f"gemma-fit: error: {printable(message, limit=2000)}", file=sys.stderr)
    sys.exit(code)


def main() -> None:
    """Entry point: one-line errors and contract exit statuses, never a traceback."""
    import signal

    # `gemma-fit ... | head`: die of SIGPIPE (status 141 in the shell) like cat and grep, instead of
    # click's "exit 1" or Python's BrokenPipeError at the first write after head has gone.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        rc = app(standalone_mode=False, prog_name="gemma-fit")  # returns typer.Exit's code, not raising it
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except GemmaFitError as exc:
        _fail(str(exc), exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("gemma-fit: aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # usage errors and anything unexpected: one line, no traceback
        format_message = getattr(exc, "format_message", None)
        if format_message is not None:  # typer/click usage errors (unknown option, bad value)
            message = format_message()
            if not message:  # no command given: click printed the help, there is nothing more to say
                sys.exit(EXIT_BAD_INPUT)
            _fail(message, EXIT_BAD_INPUT)
        print(f"gemma-fit: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
