"""`gemma-fit serve-plan`: does this hardware (one machine, or a cluster file) hold this traffic, and how."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from gemma_fit.base.errors import EXIT_NO_GO, EXIT_OFFLOAD, EXIT_OK, BadInput
from gemma_fit.cli import state
from gemma_fit.cli.options import (
    PARALLEL,
    PROMPT_TOKENS,
    EngineOpt,
    GpuOpt,
    HardwareOpt,
    JsonOpt,
    OutputOpt,
    ParallelOpt,
    PromptOpt,
    RateOpt,
)

SCHEMA = "gemma-fit.serve-plan/1"
_EXIT = {"go": EXIT_OK, "tight": EXIT_OK, "offload": EXIT_OFFLOAD, "no-go": EXIT_NO_GO}


def serve_plan_command(
    model: Annotated[str, typer.Option("--model", "-m", help="Model id or alias.")],
    quant: Annotated[str | None, typer.Option("--quant", "-q", help="File type, or the vLLM weight format.")] = None,
    gpu: GpuOpt = None,
    hardware: HardwareOpt = None,
    engine: EngineOpt = "llama.cpp",
    ctx: Annotated[int | None, typer.Option("--ctx", "-c", help="Context: llama.cpp -c (all slots), vLLM "
                                            "--max-model-len.")] = None,
    parallel: ParallelOpt = PARALLEL,
    prompt_tokens: PromptOpt = PROMPT_TOKENS,
    output_tokens: OutputOpt = 256,
    rate: RateOpt = None,
    tensor_parallel_size: Annotated[int | None, typer.Option("--tensor-parallel-size", help="vLLM on a cluster: "
                                                             "GPUs per stage (default: per node).")] = None,
    pipeline_parallel_size: Annotated[int | None, typer.Option("--pipeline-parallel-size", help="vLLM on a "
                                                               "cluster: stages (default: nodes).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """N concurrent requests of P prompt and G output tokens (and a request rate): aggregate and per-user
    tokens/s, TTFT, the KV-limited concurrency, replicas; on a cluster file, llama.cpp RPC or vLLM on Ray."""
    from gemma_fit.hardware.cluster import load_cluster
    from gemma_fit.jobs.serve_plan import plan_document

    cluster = load_cluster(hardware, state.hardware_dirs()) if hardware is not None else None
    if cluster is None and (tensor_parallel_size or pipeline_parallel_size) and engine != "vllm":
        raise BadInput("--tensor-parallel-size / --pipeline-parallel-size are vLLM's")
    doc = plan_document(model=model, quant=quant, gpus=gpu or [], hardware=hardware, cluster=cluster,
                        engine=engine, ctx=ctx, parallel=parallel, prompt_tokens=prompt_tokens,
                        output_tokens=output_tokens, rate=rate, tp=tensor_parallel_size, pp=pipeline_parallel_size,
                        model_dirs=state.model_dirs(), hardware_dirs=state.hardware_dirs())
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        _render(doc)
    raise typer.Exit(_EXIT.get(doc["verdict"], EXIT_NO_GO))


def _render(doc: dict[str, Any]) -> None:
    from rich.console import Console

    from gemma_fit.base.units import fmt_bytes

    out = Console(highlight=False, soft_wrap=True)
    out.print(f"[bold]{doc['verdict'].upper()}[/bold] {doc['model']} {doc['quant']} with {doc['engine']} on "
              f"{doc['hardware']}")
    for d in doc["devices"]:
        where = f"{d['node']} ({d['host']}) " if d.get("node") else ""
        out.print(f"  {where}{d['name']}: {fmt_bytes(d['total_bytes'])} of {fmt_bytes(d['capacity_bytes'])} "
                  f"(weights {fmt_bytes(d['weights_bytes'])}, KV {fmt_bytes(d['kv_cache_bytes'])})")
    net = doc.get("network")
    if net:
        out.print(f"  network: {net['bandwidth_gbit']:g} Gbit/s, {net['latency_us']:g} us one way; "
                  f"{net['boundaries_crossing_network']} boundaries per token, "
                  f"{net['seconds_per_token'] * 1e3:.2f} ms per token")
    perf = doc.get("performance")
    if perf:
        from gemma_fit.present.terminal import render_speed

        render_speed(out, perf)
        traffic = (perf.get("serving") or {}).get("traffic")
        if traffic and not traffic["holds"]:
            more = doc.get("more_parallel")
            if more:
                out.print(f"  or on this hardware with --parallel {more['parallel']} ({more['verdict']}, time to first "
                          f"token p95 {more['ttft_p95_s']:.2f} s, {more['per_user_tokens_per_s']:.1f} tok/s per "
                          f"user): [bold]{more['commands'][0]}[/bold]")
            out.print(f"  to hold it: {traffic['replicas']} servers like this one, {traffic['gpus_needed']} GPUs")
    for reason in doc["reasons"]:
        out.print(f"  - {reason}")
    for i, command in enumerate(doc["commands"], 1):
        out.print(f"  {i}. [bold]{command}[/bold]")



