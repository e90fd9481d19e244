"""`check`'s work and any check answer's printing, without typer: the `check` command (cli.app) and its quick path
(cli.quick, which runs before typer loads) both end here, so the two give one answer and one exit status."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemma_fit import api
from gemma_fit.base.files import write_text
from gemma_fit.cli import state
from gemma_fit.cli.values import PARALLEL, machine_flags, run_settings, speculative_ask, workload

if TYPE_CHECKING:
    from rich.console import Console


def console() -> Console:
    from gemma_fit.present.terminal import console as make  # rich only when something is drawn: --json never loads it

    return make()


def answer(result: api.CheckResult[Any], as_json: bool, html: Path | None, extra: dict[str, Any] | None = None,
           ) -> int:
    """Print a check's answer (the terminal view, or --json), write --html; the verdict's exit status."""
    doc = {**api.to_json(result), **(extra or {})}
    if doc.get("speed_error"):
        from gemma_fit.base.text import printable

        print(f"gemma-fit: speed not predicted: {printable(doc['speed_error'], 2000)}", file=sys.stderr)
    if html is not None:
        write_text(html, api.check_page(result, state.catalog(), extra))
    if as_json:
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        from gemma_fit.present.terminal import render_answer

        render_answer(console(), doc)
    return result.verdict.exit_code


def run_check(*, model: str | None, gpu: list[str] | None, quant: str | None, gguf: Path | None, ctx: int | None,
              ubatch: int, batch: int, parallel: int | None, flash_attn: str, cache_type_k: str, cache_type_v: str,
              n_gpu_layers: str, swa_full: bool, kv_unified: bool, n_cpu_moe: int, cpu_moe: bool,
              override_tensor: list[str] | None, margin: float | None, hardware: Path | None, mmproj: Path | None,
              images: int | None, prompt_tokens: int, output_tokens: int | None, rate: float | None, as_json: bool,
              html: Path | None, engine: str, engine_version: str | None, gpu_memory_utilization: float | None,
              max_num_batched_tokens: int | None, tensor_parallel_size: int | None, enforce_eager: bool,
              kv_cache_dtype: str | None, batch_size: int | None, max_new_tokens: int | None,
              cache_implementation: str | None, backend: str | None, ram: float | None, ram_type: str | None,
              ram_channels: int | None, cpu: str | None, cores: int | None, threads: int | None,
              sockets: int | None, numa: str | None, power_mode: str | None, vulkan_driver: str | None,
              disk: str | None, reserve: float | None, mtp: bool, draft: str | None, draft_max: int | None,
              acceptance: float | None) -> int:
    """`gemma-fit check` with its options' values (cli.app.check's parameters, by name); the exit status."""
    settings = run_settings(ctx=ctx if ctx is not None else 0, batch=batch, ubatch=ubatch,
                            parallel=parallel if parallel is not None else PARALLEL,
                            kv_unified=kv_unified, flash_attn=flash_attn, cache_type_k=cache_type_k,
                            cache_type_v=cache_type_v, n_gpu_layers=n_gpu_layers, swa_full=swa_full,
                            override_tensor=override_tensor, cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe)
    settings = replace(settings, speculative=speculative_ask(mtp, draft, draft_max, acceptance))
    options = {"gpu_memory_utilization": gpu_memory_utilization, "max_num_batched_tokens": max_num_batched_tokens,
               "tensor_parallel_size": tensor_parallel_size, "enforce_eager": enforce_eager or None,
               "kv_cache_dtype": kv_cache_dtype, "batch_size": batch_size, "max_new_tokens": max_new_tokens,
               "cache_implementation": cache_implementation}
    result = api.check(model, hardware if hardware is not None else list(gpu or []), quant=quant, gguf=gguf,
                       settings=settings, engine=engine, default_ctx=ctx is None,
                       default_parallel=parallel is None, engine_version=engine_version,
                       workload=workload(prompt_tokens, output_tokens, rate, images, mmproj), backend=backend,
                       machine=machine_flags(ram=ram, ram_type=ram_type, ram_channels=ram_channels, cores=cores,
                                             threads=threads, sockets=sockets, numa=numa, disk=disk,
                                             reserve=reserve, cpu=cpu, power_mode=power_mode,
                                             vulkan_driver=vulkan_driver),
                       margin_gib=margin, options=options, catalog=state.catalog())
    return answer(result, as_json, html)
