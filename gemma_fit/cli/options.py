"""The command-line options, each declared once with a one-line help that gives its meaning and default; what
their values become (the API's RunSettings, MachineFlags, Workload; the defaults the signatures spell) is
cli.values, which the quick `check` path reads without typer.

Typer reads a command's options from its signature, so every command lists the ones it takes; their spelling,
short flags and help are defined here only. Token counts take k/K (x 1024): --ctx 32k is 32768.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from gemma_fit.cli.values import token_count, volume_count

LLAMA = "llama.cpp options"  # help panels: what a reader looks for together
MACHINE = "The machine (instead of probing or assuming it)"
SERVING = "Many requests (serving)"
ENGINES = "Other engines (--engine vllm, ollama, transformers)"
OUTPUT = "Output"

def _option_parser(parse: Callable[[str], int], doc: str) -> Callable[[str], int]:
    """`parse` as typer's parser: its ValueError is typer's usage error (one line, exit 2)."""
    def parser(value: str) -> int:
        try:
            return parse(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

    parser.__doc__ = doc
    return parser


tokens = _option_parser(token_count, "A token count as typed (cli.values.token_count: k = x1024).")
volume = _option_parser(volume_count, "A daily token volume as typed (cli.values.volume_count: k = x1000, "
                                      "M = x1,000,000).")


def _tokens_opt(*names: str, help: str, panel: str | None = None) -> typer.models.OptionInfo:
    return typer.Option(*names, parser=tokens, metavar="N[k]", help=help, rich_help_panel=panel)


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Model id (gemma-3-12b), alias (12b, e4b), Ollama tag "
                                                             "(gemma3:12b) or config.json path.")]
QuantOpt = Annotated[str, typer.Option("--quant", "-q", help="llama.cpp file type, e.g. Q4_K_M, Q8_0, "
                                                             "UD-Q4_K_XL (gemma-fit list quants).")]
GpuOpt = Annotated[list[str] | None, typer.Option(
    "--gpu", "-g", help="GPU id or name (repeat for several GPUs), 'local' for this machine's, 'cpu' for none "
                        "(gemma-fit list gpus).")]
HardwareOpt = Annotated[Path | None, typer.Option(
    "--hardware", help="A machine file (YAML): GPUs, how they are attached, RAM, CPU, disk.")]
CtxOpt = Annotated[int, _tokens_opt("--ctx", "-c", help="Context in tokens (k = x1024); 0 = the model's trained "
                                    "context.", panel=LLAMA)]
EngineCtxOpt = Annotated[int | None, _tokens_opt(
    "--ctx", "-c", help="Context in tokens (k = x1024); 0 = the model's trained context. \\[default: with no "
                        "--parallel either, the engine's own (llama-server: the trained context fitted to memory); "
                        "else 4096 for llama.cpp]", panel=LLAMA)]
UbatchOpt = Annotated[int, _tokens_opt("--ubatch", "-ub", help="Physical batch (n_ubatch): tokens per compute "
                                       "step; sizes the compute buffer.", panel=LLAMA)]
BatchOpt = Annotated[int, _tokens_opt("--batch", "-b", help="Logical batch (n_batch): prompt tokens per "
                                      "decode call.", panel=LLAMA)]
ParallelOpt = Annotated[int, typer.Option("--parallel", "-np", help="Requests served at once (llama-server "
                                          "slots, vLLM --max-num-seqs).", rich_help_panel=LLAMA)]
EngineParallelOpt = Annotated[int | None, typer.Option(
    "--parallel", "-np", help="Requests served at once (llama-server slots, vLLM --max-num-seqs). \\[default: 1; "
                              "with no --ctx either, the engine's own: llama-server's 4 slots sharing one KV cache]",
    rich_help_panel=LLAMA)]
EngineVersionOpt = Annotated[str | None, typer.Option(
    "--engine-version", help="The engine version to answer for: its defaults (llama.cpp: a build number as "
                             "llama-server --version prints it, b6890). \\[default: the version gemma-fit's rules are "
                             "read from]", rich_help_panel=ENGINES)]
FlashOpt = Annotated[str, typer.Option("--flash-attn", "-fa", help="Flash attention: auto, on or off.",
                                       rich_help_panel=LLAMA)]
CtkOpt = Annotated[str, typer.Option("--cache-type-k", "-ctk", help="K cache type: f16, q8_0, q4_0 ... "
                                     "(q8_0 halves the cache).", rich_help_panel=LLAMA)]
CtvOpt = Annotated[str, typer.Option("--cache-type-v", "-ctv", help="V cache type: f16, q8_0, q4_0 ... "
                                     "(quantized needs flash attention).", rich_help_panel=LLAMA)]
NglOpt = Annotated[str, typer.Option("--n-gpu-layers", "-ngl", help="Layers on the GPU(s): a number, or auto "
                                     "(as many as fit with the margin).", rich_help_panel=LLAMA)]
SwaOpt = Annotated[bool, typer.Option("--swa-full", help="Sliding-window layers keep the full context "
                                      "(llama.cpp --swa-full).", rich_help_panel=LLAMA)]
UnifiedOpt = Annotated[bool, typer.Option("--kv-unified", help="One KV pool shared by all slots "
                                          "(llama.cpp -kvu).", rich_help_panel=LLAMA)]
PromptOpt = Annotated[int, _tokens_opt("--prompt-tokens", help="Prompt length in tokens, for prefill and time to "
                                       "first token.", panel=SERVING)]
OutputOpt = Annotated[int | None, _tokens_opt("--output-tokens", help="Output tokens per request: the aggregate "
                                              "then includes each request's prefill.", panel=SERVING)]
RateOpt = Annotated[float | None, typer.Option("--rate", help="Requests per second (Poisson): does it hold, time "
                                               "to first token p50/p95, servers needed.", rich_help_panel=SERVING)]
MmprojOpt = Annotated[Path | None, typer.Option("--mmproj", help="A multimodal projector GGUF loaded beside the "
                                                "model (its memory counts on the main GPU).")]
NCpuMoeOpt = Annotated[int, typer.Option("--n-cpu-moe", "-ncmoe", help="MoE: routed experts of the first N layers "
                                         "in system memory.", rich_help_panel=LLAMA)]
CpuMoeOpt = Annotated[bool, typer.Option("--cpu-moe", "-cmoe", help="MoE: every layer's routed experts in system "
                                         "memory.", rich_help_panel=LLAMA)]
OverrideOpt = Annotated[list[str] | None, typer.Option(
    "--override-tensor", "-ot", help="PATTERN=BUFFER[,...]: weights whose name matches go to that buffer (CPU, "
                                     "CUDA0 ...), as llama.cpp's -ot.", rich_help_panel=LLAMA)]
MarginOpt = Annotated[float | None, typer.Option(
    "--margin", help="GiB kept free on each GPU. \\[default: 1, llama.cpp's fit target]")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of the tables.",
                                       rich_help_panel=OUTPUT)]
HtmlOpt = Annotated[Path | None, typer.Option("--html", help="Also write a self-contained HTML report to this "
                                              "file.", rich_help_panel=OUTPUT)]
EngineOpt = Annotated[str, typer.Option("--engine", help="The engine to plan for: llama.cpp, ollama, vllm or "
                                        "transformers.")]
BackendOpt = Annotated[str | None, typer.Option(
    "--backend", help="llama.cpp built for another backend than the GPU's own: vulkan, sycl, rocm, cuda.")]

# The machine, said without a file (check, report, recommend): each replaces what would be probed or assumed.
RamOpt = Annotated[float | None, typer.Option("--ram", help="System memory in GiB (instead of the machine file's "
                                              "or this machine's).", rich_help_panel=MACHINE)]
RamTypeOpt = Annotated[str | None, typer.Option("--ram-type", help="Memory type and speed, e.g. ddr5-6000, "
                                                "lpddr5x-8000 (sets the bandwidth). \\[default: the machine's; else "
                                                "DDR5-5600 x 2, said so]", rich_help_panel=MACHINE)]
RamChannelsOpt = Annotated[int | None, typer.Option("--ram-channels", help="Memory channels of --ram-type (given "
                                                    "with it). \\[default: 2]", rich_help_panel=MACHINE)]
CpuOpt = Annotated[str | None, typer.Option("--cpu", help="The CPU by name or id, e.g. \"Ryzen 9 7950X\" "
                                            "(gemma-fit list cpus).", rich_help_panel=MACHINE)]
CoresOpt = Annotated[int | None, typer.Option("--cores", help="CPU cores (llama.cpp's default thread count).",
                                              rich_help_panel=MACHINE)]
ThreadsOpt = Annotated[int | None, typer.Option(
    "--threads", "-t", help="CPU threads llama.cpp uses (-t). \\[default: llama.cpp's own, the CPU's cores]",
    rich_help_panel=MACHINE)]
SocketsOpt = Annotated[int | None, typer.Option(
    "--sockets", help="CPU sockets; --cpu, --cores and --ram-channels are one socket's. \\[default: 1]",
    rich_help_panel=MACHINE)]
NumaOpt = Annotated[str | None, typer.Option(
    "--numa", help="llama.cpp's --numa: distribute (every socket's memory), isolate or numactl (one socket's). "
    "\\[default: none]", rich_help_panel=MACHINE)]
PowerModeOpt = Annotated[str | None, typer.Option(
    "--power-mode", help="A Jetson's nvpmodel mode (MAXN, MODE_30W, 25W ...; nvpmodel -q prints yours). \\[default: "
    "the database's clocks, which the answer names]", rich_help_panel=MACHINE)]
VulkanDriverOpt = Annotated[str | None, typer.Option(
    "--vulkan-driver", help="An AMD GPU's Vulkan driver: radv (Mesa's) or amdvlk (AMD's, discontinued; slower at "
    "prompts; vulkaninfo's driverName says which). \\[default: radv]", rich_help_panel=MACHINE)]
DiskOpt = Annotated[str | None, typer.Option("--disk", help="The model's drive: nvme-gen5, nvme-gen4, nvme-gen3, "
                                             "sata-ssd, hdd ... (load time). \\[default: the machine's; else "
                                             "nvme-gen4]", rich_help_panel=MACHINE)]
ReserveOpt = Annotated[float | None, typer.Option("--reserve", help="GiB kept free on each GPU for a display or "
                                                  "other programs. \\[default: 0]", rich_help_panel=MACHINE)]


# Speculative decoding (check, report, recommend, serve-plan): llama.cpp's -md / --spec-type / --spec-draft-n-max.
SPECULATIVE = "Speculative decoding"
MtpOpt = Annotated[bool, typer.Option("--mtp", help="Draft with the model's own Gemma 4 assistant drafter (MTP, "
                                      "llama.cpp's draft-mtp).", rich_help_panel=SPECULATIVE)]
DraftOpt = Annotated[str | None, typer.Option("--draft", metavar="MODEL[:QUANT]", help="Draft with a smaller model of "
                                              "the same family, e.g. gemma-3-270m:Q8_0 (llama.cpp's draft-simple).",
                                              rich_help_panel=SPECULATIVE)]
DraftMaxOpt = Annotated[int | None, typer.Option("--draft-max", help="Tokens drafted per step (llama.cpp's "
                                                 "spec-draft-n-max). \\[default: 3, llama.cpp's]",
                                                 rich_help_panel=SPECULATIVE)]
AcceptanceOpt = Annotated[float | None, typer.Option("--acceptance", help="Share of drafted tokens the target "
                                                     "keeps, 0-1. \\[default: the published figure for the pair]",
                                                     rich_help_panel=SPECULATIVE)]


# Running llama.cpp here (smoke, bench): the threads and the binaries it runs.
THIS_MACHINE_THREADS = max(1, min(512, os.cpu_count() or 2))
RunThreadsOpt = Annotated[int, typer.Option("--threads", "-t", help="CPU threads, 1 to 512. \\[default: this machine's "
                                            "cores]", show_default=False)]
LlamaBinOpt = Annotated[Path | None, typer.Option(
    "--llama-bin", help="Folder with llama.cpp binaries. \\[default: the build of scripts/build_llamacpp.py in "
                        "$GEMMA_FIT_CACHE or ~/.cache/gemma-fit, else PATH]")]
