"""`gemma-fit smoke`: run llama.cpp on a real or zero-weight GGUF and set measurement beside estimate."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from gemma_fit import api
from gemma_fit.cli import state
from gemma_fit.cli.options import (
    THIS_MACHINE_THREADS,
    BatchOpt,
    CpuMoeOpt,
    CtkOpt,
    CtvOpt,
    CtxOpt,
    FlashOpt,
    GpuOpt,
    LlamaBinOpt,
    NCpuMoeOpt,
    NglOpt,
    OverrideOpt,
    ParallelOpt,
    QuantOpt,
    RunThreadsOpt,
    SwaOpt,
    UbatchOpt,
    tokens,
)
from gemma_fit.cli.values import (
    BATCH,
    CACHE_TYPE_K,
    CACHE_TYPE_V,
    CTX,
    FLASH_ATTN,
    N_GPU_LAYERS,
    PARALLEL,
    UBATCH,
    run_settings,
)


def smoke_command(
    gguf: Annotated[Path | None, typer.Option("--gguf", help="A real GGUF file to run.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model for a --synthetic run.")] = None,
    quant: QuantOpt = "Q4_K_M",
    synthetic: Annotated[bool, typer.Option("--synthetic", help="Run a zero-weight file of the model's layout "
                                            "(written to a temporary folder, removed after).")] = False,
    gpu: GpuOpt = None,
    ctx: CtxOpt = CTX,
    ubatch: UbatchOpt = UBATCH,
    batch: BatchOpt = BATCH,
    parallel: ParallelOpt = PARALLEL,
    flash_attn: FlashOpt = FLASH_ATTN,
    cache_type_k: CtkOpt = CACHE_TYPE_K,
    cache_type_v: CtvOpt = CACHE_TYPE_V,
    n_gpu_layers: NglOpt = N_GPU_LAYERS,
    swa_full: SwaOpt = False,
    n_cpu_moe: NCpuMoeOpt = 0,
    cpu_moe: CpuMoeOpt = False,
    override_tensor: OverrideOpt = None,
    prompt_tokens: Annotated[int, typer.Option("--prompt-tokens", parser=tokens, metavar="N[k]",
                                               help="Prompt length (up to the context - 4).")] = 128,
    n_predict: Annotated[int, typer.Option("--n-predict", "-n", parser=tokens, metavar="N[k]",
                                           help="Tokens to generate (at least 1; k = x1024).")] = 16,
    threads: RunThreadsOpt = THIS_MACHINE_THREADS,
    llama_bin: LlamaBinOpt = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Seconds before llama.cpp and all it started are ended.")] = 600,
    record: Annotated[bool, typer.Option("--record", help="Append the comparison to this machine's records "
                                         "($GEMMA_FIT_SMOKE_RECORDS, else gemma-fit's data folder).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Run llama.cpp and set measured memory and speed beside the estimate."""
    if (gguf is None) == (not synthetic):
        raise api.BadInput("give --gguf FILE, or --model ID --synthetic")
    if synthetic and not model:
        raise api.BadInput("--synthetic needs --model")
    settings = run_settings(ctx=ctx, batch=batch, ubatch=ubatch, parallel=parallel, flash_attn=flash_attn,
                            cache_type_k=cache_type_k, cache_type_v=cache_type_v, n_gpu_layers=n_gpu_layers,
                            swa_full=swa_full, override_tensor=override_tensor, cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe,
                            n_outputs_max=batch)  # llama-completion reserves logits for every ubatch token
    run = api.SmokeRun(prompt_tokens, n_predict, threads, timeout, llama_bin)
    result = api.smoke(None if gguf is not None else model, quant, settings, run, gguf=gguf, gpus=gpu or [],
                       catalog=state.catalog())
    doc = api.to_json(result)
    if record:
        where = api.record_smoke(result)
        print(f"recorded in {where}", file=sys.stderr)
    if as_json:
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        from gemma_fit.present.terminal import console, render_smoke

        render_smoke(console(), doc)
