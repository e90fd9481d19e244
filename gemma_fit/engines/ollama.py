"""Ollama: llama.cpp's memory under Ollama's defaults and reserves.

Ollama runs GGUF models on the ggml/llama.cpp backend, so weights, KV cache and compute buffer are
llama.cpp's (gemma_fit.engines.llamacpp.run_check). What Ollama changes, each rule read in github.com/ollama/ollama
at the commit named (the index holds one version per file, so the commits differ file by file):
- Context (server/routes.go @00188139 Serve, modelOptions): OLLAMA_CONTEXT_LENGTH unset (0) -> num_ctx
  by total VRAM = sum over GPUs of (TotalMemory - OLLAMA_GPU_OVERHEAD): >= 47 GiB -> 262144,
  >= 23 GiB -> 32768, else 4096. The code uses 47/23 GiB on purpose ("to account for small differences
  in the exact value"); docs/context-length.mdx @01562a7f states the tiers as 48/24 GiB.
  llm/server.go @5dbb81b7 NewLlamaServer caps num_ctx at the model's trained context.
- KV cells: llm/server.go @5dbb81b7: KvSize = num_ctx x numParallel (num_ctx per sequence), and
  BatchSize = min(num_batch, num_ctx).
- num_batch (server/sched.go @fb30760 automaticGenerationBatch, v0.30.0 and later, num_batch unset): 512 up to
  a 4,096-token context, 1,024 up to 32,768, else 2,048 (-b and -ub alike); 512 on CUDA with flash attention
  off (256 on a GPU of 8 GiB or less past 4,096 tokens). Its step-downs when predicted VRAM passes 80/75/60%
  of the GPU are not modelled.
- OLLAMA_NUM_PARALLEL default 1 since v0.10.0 (commit 20c3266e9, "Reduce default parallelism to 1";
  envconfig/config.go @fb30760 Uint("OLLAMA_NUM_PARALLEL", 1)).
- Flash attention (llm/llama_server.go @fb30760 LlamaServerFlashAttention, v0.30.0 and later: Ollama runs
  llama-server for every GGUF model): OLLAMA_FLASH_ATTENTION unset passes --flash-attn auto, so llama.cpp
  turns it on where the GPU supports it, for every Gemma; set, it passes on or off. (Before v0.30.0 the
  default was per model: gemma3 from v0.12.6, gemma4 from v0.20.4, never gemma2.)
- Context tiers from v0.30.0 (server/sched.go nextLowerAutoNumCtx): an automatic num_ctx that does not fit
  steps down 262,144 -> 32,768 -> 4,096.
- OLLAMA_KV_CACHE_TYPE default "" = f16; a set type goes to llama-server as --cache-type-k/-v (v0.30.0 and
  later), where a quantized V cache needs flash attention: with OLLAMA_FLASH_ATTENTION=0 it stays f16.
- Per-GPU reserve: ml/device.go @02725d3d DeviceInfo.MinimumMemory() = 457 MiB for every library but
  Metal (512 MiB); the layout keeps MinimumMemory + OLLAMA_GPU_OVERHEAD (default 0) + the graph free on
  each GPU (llm/server.go buildLayout), and layers that do not fit go to the CPU.
How Ollama sizes memory in that version (llm/server.go @5dbb81b7): the legacy llama runner (gemma,
gemma2) estimates with ggml.GraphSize heuristics (graphPartialOffload / graphFullOffload, plus one
layer + its KV as a buffer); the Ollama engine (gemma3 and later) asks the runner to fit/alloc and uses
the backend's reported weights, cache and graph sizes. Here the graph is llama.cpp's compute buffer for
both, i.e. the new-engine behaviour; the legacy heuristic is not modelled.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.units import GIB, MIB, fmt_bytes
from gemma_fit.base.verdict import Verdict
from gemma_fit.base.version import LLAMA_CPP_COMMIT
from gemma_fit.engines.base import (
    CheckRequest,
    CheckResult,
    EngineDevice,
    EnginePlan,
    EngineSettings,
    engine_options,
    engine_settings,
    validate_numbers,
)
from gemma_fit.engines.hf_weights import gguf_type_name, tower_params, vision_activation_bytes
from gemma_fit.engines.llamacpp import LlamaCppResult, run_check, speed_of
from gemma_fit.engines.speculative import (
    draft_command,
    ollama_draft,
    resolve_asked,
    with_drafter,
    with_speculation,
)
from gemma_fit.engines.versions import defaults_of, release_label
from gemma_fit.gguf.types import file_type
from gemma_fit.hardware.spec import GPUSpec, Hardware
from gemma_fit.memory.compute_buffer import flash_attention_on
from gemma_fit.memory.settings import RunSettings, validate
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.model.ollama_tags import ollama_run, quant_tag
from gemma_fit.model.spec import ModelSpec
from gemma_fit.speed.predict import SpeedInputError

NAME = "ollama"
VERSION = ("Ollama (ollama/ollama server/routes.go @00188139, llm/server.go @5dbb81b7, ml/device.go @02725d3d, "
           "fs/ggml/ggml.go @c664d9c1, api/types.go @b8761ab0)")
# ml/device.go @02725d3d DeviceInfo.MinimumMemory: 512 MiB on Metal, 457 MiB on every other library
# (the older discover/gpu.go had a separate 256 MiB ROCm value; not in this version).
METAL_MINIMUM_MEMORY = 512 * MIB
MINIMUM_MEMORY = 457 * MIB
VERSION_NAME = "Ollama 0.33.0"  # v0.33.0-rc2 @fb30760 for the v0.30+ rules; the memory reserve files as above
KV_TYPES = ("f16", "q8_0", "q4_0")
AUTO_CTX_TIERS = (262144, 32768, 4096)  # server/routes.go @00188139 (by VRAM); sched.go steps down these


@record
class OllamaOptions:
    """Ollama's own settings (environment variables of `ollama serve`) beyond llama.cpp's."""

    gpu_overhead_bytes: int = 0  # OLLAMA_GPU_OVERHEAD
    kv_cache_dtype: str | None = None  # OLLAMA_KV_CACHE_TYPE; None: from --cache-type-k


def minimum_memory(backend: str) -> int:
    return METAL_MINIMUM_MEMORY if backend == "metal" else MINIMUM_MEMORY


def default_context(total_vram: int, n_ctx_train: int) -> int:
    """server/routes.go @00188139 Serve: total_vram is sum(TotalMemory - OLLAMA_GPU_OVERHEAD) over GPUs;
    llm/server.go @5dbb81b7 caps num_ctx at the trained context."""
    if total_vram >= 47 * GIB:
        ctx = 262144
    elif total_vram >= 23 * GIB:
        ctx = 32768
    else:
        ctx = 4096
    return min(ctx, n_ctx_train)


def auto_num_batch(num_ctx: int, flash_attention: bool, gpu: GPUSpec | None) -> int:
    """server/sched.go @fb30760 automaticGenerationBatch (num_batch unset), before its VRAM step-downs."""
    if gpu is not None and gpu.backend == "cuda" and not flash_attention:
        return 256 if gpu.usable_memory_bytes <= 8 * GIB and num_ctx > 4096 else 512
    return 512 if num_ctx <= 4096 else 1024 if num_ctx <= 32768 else 2048


def _reserve(backend: str, gpu_overhead: int) -> int:
    return minimum_memory(backend) + gpu_overhead


def _command(resolved: ResolvedModel, quant: str, num_ctx: int, parallel: int, fa: bool | None, kv: str) -> str:
    """`ollama serve` with the settings, then `ollama run` of the library tag that is this quant, or the
    Modelfile import of the GGUF where the library has no such tag. Flash attention is set only where the user
    set it (unset, Ollama lets llama.cpp decide)."""

    env = [f"OLLAMA_CONTEXT_LENGTH={num_ctx}", f"OLLAMA_NUM_PARALLEL={parallel}"]
    if fa is not None:
        env.append(f"OLLAMA_FLASH_ATTENTION={1 if fa else 0}")
    if kv != "f16":
        env.append(f"OLLAMA_KV_CACHE_TYPE={kv}")
    run, _ = ollama_run(resolved, quant)  # OLLAMA_CONTEXT_LENGTH is every request's num_ctx unless it sets one
    return f"{' '.join(env)} ollama serve & sleep 3; {run}"


def _device_line(reason: str, devices: tuple[EngineDevice, ...]) -> str:
    """llama.cpp's per-device line, in the table's terms: the whole capacity, Ollama's reserve in the overhead
    (the check it comes from saw each GPU less that reserve)."""
    for d in devices:
        if reason.startswith(f"{d.name}: needs "):
            fits = "fits" if d.headroom_bytes >= 0 else "does not fit"
            return (f"{d.name}: needs {fmt_bytes(d.total_bytes)} of {fmt_bytes(d.capacity_bytes)} ({fits}; weights "
                    f"{fmt_bytes(d.weights_bytes)}, KV {fmt_bytes(d.kv_cache_bytes)}, compute "
                    f"{fmt_bytes(d.activation_bytes)}, overhead {fmt_bytes(d.overhead_bytes)} with Ollama's reserve)")
    return reason


def estimate_ollama(resolved: ResolvedModel, spec: ModelSpec, settings: EngineSettings[OllamaOptions],
                    hardware: Hardware) -> CheckResult[EnginePlan]:
    s = settings
    overhead = s.options.gpu_overhead_bytes
    try:
        quant = file_type(s.quant).name  # llama-quantize's names, the published recipes and their aliases
    except BadInput:
        raise BadInput(f"--quant {s.quant} is not a GGUF file type Ollama loads (e.g. Q4_K_M, Q8_0, BF16); "
                       "AWQ/GPTQ/FP8/NVFP4/bnb checkpoints need --engine vllm or --engine transformers") from None
    kv = "f16" if s.kv_cache_dtype in ("auto", "") else s.kv_cache_dtype.lower()
    if kv not in KV_TYPES:
        raise BadInput(f"--kv-cache-dtype {s.kv_cache_dtype}: OLLAMA_KV_CACHE_TYPE takes {', '.join(KV_TYPES)}")
    reasons: list[str] = []
    release = defaults_of(NAME, s.engine_version)  # the defaults of the release answered for
    fa = _flash_attention(s.flash_attention, resolved, release, reasons)
    if kv != "f16" and fa is False:
        reasons.append(f"OLLAMA_KV_CACHE_TYPE={kv} needs flash attention, which is off here: the KV cache stays f16")
        kv = "f16"
    devices = tuple(hardware.gpus)
    total_vram = sum(max(0, d.usable_memory_bytes - overhead) for d in devices)
    auto_ctx = not s.max_model_len
    by_vram = release["num_ctx"] == "by VRAM"
    num_ctx = (min(s.max_model_len, spec.n_ctx_train) if not auto_ctx else default_context(total_vram, spec.n_ctx_train)
               if by_vram else min(int(release["num_ctx"]), spec.n_ctx_train))
    parallel = s.max_num_seqs or int(release["num_parallel"])
    by_context = release["num_batch"] == "by context"
    asked = s.speculative
    if asked is not None and not asked.resolved:  # as a report or recommend asks it: this model's own drafter
        asked = resolve_asked(resolved, asked, resolved.db_dirs)
    draft = ollama_draft(asked, s.engine_version) if asked else None
    r, run, num_ctx = _run(resolved, quant, hardware, overhead, num_ctx, parallel, fa, kv, by_context, draft)
    while (auto_ctx and by_vram and release["ctx_step_down"] and not r.verdict.runs_on_gpu
           and (lower := _lower_tier(num_ctx)) is not None):  # sched.go steps down (v0.30.0 and later)
        r, run, num_ctx = _run(resolved, quant, hardware, overhead, lower, parallel, fa, kv, by_context, draft)
    n_batch = run.n_batch
    est = r.detail.estimate
    fa_on = flash_attention_on(run)
    perf = None
    if r.verdict != Verdict.NO_GO:
        try:  # Ollama runs llama-server: llama.cpp's speed at Ollama's settings, on the real GPUs
            perf = speed_of(r.detail.plan, est, hardware, min(s.prompt_tokens, num_ctx), s.output_tokens,
                            s.request_rate)
            if draft is not None:
                perf = with_speculation(r.detail.plan, est, hardware, perf, draft, min(s.prompt_tokens, num_ctx),
                                        s.output_tokens, resolved.db_dirs)
        except SpeedInputError as exc:
            reasons.append(f"speed not predicted: {exc}")
    towers = tower_params(resolved) if (s.mmproj or s.images_per_prompt) else 0
    vis_act = vision_activation_bytes(resolved, s.images_per_prompt)
    out = []
    for i, (d, dm) in enumerate(zip(devices, est.devices, strict=True)):
        out.append(EngineDevice(
            d.id, d.name, dm.weights_bytes + (2 * towers if i == 0 else 0), dm.kv_cache_bytes,
            dm.compute_bytes + (vis_act if i == 0 else 0), 0,
            dm.overhead_bytes + _reserve(d.backend, overhead), d.usable_memory_bytes, dm.draft_bytes))
    out_devices = tuple(out)
    verdict = r.verdict
    if verdict.runs_on_gpu and any(d.headroom_bytes < 0 for d in out_devices):
        verdict = Verdict.OFFLOAD  # the projector did not fit next to all layers
    reasons = [_device_line(x, out_devices) for x in r.reasons] + reasons
    if not ollama_run(resolved, quant)[1]:
        reasons.append(f"the Ollama library has no {quant} tag of {resolved.spec.id}: the command imports the GGUF "
                       "with a Modelfile")
    fa_words = ("auto (llama.cpp turns it on where the GPU supports it)" if fa is None else
                ("on" if fa else "off") + (" (the model's default)" if s.flash_attention is None else ""))
    how_ctx = "set" if s.max_model_len else "by VRAM" if by_vram else "its default"
    reasons.append(f"{s.engine_version or VERSION_NAME} defaults: num_ctx {num_ctx} ({how_ctx}), "
                   f"OLLAMA_NUM_PARALLEL {parallel}{'' if s.max_num_seqs else ' (its default)'}, flash attention "
                   f"{fa_words}, KV cache {kv}, num_batch {n_batch}{' (by context)' if by_context else ''}; "
                   f"{minimum_memory(devices[0].backend) // MIB if devices else 0} MiB per GPU kept free")
    host = {"weights_bytes": est.host.weights_bytes, "kv_cache_bytes": est.host.kv_cache_bytes,
            "compute_bytes": est.host.compute_bytes, "total_bytes": est.host.total_bytes,
            "capacity_bytes": est.host.capacity_bytes}
    extras = {
        "ollama_version": VERSION,
        "num_ctx": num_ctx,
        "OLLAMA_CONTEXT_LENGTH": num_ctx,
        "OLLAMA_NUM_PARALLEL": parallel,
        "OLLAMA_FLASH_ATTENTION": fa,  # None: unset (llama-server --flash-attn auto)
        "OLLAMA_KV_CACHE_TYPE": kv,
        "OLLAMA_GPU_OVERHEAD": overhead,
        "num_batch": n_batch,
        "n_gpu_layers": r.detail.fit.n_gpu_layers,
        "n_layers_total": spec.n_layer + 1,
        "llama_cpp_total_bytes": [dm.total_bytes for dm in est.devices],
        "reserve_bytes": [_reserve(d.backend, overhead) for d in devices],
        "tower_params": towers,
        "offloads_layers": True,
        "file_size_bytes": r.detail.file_size_bytes,
    }
    plan = r.detail.plan
    terms = {"n_ubatch": n_batch, "n_batch": n_batch, "flash_attn": "on" if fa_on else "off", "cache_type_k": kv,
             "cache_type_v": kv, "n_gpu_layers": r.detail.fit.n_gpu_layers}
    detail = EnginePlan(s, out_devices, plan.n_params + towers, r.detail.file_size_bytes, host, extras, sources=(
        VERSION, f"llama.cpp {LLAMA_CPP_COMMIT} (gemma_fit.check) for weights, KV cache and compute buffer"),
        settings_terms=terms)
    return CheckResult(NAME, resolved, plan.ftype.name, hardware, verdict, tuple(reasons), r.max_ctx_fit // parallel,
                       num_ctx, draft_command(_command(resolved, plan.ftype.name, num_ctx, parallel, fa, kv), draft),
                       perf, detail)


def _lower_tier(num_ctx: int) -> int | None:
    lower = [t for t in AUTO_CTX_TIERS if t < num_ctx]
    return lower[0] if lower else None


def _flash_attention(asked: bool | None, resolved: ResolvedModel, release: dict[str, Any],
                     reasons: list[str]) -> bool | None:
    """Flash attention as the release runs it: None for llama-server's auto (v0.30.0 and later, unset); before,
    the model's default (gemma3 from v0.12.6, gemma4 from v0.20.4), and never for Gemma 2."""
    if release["flash_attention"] == "llama-server auto":
        return asked
    generation = resolved.entry.generation if resolved.entry else ""
    if generation == "2" and asked:
        reasons.append("Gemma 2 does not support flash attention in this Ollama release; it stays off")
        return False
    if asked is not None:
        return asked
    return bool(release.get(f"fa_gemma{generation}", False))


def _run(resolved: ResolvedModel, quant: str, hardware: Hardware, overhead: int, num_ctx: int, parallel: int,
         fa: bool | None, kv: str, by_context: bool = True, draft: Any = None
         ) -> tuple[LlamaCppResult, RunSettings, int]:
    """llama.cpp's plan at Ollama's settings on the machine as Ollama's scheduler sees it (each GPU less its
    reserve), without speed."""
    devices = tuple(hardware.gpus)
    run = RunSettings(n_ctx=num_ctx * parallel, n_parallel=parallel,
                      flash_attn="auto" if fa is None else "on" if fa else "off", cache_type_k=kv, cache_type_v=kv,
                      n_outputs_max=parallel)
    batch = auto_num_batch(num_ctx, flash_attention_on(run), devices[0] if devices else None) if by_context else 512
    n_batch = min(batch, num_ctx)  # 512: api/types.go DefaultOptions before v0.30.0
    run = replace(run, n_batch=n_batch, n_ubatch=n_batch)
    reserved = replace(hardware, gpus=tuple(
        replace(d, usable_memory_bytes=d.usable_memory_bytes - _reserve(d.backend, overhead)) for d in devices))
    if draft is not None:  # a Modelfile DRAFT: llama-server's drafter beside the model (engines.speculative)
        run = with_drafter(run, draft, reserved, resolved.db_dirs, resolved.spec)
    return run_check(resolved, quant, run, reserved, with_speed=False), run, num_ctx


class OllamaEngine:
    """`ollama serve` (llama.cpp's llama-server under Ollama's defaults): the engine object of engines.registry."""

    name = NAME
    aliases: tuple[str, ...] = ()
    default_quant = "Q4_K_M"
    options = OllamaOptions
    ranks_plans = True  # its plans are llama.cpp's: recommend ranks them with Ollama's commands

    def version_label(self, version: str | None) -> str:
        return release_label(NAME, "Ollama", version)

    def with_defaults(self, request: CheckRequest) -> CheckRequest:
        s = request.settings
        return replace(request, settings=replace(s, n_ctx=self.default_n_ctx(), defaults_from=s.engine_version))

    def default_n_ctx(self) -> int:
        return 0  # Ollama's context by VRAM

    def canonical_quant(self, quant: str) -> str:
        return gguf_type_name(quant, self.name)

    def settings(self, request: CheckRequest) -> EngineSettings[OllamaOptions]:
        o = engine_options(OllamaOptions, request.options)
        s = request.settings
        quant = self.default_quant if request.quant is None else request.quant  # '' is a quant to refuse
        # --flash-attn auto = OLLAMA_FLASH_ATTENTION unset: llama-server's --flash-attn auto (v0.30.0 and later)
        return engine_settings(NAME, quant, s, request.workload, o,
                               max_num_seqs=s.n_parallel, kv_cache_dtype=o.kv_cache_dtype or s.cache_type_k,
                               flash_attention={"on": True, "off": False}.get(s.flash_attn), flash_attn_used=True)

    def offered_quants(self, resolved: ResolvedModel, ladder: tuple[str, ...]) -> tuple[str, ...]:
        """The file types of `ladder` the Ollama library has a tag of (all of them where it has none)."""
        e = resolved.entry
        if e is None:
            return ladder
        tagged = tuple(q for q in ladder if quant_tag(resolved.spec.id, e.generation, e.size_label, q))
        return tagged or ladder

    def loads_vision_tower(self, resolved: ResolvedModel) -> bool:
        """Ollama loads the vision projector of Gemma 3 (4B-27B) and Gemma 4 whenever it is in the blob, which it
        always is; its converter drops Gemma 3n's towers (docs/engines.md, Ollama's rules)."""
        e = resolved.entry
        return e is not None and e.towers is not None and e.towers.vision is not None and e.generation != "3n"

    def plan_command(self, r: CheckResult[Any], n_parallel: int) -> str:
        """A llama.cpp plan through Ollama: its settings as environment, then the library tag that is this quant,
        or the Modelfile import of the GGUF where the library has none."""
        kv = r.detail.settings.cache_type_k
        env = [f"OLLAMA_CONTEXT_LENGTH={r.n_ctx}", f"OLLAMA_NUM_PARALLEL={n_parallel}"]
        if kv != "f16":
            env.append(f"OLLAMA_KV_CACHE_TYPE={kv}")  # llama.cpp's auto flash attention takes a quantized V cache
        run, _ = ollama_run(r.resolved, r.quant)
        command = f"{' '.join(env)} ollama serve & sleep 3; {run}"
        draft = r.detail.settings.speculative  # --mtp: Gemma 4's drafter beside the model, as check prints it
        return draft_command(command, ollama_draft(draft, "")) if draft is not None else command

    def validate(self, request: CheckRequest) -> None:
        validate_numbers(self.settings(request))

    def estimate(self, request: CheckRequest) -> CheckResult[EnginePlan]:
        validate(request.settings, request.resolved.spec)  # --ctx, --parallel ... mean the same for every engine
        s = self.settings(request)
        validate_numbers(s)
        return estimate_ollama(request.resolved, request.resolved.spec, s, request.hardware)

    def check(self, request: CheckRequest) -> CheckResult[EnginePlan]:
        return self.estimate(request)


ENGINE = OllamaEngine()
