#!/usr/bin/env python3
"""Gemma holdout: gemma-fit's decode and prefill predictions against published llama-bench runs of
Gemma models, which the calibration (Llama runs only) never saw.

Data: benchmarks/data/gemma_llamabench.csv (sources per row). Used: llama-bench rows (tg*/pp*) on a
GPU of the hardware database, with the run's backend (as `--backend`), all layers offloaded, a
llama.cpp file type gemma-fit knows. Listed but not scored: the `pp256 (ubatch=1)` rows of a
llama.cpp PR (token-by-token prompt processing skips the output matrix and the logits copy that
every generated token pays, so they are not decode), and rows from serving harnesses and
llama-server (their timing includes other work), and runs whose spread (±) is over half their mean.
Prints per row and the median / worst error; exits 0 (a benchmark, not a test).
"""

from __future__ import annotations

import csv
import re
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gemma_fit.base.errors import BadInput  # noqa: E402
from gemma_fit.engines.llamacpp import run_check  # noqa: E402
from gemma_fit.hardware.catalog import load_gpus  # noqa: E402
from gemma_fit.hardware.schema import BACKENDS  # noqa: E402
from gemma_fit.hardware.select import select_hardware, with_backend  # noqa: E402
from gemma_fit.memory.settings import RunSettings  # noqa: E402
from gemma_fit.model.catalog import resolve_model  # noqa: E402

DATA = REPO / "benchmarks" / "data" / "gemma_llamabench.csv"


def scored_kind(row: dict[str, str]) -> tuple[str, int] | None:
    """('decode'|'prefill', tokens) for a row gemma-fit can be scored on, else None."""
    test = row["test"].strip()
    if m := re.fullmatch(r"tg(\d+)", test):
        return "decode", int(m.group(1))
    if m := re.fullmatch(r"pp(\d+)", test):
        return "prefill", int(m.group(1))
    return None


def predict(row: dict[str, str], kind: str, n: int) -> float:
    fa = "on" if row["flash_attn"].strip().startswith("1") else "auto"
    settings = RunSettings(n_ctx=max(512, n + 256), n_gpu_layers=999, flash_attn=fa)  # type: ignore[arg-type]
    hw = with_backend(select_hardware([row["gpu_id"]], None, ()), row["backend"].strip().lower())
    prompt = max(1, n // 2) if kind == "decode" else n
    result = run_check(resolve_model(row["model"]), row["quant"], settings, hw, prompt_tokens=prompt)
    if result.performance is None:
        raise BadInput(result.detail.speed_error or f"verdict {result.verdict}")
    perf = result.performance
    return perf.decode_tokens_per_s if kind == "decode" else perf.prefill_tokens_per_s


def rows() -> list[dict]:
    """Every row with its prediction, or why it is not scored."""
    gpus = load_gpus()
    out = []
    for row in csv.DictReader(DATA.open()):
        kind_n = scored_kind(row)
        gpu = gpus.get(row["gpu_id"])
        result = {"row": row, "kind": None, "predicted": None, "why": None}
        if kind_n is None:
            result["why"] = "not llama-bench"
        elif "do not use" in row["notes"]:
            result["why"] = "noise: the run's spread is over half its mean"
        elif gpu is None:
            result["why"] = "GPU not in the database"
        elif row["backend"].strip().lower() not in BACKENDS.get(gpu.vendor, ()):
            result["why"] = f"llama.cpp has no {row['backend']} backend for {gpu.name}"
        else:
            try:
                result["predicted"] = predict(row, *kind_n)
                result["kind"] = kind_n[0]
            except BadInput as exc:
                result["why"] = str(exc)
        out.append(result)
    return out


def score() -> dict[str, list[float]]:
    """{'decode': [relative errors], 'prefill': [...]} over the scored rows."""
    errors: dict[str, list[float]] = {"decode": [], "prefill": []}
    for r in rows():
        if r["kind"] is not None:
            errors[r["kind"]].append(abs(r["predicted"] / float(r["row"]["tokens_per_s"]) - 1))
    return errors


def main() -> None:
    print(f"{'gpu':22} {'model':18} {'quant':7} {'test':18} {'measured':>9} {'predicted':>9} {'error':>7}")
    for r in rows():
        row = r["row"]
        measured = float(row["tokens_per_s"])
        if r["kind"] is not None:
            print(f"{row['gpu_id']:22} {row['model']:18} {row['quant']:7} {row['test']:18} {measured:9.1f} "
                  f"{r['predicted']:9.1f} {100 * (r['predicted'] / measured - 1):+6.1f}%")
        else:
            print(f"{row['gpu_id'] or row['gpu'][:22]:22} {row['model']:18} {row['quant'][:7]:7} "
                  f"{row['test'][:18]:18} {measured:9.1f}   not scored: {r['why']}")
    for kind, errs in score().items():
        if errs:
            print(f"{kind}: n={len(errs)} median {100 * statistics.median(errs):.1f}%  worst {100 * max(errs):.1f}%  "
                  f"within 15%: {sum(e <= 0.15 for e in errs)}/{len(errs)}")


if __name__ == "__main__":
    main()
