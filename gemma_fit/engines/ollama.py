"""Ollama: llama.cpp's memory under Ollama's defaults and reserves.

Ollama runs GGUF models on the ggml/llama.cpp backend, so weights, KV cache and compute buffer are
llama.cpp's (gemma_fit.check.run_check). What Ollama changes, with the source read:
- Context: OLLAMA_CONTEXT_LENGTH, default 0 = by VRAM: < 24 GiB -> 4096, 24-48 GiB -> 32768,
  >= 48 GiB -> 262144 (ollama/ollama docs/context-length.mdx at commit 948f693), never above the
  model's trained context.
- OLLAMA_NUM_PARALLEL default 1 (a transcription of envconfig/config.go v0.33.3 reads
  Uint("OLLAMA_NUM_PARALLEL", 1); at 4bf0d41 it was 0 = auto); the runner gets num_ctx x num_parallel
  cells (server/sched.go, not re-read), i.e. num_ctx per sequence.
- OLLAMA_KV_CACHE_TYPE default f16 (envconfig/config.go at 4bf0d41: "Quantization type for the K/V
  cache (default: f16)"); a quantized cache needs flash attention, else Ollama falls back to f16
  (llm/server.go).
- OLLAMA_FLASH_ATTENTION: envconfig Bool, default false at 4bf0d41 (newer releases enable it per model
  when the backend supports it; set it explicitly).
- num_batch default 512 (api/types.go DefaultOptions), which llama.cpp uses for n_batch and n_ubatch.
- Per-GPU reserve: the GPU's MinimumMemory (discover/gpu.go CudaMinimumMemory = 457 MiB, ROCm 256 MiB)
  plus OLLAMA_GPU_OVERHEAD (envconfig/config.go, default 0) are kept free when Ollama decides how many
  layers fit; layers that do not fit go to the CPU (Ollama offloads automatically, like -ngl auto).
Unverified in this session (from memory of those files): the api/types.go, llm/server.go and
discover/gpu.go values above.
Not modelled: the legacy llm/memory.go graph heuristic (graphPartialOffload / graphFullOffload) that
older Ollama releases used instead of reserving the real graph; here the graph is llama.cpp's compute
buffer, which the new engine measures by reserving the worst-case graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..check import run_check
from ..errors import BadInput
from ..estimate import Device
from ..ggml import file_types
from ..model_db import ResolvedModel
from ..model_spec import ModelSpec
from ..settings import RunSettings
from . import GIB, MIB, EngineDevice, EngineResult, EngineSettings, tower_params, vision_activation_bytes

VERSION = "Ollama (envconfig/config.go at 4bf0d41, docs/context-length.mdx at 948f693)"
MINIMUM_MEMORY = {"cuda": 457 * MIB, "rocm": 256 * MIB}
NUM_BATCH = 512
KV_TYPES = ("f16", "q8_0", "q4_0")


def default_context(total_vram: int, n_ctx_train: int) -> int:
    if total_vram >= 48 * GIB:
        ctx = 262144
    elif total_vram >= 24 * GIB:
        ctx = 32768
    else:
        ctx = 4096
    return min(ctx, n_ctx_train)


@dataclass(frozen=True)
class _ReservedHardware:
    """The machine as Ollama's scheduler sees it: each GPU less its reserve."""

    label: str
    gpus: tuple
    host_capacity_bytes: int | None
    machine: Any
    devices: tuple[Device, ...]
    notes: tuple[str, ...] = ()


def _reserve(backend: str, gpu_overhead: int) -> int:
    return MINIMUM_MEMORY.get(backend, 0) + gpu_overhead


def _command(resolved: ResolvedModel, quant: str, num_ctx: int, parallel: int, fa: bool, kv: str) -> str:
    env = [f"OLLAMA_CONTEXT_LENGTH={num_ctx}", f"OLLAMA_NUM_PARALLEL={parallel}",
           f"OLLAMA_FLASH_ATTENTION={1 if fa else 0}"]
    if kv != "f16":
        env.append(f"OLLAMA_KV_CACHE_TYPE={kv}")
    entry = resolved.entry
    size = (entry.size_label.lower() if entry else "").replace("-", "")
    gen = entry.generation if entry else ""
    tag = f"gemma{gen}:{size}" if gen not in ("1", "") else f"gemma:{size}"
    return (f"{' '.join(env)} ollama serve   # then: ollama run {tag}  (quant {quant}; "
            f"per request: /set parameter num_ctx {num_ctx})")


def estimate_ollama(resolved: ResolvedModel, spec: ModelSpec, settings: EngineSettings, hardware: Any) -> EngineResult:
    s = settings
    quant = s.quant.strip().upper()
    if quant not in file_types():
        raise BadInput(f"--quant {s.quant} is not a GGUF file type Ollama loads (e.g. Q4_K_M, Q8_0, BF16); "
                       "AWQ/GPTQ/FP8/NVFP4/bnb checkpoints need --engine vllm or --engine transformers")
    if s.tensor_parallel_size != 1:
        raise BadInput("--tensor-parallel-size is not an Ollama option (it splits layers across GPUs itself)")
    kv = "f16" if s.kv_cache_dtype in ("auto", "") else s.kv_cache_dtype.lower()
    if kv not in KV_TYPES:
        raise BadInput(f"--kv-cache-dtype {s.kv_cache_dtype}: OLLAMA_KV_CACHE_TYPE takes {', '.join(KV_TYPES)}")
    fa = bool(s.flash_attention)  # envconfig default false
    reasons: list[str] = []
    if kv != "f16" and not fa:
        reasons.append(f"OLLAMA_KV_CACHE_TYPE={kv} needs OLLAMA_FLASH_ATTENTION=1; Ollama falls back to f16")
        kv = "f16"
    devices = tuple(hardware.devices)
    total_vram = sum(d.capacity_bytes for d in devices)
    num_ctx = s.max_model_len or default_context(total_vram, spec.n_ctx_train)
    parallel = s.max_num_seqs or 1
    run = RunSettings(n_ctx=num_ctx * parallel, n_batch=NUM_BATCH, n_ubatch=NUM_BATCH, n_parallel=parallel,
                      flash_attn="on" if fa else "off", cache_type_k=kv, cache_type_v=kv, n_outputs_max=parallel)
    reserved = tuple(
        Device(d.id, d.name, d.backend, d.capacity_bytes - _reserve(d.backend, s.gpu_overhead_bytes)) for d in devices)
    shim = _ReservedHardware(getattr(hardware, "label", ""), tuple(getattr(hardware, "gpus", ())),
                             getattr(hardware, "host_capacity_bytes", None), getattr(hardware, "machine", None),
                             reserved)
    r = run_check(resolved, quant, run, shim, with_speed=False)
    est = r.verdict.estimate
    towers = tower_params(resolved) if (s.mmproj or s.images_per_prompt) else 0
    vis_act = vision_activation_bytes(resolved, s.images_per_prompt)
    out = []
    for i, (d, dm) in enumerate(zip(devices, est.devices, strict=True)):
        out.append(EngineDevice(
            d.id, d.name, dm.weights_bytes + (2 * towers if i == 0 else 0), dm.kv_cache_bytes,
            dm.compute_bytes + (vis_act if i == 0 else 0), 0,
            dm.overhead_bytes + _reserve(d.backend, s.gpu_overhead_bytes), d.capacity_bytes))
    out_devices = tuple(out)
    verdict = r.verdict.verdict
    if verdict in ("go", "tight") and any(d.headroom_bytes < 0 for d in out_devices):
        verdict = "offload"  # the projector did not fit next to all layers
    reasons = list(r.verdict.reasons) + reasons
    reasons.append(f"Ollama defaults: num_ctx {num_ctx} ({'set' if s.max_model_len else 'by VRAM'}), "
                   f"OLLAMA_NUM_PARALLEL {parallel}, flash attention {'on' if fa else 'off'}, KV cache {kv}, "
                   f"num_batch {NUM_BATCH}; {MINIMUM_MEMORY.get(devices[0].backend, 0) // MIB if devices else 0} MiB "
                   "per GPU kept free")
    host = {"weights_bytes": est.host.weights_bytes, "kv_cache_bytes": est.host.kv_cache_bytes,
            "compute_bytes": est.host.compute_bytes, "total_bytes": est.host.total_bytes,
            "capacity_bytes": est.host.capacity_bytes}
    extras = {
        "ollama_version": VERSION,
        "num_ctx": num_ctx,
        "OLLAMA_CONTEXT_LENGTH": num_ctx,
        "OLLAMA_NUM_PARALLEL": parallel,
        "OLLAMA_FLASH_ATTENTION": fa,
        "OLLAMA_KV_CACHE_TYPE": kv,
        "OLLAMA_GPU_OVERHEAD": s.gpu_overhead_bytes,
        "num_batch": NUM_BATCH,
        "n_gpu_layers": r.verdict.n_gpu_layers,
        "n_layers_total": spec.n_layer + 1,
        "llama_cpp_total_bytes": [dm.total_bytes for dm in est.devices],
        "reserve_bytes": [_reserve(d.backend, s.gpu_overhead_bytes) for d in devices],
        "tower_params": towers,
        "offloads_layers": True,
        "file_size_bytes": r.file_size_bytes,
    }
    return EngineResult(
        engine="ollama", resolved=resolved, quant=r.plan.ftype.name, settings=s, devices=out_devices,
        verdict=verdict, reasons=tuple(reasons),
        command=_command(resolved, r.plan.ftype.name, num_ctx, parallel, fa, kv),
        n_params=r.plan.n_params + towers, weights_total_bytes=r.file_size_bytes,
        max_ctx_fit=r.verdict.max_ctx_fit // parallel,
        n_ctx=num_ctx, hardware_label=getattr(hardware, "label", ""), host=host, extras=extras,
        sources=(VERSION, "llama.cpp 0c1e570 (gemma_fit.check) for weights, KV cache and compute buffer"),
    )
