"""The command-line options, each declared once, and the one place they become RunSettings.

Typer reads a command's options from its signature, so every command lists the ones it takes; their
spelling, short flags, help and llama.cpp defaults (RunSettings' own) are defined here only.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from gemma_fit.hardware.flags import MachineFlags
from gemma_fit.memory.settings import RunSettings, parse_flash_attn, parse_n_gpu_layers

DEFAULT = RunSettings()  # llama.cpp's defaults, as RunSettings holds them

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Model id, alias (9b, e4b) or config.json path.")]
QuantOpt = Annotated[str, typer.Option("--quant", "-q", help="llama.cpp file type, e.g. Q4_K_M.")]
GpuOpt = Annotated[list[str] | None, typer.Option("--gpu", "-g", help="GPU id (repeat for several), 'local' or 'cpu'.")]
HardwareOpt = Annotated[Path | None, typer.Option("--hardware", help="Machine file (YAML): GPUs, RAM, disk.")]
CtxOpt = Annotated[int, typer.Option("--ctx", "-c", help="Context size; 0 = the model's trained context.")]
EngineCtxOpt = Annotated[int | None, typer.Option(
    "--ctx", "-c", help="Context size; 0 = the model's trained context (default 4096 for llama.cpp; the engine's "
                        "own default for Ollama and vLLM).")]
UbatchOpt = Annotated[int, typer.Option("--ubatch", "-ub", help="Physical batch (n_ubatch).")]
BatchOpt = Annotated[int, typer.Option("--batch", "-b", help="Logical batch (n_batch).")]
ParallelOpt = Annotated[int, typer.Option("--parallel", "-np", help="Parallel sequences (slots).")]
FlashOpt = Annotated[str, typer.Option("--flash-attn", "-fa", help="auto, on or off.")]
CtkOpt = Annotated[str, typer.Option("--cache-type-k", "-ctk", help="K cache type (f16, q8_0, ...).")]
CtvOpt = Annotated[str, typer.Option("--cache-type-v", "-ctv", help="V cache type (f16, q8_0, ...).")]
NglOpt = Annotated[str, typer.Option("--n-gpu-layers", "-ngl", help="Number or 'auto'.")]
SwaOpt = Annotated[bool, typer.Option("--swa-full", help="Full-size sliding-window cache.")]
UnifiedOpt = Annotated[bool, typer.Option("--kv-unified", help="One KV pool shared by all sequences.")]
PromptOpt = Annotated[int, typer.Option("--prompt-tokens", help="Prompt length for speed and TTFT.")]
OutputOpt = Annotated[int | None, typer.Option("--output-tokens", help="Output tokens per request: the aggregate "
                                                 "then includes each request's prefill.")]
RateOpt = Annotated[float | None, typer.Option("--rate", help="Requests per second (Poisson): does the server hold "
                                               "it, TTFT p50/p95, replicas.")]
MmprojOpt = Annotated[Path | None, typer.Option("--mmproj", help="Multimodal projector GGUF loaded beside it.")]
NCpuMoeOpt = Annotated[int, typer.Option("--n-cpu-moe", "-ncmoe", help="Routed experts of the first N layers "
                                                                    "in system memory (llama.cpp's).")]
CpuMoeOpt = Annotated[bool, typer.Option("--cpu-moe", "-cmoe", help="Every layer's routed experts in system memory.")]
OverrideOpt = Annotated[list[str] | None, typer.Option(
    "--override-tensor", "-ot", help="PATTERN=BUFFER[,...]: weights whose name matches go to that buffer "
                                     "(CPU, CUDA0, ...), as llama.cpp's -ot.")]
MarginOpt = Annotated[float | None, typer.Option(
    "--margin", help="GiB kept free on each GPU by a plan with explicit -ngl (default: llama.cpp's fit target, 1).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")]
HtmlOpt = Annotated[Path | None, typer.Option("--html", help="Write a self-contained HTML report here.")]
EngineOpt = Annotated[str, typer.Option("--engine", help="llama.cpp, ollama, vllm or transformers.")]
BackendOpt = Annotated[str | None, typer.Option(
    "--backend", help="llama.cpp backend when not the GPU's own: vulkan (NVIDIA, AMD, Intel), sycl, rocm, cuda.")]

# The defaults, as the signatures spell them.
CTX, UBATCH, BATCH, PARALLEL = DEFAULT.n_ctx, DEFAULT.n_ubatch, DEFAULT.n_batch, DEFAULT.n_parallel
FLASH_ATTN, CACHE_TYPE_K, CACHE_TYPE_V = DEFAULT.flash_attn, DEFAULT.cache_type_k, DEFAULT.cache_type_v
N_GPU_LAYERS = "auto"
PROMPT_TOKENS = 512


def run_settings(*, ctx: int = CTX, batch: int = BATCH, ubatch: int = UBATCH, parallel: int = PARALLEL,
                 flash_attn: str = FLASH_ATTN, cache_type_k: str = CACHE_TYPE_K, cache_type_v: str = CACHE_TYPE_V,
                 n_gpu_layers: str = N_GPU_LAYERS, swa_full: bool = False, kv_unified: bool = False,
                 mmproj_bytes: int = 0, n_outputs_max: int = 0) -> RunSettings:
    """The llama.cpp options of any command, as RunSettings (-ngl and -fa parsed as llama.cpp parses them)."""
    return RunSettings(
        n_ctx=ctx, n_batch=batch, n_ubatch=ubatch, n_parallel=parallel, kv_unified=kv_unified,
        flash_attn=parse_flash_attn(flash_attn), cache_type_k=cache_type_k, cache_type_v=cache_type_v,
        n_gpu_layers=parse_n_gpu_layers(n_gpu_layers), swa_full=swa_full, mmproj_bytes=mmproj_bytes,
        n_outputs_max=n_outputs_max,
    )

# The machine, said without a file (check, report): each replaces what would be probed or assumed.
RamOpt = Annotated[float | None, typer.Option("--ram", help="System memory in GiB (instead of a machine file's "
                                                            "ram_gb, or this machine's RAM for --gpu cpu/local).")]
RamTypeOpt = Annotated[str | None, typer.Option("--ram-type", help="Memory type and speed, e.g. ddr5-6000, "
                                                                  "ddr4-3200, lpddr5x-8000 (sets the bandwidth).")]
RamChannelsOpt = Annotated[int | None, typer.Option("--ram-channels", help="Memory channels (default 2).")]
CpuOpt = Annotated[str | None, typer.Option("--cpu", help="The CPU by name or id (e.g. \"Ryzen 9 7950X\"; "
                                                          "gemma-fit list cpus): its cores, kernels and memory.")]
CoresOpt = Annotated[int | None, typer.Option("--cores", help="CPU cores (llama.cpp's default threads).")]
ThreadsOpt = Annotated[int | None, typer.Option("--threads", "-t", help="CPU threads llama.cpp uses (-t).")]
DiskOpt = Annotated[str | None, typer.Option("--disk", help="Storage class of the model's drive (nvme-gen4, "
                                                           "nvme-gen3, sata-ssd, hdd, ...).")]
ReserveOpt = Annotated[float | None, typer.Option("--reserve", help="GiB kept free on each GPU (a display, "
                                                                   "other processes).")]


def machine_flags(*, ram: float | None = None, ram_type: str | None = None, ram_channels: int | None = None,
                  cores: int | None = None, threads: int | None = None, disk: str | None = None,
                  reserve: float | None = None, cpu: str | None = None) -> MachineFlags:
    return MachineFlags(ram, ram_type, ram_channels, cores, threads, disk, reserve, cpu)


def with_overrides(s: RunSettings, *, override_tensor: list[str] | None = None, cpu_moe: bool = False,
                   n_cpu_moe: int = 0) -> RunSettings:
    """The placement flags (-ot, --cpu-moe, --n-cpu-moe) on top of the other llama.cpp options."""
    return replace(s, override_tensor=tuple(override_tensor or ()), cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe)
