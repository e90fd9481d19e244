"""`gemma-fit db validate`'s checks of model_db/quality/: every benchmark figure with its setup, source and the
source's row verbatim (the value must appear in it), for a model the database has; every quant row for a file
type llama.cpp (or a published recipe) has, with a score in range."""

from __future__ import annotations

from gemma_fit.engines.data_schema import (
    Checkpoint,
    CheckpointsFile,
    EngineSpeed,
    EngineVersions,
    SpeedFile,
    SpeedTerms,
    VersionChange,
    VersionsFile,
)
from gemma_fit.gguf.quality_schema import BenchmarkFigure, BenchmarksFile, KLDRow, KLDTable, QuantsFile, Retention
from gemma_fit.jobs.validate.common import Doc, Report, Seen, validate_with


def check_engines_file(doc: Doc, report: Report) -> None:
    """model_db/engines/: checkpoints.yaml (pre-quantized repos) or speed.yaml (the HF engines' speed terms)."""
    if doc.path.name == "versions.yaml":
        parsed = validate_with(doc, report, VersionsFile, doc.data, (), [VersionsFile, EngineVersions, VersionChange])
        for name, t in (("vllm", parsed.vllm), ("ollama", parsed.ollama)) if parsed is not None else ():
            unknown = {c.key for c in t.changes} - set(t.initial)
            if unknown:
                report.add(doc, (name, "changes"), name, f"changes to keys without an initial value: {sorted(unknown)}")
        return
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
