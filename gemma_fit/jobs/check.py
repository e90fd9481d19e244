"""`check`: one model, quant, settings and hardware in; a typed result out (CheckResult for llama.cpp,
EngineResult for Ollama, vLLM and transformers). present.documents renders either as the contract's JSON.

For the engines beyond llama.cpp, `run_engine_check(engine, resolved, quant, settings, hardware,
**engine_options)` maps RunSettings onto the engine's own: --ctx -> max_model_len / num_ctx (0 = the
engine's default: vLLM the trained context, Ollama its by-VRAM default, transformers prompt + new
tokens), --parallel -> max_num_seqs / OLLAMA_NUM_PARALLEL, --cache-type-k -> kv_cache_dtype (Ollama:
OLLAMA_KV_CACHE_TYPE), --flash-attn -> OLLAMA_FLASH_ATTENTION, --mmproj -> load the towers. Quant
names: vLLM and transformers take bf16, fp16, fp8, awq, gptq, nvfp4, bnb-8bit, bnb-4bit; Ollama takes
the llama.cpp file types.

Extra options the `check` command needs (typer), passed through as **engine_options:
    --gpu-memory-utilization FLOAT   vLLM, default 0.92                     -> gpu_memory_utilization
    --max-num-batched-tokens INT     vLLM, default by GPU                    -> max_num_batched_tokens
    --tensor-parallel-size INT       vLLM, default 1                         -> tensor_parallel_size
    --block-size INT                 vLLM, default 16                        -> block_size
    --enforce-eager                  vLLM, no CUDA graphs                    -> enforce_eager
    --kv-cache-dtype TEXT            vLLM auto|fp8                           -> kv_cache_dtype
    --batch-size INT                 transformers generate batch, default 1  -> batch_size
    --prompt-tokens INT              transformers, default 512               -> prompt_tokens
    --max-new-tokens INT             transformers, default 512               -> max_new_tokens
    --cache-implementation TEXT      transformers dynamic|static             -> cache_implementation
    --images INT                     images per prompt, default 0            -> images_per_prompt
    --gpu-overhead BYTES             Ollama OLLAMA_GPU_OVERHEAD, default 0   -> gpu_overhead_bytes
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.engines.base import ENGINES, EngineResult, EngineSettings
from gemma_fit.engines.llamacpp import CheckResult, Unmodelled, run_check
from gemma_fit.gguf.tensors import TensorPlan, build_plan
from gemma_fit.hardware.flags import MachineFlags, with_machine_flags
from gemma_fit.hardware.select import Hardware, select_hardware, with_backend
from gemma_fit.memory.fit import SAFETY_MARGIN_BYTES
from gemma_fit.memory.settings import MAX_CTX, RunSettings, is_llama_cpp, validate
from gemma_fit.model.catalog import ResolvedModel, resolve_model
from gemma_fit.model.ollama_tags import OllamaTag, ollama_tag
from gemma_fit.speed.traffic import Traffic

_OPTION_NAMES = {f.name for f in fields(EngineSettings)} - {"engine", "quant"}


# Engine options that count something: (least, most). The most is far past any real use (vLLM caps
# a batch at the model length; 1,024 images is 256k vision tokens for Gemma 3), so a typo is caught.
_COUNTS = {"max_num_batched_tokens": (1, MAX_CTX), "tensor_parallel_size": (1, 64), "batch_size": (1, 65536),
           "prompt_tokens": (1, MAX_CTX), "max_new_tokens": (0, MAX_CTX), "images_per_prompt": (0, 1024)}
_FLAGS = {"images_per_prompt": "--images"}


def check_engine_options(options: dict[str, Any]) -> None:
    """One line for an engine option out of range, before any estimate."""
    for name, (least, most) in _COUNTS.items():
        value = options.get(name)
        if value is not None and not least <= value <= most:
            flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
            raise BadInput(f"{flag} {value} is impossible (must be between {least:,} and {most:,})")


def engine_settings(engine: str, quant: str, settings: RunSettings, mmproj: bool = False,
                    **engine_options: Any) -> EngineSettings:
    engine = engine.strip().lower()
    if engine not in ENGINES or engine == "llama.cpp":
        raise BadInput(f"--engine {engine} is not one of {', '.join(e for e in ENGINES if e != 'llama.cpp')} "
                       "(llama.cpp is the default path)")
    unknown = set(engine_options) - _OPTION_NAMES
    if unknown:
        raise BadInput(f"unknown engine option(s): {', '.join(sorted(unknown))}")
    opts = {k: v for k, v in engine_options.items() if v is not None}
    base: dict[str, Any] = {"engine": engine, "quant": quant, "max_model_len": settings.n_ctx, "mmproj": mmproj}
    if engine == "ollama":
        base["kv_cache_dtype"] = settings.cache_type_k
        # --flash-attn auto = OLLAMA_FLASH_ATTENTION unset: Ollama then uses the model's default
        # (fs/ggml/ggml.go @c664d9c1 FlashAttention(): on for gemma3).
        base["flash_attention"] = {"on": True, "off": False}.get(settings.flash_attn)
        base["max_num_seqs"] = settings.n_parallel
    else:
        if settings.n_parallel != 1:
            base["max_num_seqs" if engine == "vllm" else "batch_size"] = settings.n_parallel
        if settings.cache_type_k.lower() not in ("f16", "bf16"):
            base["kv_cache_dtype"] = "fp8" if settings.cache_type_k.lower().startswith("q8") else settings.cache_type_k
    base.update(opts)
    return EngineSettings(**base)


def run_engine_check(engine: str, resolved: ResolvedModel, quant: str | None, settings: RunSettings,
                     hardware: Hardware, **engine_options: Any) -> EngineResult:
    """The estimate of `engine`; raises BadInput for combinations the engine refuses.
    quant None = the engine's default (bf16 for vLLM and transformers, Q4_K_M for Ollama)."""
    if quant is None:
        quant = "Q4_K_M" if engine.strip().lower() == "ollama" else "bf16"
    validate(settings, resolved.spec)  # --ctx, --parallel, ... mean the same for every engine
    check_engine_options(engine_options)
    mmproj = bool(engine_options.pop("mmproj", False))
    es = engine_settings(engine, quant, settings, mmproj=mmproj, **engine_options)
    from gemma_fit.engines.dispatch import estimate  # the engines' rules load only when one is asked for

    return estimate(resolved, es, hardware)


def projector_bytes(path: Path, flash_attn: bool = True) -> int:
    """What a multimodal projector GGUF (--mmproj) adds on the main GPU: its tensors, from its header, and
    clip's compute buffer for one image where it is measured for the file's projector type."""
    from gemma_fit.gguf.from_file import is_mmproj, mmproj_bytes
    from gemma_fit.gguf.projector import compute_bytes
    from gemma_fit.gguf.reader import read_gguf_header

    header = read_gguf_header(path)
    if not is_mmproj(header):
        raise BadInput(f"{path}: not a multimodal projector (general.architecture is not 'clip')")
    kind = header.metadata.get("clip.projector_type")
    return mmproj_bytes(header) + compute_bytes(kind if isinstance(kind, str) else None, flash_attn)


def with_projector(resolved: ResolvedModel, settings: RunSettings, images: int | None,
                   mmproj: Path | None) -> RunSettings:
    """--images N and --mmproj for llama.cpp: the projector's weights and image-encoder buffer on the main GPU
    (from the file, or without one from the model's vision tower), and the context the images take."""
    from gemma_fit.gguf.projector import image_compute_bytes, projector_plan, tower_for

    if images is not None and not 0 <= images <= MAX_IMAGES:
        raise BadInput(f"--images {images} is impossible (0 to {MAX_IMAGES})")
    flash = settings.flash_attn != "off"
    if mmproj is not None:
        return replace(settings, mmproj_bytes=settings.mmproj_bytes or projector_bytes(mmproj, flash),
                       mmproj_path=str(mmproj), images=images or 0, image_tokens=IMAGE_TOKENS_UNKNOWN)
    if not images:
        return settings
    vision = vision_type(resolved)
    if vision is None:
        raise BadInput(f"--images {images}: {resolved.spec.id} has no vision tower (a text-only model)")
    tower = tower_for(vision, resolved.spec.id)
    if tower is None:
        raise BadInput(f"--images {images}: the {vision} projector of {resolved.spec.id} is not modelled without its "
                       "file yet; give --mmproj FILE (the mmproj GGUF)")
    plan = projector_plan(tower, resolved.spec.n_embd)
    extra = plan.tensor_data_bytes + image_compute_bytes(plan.config, flash)
    return replace(settings, mmproj_bytes=extra, mmproj_path=f"mmproj-{resolved.spec.id}-f16.gguf", images=images,
                   image_tokens=plan.tokens_per_image)


MAX_IMAGES = 1024


def vision_type(resolved: ResolvedModel) -> str | None:
    """The model's vision tower type in the database (towers.vision.type), or None."""
    entry = resolved.entry
    return entry.towers.vision.type if entry and entry.towers and entry.towers.vision else None


IMAGE_TOKENS_UNKNOWN = 0  # a file's projector: tokens per image not read from it


def gguf_model(path: Path) -> tuple[ResolvedModel, TensorPlan]:
    """The model and tensor plan a real GGUF file's header describes."""
    from gemma_fit.gguf.from_file import model_from_gguf

    _, spec, plan = model_from_gguf(path)
    return ResolvedModel(spec, None, f"from {path}"), plan


def hardware_of(hardware: Hardware | str | Sequence[str] | Path, backend: str | None = None,
                hardware_dirs: tuple[Path, ...] = (), machine: MachineFlags | None = None) -> Hardware:
    """The hardware a check runs on: as given, or selected from GPU names (a str, or several) or a machine file."""
    if isinstance(hardware, Hardware):
        hw = hardware
    elif isinstance(hardware, Path):
        hw = select_hardware([], hardware, hardware_dirs)
    else:
        hw = select_hardware([hardware] if isinstance(hardware, str) else list(hardware), None, hardware_dirs)
    return with_machine_flags(with_backend(hw, backend), machine or MachineFlags(), hardware_dirs)


def check_model_source(model: object, gguf: Path | None) -> None:
    """A check needs one model: from the databases (or a config.json), or from a GGUF file."""
    if (model is None) == (gguf is None):
        raise BadInput("give --model ID (with --quant) or --gguf FILE")


MAX_RATE = 1e6  # requests per second: past any one deployment's traffic, certainly a typo


def check_traffic(output_tokens: int | None, request_rate: float | None) -> None:
    """--output-tokens and --rate: one line for impossible values (NaN fails both comparisons)."""
    if output_tokens is not None and not 1 <= output_tokens <= MAX_CTX:
        raise BadInput(f"--output-tokens {output_tokens} is impossible (must be between 1 and {MAX_CTX:,})")
    if request_rate is not None and not 0 < request_rate <= MAX_RATE:
        raise BadInput(f"--rate {request_rate} is impossible (requests per second, more than 0 and at most "
                       f"{MAX_RATE:,.0f})")


def check_prompt_tokens(prompt_tokens: int) -> None:
    if not 1 <= prompt_tokens <= MAX_CTX:
        raise BadInput(f"--prompt-tokens {prompt_tokens} is impossible (must be between 1 and {MAX_CTX:,})")


def check(model: str | ResolvedModel | None, hardware: Hardware | str | Sequence[str] | Path, *,
          quant: str | None = None, gguf: Path | None = None, settings: RunSettings | None = None,
          engine: str = "llama.cpp", prompt_tokens: int = 512, mmproj: Path | None = None,
          backend: str | None = None, model_dirs: tuple[Path, ...] = (), hardware_dirs: tuple[Path, ...] = (),
          machine: MachineFlags | None = None, margin_gib: float | None = None, images: int | None = None,
          traffic: Traffic | None = None, **engine_options: Any) -> CheckResult | EngineResult:
    """Will `model` (an id, alias, config.json path, or a real GGUF as `gguf`) run on `hardware` (a GPU id,
    several, a machine file, or a Hardware) with these settings, and how well. Raises BadInput (a
    GemmaFitError) for input llama.cpp or the engine would refuse. The result's JSON is
    present.documents.check_document(result)."""
    check_model_source(model, gguf)
    traffic = traffic or Traffic()
    check_traffic(traffic.output_tokens, traffic.rate_per_s)
    hw = hardware_of(hardware, backend, hardware_dirs, machine)
    # Without settings, the context is llama-server's 4096 for llama.cpp and the engine's own default elsewhere.
    settings = settings or RunSettings(n_ctx=RunSettings().n_ctx if is_llama_cpp(engine) else 0)
    tag = ollama_tag(model) if isinstance(model, str) else None
    if tag is not None:
        model, quant = tag.model, tag_quant(tag, quant)
    if not is_llama_cpp(engine):
        if images is not None:
            engine_options["images_per_prompt"] = images
        if gguf is not None:
            raise BadInput("--gguf works with --engine llama.cpp (or ollama via --model)")
        resolved = model if isinstance(model, ResolvedModel) else resolve_model(model or "", model_dirs)
        return run_engine_check(engine, resolved, quant, settings, hw, mmproj=mmproj is not None,
                                prompt_tokens=prompt_tokens, output_tokens=traffic.output_tokens,
                                request_rate=traffic.rate_per_s, **engine_options)
    if gguf is not None:
        resolved, plan = gguf_model(gguf)
    else:
        resolved = model if isinstance(model, ResolvedModel) else resolve_model(model or "", model_dirs)
        plan = build_plan(resolved.spec, quant or "Q4_K_M")
    settings = with_projector(resolved, settings, images, mmproj)
    check_prompt_tokens(prompt_tokens)
    result = run_check(resolved, plan.ftype.name, settings, hw, prompt_tokens=prompt_tokens, plan=plan,
                       gguf_path=gguf, margin_bytes=margin_bytes(margin_gib),
                       unmodelled=tag_unmodelled(tag, resolved, plan, settings) if tag else None,
                       output_tokens=traffic.output_tokens, request_rate=traffic.rate_per_s)
    from gemma_fit.jobs.advice import advise
    from gemma_fit.memory.llamacpp_fit import llamacpp_fit

    fit = llamacpp_fit(result.plan, result.settings, hw.gpus, hw.host_capacity_bytes)
    return replace(result, advice=advise(result), llamacpp_fit=fit)


def tag_quant(tag: OllamaTag, quant: str | None) -> str:
    """The quant an Ollama tag pulls; --quant may only repeat it (another quant is another tag)."""
    from gemma_fit.gguf.types import file_type

    if quant is not None and file_type(quant).name != file_type(tag.quant).name:
        raise BadInput(f"the Ollama tag {tag.tag} is {tag.quant}, not {quant}: drop --quant, or name the model "
                       f"({tag.model}) with --quant {quant}")
    return tag.quant


def tag_unmodelled(tag: OllamaTag, resolved: ResolvedModel, plan: TensorPlan, settings: RunSettings) -> Unmodelled:
    """What an Ollama blob holds beyond the text plan (and the projector --images places): its vision (and
    audio) towers, which Ollama loads with the model. The modelled tower where there is one, else what the
    published blob size leaves beyond the text weights, when that is more than its rounding."""
    from gemma_fit.gguf.layout import estimated_file_bytes
    from gemma_fit.gguf.projector import projector_plan, tower_for

    text = estimated_file_bytes(plan)
    tower = tower_for(vision_type(resolved), resolved.spec.id)
    modelled = projector_plan(tower, resolved.spec.n_embd).tensor_data_bytes if tower else 0
    rest = tag.blob_bytes - text
    rest = max(modelled, rest if rest > tag.rounding_bytes else 0)
    if settings.images:
        rest = max(rest - modelled, 0)  # --images already places the modelled projector
    what = f"{rest / 1e9:.2f} GB more (the towers beside the text weights, which Ollama loads) kept free" if rest else \
        "nothing more to keep free"
    return Unmodelled(rest, f"Ollama tag {tag.tag}: {resolved.spec.name} {tag.quant}, a {tag.shown} blob "
                            f"(text weights {text / 1e9:.2f} GB): {what}")


MAX_MARGIN_GIB = 1024


def margin_bytes(margin_gib: float | None) -> int:
    """--margin GiB as bytes; llama.cpp's fit target (1 GiB) when not given."""
    if margin_gib is None:
        return SAFETY_MARGIN_BYTES
    if not 0 <= margin_gib <= MAX_MARGIN_GIB:
        raise BadInput(f"--margin {margin_gib:g} is impossible (0 to {MAX_MARGIN_GIB:,} GiB kept free on each GPU)")
    return round(margin_gib * 1024**3)
