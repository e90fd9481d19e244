"""`gemma-fit smoke`: run llama.cpp on a real or zero-weight GGUF and set measurement beside estimate."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Annotated

import typer

from gemma_fit.base.errors import BadInput
from gemma_fit.cli import state
from gemma_fit.cli.options import (
    BATCH,
    CACHE_TYPE_K,
    CACHE_TYPE_V,
    CTX,
    FLASH_ATTN,
    N_GPU_LAYERS,
    PARALLEL,
    UBATCH,
    BatchOpt,
    CpuMoeOpt,
    CtkOpt,
    CtvOpt,
    CtxOpt,
    FlashOpt,
    GpuOpt,
    NCpuMoeOpt,
    NglOpt,
    OverrideOpt,
    ParallelOpt,
    QuantOpt,
    SwaOpt,
    UbatchOpt,
    run_settings,
    with_overrides,
)


def smoke_command(
    gguf: Annotated[Path | None, typer.Option("--gguf", help="A real GGUF file to run.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model for a --synthetic run.")] = None,
    quant: QuantOpt = "Q4_K_M",
    synthetic: Annotated[bool, typer.Option("--synthetic", help="Run a zero-weight file of the layout.")] = False,
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
    prompt_tokens: Annotated[int, typer.Option("--prompt-tokens", help="Prompt length (up to the context - 4).")] = 128,
    n_predict: Annotated[int, typer.Option("--n-predict", "-n", help="Tokens to generate (at least 1).")] = 16,
    threads: Annotated[int, typer.Option("--threads", "-t", help="CPU threads, 1 to 512.")] = max(
        1, min(512, os.cpu_count() or 2)),
    llama_bin: Annotated[Path | None, typer.Option(
        "--llama-bin", help="Folder with llama.cpp binaries (default: the build of scripts/build_llamacpp.py in "
                            "$GEMMA_FIT_CACHE or ~/.cache/gemma-fit, else PATH).")] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Seconds before llama.cpp and all it started are ended.")] = 600,
    record: Annotated[bool, typer.Option("--record", help="Append the comparison to benchmarks/data.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Run llama.cpp and set measured memory and speed beside the estimate."""
    from gemma_fit.engines.llamacpp import run_check
    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.hardware.select import select_hardware
    from gemma_fit.jobs import smoke as sm
    from gemma_fit.jobs.check import gguf_model
    from gemma_fit.model.catalog import resolve_model
    from gemma_fit.present.documents import check_json

    if (gguf is None) == (not synthetic):
        raise BadInput("give --gguf FILE, or --model ID --synthetic")
    if synthetic and not model:
        raise BadInput("--synthetic needs --model")
    sm.check_run_numbers(threads=threads, prompt_tokens=prompt_tokens, n_predict=n_predict, timeout=timeout)
    hw = select_hardware(gpu or ["cpu"], None, state.hardware_dirs())
    settings = run_settings(ctx=ctx, batch=batch, ubatch=ubatch, parallel=parallel, flash_attn=flash_attn,
                            cache_type_k=cache_type_k, cache_type_v=cache_type_v, n_gpu_layers=n_gpu_layers,
                            swa_full=swa_full,
                            n_outputs_max=batch)  # llama-completion reserves logits for every ubatch token
    settings = with_overrides(settings, override_tensor=override_tensor, cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe)
    source: contextlib.AbstractContextManager[Path]
    if gguf is not None:
        resolved, plan = gguf_model(gguf)
        source = contextlib.nullcontext(gguf)
    else:
        resolved = resolve_model(model or "", state.model_dirs())
        plan = build_plan(resolved.spec, quant)
        source = sm.synthetic_file(plan)
    result = run_check(resolved, plan.ftype.name, settings, hw, prompt_tokens=prompt_tokens, plan=plan)  # validates
    sm.check_prompt_fits(prompt_tokens, result.settings.ctx_per_stream(resolved.spec))
    exe = sm.find_llama_bin(llama_bin)
    est = check_json(result)
    with source as path:
        args = sm.llama_args(exe, Path(path), result.verdict.estimate.n_ctx, result.settings,
                             result.verdict.n_gpu_layers, prompt_tokens, n_predict, threads, not hw.gpus)
        measured = sm.run_llama(args, timeout)
    mem = sm.measured_memory(measured, len(hw.gpus))
    doc = {"schema": "gemma-fit.smoke/1", "model": est["model"], "settings": est["settings"],
           "estimate": est["memory"],
           "measured": {**mem, "decode_tokens_per_s": measured.decode_tokens_per_s,
                        "prefill_tokens_per_s": measured.prefill_tokens_per_s},
           "estimated_speed": est["performance"], "error_pct": sm.error_pct(est["memory"], mem),
           "llama_cpp_command": sm.shown_command(args, prompt_tokens), "llama_cpp_bin": str(exe.parent)}
    if record:
        _record_smoke(doc)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        from gemma_fit.present.terminal import console, render_smoke

        render_smoke(console(), doc)


def _record_smoke(doc: dict[str, object]) -> None:
    """Append to the repo's calibration store (GEMMA_FIT_SMOKE_RECORDS overrides the file)."""
    default = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "smoke_records.jsonl"
    path = Path(os.environ.get("GEMMA_FIT_SMOKE_RECORDS") or default)
    if not path.parent.is_dir():
        raise BadInput(f"--record needs a source checkout (no {path.parent})")
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(doc, sort_keys=True) + "\n")
