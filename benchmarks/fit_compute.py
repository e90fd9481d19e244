#!/usr/bin/env python3
"""Measure llama.cpp's compute buffer (CPU backend) over a matrix of models and settings and print
how far gemma-fit's compute_buffer model is from it (median, 95th percentile, worst, per model).

    python benchmarks/fit_compute.py            # measure (needs scripts/build_llamacpp.py) and compare
    python benchmarks/fit_compute.py --cached   # compare against benchmarks/data/compute_cpu.json

Measurements are exact bytes from tools/llama_mem_probe.cpp (llama.cpp's own allocator, no_alloc).
They are kept in benchmarks/data/compute_cpu.json with the llama.cpp version.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from gemma_fit.memory.compute_buffer import compute_phases  # noqa: E402
from gemma_fit.memory.kv_cache import kv_cache_layout  # noqa: E402
from gemma_fit.memory.settings import RunSettings  # noqa: E402
from gemma_fit.model.catalog import resolve_model  # noqa: E402

DATA = REPO / "benchmarks" / "data" / "compute_cpu.json"
MODELS = ["gemma-2b", "gemma-7b", "gemma-2-2b", "gemma-2-9b", "gemma-2-27b", "gemma-3-270m", "gemma-3-1b",
          "gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "gemma-3n-E2B", "gemma-3n-E4B", "gemma-4-E2B",
          "gemma-4-E4B", "gemma-4-12B", "gemma-4-26B-A4B", "gemma-4-31B"]
GRID = list(itertools.product(["on", "off"], [4096, 16384, 65536], [256, 512, 1024], [0, 1]))


def settings_of(row: dict) -> RunSettings:
    return RunSettings(n_ctx=row["ctx"], n_ubatch=row["ub"], flash_attn=row["fa"], n_outputs_max=row["nout"])


def measure() -> list[dict]:
    import tempfile

    from llamacpp_probe import probe_memory  # scripts/llamacpp_probe.py

    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.gguf.writer import write_synthetic_gguf

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            spec = resolve_model(model).spec
            path = Path(tmp) / f"{model}.gguf"
            write_synthetic_gguf(build_plan(spec, "Q4_0"), path)
            for fa, ctx, ub, nout in GRID:
                row = {"model": model, "fa": fa, "ctx": ctx, "ub": ub, "nout": nout}
                m = probe_memory(path, settings_of(row))
                row["compute"] = sum(b["compute"] for b in m["buffers"].values())
                row["context"] = sum(b["context"] for b in m["buffers"].values())
                rows.append(row)
            print(f"measured {model}", file=sys.stderr, flush=True)
    return rows


def compare(rows: list[dict]) -> dict:
    errors = []
    for row in rows:
        spec = resolve_model(row["model"]).spec
        s = settings_of(row)
        predicted = compute_phases(spec, s, kv_cache_layout(spec, s)).total
        errors.append(((predicted - row["compute"]) / row["compute"], row, predicted))
    absolute = sorted(abs(e) for e, _, _ in errors)
    summary = {
        "n": len(errors),
        "median_abs_pct": 100 * statistics.median(absolute),
        "p95_abs_pct": 100 * absolute[int(0.95 * len(absolute))],
        "max_abs_pct": 100 * absolute[-1],
        "within_5pct": sum(a <= 0.05 for a in absolute) / len(absolute),
    }
    print(json.dumps(summary, indent=2))
    for model in MODELS:
        errs = [abs(e) for e, r, _ in errors if r["model"] == model]
        if errs:
            print(f"  {model:18} median {100 * statistics.median(errs):5.2f}%  worst {100 * max(errs):5.2f}%")
    worst = sorted(errors, key=lambda x: -abs(x[0]))[:10]
    for err, row, pred in worst:
        print(f"  {100 * err:+6.1f}%  {row['model']} fa={row['fa']} ctx={row['ctx']} ub={row['ub']} "
              f"nout={row['nout']}: measured {row['compute'] / 2**20:.1f} MiB, predicted {pred / 2**20:.1f} MiB")
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cached", action="store_true", help="use the stored measurements")
    args = ap.parse_args()
    if args.cached:
        rows = json.loads(DATA.read_text())["rows"]
    else:
        rows = measure()
        DATA.parent.mkdir(parents=True, exist_ok=True)
        DATA.write_text(json.dumps({"llama_cpp": "0c1e570 (llama-cpp-python 0.3.36), CPU backend",
                                    "rows": rows}, indent=0))
    compare(rows)


if __name__ == "__main__":
    main()
