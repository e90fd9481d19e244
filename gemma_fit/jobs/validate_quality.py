"""`gemma-fit db validate`'s checks of model_db/quality/: every benchmark figure with its setup, source and the
source's row verbatim (the value must appear in it), for a model the database has; every quant row for a file
type llama.cpp (or a published recipe) has, with a score in range."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gemma_fit.jobs.validate_common import Doc, Report, Seen, validate_with


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BenchmarkFigure(_Strict):
    value: float = Field(ge=0, le=5000)  # percent, or an Elo score
    setup: str = Field(min_length=3)
    source: str = Field(pattern=r"^https?://\S+$")
    source_id: str | None = None
    quote: str = Field(min_length=5)


class SourceNote(_Strict):
    url: str = Field(pattern=r"^https?://\S+$")
    note: str = Field(min_length=5)


class BenchmarksFile(_Strict):
    sources: dict[str, SourceNote]
    benchmarks: dict[str, dict[str, BenchmarkFigure]]


class Retention(_Strict):
    source: str = Field(pattern=r"^https?://\S+$")
    measured_on: str
    bf16: float = Field(gt=0, le=100)
    header: str
    types: dict[str, float]


class KLDRow(_Strict):
    kld: float = Field(gt=0, le=20)
    imatrix: str
    line: str = Field(min_length=10)


class KLDTable(_Strict):
    source: str = Field(min_length=10)
    measured_on: str
    types: dict[str, KLDRow]


class Checkpoint(_Strict):
    repo: str = Field(pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # a Hugging Face owner/name
    evidence: str = Field(min_length=8)


class CheckpointsFile(_Strict):
    checkpoints: dict[str, dict[Literal["awq-int4", "gptq-int4", "nvfp4", "fp8"], Checkpoint]]


class SpeedTerms(_Strict):
    """One engine's speed terms (gemma_fit/engines/hf_speed.py): shares of datasheet rates and fixed seconds."""

    bandwidth_efficiency: float = Field(gt=0, le=1)
    compute_efficiency: float = Field(gt=0, le=1)
    prefill_efficiency: float = Field(gt=0, le=1)
    step_overhead_s: float = Field(ge=0, lt=1)
    per_layer_s: float = Field(ge=0, lt=0.1)


class PartialSpeedTerms(_Strict):
    bandwidth_efficiency: float | None = Field(default=None, gt=0, le=1)
    compute_efficiency: float | None = Field(default=None, gt=0, le=1)
    prefill_efficiency: float | None = Field(default=None, gt=0, le=1)
    step_overhead_s: float | None = Field(default=None, ge=0, lt=1)
    per_layer_s: float | None = Field(default=None, ge=0, lt=0.1)


class EngineSpeed(_Strict):
    default: SpeedTerms
    formats: dict[str, PartialSpeedTerms] = {}
    startup_s_budget: float = Field(default=0.0, ge=0, lt=3600)


class SpeedFile(_Strict):
    vllm: EngineSpeed
    transformers: EngineSpeed


def check_engines_file(doc: Doc, report: Report) -> None:
    """model_db/engines/: checkpoints.yaml (pre-quantized repos) or speed.yaml (the HF engines' speed terms)."""
    if doc.path.name == "speed.yaml":
        if validate_with(doc, report, SpeedFile, doc.data, (), [SpeedFile, EngineSpeed, SpeedTerms]) is not None:
            report.counts["engine speed terms"] = 2
        return
    check_checkpoints(doc, report)


def check_checkpoints(doc: Doc, report: Report) -> None:
    """model_db/engines/checkpoints.yaml: a Hugging Face repo with its evidence per model and format."""
    parsed = validate_with(doc, report, CheckpointsFile, doc.data, (), [CheckpointsFile, Checkpoint])
    if parsed is None:
        return
    from gemma_fit.model.catalog import load_model_db

    known = set(load_model_db())
    for model in parsed.checkpoints:
        if model.lower() not in known:
            report.add(doc, ("checkpoints", model), model, "not a model in model_db")
    report.counts["checkpoints"] = sum(len(v) for v in parsed.checkpoints.values())


class QuantsFile(_Strict):
    retention: Retention
    kld: KLDTable


def _model_ids(seen: Seen) -> set[str]:
    return {i for k, i in seen.ids if k == "models"}


def check_quality(doc: Doc, report: Report, seen: Seen) -> None:
    if doc.path.name == "benchmarks.yaml":
        _check_benchmarks(doc, report)
    elif doc.path.name == "quants.yaml":
        _check_quants(doc, report)
    else:
        report.add(doc, (), "(file)", "model_db/quality holds benchmarks.yaml and quants.yaml only")


def _check_benchmarks(doc: Doc, report: Report) -> None:
    parsed = validate_with(doc, report, BenchmarksFile, doc.data, (), [BenchmarksFile, BenchmarkFigure])
    if parsed is None:
        return
    from gemma_fit.model.catalog import load_model_db

    known = set(load_model_db())
    for model, rows in parsed.benchmarks.items():
        if model.lower() not in known:
            report.add(doc, ("benchmarks", model), model, "not a model in model_db")
        for name, fig in rows.items():
            where = ("benchmarks", model, name)
            if fig.source_id is not None and fig.source_id not in parsed.sources:
                report.add(doc, where, f"{model}.{name}.source_id", f"'{fig.source_id}' is not in sources")
            if f"{fig.value:g}" not in fig.quote.replace(",", "") and name != "lmarena_elo":
                report.add(doc, where, f"{model}.{name}.quote", f"the value {fig.value:g} is not in the quoted row")
    report.counts["benchmarks"] = sum(len(r) for r in parsed.benchmarks.values())


def _check_quants(doc: Doc, report: Report) -> None:
    parsed = validate_with(doc, report, QuantsFile, doc.data, (), [QuantsFile, Retention, KLDTable, KLDRow])
    if parsed is None:
        return
    from gemma_fit.gguf.types import file_types

    known = set(file_types())
    rows = [("retention", t) for t in parsed.retention.types] + [("kld", t) for t in parsed.kld.types]
    for section, t in rows:
        if t not in known:
            report.add(doc, (section, "types", t), f"{section}.{t}", "not a file type gemma-fit knows")
    for t, score in parsed.retention.types.items():
        if not 0 < score <= 100:
            report.add(doc, ("retention", "types", t), f"retention.{t}", f"{score:g} is not a score in percent")
    report.counts["quant quality rows"] = len(parsed.retention.types) + len(parsed.kld.types)
