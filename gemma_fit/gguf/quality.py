"""What a configuration is worth, from published data only (model_db/quality/): the model's benchmark result
from its card, times what its file type keeps of the full-precision model's score (Unsloth's 5-shot MMLU of
Gemma 3 27B per quant; for types they did not measure, placed by llama.cpp's own KL-divergence scoreboard)."""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from gemma_fit.base.record import record
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.gguf.types import UNQUANTIZED, FileType

RANKING_BENCHMARK = "mmlu_pro_it"  # published for Gemma 2, 3 (1B-27B), 3n and 4: the widest common benchmark


@record
class Benchmark:
    name: str  # e.g. mmlu_pro_it
    value: float
    setup: str
    source: str
    scale: str  # figures on one scale compare (same benchmark, same setup); else a ranking says it mixes them


@record
class Quality:
    score: float | None  # benchmark x retention, in the benchmark's unit; None without a published benchmark
    benchmark: Benchmark | None
    retention: float  # of the full-precision model's score, at most 1
    retention_how: str

    def why(self) -> str:
        if self.benchmark is None or self.score is None:
            return (f"no published {RANKING_BENCHMARK} for this model; its quant keeps {self.retention:.1%} "
                    f"({self.retention_how})")
        return (f"{self.benchmark.name} {self.benchmark.value:g} ({self.benchmark.setup}) x {self.retention:.3f} "
                f"for its quant ({self.retention_how}) = {self.score:.1f}")


@cache
def _data(name: str) -> dict[str, Any]:
    return dict(read_packaged_yaml(f"quality/{name}"))


def benchmarks(model_id: str) -> dict[str, Benchmark]:
    rows = _data("benchmarks.yaml")["benchmarks"].get(model_id) or {}
    return {k: Benchmark(k, float(v["value"]), str(v["setup"]), str(v["source"]), str(v.get("scale", k)))
            for k, v in rows.items()}


def _measured() -> dict[str, float]:
    r = _data("quants.yaml")["retention"]
    return {t: min(1.0, float(score) / float(r["bf16"])) for t, score in r["types"].items()}


def _kld() -> dict[str, float]:
    return {t: float(v["kld"]) for t, v in _data("quants.yaml")["kld"]["types"].items()}


@cache
def retention(quant: str) -> tuple[float, str]:
    """What a file type keeps of the full-precision score, and how that is known."""
    measured, kld = _measured(), _kld()
    if quant in UNQUANTIZED:
        return 1.0, "full precision"
    if quant in measured:
        return measured[quant], "measured on Gemma 3 27B, 5-shot MMLU"
    if quant not in kld:
        raise KeyError(quant)
    known = sorted((kld[t], t) for t in measured if t in kld)
    k = kld[quant]
    below = [x for x in known if x[0] <= k]
    above = [x for x in known if x[0] >= k]
    lo, hi = (below[-1] if below else above[0]), (above[0] if above else below[-1])
    if lo[1] == hi[1]:
        return measured[lo[1]], f"as {lo[1]} (nearest in llama.cpp's KLD scoreboard)"
    f = (math.log(k) - math.log(lo[0])) / (math.log(hi[0]) - math.log(lo[0]))
    value = measured[lo[1]] + f * (measured[hi[1]] - measured[lo[1]])
    return value, f"between {lo[1]} and {hi[1]} by llama.cpp's KLD scoreboard"


def quant_retention(ft: FileType) -> tuple[float, str]:
    """A file type's retention: its own, a recipe's measured row, or an Unsloth UD recipe's base type."""
    for name in (ft.name, ft.mix_of, "QAT_Q4_0" if ft.name.startswith("QAT") else None, ft.default_type.name):
        if name is not None:
            try:
                kept, how = retention(name)
            except KeyError:
                continue
            return kept, how if name == ft.name else f"as {name}: {how}"
    return 1.0, "not measured"  # unreachable for the database's types; a test holds every one to a row


def quality(model_id: str, ft: FileType) -> Quality:
    bench = benchmarks(model_id).get(RANKING_BENCHMARK)
    kept, how = quant_retention(ft)
    return Quality(round(bench.value * kept, 2) if bench else None, bench, kept, how)
