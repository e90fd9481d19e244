"""The pydantic schema of a Hugging Face Gemma text config (a model_db entry's `config`, or a user's
`config.json`), and how its validation errors read.

Every number that decides a layout has a type (strict: `"2560"`, `true` and `2560.0` are not sizes)
and a range (model/limits.py): a typo or a hostile file is refused before any work is done. Floats
must be finite, anywhere in the config.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator
from pydantic_core import PydanticCustomError

from gemma_fit.model.limits import (
    LIMIT_NOTES,
    MAX_ALTUP,
    MAX_CTX,
    MAX_EXPERTS,
    MAX_FFN,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_ROPE_THETA,
    MAX_SCALAR,
    MAX_VOCAB,
)

LayerType = Literal["sliding_attention", "full_attention"]

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
