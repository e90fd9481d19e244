"""ModelSpec: a Gemma model as llama.cpp sees it (its hparams), derived from a Hugging Face config.

The derivation follows what llama.cpp's converter writes (conversion/gemma.py) and what its loader
reads (src/models/gemma*.cpp), so one function serves model_db entries and users' config.json files.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record

if TYPE_CHECKING:  # the schema is only needed when a config is read (model_files), not to use a spec
    from gemma_fit.model.schema import HFTextConfig

# Newer generations sort later: a size alias (9b, e4b) means the newest model of that size.
GENERATION_ORDER = {"1": 1, "2": 2, "3": 3, "3n": 3.5, "4": 4}

# llama.cpp's Gemma architectures, oldest first (what a config's model_type or a GGUF's
# general.architecture names; gemma_fit.gguf.from_file reads files of these and a few dense ones).
GEMMA_ARCHS = ("gemma", "gemma2", "gemma3", "gemma3n", "gemma4")

# HF model_type -> llama.cpp architecture.
_ARCH_BY_MODEL_TYPE = {
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3": "gemma3",
    "gemma3_text": "gemma3",
    "gemma3n": "gemma3n",
    "gemma3n_text": "gemma3n",
    "gemma4": "gemma4",
    "gemma4_text": "gemma4",
    "gemma4_unified": "gemma4",
    "gemma4_unified_text": "gemma4",
}

# llama.cpp's fallback SWA periods when a GGUF has no explicit pattern (src/models/gemma2|3|3n.cpp):
# the last layer of each period is global.
SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "gemma3n": 5}

# Gemma 3n: llama.cpp fixes the KV-owning layers to the first 20 (src/models/gemma3n.cpp:
# n_layer_kv_from_start = 20).
GEMMA3N_KV_LAYERS = 20


@record
class LayerSpec:
    index: int
    is_swa: bool
    n_head: int
    n_head_kv: int
    head_dim: int  # K and V head size (equal on every Gemma)
    n_ff: int
    has_kv: bool  # owns a KV cache (layers past n_layer_kv_from_start reuse earlier ones)
    has_v_proj: bool  # Gemma 4 K=V global layers have no attn_v
    has_experts: bool

    @property
    def n_embd_k_gqa(self) -> int:
        return self.n_head_kv * self.head_dim

    @property
    def n_embd_v_gqa(self) -> int:
        return self.n_head_kv * self.head_dim


@record
class ModelSpec:
    """Everything about a model that decides tensors, memory and speed. Immutable."""

    id: str
    name: str
    arch: str
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    n_swa: int  # sliding window in tokens; 0 = no SWA
    layers: tuple[LayerSpec, ...]
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_embd_per_layer: int = 0  # per-layer-embedding width (Gemma 3n/4 E-models), 0 = none
    n_altup: int = 0  # Gemma 3n
    laurel_rank: int = 0  # Gemma 3n
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_theta_swa: float = 10000.0
    attn_logit_softcap: float = 0.0
    final_logit_softcap: float = 0.0
    query_pre_attn_scalar: float = 0.0
    tied_embeddings: bool = True
    activation_sparsity: tuple[float, ...] = ()

    @property
    def n_layer(self) -> int:
        return len(self.layers)

    @cached_property
    def n_layer_kv_from_start(self) -> int:
        return sum(1 for layer in self.layers if layer.has_kv)

    @cached_property
    def max_n_embd_v_gqa(self) -> int:
        return max(layer.n_embd_v_gqa for layer in self.layers)

    @cached_property
    def has_swa(self) -> bool:
        return self.n_swa > 0 and any(layer.is_swa for layer in self.layers)

    @cached_property
    def _hash(self) -> int:
        return hash((self.id, self.arch, self.n_embd, self.n_vocab, self.layers))

    def __hash__(self) -> int:  # hashed often (cache keys): compute once
        return self._hash

    @property
    def gqa_layer0(self) -> int:
        """n_head / n_head_kv of layer 0, the ratio llama-quantize's rules test."""
        first = self.layers[0]
        return first.n_head // first.n_head_kv


def gemma_arch(model_type: object) -> str:
    """The llama.cpp architecture of an HF model_type; BadInput when it is not a Gemma one."""
    arch = _ARCH_BY_MODEL_TYPE.get(model_type) if isinstance(model_type, str) else None
    if arch is None:
        known = ", ".join(sorted(_ARCH_BY_MODEL_TYPE))
        if isinstance(model_type, str):
            shown = model_type if model_type.isprintable() else ascii(model_type)[1:-1]
        else:
            shown = repr(model_type)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise BadInput(f"model_type '{shown}' is not a Gemma architecture (known: {known})")
    return arch


def _arch(config: HFTextConfig) -> str:
    return gemma_arch(config.model_type)


def _layer_is_swa(config: HFTextConfig, arch: str) -> list[bool]:
    n = config.num_hidden_layers
    if arch == "gemma" or not config.sliding_window:
        return [False] * n
    if config.layer_types is not None:
        return [t == "sliding_attention" for t in config.layer_types]
    if arch == "gemma4":
        raise BadInput("a Gemma 4 config needs layer_types (llama.cpp requires the per-layer pattern)")
    period = SWA_PERIOD[arch]
    return [il % period < period - 1 for il in range(n)]


def _n_ff(config: HFTextConfig, il: int, first_shared: int) -> int:
    ff = config.intermediate_size
    n_ff = ff[il] if isinstance(ff, list) else ff
    # Gemma 4 E2B: KV-shared layers use a double-wide MLP (converter: use_double_wide_mlp).
    if config.use_double_wide_mlp and il >= first_shared:
        n_ff *= 2
    return n_ff


def _kv_layers(config: HFTextConfig, arch: str) -> int:
    n = config.num_hidden_layers
    if arch == "gemma3n":
        return min(n, GEMMA3N_KV_LAYERS)
    if arch == "gemma4":
        return n - config.num_kv_shared_layers
    return n


def _rope_theta(config: HFTextConfig, kind: str, default: float) -> float:
    params = config.rope_parameters
    if params and isinstance(params.get(kind), dict) and params[kind].get("rope_theta") is not None:
        return float(params[kind]["rope_theta"])
    if params and params.get("rope_theta") is not None:  # one flat block (transformers 5 Gemma 1/2 configs)
        return float(params["rope_theta"])
    if kind == "full_attention" and config.rope_theta:
        return float(config.rope_theta)
    if kind == "sliding_attention" and config.rope_local_base_freq:
        return float(config.rope_local_base_freq)
    return default


def spec_from_config(config: HFTextConfig, model_id: str, name: str | None = None) -> ModelSpec:
    """Derive llama.cpp's view of a model from its Hugging Face text config."""
    arch = _arch(config)
    if arch == "gemma3n" and not (config.altup_num_inputs and config.laurel_rank):
        raise BadInput("a Gemma 3n config needs altup_num_inputs and laurel_rank (its AltUp and LAuReL tensors)")
    n = config.num_hidden_layers
    n_head_kv = config.num_key_value_heads or config.num_attention_heads
    is_swa = _layer_is_swa(config, arch)
    kv_from_start = _kv_layers(config, arch)
    first_shared = n - config.num_kv_shared_layers
    layers = []
    for il in range(n):
        head_dim, kv_heads, has_v = config.head_dim, n_head_kv, True
        if arch == "gemma4" and not is_swa[il]:
            head_dim = config.global_head_dim or config.head_dim
            kv_heads = config.num_global_key_value_heads or n_head_kv
            has_v = not config.attention_k_eq_v
        layers.append(
            LayerSpec(
                index=il,
                is_swa=is_swa[il],
                n_head=config.num_attention_heads,
                n_head_kv=kv_heads,
                head_dim=head_dim,
                n_ff=_n_ff(config, il, first_shared),
                has_kv=il < kv_from_start,
                has_v_proj=has_v,
                has_experts=arch == "gemma4" and config.enable_moe_block,
            )
        )
    moe = arch == "gemma4" and config.enable_moe_block
    return ModelSpec(
        id=model_id,
        name=name or model_id,
        arch=arch,
        n_embd=config.hidden_size,
        n_vocab=config.vocab_size,
        n_ctx_train=config.max_position_embeddings,
        n_swa=config.sliding_window or 0 if arch != "gemma" else 0,
        layers=tuple(layers),
        n_expert=config.num_experts or 0 if moe else 0,
        n_expert_used=config.top_k_experts or 0 if moe else 0,
        n_ff_exp=config.moe_intermediate_size or 0 if moe else 0,
        n_embd_per_layer=config.hidden_size_per_layer_input or 0,
        n_altup=config.altup_num_inputs or 0 if arch == "gemma3n" else 0,
        laurel_rank=config.laurel_rank or 0 if arch == "gemma3n" else 0,
        rms_norm_eps=config.rms_norm_eps,
        rope_theta=_rope_theta(config, "full_attention", 10000.0),
        rope_theta_swa=_rope_theta(config, "sliding_attention", 10000.0),
        attn_logit_softcap=config.attn_logit_softcapping or 0.0,
        final_logit_softcap=config.final_logit_softcapping or 0.0,
        query_pre_attn_scalar=config.query_pre_attn_scalar or 0.0,
        tied_embeddings=config.tie_word_embeddings,
        activation_sparsity=tuple(config.activation_sparsity_pattern or ()),
    )
