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
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gemma_fit.hardware.catalog import load_gpus, load_hardware_db, name_key  # noqa: E402
from gemma_fit.hardware.schema import BACKENDS  # noqa: E402
from gemma_fit.speed.calibration import (  # noqa: E402
    NEAREST_GROUP,
    REFERENCE_CLOCK_MHZ,
    decode_group,
    prefill_group,
    scalar_peers,
)
from gemma_fit.speed.graph import llama_graph_nodes  # noqa: E402
from gemma_fit.speed.links import default_attachment, host_link  # noqa: E402
from gemma_fit.speed.mmq import padded_columns  # noqa: E402
from gemma_fit.speed.prefill import elementwise_bytes  # noqa: E402
from gemma_fit.speed.rates import attention_tflops, matmul_tops  # noqa: E402

DATA = REPO / "benchmarks" / "data" / "llamabench_calibration.csv"
OUT = REPO / "model_db" / "llamacpp" / "speed_calibration.yaml"

# Published architecture facts of the benchmark models (Meta's Hugging Face config.json files).
# embd_tied: the token embedding doubles as the output matrix, so it is read every token.
BENCH_MODELS = {
    "Llama 2 7B": {"n_embd": 4096, "n_vocab": 32000, "tied": False, "n_ff": 11008,
                   "source": "https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json"},
    "Llama 3 8B": {"n_embd": 4096, "n_vocab": 128256, "tied": False, "n_ff": 14336,
                   "source": "https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json"},
    "Llama 3 70B": {"n_embd": 8192, "n_vocab": 128256, "tied": False, "n_ff": 28672,
                    "source": "https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json"},
    "Llama 3.2 3B Instruct": {"n_embd": 3072, "n_vocab": 128256, "tied": True, "n_ff": 8192,
                              "source": "https://huggingface.co/meta-llama/Llama-3.2-3B-Instruct/blob/main/config.json"},
}
# Repeating layers of the benchmark models (the per-token fixed cost scales with kernels per layer).
BENCH_LAYERS = {"Llama 2 7B": 32, "Llama 3 8B": 32, "Llama 3 70B": 80, "Llama 3.2 3B Instruct": 28}
# Bytes per element of the token embedding in llama-quantize's output for an untied model (the
# file type's base type: Q4_0 -> Q4_0, Q4_K_M -> Q4_K, Q8_0 -> Q8_0, F16 -> F16).
EMBD_BYTES = {"Q4_0": 18 / 32, "Q4_K_M": 144 / 256, "Q8_0": 34 / 32, "F16": 2.0}
# The type most of a file type's matrices are stored in, which picks the kernel's rate (speed.rates.matmul_tops).
BASE_TYPE = {"Q4_0": "Q4_0", "Q4_K_M": "Q4_K", "Q8_0": "Q8_0", "F16": "F16"}


def bytes_per_token(row: dict) -> tuple[float, float]:
    """(weight bytes read per generated token, matmul parameters) of a benchmark row."""
    m = BENCH_MODELS[row["model"]]
    size = float(row["model_size_gib"]) * 2**30
    params = float(row["params_b"]) * 1e9
    embd_params = m["n_embd"] * m["n_vocab"]
    if m["tied"]:
        return size, params  # the embedding is the output matrix: read and multiplied every token
    return size - embd_params * EMBD_BYTES[row["quant"]], params - embd_params


def logits_s(row: dict, gpu) -> float:
    """Seconds per token to copy the logits (n_vocab float32) to the host, as gemma_fit.speed.predict counts."""
    if gpu.unified_memory:
        return 0.0
    return host_link(default_attachment(gpu)).seconds(4.0 * BENCH_MODELS[row["model"]]["n_vocab"])


def recent_default_build(row: dict) -> bool:
    """Scoreboard rows of current builds with flash attention on (the default 'auto' resolves to on);
    the May 2024 snapshot predates today's MMQ kernels."""
    return (row["build_or_date"].startswith("commit") or "scoreboard" in row["build_or_date"]) and \
        row["flash_attn"] in ("1", "unknown")


def efficiencies() -> list[dict]:
    gpus = load_gpus()
    names = load_hardware_db().names  # a row's id may be an alias now (m2-max is m2-max-96gb)
    out = []
    for row in csv.DictReader(DATA.open()):
        gpu = gpus.get(row["gpu_id"]) or gpus.get(names.get(name_key(row["gpu_id"]), ""))
        if gpu is None or row["model"] not in BENCH_MODELS or row["quant"] not in EMBD_BYTES:
            continue
        run_backend = row["backend"].strip().lower()
        if run_backend not in BACKENDS.get(gpu.vendor, ()):
            continue
        gpu = replace(gpu, backend=run_backend)  # e.g. Vulkan runs on NVIDIA cards: the Vulkan groups
        read, matmul_params = bytes_per_token(row)
        tps = float(row["tokens_per_s"])
        if row["test"].startswith("tg") and gpu.memory_bandwidth_gbps:
            eff = tps * read / (gpu.memory_bandwidth_gbps * 1e9)
            out.append({"kind": "decode", "gpu": gpu.id, "group": decode_group(gpu), "eff": eff, "row": row,
                        "x": read / (gpu.memory_bandwidth_gbps * 1e9), "y": 1.0 / tps - logits_s(row, gpu),
                        "nodes": llama_graph_nodes(BENCH_LAYERS[row["model"]]).kernels,
                        "clock": gpu.boost_clock_mhz})
        elif row["test"].startswith("pp") and (recent_default_build(row) or row["quant"] == "F16"
                                                or gpu.backend in ("metal", "vulkan")):
            # F16 prompts run through cuBLAS/hipBLAS/Metal GEMMs, which the May 2024 builds used already;
            # Metal's matrix kernels have not been replaced since the Apple table was started; the Vulkan
            # scoreboard ran with flash attention off, a few percent at pp512
            quantized = row["quant"] != "F16"
            out.append({"kind": "prefill", "gpu": gpu.id, "group": prefill_group(gpu, quantized), "row": row,
                        "spec": gpu, "tps": tps})
    return out


def prefill_parts(p: dict, decode_fits: dict) -> tuple[float, float] | None:
    """gemma_fit.speed.predict's ubatch time for row p, split as (seconds the matrix and attention FLOPs take at
    the rated throughput, seconds of element-wise traffic and per-kernel cost). The prefill efficiency
    is the first over what the measured time leaves of the second. Uses the decode fit for bandwidth
    efficiency and kernel cost."""
    row, gpu = p["row"], p["spec"]
    m = BENCH_MODELS[row["model"]]
    layers = BENCH_LAYERS[row["model"]]
    u = int(row["test"][2:])
    params = float(row["params_b"]) * 1e9 - m["n_embd"] * m["n_vocab"] * (1 if m["tied"] else 2)
    # the layers' matrices are read once per ubatch (not the embedding, nor the output matrix: one token's logits)
    read = float(row["model_size_gib"]) * 2**30 * params / (float(row["params_b"]) * 1e9)
    quantized = row["quant"] not in ("F16", "BF16", "F32")
    tops = matmul_tops(gpu, quantized, BASE_TYPE[row["quant"]])
    fit = decode_fits.get(gpu.backend)
    if not tops or not gpu.memory_bandwidth_gbps or fit is None:
        return None
    e_dec = fit["groups"].get(decode_group(gpu), fit["efficiency"])
    tau = fit["seconds_per_node"] * clock_factor({"clock": gpu.boost_clock_mhz})
    nodes = llama_graph_nodes(layers)
    bw = gpu.memory_bandwidth_gbps * 1e9 * e_dec
    fixed = elementwise_bytes(nodes.kernels, nodes.matmul_nodes, layers * m["n_ff"], m["n_embd"], u) / bw \
        + nodes.kernels * tau + (read / bw if quantized else 0.0)  # MMQ: the read adds to the products (speed.predict)
    attn = 4.0 * m["n_embd"] * u * u * layers  # n_head x head_dim = n_embd
    rated = (2 * params * padded_columns(u) / tops + attn / (attention_tflops(gpu) or tops)) / 1e12
    return rated, fixed


def prefill_efficiency(p: dict, decode_fits: dict) -> float | None:
    parts = prefill_parts(p, decode_fits)
    if parts is None:
        return None
    busy = int(p["row"]["test"][2:]) / p["tps"] - parts[1]
    return parts[0] / busy if busy > 0 else None


# Decode fit bounds: an achieved fraction of datasheet bandwidth outside this range means a fit that
# traded efficiency against the fixed cost, not a physical GPU.
EFF_BOUNDS = (0.2, 0.98)
REF_CLOCK_MHZ = REFERENCE_CLOCK_MHZ  # seconds_per_node is stated for a GPU at this boost clock
TAU_GRID = [i * 0.05e-6 for i in range(0, 400)]  # seconds per graph node, 0 to 20 us


def clock_factor(p: dict) -> float:
    """The per-node cost scales with 1 / boost clock (kernel launch and tail are counted in cycles)."""
    return REF_CLOCK_MHZ / p["clock"] if p.get("clock") else 1.0


def implied_efficiency(p: dict, tau: float) -> float:
    rest = p["y"] - p["nodes"] * tau * clock_factor(p)
    eff = p["x"] / rest if rest > 0 else EFF_BOUNDS[1]
    return min(max(eff, EFF_BOUNDS[0]), EFF_BOUNDS[1])


def decode_efficiencies(points: list[dict], tau: float) -> tuple[dict[str, float], float]:
    """(median efficiency per architecture group, median over the backend) at a given per-node cost."""
    by_group: dict[str, list[float]] = defaultdict(list)
    for p in points:
        by_group[p["group"]].append(implied_efficiency(p, tau))
    return ({g: statistics.median(v) for g, v in by_group.items()},
            statistics.median([e for v in by_group.values() for e in v]))


MIN_GPUS_FOR_OWN_NODE_COST = 5  # fewer GPUs cannot tell the per-node cost from the efficiency
# ROCm borrows CUDA's per-node cost however many cards it has: its scoreboard cards span only 512-960 GB/s on one
# model, which cannot tell the two apart (fitted on six of them: 0.7 us, where its chips fitted on Gemma runs of
# several sizes take 10-13 us, benchmarks/fit_backends.py).
BORROWS_NODE_COST = {"rocm"}


def fit_decode(points: list[dict], tau: float | None = None) -> dict | None:
    """seconds per token = bytes / (bandwidth x efficiency) + graph nodes x seconds per node x
    (2 GHz / boost clock). One seconds-per-node per backend, chosen on a grid to minimise the squared
    log error of the fit (or given: borrowed from another backend); the efficiency of each
    architecture group is the median of what its runs imply at that cost (robust to one odd run)."""
    if not points:
        return None
    best = (0.0, tau) if tau is not None else None
    for tau in TAU_GRID if best is None else []:
        groups, _ = decode_efficiencies(points, tau)
        err = sum(math.log(p["y"] / (p["x"] / groups[p["group"]] + p["nodes"] * tau * clock_factor(p))) ** 2
                  for p in points)
        if best is None or err < best[0]:
            best = (err, tau)
    assert best is not None
    tau = best[1]
    groups, backend_eff = decode_efficiencies(points, tau)
    return {"efficiency": round(backend_eff, 4), "seconds_per_node": round(tau, 10),
            "groups": {g: round(e, 4) for g, e in sorted(groups.items())}}


def decode_fits(points: list[dict]) -> dict:
    """A fit per backend. A backend measured on fewer than MIN_GPUS_FOR_OWN_NODE_COST GPUs, or in
    BORROWS_NODE_COST (ROCm), borrows CUDA's per-node cost: HIP builds the same kernels and graphs from the CUDA
    sources."""
    fits: dict = {}
    decode = [p for p in points if p["kind"] == "decode"]
    backends = sorted({p["group"].split("-")[0] for p in decode})
    few = {b for b in backends if len({p["gpu"] for p in decode if p["group"].startswith(b + "-")})
           < MIN_GPUS_FOR_OWN_NODE_COST} | BORROWS_NODE_COST
    for backend in [b for b in backends if b not in few] + sorted(few):
        mine = [p for p in decode if p["group"].startswith(backend + "-")]
        borrowed = fits.get("cuda", {}).get("seconds_per_node") if backend in few else None
        fit = fit_decode(mine, borrowed)
        if fit is not None:
            fits[backend] = {**fit, "reference_clock_mhz": REF_CLOCK_MHZ,
                             **({"seconds_per_node_from": "cuda"} if borrowed is not None else {})}
    return fits


def with_prefill_efficiencies(points: list[dict], fits: dict) -> list[dict]:
    out = []
    for p in points:
        if p["kind"] == "decode":
            out.append(p)
        elif (eff := prefill_efficiency(p, fits)) is not None:
            out.append({**p, "eff": eff})
    return out


def table(points: list[dict]) -> dict:
    fits = decode_fits(points)
    points = with_prefill_efficiencies(points, fits)
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
    result["decode"]["fits"] = fits
    return result


def by_group(points: list[dict]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for q in points:
        out[q["group"]].append(q["eff"])
    return out


def _predict_prefill_error(train: list[dict], p: dict) -> float | None:
    """|predicted - measured| / measured tokens/s of prefill row p, everything fitted without its GPU."""
    fits = decode_fits(train)
    parts = prefill_parts(p, fits)
    trained = [q for q in with_prefill_efficiencies(train, fits) if q["kind"] == "prefill"]
    same = [q["eff"] for q in trained if q["group"] == p["group"]]
    near = [q["eff"] for q in trained if q["group"] == NEAREST_GROUP.get(p["group"])]
    if not near:  # a Vulkan scalar-shader group borrows the other scalar-shader groups' (calibration.scalar_peers)
        near = scalar_peers(p["group"], {g: {"efficiency": statistics.median(v)} for g, v in by_group(trained).items()})
    pool = same or near or [q["eff"] for q in trained if q["group"].split("-")[0] == p["group"].split("-")[0]]
    if parts is None or prefill_efficiency(p, fits) is None or not pool:
        return None
    rated, fixed = parts
    measured_t = int(p["row"]["test"][2:]) / p["tps"]
    return abs(measured_t / (rated / statistics.median(pool) + fixed) - 1.0)


def _predict_decode(train: list[dict], p: dict) -> float | None:
    """tokens/s for row p from the other GPUs: the per-backend fit (the architecture's efficiency
    where other GPUs of it were measured), else the group median efficiency."""
    backend = p["group"].split("-")[0]
    fit = decode_fits(train).get(backend)
    if fit is not None:
        eff = fit["groups"].get(p["group"], fit["efficiency"])
        return 1.0 / (p["x"] / eff + p["nodes"] * fit["seconds_per_node"] * clock_factor(p))
    same = [q["eff"] for q in train if q["group"] == p["group"]]
    pool = same or [q["eff"] for q in train if q["group"].startswith(backend + "-")]
    return statistics.median(pool) / p["x"] if pool else None


def leave_one_gpu_out(points: list[dict]) -> dict[str, dict[str, list[float]]]:
    """{kind: {group: [relative errors of tokens/s]}}, each GPU predicted from the others."""
    result: dict[str, dict[str, list[float]]] = {}
    for kind in ("decode", "prefill"):
        errors: dict[str, list[float]] = defaultdict(list)
        for p in (q for q in points if q["kind"] == kind):
            train = [q for q in points if q["gpu"] != p["gpu"]]
            if kind == "decode":
                tps = _predict_decode([q for q in train if q["kind"] == "decode"], p)
                err = None if tps is None else abs(tps * p["y"] - 1.0)
            else:
                err = _predict_prefill_error(train, p)
            if err is not None:
                errors[p["group"]].append(err)
        result[kind] = dict(errors)
    return result


def print_errors(errors: dict[str, dict[str, list[float]]]) -> None:
    for kind, groups in errors.items():
        print(f"{kind}: leave-one-GPU-out error of tokens/s (|predicted - measured| / measured)")
        everything = [e for v in groups.values() for e in v]
        if everything:
            print(f"  all: n={len(everything)} median {100 * statistics.median(everything):.1f}%  "
                  f"worst {100 * max(everything):.1f}%  within 15%: "
                  f"{100 * sum(e <= 0.15 for e in everything) / len(everything):.0f}%")
        for group, errs in sorted(groups.items()):
            med, worst = 100 * statistics.median(errs), 100 * max(errs)
            print(f"  {group:22} n={len(errs):3}  median {med:5.1f}%  worst {worst:5.1f}%  "
                  f"within 15%: {sum(e <= 0.15 for e in errs)}/{len(errs)}")


MULTI_GPU_DATA = REPO / "benchmarks" / "data" / "multigpu_llamabench.csv"
# Repeating layers of the models in the multi-GPU pairs (their configs; Gemma 4 31B from model_db).
MULTI_GPU_LAYERS = {"Llama 70B": 80, "Llama 8B": 32, "Llama 1B": 16, "Gemma 4 31B": 60}
LLAMA_MATMULS_PER_LAYER = 7  # q, k, v, output, gate, up, down
PCIE_LATENCY_S = 10e-6  # per hand-over; below what the published pairs resolve (see links_table)


def links_table() -> dict:
    """Multi-GPU costs from same-machine pairs in benchmarks/data/multigpu_llamabench.csv (tg128,
    2026 builds). Against the layer split of the same run, a split that shares every matrix over n
    GPUs would ideally take 1/n of the time; the rest is the split's own cost:
      row:    per gathered matrix product (layers x 7 products)
      tensor: per all-reduce (two per layer)
    The layer split's own hand-over is not resolved: going from 2 to 4 GPUs changed tg128 by < 1%
    (A16 8B 37.18 -> 37.44 t/s, 4090 70B 19.22 -> 19.80), so PCIE_LATENCY_S stays a 10 us budget."""
    rows = list(csv.DictReader(MULTI_GPU_DATA.open()))

    def tps(model: str, n: str, mode: str) -> float | None:
        for r in rows:
            if r["model"] == model and r["n_gpus"] == n and r["split_mode"] == mode and r["test"] == "tg128":
                return float(r["tokens_per_s"])
        return None

    row_costs, tensor_costs = [], []
    for model, layers in MULTI_GPU_LAYERS.items():
        for n in ("2", "4"):
            layer = tps(model, n, "layer")
            if layer is None:
                continue
            ideal = 1.0 / layer / int(n)
            if (row := tps(model, n, "row")) is not None:
                row_costs.append((1.0 / row - ideal) / (layers * LLAMA_MATMULS_PER_LAYER))
            if (tensor := tps(model, n, "tensor")) is not None and tensor > layer:  # the 4090 70B run is broken
                tensor_costs.append((1.0 / tensor - ideal) / (2 * layers))
    return {"pcie_latency_s": PCIE_LATENCY_S, "nvlink_latency_s": PCIE_LATENCY_S,
            "row_gather_s": round(statistics.median(row_costs), 7),
            "tensor_allreduce_s": round(statistics.median(tensor_costs), 7),
            "n_row_pairs": len(row_costs), "n_tensor_pairs": len(tensor_costs),
            "source": "benchmarks/calibrate_speed.py links_table over benchmarks/data/multigpu_llamabench.csv; "
                      "no NVLink run was found, so NVLink takes the PCIe hand-over latency"}


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
    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.model.catalog import resolve_model

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


def calibration_doc(points: list[dict]) -> dict:
    """What --write stores in model_db/llamacpp/speed_calibration.yaml."""
    return {
        "source": "benchmarks/calibrate_speed.py over benchmarks/data/llamabench_calibration.csv",
        "note": "decode: seconds per token = bytes / (bandwidth x efficiency) + kernels x seconds_per_node x "
                "(reference clock / boost clock), per backend fit; prefill: efficiency = achieved fraction of "
                "the rated matmul throughput once element-wise traffic and kernel costs are taken off",
        **table(points),
        "cpu": cpu_table(),
        "load": load_table(),
        "links": links_table(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"store the table in {OUT.relative_to(REPO)}")
    args = ap.parse_args()
    points = efficiencies()
    print_errors(leave_one_gpu_out(points))
    if args.write:
        OUT.write_text(yaml.safe_dump(calibration_doc(points), sort_keys=False))
        print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
