"""The model database schema: one YAML per model, validated with pydantic.

`config` holds the published Hugging Face text config with HF key names, so a model_db entry and a
user's own `config.json` go through the same code (`model_spec.spec_from_config`).

Every number that decides a layout has a type (strict: `"2560"`, `true` and `2560.0` are not sizes)
and a range: sizes are at least 1 and at most a limit far above any published model, so a typo or a
hostile file is refused before any work is done (a 100,000-layer config would otherwise cost minutes
and gigabytes in the tensor plan). Floats must be finite, anywhere in the config.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator
from pydantic_core import PydanticCustomError

from gemma_fit.model.spec import GENERATION_ORDER  # noqa: F401 - re-exported

LayerType = Literal["sliding_attention", "full_attention"]

# --- limits -----------------------------------------------------------------------------------
# Upper limits for a config's sizes: each is several times the largest published LLM, so no real
# model is refused, and each bounds the work (tensors, layers) and the integers the estimates use.
# Largest published figures for reference: layers 126 (Llama 3.1 405B), 128 (several 1T-class MoE
# models); hidden width 16384 (Llama 3.1 405B), 18432 (PaLM 540B), 25600 (a few research models);
# FFN width 53248 (Llama 3.1 405B), 73728 (PaLM); vocabulary 262400 (Gemma 3n), 256000 (Gemma,
# BLOOM 250880); attention heads 128; head size 512 (Gemma 4 global layers); context 10,485,760
# (Llama 4 Scout, 10M); experts 384 (Kimi K2), 512 (Qwen3-Next).
MAX_LAYERS = 1024
MAX_HIDDEN = 65536
MAX_FFN = 2**20
MAX_HEADS = 1024
MAX_HEAD_DIM = 4096
MAX_VOCAB = 2**21
MAX_CTX = 2**24
MAX_EXPERTS = 4096
MAX_ALTUP = 64  # Gemma 3n: 4 AltUp streams
MAX_ROPE_THETA = 1e12  # published: 1e4 .. 1e8
MAX_SCALAR = 1e6  # soft-capping (30, 50) and query_pre_attn_scalar (144 .. 256)

LIMIT_NOTES: dict[str, str] = {
    "num_hidden_layers": f"{MAX_LAYERS} layers is gemma-fit's limit; published LLMs have at most about 128",
    "hidden_size": f"{MAX_HIDDEN} is gemma-fit's limit; published LLMs are at most about 25,600 wide",
    "intermediate_size": f"{MAX_FFN} is gemma-fit's limit; published FFNs are at most about 73,728 wide",
    "moe_intermediate_size": f"{MAX_FFN} is gemma-fit's limit",
    "num_attention_heads": f"{MAX_HEADS} heads is gemma-fit's limit; published LLMs have at most 128",
    "num_key_value_heads": f"{MAX_HEADS} heads is gemma-fit's limit",
    "num_global_key_value_heads": f"{MAX_HEADS} heads is gemma-fit's limit",
    "head_dim": f"{MAX_HEAD_DIM} is gemma-fit's limit; published head sizes are at most 512",
    "global_head_dim": f"{MAX_HEAD_DIM} is gemma-fit's limit; published head sizes are at most 512",
    "vocab_size": f"{MAX_VOCAB} tokens is gemma-fit's limit; published vocabularies are at most about 262,400",
    "vocab_size_per_layer_input": f"{MAX_VOCAB} tokens is gemma-fit's limit",
    "max_position_embeddings": f"{MAX_CTX} tokens is gemma-fit's limit; the longest published context is 10M",
    "sliding_window": f"{MAX_CTX} tokens is gemma-fit's limit",
    "num_experts": f"{MAX_EXPERTS} experts is gemma-fit's limit; published MoE models have at most 512",
    "hidden_size_per_layer_input": f"{MAX_HIDDEN} is gemma-fit's limit",
    "laurel_rank": f"{MAX_HIDDEN} is gemma-fit's limit",
    "altup_num_inputs": f"{MAX_ALTUP} is gemma-fit's limit; Gemma 3n uses 4",
}

# Strict: a JSON string "2560", a bool or a float 2560.0 is not a size.
Layers = Annotated[int, Field(strict=True, ge=1, le=MAX_LAYERS)]
LayerCount = Annotated[int, Field(strict=True, ge=0, le=MAX_LAYERS)]
Width = Annotated[int, Field(strict=True, ge=1, le=MAX_HIDDEN)]
OptionalWidth = Annotated[int, Field(strict=True, ge=0, le=MAX_HIDDEN)]  # 0 = none
FFNWidth = Annotated[int, Field(strict=True, ge=1, le=MAX_FFN)]
Heads = Annotated[int, Field(strict=True, ge=1, le=MAX_HEADS)]
HeadDim = Annotated[int, Field(strict=True, ge=1, le=MAX_HEAD_DIM)]
Vocab = Annotated[int, Field(strict=True, ge=1, le=MAX_VOCAB)]
Tokens = Annotated[int, Field(strict=True, ge=1, le=MAX_CTX)]
Window = Annotated[int, Field(strict=True, ge=0, le=MAX_CTX)]  # 0 = no sliding window
Experts = Annotated[int, Field(strict=True, ge=1, le=MAX_EXPERTS)]
AltUp = Annotated[int, Field(strict=True, ge=2, le=MAX_ALTUP)]
AltUpIndex = Annotated[int, Field(strict=True, ge=0, lt=MAX_ALTUP)]
# Floats: ints are accepted (1 is 1.0), strings and bools are not, NaN and infinities are not.
Eps = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, lt=1)]
Theta = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=MAX_ROPE_THETA)]
Cap = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=MAX_SCALAR)]  # 0 = no capping
Scalar = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=MAX_SCALAR)]
Sparsity = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, lt=1)]


def config_error(loc: tuple[str | int, ...], problem: str) -> PydanticCustomError:
    """A validation error about one field of the config, found by a check across fields.

    pydantic gives such errors no location; `ctx["loc"]` carries it so the messages name the field.
    """
    return PydanticCustomError("config_field", "{problem}", {"loc": loc, "problem": problem})


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _non_finite(value: Any) -> tuple[tuple[str | int, ...], float] | None:
    """The first NaN or infinity anywhere in `value` (iteratively: JSON may nest deep)."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        loc, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return loc, v
        if isinstance(v, dict):
            stack.extend(((*loc, str(k)), x) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend(((*loc, i), x) for i, x in enumerate(v))
    return None


def _check_rope(loc: tuple[str | int, ...], params: Any) -> None:
    """One RoPE parameter block (rope_scaling, or one entry of rope_parameters)."""
    if not isinstance(params, dict):
        raise config_error(loc, f"expected a mapping of RoPE parameters, got {type(params).__name__}")
    for key, high in (("rope_theta", MAX_ROPE_THETA), ("factor", 1e6), ("partial_rotary_factor", 1.0)):
        v = params.get(key)
        if v is None:
            continue
        if not _is_number(v):
            raise config_error((*loc, key), f"expected a number, got {v!r}")
        if not 0 < v <= high:
            raise config_error((*loc, key), f"{v!r} is outside (0, {high:g}]")
    if "rope_type" in params and not isinstance(params["rope_type"], str):
        raise config_error((*loc, "rope_type"), f"expected a string, got {params['rope_type']!r}")


class HFTextConfig(BaseModel):
    """The fields of a Gemma Hugging Face text config that decide the llama.cpp layout.

    Unknown keys are kept (HF configs carry many); the ones named here are type- and range-checked.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    model_type: Annotated[str, Field(max_length=100)]
    architectures: list[Annotated[str, Field(max_length=200)]] | None = None
    hidden_size: Width
    intermediate_size: FFNWidth | list[FFNWidth]
    num_hidden_layers: Layers
    num_attention_heads: Heads
    num_key_value_heads: Heads | None = None
    head_dim: HeadDim = 256
    vocab_size: Vocab
    max_position_embeddings: Tokens
    rms_norm_eps: Eps = 1e-6
    sliding_window: Window | None = None
    layer_types: list[LayerType] | None = None
    tie_word_embeddings: StrictBool = True
    final_logit_softcapping: Cap | None = None
    attn_logit_softcapping: Cap | None = None
    rope_theta: Theta | None = None
    rope_local_base_freq: Theta | None = None
    rope_scaling: dict[str, Any] | None = None
    rope_parameters: dict[str, Any] | None = None
    query_pre_attn_scalar: Scalar | None = None
    # Gemma 3n / Gemma 4 E-models
    num_kv_shared_layers: LayerCount = 0
    hidden_size_per_layer_input: OptionalWidth | None = None
    vocab_size_per_layer_input: Vocab | None = None
    altup_num_inputs: AltUp | None = None
    altup_active_idx: AltUpIndex | None = None
    laurel_rank: Width | None = None
    activation_sparsity_pattern: list[Sparsity] | None = None
    # Gemma 4
    global_head_dim: HeadDim | None = None
    num_global_key_value_heads: Heads | None = None
    attention_k_eq_v: StrictBool = False
    use_double_wide_mlp: StrictBool = False
    enable_moe_block: StrictBool = False
    num_experts: Experts | None = None
    top_k_experts: Experts | None = None
    moe_intermediate_size: FFNWidth | None = None

    @model_validator(mode="before")
    @classmethod
    def _finite_everywhere(cls, data: Any) -> Any:
        """NaN and infinities are refused in every value, known key or not (rope_scaling.factor...)."""
        if isinstance(data, dict):
            found = _non_finite(data)
            if found is not None:
                loc, value = found
                raise config_error(loc, f"{value} is not a finite number")
        return data

    @field_validator("rope_scaling")
    @classmethod
    def _rope_scaling(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            _check_rope(("rope_scaling",), v)
        return v

    @field_validator("rope_parameters")
    @classmethod
    def _rope_parameters(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        """Per layer type ({full_attention: {...}, sliding_attention: {...}}) or one flat block."""
        if v is None:
            return v
        if any(k in v for k in ("full_attention", "sliding_attention")):
            for kind, params in v.items():
                _check_rope(("rope_parameters", kind), params)
        else:
            _check_rope(("rope_parameters",), v)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> HFTextConfig:
        n = self.num_hidden_layers
        for name in ("layer_types", "intermediate_size", "activation_sparsity_pattern"):
            value = getattr(self, name)
            if isinstance(value, list) and len(value) != n:
                raise config_error((name,), f"has {len(value)} entries for {n} layers (num_hidden_layers)")
        if self.num_kv_shared_layers >= n:
            raise config_error(("num_kv_shared_layers",), f"{self.num_kv_shared_layers} must be smaller than "
                               f"num_hidden_layers {n}")
        heads = self.num_attention_heads
        for name in ("num_key_value_heads", "num_global_key_value_heads"):
            kv = getattr(self, name)
            if kv is not None and (kv > heads or heads % kv):
                raise config_error((name,), f"{kv} must divide num_attention_heads {heads} (each KV head "
                                   "serves a whole group of query heads)")
        if self.enable_moe_block and not (self.num_experts and self.top_k_experts and self.moe_intermediate_size):
            raise config_error(("enable_moe_block",), "needs num_experts, top_k_experts and moe_intermediate_size")
        if self.num_experts and self.top_k_experts and self.top_k_experts > self.num_experts:
            raise config_error(("top_k_experts",), f"{self.top_k_experts} is more than num_experts {self.num_experts}")
        altup, active = self.altup_num_inputs, self.altup_active_idx
        if altup and active is not None and active >= altup:
            raise config_error(("altup_active_idx",), f"{active} must be below altup_num_inputs {altup}")
        return self


# --- transformers' defaults for keys a config.json leaves out ----------------------------------
# A Hugging Face config.json lists only the keys that differ from its config class's defaults (the
# published Gemma 3 4B text_config has six keys); transformers, and llama.cpp's converter (which reads
# the config through transformers), fill the rest from the class named by `model_type`. These are
# those defaults, for the keys HFTextConfig reads, transcribed from transformers' sources:
_TRANSFORMERS = "https://github.com/huggingface/transformers/blob/"
HF_DEFAULTS_SOURCES = {
    "gemma": _TRANSFORMERS + "008e574391258935f3ecc3035c882e73bbcac419/src/transformers/models/gemma/"
    "configuration_gemma.py",
    "gemma2": _TRANSFORMERS + "008e574391258935f3ecc3035c882e73bbcac419/src/transformers/models/gemma2/"
    "configuration_gemma2.py",
    "gemma3_text": _TRANSFORMERS + "008f5c8c29be84d4721dc6d1e0fcd72300580be4/src/transformers/models/gemma3/"
    "configuration_gemma3.py",
    "gemma3n_text": _TRANSFORMERS + "018548097621d331be9d60ab6cafdd71cfa67a43/src/transformers/models/gemma3n/"
    "configuration_gemma3n.py",
    "gemma4_text": _TRANSFORMERS + "008e574391258935f3ecc3035c882e73bbcac419/src/transformers/models/gemma4/"
    "configuration_gemma4.py",
    "gemma4_unified_text": _TRANSFORMERS + "aa291ac486da4f6cc50fc72aea9014bd54a45a4f/src/transformers/models/"
    "gemma4_unified/configuration_gemma4_unified.py",
}
HF_CLASS_NAMES = {"gemma": "GemmaConfig", "gemma2": "Gemma2Config", "gemma3_text": "Gemma3TextConfig",
                  "gemma3n_text": "Gemma3nTextConfig", "gemma4_text": "Gemma4TextConfig",
                  "gemma4_unified_text": "Gemma4UnifiedTextConfig"}
_GEMMA4_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}}
HF_DEFAULTS: dict[str, dict[str, Any]] = {
    # GemmaConfig (Gemma 1; the 7B). rope_theta: the base class's RoPE default (explicit 10000.0 in
    # releases before rope_parameters).
    "gemma": dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=16, head_dim=256, max_position_embeddings=8192,
                  rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=10000.0),
    # Gemma2Config (the 2B); layer_types default: alternating, as llama.cpp's gemma2 fallback.
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=8192,
                   rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=10000.0, query_pre_attn_scalar=256,
                   sliding_window=4096, final_logit_softcapping=30.0, attn_logit_softcapping=50.0),
    # Gemma3TextConfig; sliding_window_pattern 6 (5 local : 1 global), as llama.cpp's gemma3 fallback.
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072,
                        rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1e6, rope_local_base_freq=10000.0,
                        query_pre_attn_scalar=256, sliding_window=4096, final_logit_softcapping=None,
                        attn_logit_softcapping=None),
    # Gemma3nTextConfig (the E4B); rope thetas from its default_theta {global: 1e6, local: 1e4};
    # activation_sparsity_pattern is derived (fill_hf_defaults); layer_types default 4 local : 1 global,
    # as llama.cpp's gemma3n fallback.
    "gemma3n_text": dict(vocab_size=262400, vocab_size_per_layer_input=262144, hidden_size=2048,
                         hidden_size_per_layer_input=256, intermediate_size=16384, num_hidden_layers=35,
                         num_attention_heads=8, num_key_value_heads=2, head_dim=256, max_position_embeddings=32768,
                         rms_norm_eps=1e-6, tie_word_embeddings=True, sliding_window=512,
                         final_logit_softcapping=30.0, altup_active_idx=0, altup_num_inputs=4,
                         num_kv_shared_layers=15, laurel_rank=64, rope_theta=1e6, rope_local_base_freq=10000.0),
    # Gemma4TextConfig; global_head_dim 512 and num_global_key_value_heads None are popped from its
    # kwargs with those defaults; layer_types is derived (fill_hf_defaults).
    "gemma4_text": dict(vocab_size=262144, hidden_size=2304, intermediate_size=9216, num_hidden_layers=30,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072,
                        rms_norm_eps=1e-6, tie_word_embeddings=True, sliding_window=512, final_logit_softcapping=None,
                        vocab_size_per_layer_input=262144, hidden_size_per_layer_input=256, attention_k_eq_v=False,
                        num_kv_shared_layers=0, enable_moe_block=False, use_double_wide_mlp=False, num_experts=None,
                        top_k_experts=None, moe_intermediate_size=None, global_head_dim=512,
                        num_global_key_value_heads=None, rope_parameters=_GEMMA4_ROPE),
    # Gemma4UnifiedTextConfig (the 12B): no per-layer embeddings, no MoE.
    "gemma4_unified_text": dict(vocab_size=262144, hidden_size=2304, intermediate_size=9216, num_hidden_layers=30,
                                num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                                max_position_embeddings=131072, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                sliding_window=1024, final_logit_softcapping=None, num_global_key_value_heads=None,
                                global_head_dim=512, attention_k_eq_v=False, num_kv_shared_layers=0,
                                use_double_wide_mlp=False, rope_parameters=_GEMMA4_ROPE),
}
# A composite (multimodal) config's model_type -> the model_type of its text_config class.
TEXT_MODEL_TYPE = {"gemma": "gemma", "gemma2": "gemma2", "gemma3": "gemma3_text", "gemma3_text": "gemma3_text",
                   "gemma3n": "gemma3n_text", "gemma3n_text": "gemma3n_text", "gemma4": "gemma4_text",
                   "gemma4_text": "gemma4_text", "gemma4_unified": "gemma4_unified_text",
                   "gemma4_unified_text": "gemma4_unified_text"}
GEMMA4_SLIDING_WINDOW_PATTERN = 6  # Gemma4(Unified)TextConfig: layer_types default 5 local : 1 global


def _derived_defaults(text_type: str, n: int) -> dict[str, Any]:
    """Defaults transformers computes from num_hidden_layers (in the classes' __post_init__)."""
    if text_type in ("gemma4_text", "gemma4_unified_text"):
        period = GEMMA4_SLIDING_WINDOW_PATTERN
        types = ["sliding_attention" if (i + 1) % period else "full_attention" for i in range(n)]
        types[-1] = "full_attention"  # "Last layer must use full_attention": transformers forces it
        return {"layer_types": types}
    if text_type == "gemma3n_text":
        sparse = 10 if n > 10 else 0  # the first 10 layers sparse (0.95), the rest dense
        return {"activation_sparsity_pattern": [0.95] * sparse + [0.0] * (n - sparse)}
    return {}


def fill_hf_defaults(text: dict[str, Any]) -> tuple[dict[str, Any], str | None, list[str]]:
    """`text` with the keys it leaves out taken from its transformers class's defaults.

    Returns (filled config, class name or None when model_type names no known class, keys filled).
    Derived defaults are computed only for a layer count within the limits (checked again later).
    """
    text_type = text.get("model_type")
    if not isinstance(text_type, str) or text_type not in HF_DEFAULTS:
        return text, None, []
    out = dict(text)
    filled = [k for k in HF_DEFAULTS[text_type] if k not in out]
    for key in filled:
        value = HF_DEFAULTS[text_type][key]
        out[key] = {k: dict(v) for k, v in value.items()} if key == "rope_parameters" else value
    n = out.get("num_hidden_layers")
    if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_LAYERS:
        for key, value in _derived_defaults(text_type, n).items():
            if key not in out:
                out[key] = value
                filled.append(key)
    return out, HF_CLASS_NAMES[text_type], filled


class PublishedParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    published: int = Field(gt=0)
    published_label: str
    includes: list[Literal["text", "vision", "audio"]]
    source: str
    note: str | None = None


class Tower(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    params: int | None = Field(default=None, gt=0)
    params_label: str | None = None
    source: str | None = None
    note: str | None = None


class Towers(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    vision: Tower | None = None
    audio: Tower | None = None


class ModelEntry(BaseModel):
    """One file in model_db/."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-zA-Z0-9.-]*$")
    name: str
    generation: Literal["1", "2", "3", "3n", "4"]
    size_label: str
    arch: Literal["gemma", "gemma2", "gemma3", "gemma3n", "gemma4"]
    release_date: dt.date
    license: str
    license_url: str
    gated: bool | None
    hf_repos: list[str]
    source: str = Field(pattern=r"^https?://")
    corroborating_sources: list[str] = []
    verification: str
    config: HFTextConfig
    params: PublishedParams
    towers: Towers | None = None

    @field_validator("source", "license_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must be a URL")
        return v

    @property
    def published_tower_params(self) -> int:
        """Tower parameters that the published figure counts."""
        total = 0
        for part in ("vision", "audio"):
            tower = getattr(self.towers, part, None) if self.towers else None
            if part in self.params.includes and tower is not None and tower.params:
                total += tower.params
        return total


_UNION_TAG = re.compile(r"^(constrained-\w+|(list|dict|literal|function-\w+)\[.*\]|int|str|float|bool|none)$")


def error_loc(err: Mapping[str, Any]) -> tuple[str | int, ...]:
    """Where a pydantic error of HFTextConfig (or a model holding one) points: the key path in the input.

    Union-member tags pydantic adds are dropped; a cross-field error (`config_error`) carries its
    field in ctx["loc"], relative to the HFTextConfig, which sits where the error's own loc ends.
    """
    loc = tuple(p for p in err.get("loc", ()) if not (isinstance(p, str) and _UNION_TAG.match(p)))
    ctx = err.get("ctx") or {}
    if err.get("type") != "config_field" or "loc" not in ctx:
        return loc
    inner = tuple(ctx["loc"])
    for k in range(len(loc) + 1):
        if loc[k:] == inner[: len(loc) - k]:
            return (*loc[:k], *inner)
    return (*loc, *inner)


def dotted(loc: Sequence[str | int]) -> str:
    """('rope_parameters', 'full_attention', 'rope_theta') -> 'rope_parameters.full_attention.rope_theta'."""
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return text or "(top level)"


def explain_config_error(err: Mapping[str, Any]) -> str:
    """The pydantic message, with the limit's reason or the offending value when that helps."""
    msg = str(err.get("msg", ""))
    loc = error_loc(err)
    field = next((p for p in reversed(loc) if isinstance(p, str)), "")
    value = err.get("input")
    if err.get("type") in ("less_than_equal", "less_than") and field in LIMIT_NOTES:
        return f"{msg} ({LIMIT_NOTES[field]})"
    if str(err.get("type", "")).endswith(("_type", "_parsing")) and not isinstance(value, dict | list):
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return f"{msg}, got {shown} ({type(value).__name__})"
    return msg
