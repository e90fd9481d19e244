#!/usr/bin/env python3
"""Calibrate gemma-fit's speed model on published llama-bench results and print its error.

Data: benchmarks/data/llamabench_calibration.csv (published llama-bench pp512/tg128 results with their
sources; `gpu_id` links a row to hardware_db). For every row with a known GPU it derives the
efficiency the GPU reached:
  decode:  tg tokens/s x bytes read per token / memory bandwidth
  prefill: pp tokens/s x 2 x matmul parameters / dense tensor throughput (INT8 for quantized
           weights, which llama.cpp multiplies with its MMQ kernels; FP16 for F16/BF16 weights)
then groups them by backend and GPU architecture (median). With --write it stores the table in
model_db/llamacpp/speed_calibration.yaml, which gemma_fit/speed.py reads.

The error report is leave-one-GPU-out: each GPU is predicted from the other GPUs of its group, so
the figures are those for a GPU the calibration never saw. Prints median and worst per group.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gemma_fit.hardware_db import load_gpus  # noqa: E402

DATA = REPO / "benchmarks" / "data" / "llamabench_calibration.csv"
OUT = REPO / "model_db" / "llamacpp" / "speed_calibration.yaml"

# Published architecture facts of the benchmark models (Meta's Hugging Face config.json files).
# embd_tied: the token embedding doubles as the output matrix, so it is read every token.
BENCH_MODELS = {
    "Llama 2 7B": {"n_embd": 4096, "n_vocab": 32000, "tied": False,
                   "source": "https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json"},
    "Llama 3 8B": {"n_embd": 4096, "n_vocab": 128256, "tied": False,
                   "source": "https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json"},
    "Llama 3 70B": {"n_embd": 8192, "n_vocab": 128256, "tied": False,
                    "source": "https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json"},
    "Llama 3.2 3B Instruct": {"n_embd": 3072, "n_vocab": 128256, "tied": True,
                              "source": "https://huggingface.co/meta-llama/Llama-3.2-3B-Instruct/blob/main/config.json"},
}
# Repeating layers of the benchmark models (the per-token fixed cost scales with kernels per layer).
BENCH_LAYERS = {"Llama 2 7B": 32, "Llama 3 8B": 32, "Llama 3 70B": 80, "Llama 3.2 3B Instruct": 28}
# Bytes per element of the token embedding in llama-quantize's output for an untied model (the
# file type's base type: Q4_0 -> Q4_0, Q4_K_M -> Q4_K, Q8_0 -> Q8_0, F16 -> F16).
EMBD_BYTES = {"Q4_0": 18 / 32, "Q4_K_M": 144 / 256, "Q8_0": 34 / 32, "F16": 2.0}


def bytes_per_token(row: dict) -> tuple[float, float]:
    """(weight bytes read per generated token, matmul parameters) of a benchmark row."""
    m = BENCH_MODELS[row["model"]]
    size = float(row["model_size_gib"]) * 2**30
    params = float(row["params_b"]) * 1e9
    embd_params = m["n_embd"] * m["n_vocab"]
    if m["tied"]:
        return size, params  # the embedding is the output matrix: read and multiplied every token
    return size - embd_params * EMBD_BYTES[row["quant"]], params - embd_params


def prefill_tflops(gpu, quant: str) -> float | None:
    """Quantized weights: llama.cpp's MMQ kernels multiply in INT8 on the tensor cores; F16/BF16
    weights go through cuBLAS/hipBLAS in FP16."""
    if quant in ("F16", "BF16", "F32"):
        return gpu.fp16_tensor_tflops
    return gpu.int8_tensor_tops or gpu.fp16_tensor_tflops


def segment(gpu) -> str:
    """Consumer cards boost higher and report tensor throughput differently from workstation and
    datacenter parts, so prefill efficiency is grouped by segment."""
    return "consumer" if "GeForce" in gpu.name else "pro"


def recent_default_build(row: dict) -> bool:
    """Scoreboard rows of current builds with flash attention on (the default 'auto' resolves to on);
    the May 2024 snapshot predates today's MMQ kernels."""
    return (row["build_or_date"].startswith("commit") or "scoreboard" in row["build_or_date"]) and \
        row["flash_attn"] in ("1", "unknown")


def group_of(gpu) -> str:
    return f"{gpu.backend}-{gpu.arch}"


def efficiencies() -> list[dict]:
    gpus = load_gpus()
    out = []
    for row in csv.DictReader(DATA.open()):
        gpu = gpus.get(row["gpu_id"])
        if gpu is None or row["model"] not in BENCH_MODELS or row["quant"] not in EMBD_BYTES:
            continue
        if row["backend"].lower() != gpu.backend:
            continue  # e.g. Vulkan runs on NVIDIA cards: a different software efficiency
        read, matmul_params = bytes_per_token(row)
        tps = float(row["tokens_per_s"])
        if row["test"].startswith("tg") and gpu.memory_bandwidth_gbps:
            eff = tps * read / (gpu.memory_bandwidth_gbps * 1e9)
            out.append({"kind": "decode", "gpu": gpu.id, "group": group_of(gpu), "eff": eff, "row": row,
                        "x": read / (gpu.memory_bandwidth_gbps * 1e9), "y": 1.0 / tps,
                        "layers": BENCH_LAYERS[row["model"]]})
        elif row["test"].startswith("pp") and prefill_tflops(gpu, row["quant"]) and recent_default_build(row):
            eff = tps * 2 * matmul_params / (prefill_tflops(gpu, row["quant"]) * 1e12)
            out.append({"kind": "prefill", "gpu": gpu.id, "group": f"{gpu.backend}-{segment(gpu)}", "eff": eff,
                        "row": row})
    return out


def fit_decode(points: list[dict]) -> tuple[float, float] | None:
    """Least squares of seconds per token = bytes/bandwidth / efficiency + layers x per-layer cost.
    Needs at least three GPUs; returns (efficiency, per-layer seconds)."""
    if len({p["gpu"] for p in points}) < 3:
        return None
    sxx = sum(p["x"] ** 2 for p in points)
    sxl = sum(p["x"] * p["layers"] for p in points)
    sll = sum(p["layers"] ** 2 for p in points)
    sxy = sum(p["x"] * p["y"] for p in points)
    sly = sum(p["layers"] * p["y"] for p in points)
    det = sxx * sll - sxl * sxl
    if det <= 0:
        return None
    a = (sxy * sll - sly * sxl) / det
    c = (sxx * sly - sxl * sxy) / det
    if a <= 0:
        return None
    return 1.0 / a, max(c, 0.0)


def table(points: list[dict]) -> dict:
    result: dict = {"decode": {}, "prefill": {}}
    for kind in ("decode", "prefill"):
        by_group: dict[str, list[float]] = defaultdict(list)
        by_backend: dict[str, list[float]] = defaultdict(list)
        for p in points:
            if p["kind"] == kind:
                by_group[p["group"]].append(p["eff"])
                by_backend[p["group"].split("-")[0]].append(p["eff"])
        result[kind] = {
            "groups": {g: {"efficiency": round(statistics.median(v), 4), "n": len(v)}
                       for g, v in sorted(by_group.items())},
            "backends": {b: {"efficiency": round(statistics.median(v), 4), "n": len(v)}
                         for b, v in sorted(by_backend.items())},
        }
    fits = {}
    for backend in sorted({p["group"].split("-")[0] for p in points if p["kind"] == "decode"}):
        fit = fit_decode([p for p in points if p["kind"] == "decode" and p["group"].startswith(backend + "-")])
        if fit is not None:
            fits[backend] = {"efficiency": round(fit[0], 4), "per_layer_s": round(fit[1], 9)}
    result["decode"]["fits"] = fits
    return result


def _predict_decode(train: list[dict], p: dict) -> float | None:
    """tokens/s for row p from the other GPUs: the per-backend fit, else the group median efficiency."""
    backend = p["group"].split("-")[0]
    fit = fit_decode([q for q in train if q["group"].startswith(backend + "-")])
    if fit is not None:
        return 1.0 / (p["x"] / fit[0] + p["layers"] * fit[1])
    same = [q["eff"] for q in train if q["group"] == p["group"]]
    pool = same or [q["eff"] for q in train if q["group"].startswith(backend + "-")]
    return statistics.median(pool) / p["x"] if pool else None


def leave_one_gpu_out(points: list[dict]) -> None:
    for kind in ("decode", "prefill"):
        errors: dict[str, list[float]] = defaultdict(list)
        for p in (q for q in points if q["kind"] == kind):
            others = [q for q in points if q["kind"] == kind and q["gpu"] != p["gpu"]]
            if kind == "decode":
                tps = _predict_decode(others, p)
                if tps is not None:
                    errors[p["group"]].append(abs(tps * p["y"] - 1.0))
                continue
            same = [q["eff"] for q in others if q["group"] == p["group"]]
            pool = same or [q["eff"] for q in others if q["group"].split("-")[0] == p["group"].split("-")[0]]
            if not pool:
                continue
            predicted = statistics.median(pool)
            errors[p["group"]].append(abs(predicted - p["eff"]) / p["eff"])
        print(f"{kind}: leave-one-GPU-out error of tokens/s (|predicted - measured| / measured)")
        everything = [e for v in errors.values() for e in v]
        if everything:
            print(f"  all: n={len(everything)} median {100 * statistics.median(everything):.1f}%  "
                  f"worst {100 * max(everything):.1f}%  within 15%: "
                  f"{100 * sum(e <= 0.15 for e in everything) / len(everything):.0f}%")
        for group, errs in sorted(errors.items()):
            med, worst = 100 * statistics.median(errs), 100 * max(errs)
            print(f"  {group:22} n={len(errs):3}  median {med:5.1f}%  worst {worst:5.1f}%")


CPU_DATA = REPO / "benchmarks" / "data" / "cpu_llamabench.json"
LOAD_DATA = REPO / "benchmarks" / "data" / "load_measurements.json"


def load_table() -> dict:
    """Load-time terms: the page-cache read fraction measured by benchmarks/measure_load.py; the fixed
    setup seconds stay a budget until a GPU run times them."""
    doc = json.loads(LOAD_DATA.read_text()) if LOAD_DATA.is_file() else {}
    return {"page_cache_fraction_of_ram": doc.get("page_cache_fraction_of_ram", 0.9),
            "setup_s_budget": 0.5,
            "source": "benchmarks/measure_load.py -> benchmarks/data/load_measurements.json (page cache); "
                      "setup_s_budget is not measured"}


def cpu_table() -> dict | None:
    """CPU efficiencies from benchmarks/measure_cpu_speed.py (llama-bench on this kind of machine)."""
    if not CPU_DATA.is_file():
        return None
    from gemma_fit.model_db import resolve_model
    from gemma_fit.tensor_plan import build_plan

    doc = json.loads(CPU_DATA.read_text())
    bw = doc["machine"]["read_bandwidth_gbps"] * 1e9
    decode, prefill = [], []
    for r in doc["rows"]:
        plan = build_plan(resolve_model(r["model"]).spec, r["quant"])
        # tied Gemma: the embedding is read once per token as the output matrix, never as input rows
        read = plan.tensor_data_bytes
        flops = 2 * sum(t.n_elements for t in plan.tensors if t.role != "input" and len(t.shape) >= 2)
        if r["n_gen"]:
            decode.append(r["tokens_per_s"] * read / bw)
        else:
            prefill.append(r["tokens_per_s"] * flops / r["threads"] / 1e9)
    return {"decode_efficiency": round(statistics.median(decode), 3),
            "prefill_gflops_per_core": round(statistics.median(prefill), 1),
            "n": len(doc["rows"]), "machine": doc["machine"],
            "source": "benchmarks/measure_cpu_speed.py -> benchmarks/data/cpu_llamabench.json"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"store the table in {OUT.relative_to(REPO)}")
    args = ap.parse_args()
    points = efficiencies()
    leave_one_gpu_out(points)
    if args.write:
        doc = {
            "source": "benchmarks/calibrate_speed.py over benchmarks/data/llamabench_calibration.csv",
            "note": "efficiency = achieved fraction of datasheet memory bandwidth (decode) or dense FP16 tensor "
                    "throughput (prefill) in published llama-bench runs; median per backend-architecture group",
            **table(points),
            "cpu": cpu_table(),
            "load": load_table(),
        }
        OUT.write_text(yaml.safe_dump(doc, sort_keys=False))
        print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
