"""The schema of model_db/engines/ (read by engines.hf_weights and engines.hf_speed, checked by `db validate`):
published pre-quantized checkpoints, and the Hugging Face engines' speed terms."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gemma_fit.db.schema import Strict


class Checkpoint(Strict):
    repo: str = Field(pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # a Hugging Face owner/name
    evidence: str = Field(min_length=8)


class CheckpointsFile(Strict):
    checkpoints: dict[str, dict[Literal["awq-int4", "gptq-int4", "nvfp4", "fp8"], Checkpoint]]


class SpeedTerms(Strict):
    """One engine's speed terms (gemma_fit/engines/hf_speed.py): shares of datasheet rates and fixed seconds."""

    bandwidth_efficiency: float = Field(gt=0, le=1)
    compute_efficiency: float = Field(gt=0, le=1)
    prefill_efficiency: float = Field(gt=0, le=1)
    step_overhead_s: float = Field(ge=0, lt=1)
    per_layer_s: float = Field(ge=0, lt=0.1)


class PartialSpeedTerms(Strict):
    bandwidth_efficiency: float | None = Field(default=None, gt=0, le=1)
    compute_efficiency: float | None = Field(default=None, gt=0, le=1)
    prefill_efficiency: float | None = Field(default=None, gt=0, le=1)
    step_overhead_s: float | None = Field(default=None, ge=0, lt=1)
    per_layer_s: float | None = Field(default=None, ge=0, lt=0.1)


class EngineSpeed(Strict):
    default: SpeedTerms
    formats: dict[str, PartialSpeedTerms] = {}
    startup_s_budget: float = Field(default=0.0, ge=0, lt=3600)
    nvlink_allreduce_s: float | None = Field(default=None, gt=0, lt=0.001)  # one all-reduce over NVLink (vLLM)


class SpeedFile(Strict):
    vllm: EngineSpeed
    transformers: EngineSpeed


RELEASE = r"^[0-9]{1,4}(\.[0-9]{1,4}){1,3}$"


class VersionChange(Strict):
    since: str = Field(pattern=RELEASE)
    key: str = Field(min_length=2)
    value: Any
    source: str = Field(min_length=10)


class EngineVersions(Strict):
    modelled: str = Field(pattern=RELEASE)
    oldest: str = Field(pattern=RELEASE)
    initial: dict[str, Any]
    changes: list[VersionChange]


class VersionsFile(Strict):
    """model_db/engines/versions.yaml: the defaults that changed between releases (engines.versions)."""

    vllm: EngineVersions
    ollama: EngineVersions
