"""The model database schema: one YAML per model, validated with pydantic.

`config` holds the published Hugging Face text config with HF key names, so a model_db entry and a
user's own `config.json` go through the same code (`model_spec.spec_from_config`). That config's
schema is model/hf_config.py (its limits model/limits.py), transformers' defaults for the keys a
config.json leaves out model/hf_defaults.py; the names other modules use are re-exported here.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import Field, field_validator

from gemma_fit.db.schema import Strict
from gemma_fit.model.hf_config import HFTextConfig, config_error, dotted, error_loc, explain_config_error
from gemma_fit.model.hf_defaults import HF_CLASS_NAMES, HF_DEFAULTS, TEXT_MODEL_TYPE, fill_hf_defaults

__all__ = [
    "HF_CLASS_NAMES",
    "HF_DEFAULTS",
    "TEXT_MODEL_TYPE",
    "HFTextConfig",
    "ModelEntry",
    "PublishedParams",
    "Tower",
    "Towers",
    "config_error",
    "dotted",
    "error_loc",
    "explain_config_error",
    "fill_hf_defaults",
]


class PublishedParams(Strict):

    published: int = Field(gt=0)
    published_label: str
    includes: list[Literal["text", "vision", "audio"]]
    source: str
    note: str | None = None


class Tower(Strict):

    type: str
    params: int | None = Field(default=None, gt=0)
    params_label: str | None = None
    source: str | None = None
    note: str | None = None


class Towers(Strict):

    vision: Tower | None = None
    audio: Tower | None = None


class ModelEntry(Strict):
    """One file in model_db/."""


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

