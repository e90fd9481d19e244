"""The Hugging Face weight formats vLLM and transformers load, and what a checkpoint holds: parameters by kind,
bytes per format, the vision towers, and the published pre-quantized checkpoints."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.gguf.tensors import raw_tensors
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.model.spec import LayerSpec, ModelSpec

# Weight formats of the Hugging Face engines (vLLM, transformers), by canonical name.
HF_QUANTS = ("bf16", "fp16", "fp8", "awq-int4", "gptq-int4", "nvfp4", "bnb-8bit", "bnb-4bit")
_HF_ALIASES = {"awq": "awq-int4", "gptq": "gptq-int4", "int4-awq": "awq-int4", "int4-gptq": "gptq-int4",
               "bnb8": "bnb-8bit", "bnb4": "bnb-4bit", "bitsandbytes-8bit": "bnb-8bit",
               "bitsandbytes-4bit": "bnb-4bit", "fp4": "nvfp4", "float16": "fp16", "bfloat16": "bf16"}

# Bytes per parameter of a quantized linear weight, scales included:
# - fp8 (vLLM fp8.py / transformers finegrained_fp8): 1 byte + one fp32 scale per 128x128 block (~0).
# - AWQ / GPTQ int4, group size 128 (vLLM awq.py, gptq.py): 4 bits + fp16 scale + 4-bit zero per group.
# - NVFP4 (vLLM modelopt.py ModelOptNvFp4Config): 4 bits + one fp8 scale per 16 values.
# - bnb 8-bit (transformers 5.24.0 integrations/bitsandbytes.py -> Linear8bitLt; bitsandbytes 0.50.2
#   functional.py int8_vectorwise_quant): int8 + one fp32 scale (SCB) per output row, 4/in_features (~0).
# - bnb 4-bit (Linear4bit; bitsandbytes 0.50.2 functional.py quantize_4bit, default blocksize 64, absmax
#   fp32): 4 bits + 4/64 B. BitsAndBytesConfig has bnb_4bit_use_double_quant=False by default; with it,
#   0.5 + 1/64 + 4/(64*256) B (absmax re-quantized to 8 bit in blocks of 256). nf4 and fp4 store the same.
LINEAR_BYTES_PER_PARAM = {
    "bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0,
    "awq-int4": 0.5 + (2 + 0.5) / 128, "gptq-int4": 0.5 + (2 + 0.5) / 128,
    "nvfp4": 0.5 + 1 / 16, "bnb-8bit": 1.0, "bnb-4bit": 0.5 + 4 / 64,
}


def canonical_hf_quant(quant: str, engine: str, refused: Mapping[str, str] | None = None) -> str:
    """--quant as `engine` names a weight format; BadInput naming the formats it takes (those in `refused` it has
    no kernel for are left out of the list, and are the engine's to refuse with its reason)."""
    from gemma_fit.base.suggest import did_you_mean
    from gemma_fit.base.text import printable

    q = quant.strip().lower()
    q = _HF_ALIASES.get(q, q)
    if q in HF_QUANTS:
        return q
    taken = [f for f in HF_QUANTS if f not in (refused or {})]
    hint = "use --engine llama.cpp or --engine ollama for GGUF quants" if _is_gguf_quant(quant) else ""
    raise BadInput(f"--quant {printable(quant, 40)} is not a {engine} weight format (use one of {', '.join(taken)})"
                   + (f"; {hint}" if hint else did_you_mean(q, taken)))


def gguf_type_name(quant: str, engine: str) -> str:
    """The GGUF file type `quant` names for llama.cpp or Ollama; a vLLM/transformers weight format is refused with
    the engines that take it (the mirror of canonical_hf_quant's hint)."""
    from gemma_fit.gguf.types import file_type

    try:
        return file_type(quant).name
    except BadInput:
        q = quant.strip().lower()
        if _HF_ALIASES.get(q, q) in HF_QUANTS:
            raise BadInput(f"--quant {quant} is a vLLM/transformers weight format, not a GGUF file type for {engine}: "
                           "use --engine vllm or transformers, or a file type such as Q4_K_M") from None
        raise


def _is_gguf_quant(quant: str) -> bool:
    from gemma_fit.gguf.types import file_types

    return quant.strip().upper() in file_types()


@record
class ParamBreakdown:
    embedding: int  # token embeddings, per-layer embeddings (kept in bf16 by every HF quantizer)
    linear: int  # dense matrices that quantizers convert (attention, MLP, projections)
    experts: int  # routed expert matrices (MoE), also quantized
    experts_active: int  # the part of `experts` one token reads (top-k of n)
    other: int  # norms, scales, 1-D tensors (bf16)

    @property
    def total(self) -> int:
        return self.embedding + self.linear + self.experts + self.other

    @property
    def active(self) -> int:
        return self.embedding + self.linear + self.experts_active + self.other


def param_breakdown(spec: ModelSpec) -> ParamBreakdown:
    """Text-model parameters by kind, from the same tensor list the GGUF plan uses (tensor_plan.raw_tensors)."""
    emb = lin = exp = other = 0
    for t in raw_tensors(spec):
        n = 1
        for d in t.shape:
            n *= d
        if t.role == "input":
            emb += n
        elif "_exps" in t.name and len(t.shape) >= 3:
            exp += n
        elif len(t.shape) >= 2 and t.shape[0] > 1 and t.shape[1] > 1:
            lin += n
        else:
            other += n
    active = exp * spec.n_expert_used // spec.n_expert if spec.n_expert else 0
    return ParamBreakdown(emb, lin, exp, active, other)


def hf_weight_bytes(spec: ModelSpec, quant: str) -> int:
    """Weights of an HF checkpoint in GPU memory: quantized linear/expert matrices, embeddings and norms in bf16.
    (vLLM VocabParallelEmbedding and transformers' quantizers both leave nn.Embedding unquantized; the tied
    lm_head shares the embedding tensor.)"""
    p = param_breakdown(spec)
    per = LINEAR_BYTES_PER_PARAM[quant]
    return int((p.linear + p.experts) * per) + (4 if quant == "fp32" else 2) * (p.embedding + p.other)


# Vision encoders (per image). SigLIP So400m at 896 px / patch 14 = 4096 patches (Gemma 3 report, sec. 2.1);
# Gemma 4 ViT patch 16, 280 soft tokens x 3x3 pooling = 2520 patches (model_db/gemma-4-*.yaml towers note);
# Gemma 3n MobileNet-V5 at 768 px: activations taken as the SigLIP figure (a budget).
_VISION_ENCODER = {  # type -> (patches per image, width, mlp width)
    "siglip": (4096, 1152, 4304),
    "gemma4_vision": (2520, 1152, 4304),
}


def tower_params(resolved: ResolvedModel) -> int:
    entry = resolved.entry
    if entry is None or entry.towers is None:
        return 0
    return sum(t.params or 0 for t in (entry.towers.vision, entry.towers.audio) if t is not None)


def vision_activation_bytes(resolved: ResolvedModel, images: int, act_bytes: int = 2) -> int:
    """Peak activations of the vision encoder for `images` images in one batch: per patch the residual,
    the qkv and the MLP intermediate (width x 4 + mlp), in the activation dtype; attention by SDPA kernels
    (no patches x patches matrix)."""
    entry = resolved.entry
    if images <= 0 or entry is None or entry.towers is None or entry.towers.vision is None:
        return 0
    patches, width, mlp = _VISION_ENCODER.get(entry.towers.vision.type, _VISION_ENCODER["siglip"])
    return images * patches * (4 * width + mlp) * act_bytes


def kv_layers(spec: ModelSpec) -> list[LayerSpec]:
    """Layers that own a KV cache (Gemma 3n/4 KV-shared layers read an earlier layer's cache)."""
    return [layer for layer in spec.layers if layer.has_kv]


PRE_QUANTIZED = ("awq-int4", "gptq-int4", "nvfp4")  # formats no engine quantizes at load time


@cache
def _checkpoints() -> dict[str, dict[str, dict[str, str]]]:
    from gemma_fit.db.rules import read_packaged_yaml

    return dict(read_packaged_yaml("engines/checkpoints.yaml")["checkpoints"])


def checkpoint(resolved: ResolvedModel, quant: str) -> str | None:
    """A published pre-quantized checkpoint of this model in this format (model_db/engines/checkpoints.yaml)."""
    row = _checkpoints().get(resolved.spec.id, {}).get(quant)
    return row["repo"] if row else None


def require_checkpoint(resolved: ResolvedModel, quant: str, engine: str) -> None:
    """AWQ, GPTQ and NVFP4 load only from a checkpoint quantized ahead of time: without a known one (or the user's own
    folder) the printed command would load the bf16 weights while the estimate counted 4-bit ones."""
    if quant in PRE_QUANTIZED and resolved.local_dir is None and checkpoint(resolved, quant) is None:
        raise BadInput(_no_checkpoint(resolved, quant, engine))


def _no_checkpoint(resolved: ResolvedModel, quant: str, engine: str) -> str:
    """Why a pre-quantized format cannot be planned for a model without a known checkpoint in it."""
    others = sorted(m for m, row in _checkpoints().items() if quant in row)
    known = f"; the database has one for {', '.join(others)}" if others else ""
    return (f"--quant {quant}: no published {quant} checkpoint of {resolved.spec.id} is known "
            f"(model_db/engines/checkpoints.yaml), and {engine} does not quantize to {quant} at load time{known}; "
            "fp8 (quantized at load) or bf16 need none, and a folder holding your own checkpoint's config.json "
            "can be given as the model")


def hf_repo(resolved: ResolvedModel) -> str:
    """Where vLLM and transformers load the model from: the folder of a user's config.json, or the model's
    Hugging Face repository (the instruction-tuned one where the database has it)."""
    if resolved.local_dir is not None:
        return resolved.local_dir
    entry = resolved.entry
    if entry is not None and entry.hf_repos:
        its = [r for r in entry.hf_repos if r.endswith("-it")]
        return (its or entry.hf_repos)[-1]
    return f"google/{resolved.spec.id}"

