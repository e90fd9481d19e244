"""Hugging Face transformers: `from_pretrained` + `generate` on one or more GPUs.

Rules read from the transformers 5.24.0 wheel (PyPI):
- src/transformers/cache_utils.py DynamicLayer: full-attention layers grow to every token seen;
  DynamicSlidingWindowLayer.update keeps the last `sliding_window - 1` tokens (the concatenation with the
  new tokens is transient); StaticLayer preallocates max_cache_len; StaticSlidingWindowLayer
  preallocates min(sliding_window, max_cache_len). get_layer_types_and_kwargs: KV-shared layers
  (kv_sharing_modes "reuse", Gemma 4) become DummyLayer and store nothing.
- src/transformers/generation/utils.py: generate sets logits_to_keep=1 when the model supports it, so
  prefill computes logits for the last position only; the logits are cast to fp32 (`.float()`) before
  the logits processors and sampling. generate with cache_implementation="static" sets
  max_cache_len = prompt + max_new_tokens.
- src/transformers/integrations/bitsandbytes.py replace_with_bnb_linear: only nn.Linear (and Conv1D)
  modules become Linear8bitLt / Linear4bit; nn.Embedding (token and per-layer embeddings) and norms are
  never converted, and quantizers/base.py get_keys_to_not_convert (used when llm_int8_skip_modules is
  None, the default) also skips tied weights, the output embeddings (lm_head) and the last module.
  Vision/audio tower Linear layers ARE quantized (counted here as bf16: a slight over-estimate).
- src/transformers/utils/quantization_config.py BitsAndBytesConfig defaults: bnb_4bit_quant_type "fp4"
  (the snippet below asks for "nf4"; same storage), bnb_4bit_use_double_quant False, llm_int8_threshold
  6.0, quant storage uint8. Linear4bit gets compress_statistics = bnb_4bit_use_double_quant.
- Storage (bitsandbytes 0.50.2 wheel, functional.py quantize_4bit / int8_vectorwise_quant): 4-bit =
  two 4-bit values per byte + one fp32 absmax per block of 64 (Params4bit / quantize_4bit default
  blocksize) = 0.5 + 4/64 B per parameter; with double quant the absmax is re-quantized to 8 bit in
  blocks of 256 (+ one fp32 absmax per 256 blocks) = 0.5 + 1/64 + 4/(64 x 256) B. 8-bit (LLM.int8) =
  int8 weights + one fp32 scale per output row (SCB) = 1 + 4/in_features B.
The caching allocator keeps freed blocks reserved, so nvidia-smi shows the peak, not the steady state.
transformers does not offload layers unless device_map="auto" is given a max_memory smaller than the
model (then accelerate runs the rest from CPU RAM, slowly): the verdict here is go / tight / no-go.
"""

from __future__ import annotations

import json
from dataclasses import replace

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.units import GIB
from gemma_fit.base.verdict import Verdict
from gemma_fit.engines.base import (
    CheckRequest,
    CheckResult,
    EngineDevice,
    EnginePlan,
    EngineSettings,
    engine_options,
    engine_settings,
    fits_verdict,
    hf_kv_dtype,
    pinned_version,
    validate_numbers,
)
from gemma_fit.engines.hf_speed import HFLayout, Requests, hf_model_work, hf_performance
from gemma_fit.engines.hf_weights import (
    PRE_QUANTIZED,
    canonical_hf_quant,
    checkpoint,
    hf_repo,
    hf_weight_bytes,
    kv_layers,
    param_breakdown,
    require_checkpoint,
    tower_params,
    vision_activation_bytes,
)
from gemma_fit.hardware.spec import GPUSpec, Hardware
from gemma_fit.memory.estimate import runtime_overhead
from gemma_fit.memory.search import largest_fitting
from gemma_fit.memory.settings import validate_shared
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.model.spec import ModelSpec

NAME = "transformers"
VERSION = "transformers 5.24.0"
LOGIT_COPIES = 3  # bf16 logits of the last position, their fp32 copy, the softmax probabilities
UNSUPPORTED = {"nvfp4": "transformers has no NVFP4 loader for Gemma; use bf16, fp8, bnb-8bit or bnb-4bit"}


@record
class TransformersOptions:
    """transformers' own options: `generate`'s batch, length and cache, and the KV cache type."""

    batch_size: int | None = None  # None: --parallel (1)
    max_new_tokens: int = 512
    cache_implementation: str = "dynamic"  # dynamic | static
    kv_cache_dtype: str | None = None  # auto; None: from --cache-type-k


def kv_bytes_per_token(spec: ModelSpec, sliding: bool, dtype_bytes: int = 2) -> int:
    """K + V bytes per token over the KV-owning layers of one kind."""
    return sum(2 * la.n_embd_k_gqa * dtype_bytes for la in kv_layers(spec) if (la.is_swa and spec.has_swa) == sliding)


def kv_cache_bytes(spec: ModelSpec, batch: int, n_tokens: int, cache: str, dtype_bytes: int = 2) -> int:
    """KV cache after `n_tokens` tokens (prompt + generated) for `batch` sequences.
    dynamic: full layers hold n_tokens, sliding layers min(n_tokens, window - 1);
    static: full layers hold max_cache_len = n_tokens, sliding layers min(window, n_tokens)."""
    full = kv_bytes_per_token(spec, False, dtype_bytes) * n_tokens
    if not spec.has_swa:
        return batch * full
    kept = min(n_tokens, spec.n_swa - 1) if cache == "dynamic" else min(n_tokens, spec.n_swa)
    return batch * (full + kv_bytes_per_token(spec, True, dtype_bytes) * kept)


def prefill_activation_bytes(spec: ModelSpec, batch: int, prompt: int, act_bytes: int = 2) -> int:
    """Peak of one prefill forward (SDPA attention, no prompt x prompt matrix): per token the residual and
    normed hidden states, q/k/v, the MLP gate, up and activation outputs of the widest layer (plus the
    routed experts' intermediates for MoE), and the last position's logits (bf16, fp32, probabilities)."""
    widest = max(spec.layers, key=lambda la: la.n_ff)
    qkv = max((la.n_head + 2 * la.n_head_kv) * la.head_dim for la in spec.layers)
    per_token = 2 * spec.n_embd + qkv + 3 * widest.n_ff
    if spec.n_expert:
        per_token += spec.n_expert_used * (3 * spec.n_ff_exp + spec.n_embd)
    return batch * prompt * per_token * act_bytes + batch * spec.n_vocab * (2 + 4 + 4)


def full_logits_bytes(spec: ModelSpec, batch: int, tokens: int) -> int:
    """A plain forward (model(**inputs), no logits_to_keep) makes bf16 logits for every position plus an
    fp32 copy in the loss / softmax: the trap that runs long prompts out of memory."""
    return batch * tokens * spec.n_vocab * (2 + 4)


def torch_device(g: GPUSpec) -> str:
    """PyTorch's name for the GPU: ROCm builds keep "cuda"; Apple's is "mps", Intel's "xpu"."""
    if g.backend == "metal":
        return "mps"
    return "xpu" if g.vendor == "intel" else "cuda"


def _snippet(resolved: ResolvedModel, quant: str, s: EngineSettings[TransformersOptions], batch: int,
             multi_gpu: bool, device: str = "cuda") -> str:
    repo = checkpoint(resolved, quant) if quant in PRE_QUANTIZED else None
    repo = repo or hf_repo(resolved)
    lines = ["import torch", "from transformers import AutoModelForCausalLM, AutoTokenizer"]
    device_map = '"auto"' if multi_gpu else f'"{device}"'
    kwargs = [json.dumps(repo), f"device_map={device_map}"]  # a Python string literal, whatever the path holds
    if quant in ("bf16", "fp16"):
        kwargs.append(f"dtype=torch.{'bfloat16' if quant == 'bf16' else 'float16'}")
    elif quant.startswith("bnb"):
        lines[-1] = "from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig"
        q = "load_in_8bit=True" if quant == "bnb-8bit" else \
            'load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16'
        kwargs.append(f"quantization_config=BitsAndBytesConfig({q})")
    elif quant == "fp8":
        lines[-1] = "from transformers import AutoModelForCausalLM, AutoTokenizer, FineGrainedFP8Config"
        kwargs.append("quantization_config=FineGrainedFP8Config()")
    else:
        lines.append("# a pre-quantized checkpoint carries its own quantization config")
        kwargs.append("dtype=torch.bfloat16")
    lines += [f"tok = AutoTokenizer.from_pretrained({json.dumps(repo)})",
              f"model = AutoModelForCausalLM.from_pretrained({', '.join(kwargs)})",
              f'inputs = tok(["..."] * {batch}, return_tensors="pt").to(model.device)',
              f"out = model.generate(**inputs, max_new_tokens={s.options.max_new_tokens}, "
              f"cache_implementation=\"{s.options.cache_implementation}\")"]
    return "\n".join(lines)


def _check_fp8(quant: str, devices: tuple[GPUSpec, ...]) -> None:
    """FineGrainedFP8 asks torch for compute capability 8.9 (Ada, Hopper, Blackwell); below it transformers raises, or
    in the newer releases keeps the weights in bf16 (quantizers/quantizer_finegrained_fp8.py validate_environment)."""
    old = [g for g in devices if quant == "fp8" and (g.cuda_capability or 8.9) < 8.9]
    if old:
        raise BadInput(f"--quant fp8 on --engine transformers needs compute capability 8.9 or higher (FineGrainedFP8: "
                       f"RTX 40xx, L4, H100); {old[0].name} has {old[0].compute_capability}, where transformers "
                       "refuses it or keeps bf16 weights; use bf16 or bnb-8bit, or --engine vllm (FP8 Marlin, Ampere)")


def estimate_transformers(resolved: ResolvedModel, spec: ModelSpec, settings: EngineSettings[TransformersOptions],
                          hardware: Hardware) -> CheckResult[EnginePlan]:
    s, o = settings, settings.options
    batch = o.batch_size or 1
    quant = canonical_hf_quant(s.quant, "transformers")
    if quant in UNSUPPORTED:
        raise BadInput(f"--quant {quant} on --engine transformers: {UNSUPPORTED[quant]}")
    require_checkpoint(resolved, quant, "transformers")
    request = s.prompt_tokens + o.max_new_tokens
    if s.max_model_len and s.max_model_len < request:  # generate() would be asked for more tokens than planned
        raise BadInput(f"--ctx {s.max_model_len:,} is shorter than one request: {s.prompt_tokens:,} prompt tokens + "
                       f"{o.max_new_tokens:,} new tokens (--max-new-tokens) = {request:,}; give --ctx {request} or "
                       "more, or fewer --prompt-tokens or --max-new-tokens")
    if o.cache_implementation not in ("dynamic", "static"):
        raise BadInput(f"--cache-implementation {o.cache_implementation} must be dynamic or static")
    if s.kv_cache_dtype not in ("auto", "bf16", "fp16"):
        raise BadInput(f"--kv-cache-dtype {s.kv_cache_dtype}: transformers keeps the KV cache in the model dtype "
                       "(auto); a quantized cache (QuantizedCache) is not modelled")
    devices = tuple(hardware.gpus)
    if not devices:
        raise BadInput("--engine transformers is modelled on GPUs only; use --engine llama.cpp for CPU")
    _check_fp8(quant, devices)
    n_tokens = s.max_model_len or request  # at least one request (refused above when shorter)
    prompt = s.prompt_tokens
    if n_tokens > spec.n_ctx_train:
        raise BadInput(f"{n_tokens} tokens is beyond the model's {spec.n_ctx_train}")

    towers = tower_params(resolved) if (s.mmproj or s.images_per_prompt) else 0
    weights = hf_weight_bytes(spec, quant) + 2 * towers
    kv = kv_cache_bytes(spec, batch, n_tokens, o.cache_implementation)
    act = prefill_activation_bytes(spec, batch, prompt) + vision_activation_bytes(
        resolved, s.images_per_prompt * batch)
    # device_map="auto" (accelerate) fills GPUs in order; weights and KV are split in proportion to
    # capacity here, activations land on the first GPU (embeddings and the first layers live there).
    total_cap = sum(d.usable_memory_bytes for d in devices)
    out = []
    for i, d in enumerate(devices):
        share = d.usable_memory_bytes / total_cap
        out.append(EngineDevice(d.id, d.name, int(weights * share), int(kv * share), act if i == 0 else 0, 0,
                                runtime_overhead(d.backend).bytes, d.usable_memory_bytes))
    out_devices = tuple(out)
    verdict = fits_verdict(out_devices)

    def fits(n: int) -> bool:
        kv_n = kv_cache_bytes(spec, batch, n, o.cache_implementation)
        act_n = prefill_activation_bytes(spec, batch, min(s.prompt_tokens, n))
        need = weights + kv_n + act_n + sum(runtime_overhead(d.backend).bytes for d in devices)
        return need <= total_cap

    max_fit = 0
    if fits(256):
        max_fit = largest_fitting(1, spec.n_ctx_train // 256, lambda n: fits(n * 256)) * 256

    reasons = []
    worst = min(out_devices, key=lambda d: d.headroom_bytes)
    if verdict == Verdict.NO_GO:
        reasons.append(f"needs {worst.total_bytes / GIB:.1f} GiB on {worst.name}, has {worst.capacity_bytes / GIB:.1f}"
                       " GiB; transformers does not offload layers by default (device_map=\"auto\" with max_memory "
                       "runs the rest from CPU RAM, slowly)")
    elif verdict == Verdict.TIGHT:
        reasons.append(f"{worst.headroom_bytes / GIB:.2f} GiB to spare on {worst.name}: allocator fragmentation can "
                       "take that")
    else:
        reasons.append(f"{worst.headroom_bytes / GIB:.1f} GiB to spare on {worst.name}")
    if spec.has_swa:
        kept = spec.n_swa - 1 if o.cache_implementation == "dynamic" else spec.n_swa
        reasons.append(f"{o.cache_implementation} cache: sliding layers hold at most {kept} tokens, full layers all "
                       f"{n_tokens}")
    shared = spec.n_layer - len(kv_layers(spec))
    if shared:
        reasons.append(f"{shared} KV-shared layers store no cache (DummyLayer)")
    reasons.append(f"a plain forward over {n_tokens} tokens without logits_to_keep would add "
                   f"{full_logits_bytes(spec, batch, n_tokens) / GIB:.1f} GiB of logits")

    perf = None
    if verdict != Verdict.NO_GO and all(d.memory_bandwidth_gbps for d in devices):
        # device_map="auto" runs the GPUs one after another (layers in turn), one static batch of batch_size
        req = Requests(prompt, s.output_tokens or o.max_new_tokens or None, None, batch, batch,
                       batch)
        perf = hf_performance("transformers", hf_model_work(spec), HFLayout(devices[:1], quant, chunk=prompt), req,
                              weights,
                              extra_notes=("generate() runs one static batch: no continuous batching, so a request "
                                           "rate is not modelled (use vLLM for serving)",))
    p = param_breakdown(spec)
    extras = {
        "transformers_version": VERSION,
        "cache_implementation": o.cache_implementation,
        "batch_size": batch,
        "prompt_tokens": prompt,
        "max_new_tokens": o.max_new_tokens,
        "kv_cache_bytes": kv,
        "generate_logits_bytes": batch * spec.n_vocab * (2 + 4 + 4),
        "full_forward_logits_bytes": full_logits_bytes(spec, batch, n_tokens),
        "tower_params": towers,
        "n_params_active": p.active,
        "offloads_layers": False,
        "python": _snippet(resolved, quant, s, batch, len(devices) > 1, torch_device(devices[0]) if devices else "cpu"),
    }
    detail = EnginePlan(s, out_devices, p.total + towers, weights, None, extras, sources=(
        f"{VERSION} src/transformers/cache_utils.py DynamicSlidingWindowLayer, StaticSlidingWindowLayer",
        f"{VERSION} src/transformers/generation/utils.py logits_to_keep",
        f"{VERSION} src/transformers/integrations/bitsandbytes.py"),
        settings_terms={"n_batch": s.prompt_tokens, "cache_type_k": s.kv_cache_dtype,
                        "cache_type_v": s.kv_cache_dtype, "n_gpu_layers": spec.n_layer + 1})
    return CheckResult(NAME, resolved, quant, hardware, verdict, tuple(reasons), max_fit, n_tokens,
                       str(extras["python"]), perf, detail)


class TransformersEngine:
    """`from_pretrained` + `generate`: the engine object of engines.registry."""

    name = NAME
    aliases: tuple[str, ...] = ("hf", "huggingface")
    default_quant = "bf16"
    options = TransformersOptions
    ranks_plans = False

    def version_label(self, version: str | None) -> str:
        return pinned_version(self.name, VERSION, version)

    def with_defaults(self, request: CheckRequest) -> CheckRequest:
        s = request.settings
        return replace(request, settings=replace(s, n_ctx=self.default_n_ctx(), defaults_from=s.engine_version))

    def default_n_ctx(self) -> int:
        return 0  # the prompt and the new tokens

    def canonical_quant(self, quant: str) -> str:
        return canonical_hf_quant(quant, "transformers")

    def settings(self, request: CheckRequest) -> EngineSettings[TransformersOptions]:
        o = engine_options(TransformersOptions, request.options)
        s = request.settings
        o = o if o.batch_size is not None else replace(o, batch_size=s.n_parallel)  # --parallel is the batch
        quant = self.default_quant if request.quant is None else request.quant  # '' is a quant to refuse
        return engine_settings(NAME, quant, s, request.workload, o,
                               kv_cache_dtype=o.kv_cache_dtype or hf_kv_dtype(s.cache_type_k))

    def validate(self, request: CheckRequest) -> None:
        validate_numbers(self.settings(request))

    def estimate(self, request: CheckRequest) -> CheckResult[EnginePlan]:
        validate_shared(request.settings, request.resolved.spec)  # --ctx, --batch ...: llama.cpp's meaning
        s = self.settings(request)
        validate_numbers(s)
        return estimate_transformers(request.resolved, request.resolved.spec, s, request.hardware)

    def check(self, request: CheckRequest) -> CheckResult[EnginePlan]:
        return self.estimate(request)


ENGINE = TransformersEngine()
