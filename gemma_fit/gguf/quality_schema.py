"""The schema of model_db/quality/ (read by gguf.quality, checked by `db validate`): every benchmark figure with
its setup, source and the source's row verbatim; every quant's retention and KLD row."""

from __future__ import annotations

from pydantic import Field

from gemma_fit.db.schema import Strict


class BenchmarkFigure(Strict):
    value: float = Field(ge=0, le=5000)  # percent, or an Elo score
    setup: str = Field(min_length=3)
    source: str = Field(pattern=r"^https?://\S+$")
    source_id: str | None = None
    quote: str = Field(min_length=5)
    scale: str | None = None  # what the figure compares with (same benchmark and setup); default: the benchmark


class SourceNote(Strict):
    url: str = Field(pattern=r"^https?://\S+$")
    note: str = Field(min_length=5)


class BenchmarksFile(Strict):
    sources: dict[str, SourceNote]
    benchmarks: dict[str, dict[str, BenchmarkFigure]]


class Retention(Strict):
    source: str = Field(pattern=r"^https?://\S+$")
    measured_on: str
    bf16: float = Field(gt=0, le=100)
    header: str
    types: dict[str, float]


class KLDRow(Strict):
    kld: float = Field(gt=0, le=20)
    imatrix: str
    line: str = Field(min_length=10)


class KLDTable(Strict):
    source: str = Field(min_length=10)
    measured_on: str
    types: dict[str, KLDRow]


class QuantsFile(Strict):
    retention: Retention
    kld: KLDTable
