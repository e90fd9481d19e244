"""The model database schema: one YAML per model, validated with pydantic.

`config` holds the published Hugging Face text config with HF key names, so a model_db entry and a
user's own `config.json` go through the same code (`model_spec.spec_from_config`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LayerType = Literal["sliding_attention", "full_attention"]


class HFTextConfig(BaseModel):
    """The fields of a Gemma Hugging Face text config that decide the llama.cpp layout.

    Unknown keys are kept (HF configs carry many); the ones named here are type-checked.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    model_type: str
    architectures: list[str] | None = None
    hidden_size: int = Field(gt=0)
    intermediate_size: int | list[int]
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int | None = Field(default=None, gt=0)
    head_dim: int = Field(default=256, gt=0)
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0)
    rms_norm_eps: float = 1e-6
    sliding_window: int | None = None
    layer_types: list[LayerType] | None = None
    tie_word_embeddings: bool = True
    final_logit_softcapping: float | None = None
    attn_logit_softcapping: float | None = None
    rope_theta: float | None = None
    rope_local_base_freq: float | None = None
    rope_parameters: dict[str, Any] | None = None
    query_pre_attn_scalar: float | None = None
    # Gemma 3n / Gemma 4 E-models
    num_kv_shared_layers: int = Field(default=0, ge=0)
    hidden_size_per_layer_input: int | None = None
    vocab_size_per_layer_input: int | None = None
    altup_num_inputs: int | None = None
    altup_active_idx: int | None = None
    laurel_rank: int | None = None
    activation_sparsity_pattern: list[float] | None = None
    # Gemma 4
    global_head_dim: int | None = None
    num_global_key_value_heads: int | None = None
    attention_k_eq_v: bool = False
    use_double_wide_mlp: bool = False
    enable_moe_block: bool = False
    num_experts: int | None = None
    top_k_experts: int | None = None
    moe_intermediate_size: int | None = None

    @model_validator(mode="after")
    def _per_layer_lists_match(self) -> HFTextConfig:
        n = self.num_hidden_layers
        if self.layer_types is not None and len(self.layer_types) != n:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for {n} layers")
        if isinstance(self.intermediate_size, list) and len(self.intermediate_size) != n:
            raise ValueError(f"intermediate_size has {len(self.intermediate_size)} entries for {n} layers")
        if self.num_kv_shared_layers >= n:
            raise ValueError("num_kv_shared_layers must be smaller than num_hidden_layers")
        if self.enable_moe_block and not (self.num_experts and self.top_k_experts and self.moe_intermediate_size):
            raise ValueError("enable_moe_block needs num_experts, top_k_experts and moe_intermediate_size")
        return self


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


GENERATION_ORDER = {"1": 1, "2": 2, "3": 3, "3n": 3.5, "4": 4}
