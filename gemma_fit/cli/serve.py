"""`gemma-fit serve-plan`: does this hardware (one machine, or a cluster file) hold this traffic, and how."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gemma_fit import api
from gemma_fit.cli import state
from gemma_fit.cli.options import (
    AcceptanceOpt,
    DraftMaxOpt,
    DraftOpt,
    EngineOpt,
    GpuOpt,
    JsonOpt,
    MtpOpt,
    OutputOpt,
    ParallelOpt,
    PromptOpt,
    RateOpt,
    tokens,
)
from gemma_fit.cli.values import (
    PARALLEL,
    PROMPT_TOKENS,
    speculative_ask,
)


def serve_plan_command(
    model: Annotated[str, typer.Option("--model", "-m", help="Model id or alias.")],
    quant: Annotated[str | None, typer.Option(
        "--quant", "-q", help="File type (gemma-fit list quants), or the vLLM weight format. \\[default: Q4_K_M; "
                              "vLLM: bf16]")] = None,
    gpu: GpuOpt = None,
    hardware: Annotated[Path | None, typer.Option(
        "--hardware", help="A machine file, or a cluster file (nodes, their GPUs, the network).")] = None,
    engine: EngineOpt = "llama.cpp",
    ctx: Annotated[int | None, typer.Option("--ctx", "-c", parser=tokens, metavar="N[k]", help="Context in tokens "
                                            "(k = x1024): llama.cpp -c (all slots), vLLM --max-model-len. "
                                            "\\[default: llama.cpp: enough for every request; vLLM and "
                                            "Ollama: the model's trained context]")] = None,
    parallel: ParallelOpt = PARALLEL,
    prompt_tokens: PromptOpt = PROMPT_TOKENS,
    output_tokens: OutputOpt = 256,
    rate: RateOpt = None,
    tensor_parallel_size: Annotated[int | None, typer.Option("--tensor-parallel-size", help="vLLM on a cluster: "
                                                             "GPUs per stage. \\[default: per node]")] = None,
    pipeline_parallel_size: Annotated[int | None, typer.Option("--pipeline-parallel-size", help="vLLM on a "
                                                               "cluster: stages. \\[default: the nodes]")] = None,
    as_json: JsonOpt = False,
    mtp: MtpOpt = False,
    draft: DraftOpt = None,
    draft_max: DraftMaxOpt = None,
    acceptance: AcceptanceOpt = None,
) -> None:
    """N concurrent requests of P prompt and G output tokens (and a request rate): aggregate and per-user
    tokens/s, TTFT, the KV-limited concurrency, replicas; on a cluster file, llama.cpp RPC or vLLM on Ray."""
    doc = api.serve_plan(model, quant=quant, gpus=gpu or [], hardware=hardware, engine=engine, ctx=ctx,
                         parallel=parallel, prompt_tokens=prompt_tokens, output_tokens=output_tokens, rate=rate,
                         tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size,
                         speculative=speculative_ask(mtp, draft, draft_max, acceptance), catalog=state.catalog())
    if as_json:
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        from gemma_fit.present.serve_view import render_serve_plan
        from gemma_fit.present.terminal import console

        render_serve_plan(console(), doc)
    raise typer.Exit(api.Verdict(doc["verdict"]).exit_code)
