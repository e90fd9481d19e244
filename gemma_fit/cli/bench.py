"""`gemma-fit bench`: llama.cpp's benchmarks on this machine beside the speed model, and its saved calibration."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from gemma_fit import api
from gemma_fit.base.text import printable
from gemma_fit.cli import state
from gemma_fit.cli.options import THIS_MACHINE_THREADS, GpuOpt, LlamaBinOpt, QuantOpt, RunThreadsOpt, tokens


def bench_command(
    gguf: Annotated[Path | None, typer.Option("--gguf", help="A real GGUF file to benchmark.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model of a --synthetic run or a --paste.")] = None,
    quant: QuantOpt = "Q4_K_M",
    synthetic: Annotated[bool, typer.Option("--synthetic", help="Benchmark a zero-weight file of the model's layout "
                                            "(written to a temporary folder, removed after).")] = False,
    paste: Annotated[Path | None, typer.Option(
        "--paste", help="Read the table llama-bench (or llama-batched-bench) printed, instead of running it.")] = None,
    gpu: GpuOpt = None,
    n_prompt: Annotated[int, typer.Option("--n-prompt", "-p", parser=tokens, metavar="N[k]",
                                          help="Prompt tokens of the prefill test (llama-bench -p).")] = 512,
    n_gen: Annotated[int, typer.Option("--n-gen", "-n", parser=tokens, metavar="N[k]",
                                       help="Generated tokens of the decode test (llama-bench -n).")] = 128,
    repetitions: Annotated[int, typer.Option("--repetitions", "-r", help="Runs of each test (llama-bench -r).")] = 3,
    parallel: Annotated[int, typer.Option("--parallel", "-np", help="Also llama-batched-bench at 1, 2, 4 ... N "
                                          "sequences at once (1: llama-bench only).")] = 1,
    threads: RunThreadsOpt = THIS_MACHINE_THREADS,
    llama_bin: LlamaBinOpt = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds before each benchmark is ended.")] = 600,
    save: Annotated[bool, typer.Option("--save", help="Keep the runs as this machine's calibration "
                                       "($GEMMA_FIT_CALIBRATION, else ~/.config/gemma-fit/calibration.json): later "
                                       "answers for this hardware use and name it.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Run llama-bench on this machine and set the speed model's prediction beside each test."""
    if paste is None and gguf is None and not synthetic:
        raise api.BadInput("give --gguf FILE, --model ID --synthetic, or --model ID --paste FILE")
    if synthetic and not model:
        raise api.BadInput("--synthetic needs --model")
    run = api.BenchRun(n_prompt, n_gen, repetitions, parallel, threads, timeout, llama_bin, paste)
    result = api.bench(model, quant, run, gguf=gguf, gpus=gpu or [], save=save, catalog=state.catalog())
    doc = api.to_json(result)
    if doc["calibration_file"]:
        print(f"saved as this machine's calibration in {printable(str(doc['calibration_file']), 300)}",
              file=sys.stderr)
    if as_json:
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        from gemma_fit.present.terminal import console, render_bench

        render_bench(console(), doc)
