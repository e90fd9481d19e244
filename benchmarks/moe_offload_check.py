#!/usr/bin/env python3
"""Predicted beside published decode and prefill for Gemma 4 26B-A4B with routed experts in system memory.

The runs are in benchmarks/data/moe_offload_runs.csv (each with its source URL and a verbatim quote); the
ones whose machine is stated are predicted here with the same flags. Published files are Unsloth UD-*
mixes, which gemma-fit does not model yet: the nearest plain file type stands in (named in each row), so
the weights per token differ by the mix. Speed does not depend on the GPU's capacity, so the GPU is given
room enough for the placement the run used. Prints one line per run and the median absolute error.

With --write it first fits model_db/llamacpp/hybrid_decode.yaml: the two runs differ in how many layers
keep their experts on the CPU (30 and 9), which separates a per-token cost per GPU kernel (the split
graph) from one per CPU-expert layer; the measured time less the prediction without either term gives
two equations in the two terms.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gemma_fit.gguf.tensors import build_plan  # noqa: E402
from gemma_fit.hardware.catalog import resolve_cpu  # noqa: E402
from gemma_fit.hardware.select import Hardware  # noqa: E402
from gemma_fit.hardware.snapshot import known_hardware  # noqa: E402
from gemma_fit.memory.estimate import estimate_memory  # noqa: E402
from gemma_fit.memory.settings import RunSettings  # noqa: E402
from gemma_fit.model.catalog import resolve_model  # noqa: E402
from gemma_fit.speed.cpu import _hybrid, hybrid_split_s  # noqa: E402
from gemma_fit.speed.predict import clear_speed_cache, predict_performance  # noqa: E402
from gemma_fit.speed.work import device_work  # noqa: E402

TABLE = REPO / "model_db" / "llamacpp" / "hybrid_decode.yaml"

GIB = 1024**3
# (what the run was, stand-in quant, -ot, threads, measured tg128, measured pp512); the machine of all three:
# RTX 4070 12 GB, i5-12600K, DDR5-6000 dual channel (carteakey.dev / l3ms rows of moe_offload_runs.csv)
RUNS = (
    ("UD-Q5_K_XL, all routed experts on the CPU", "Q5_K_M", r"\.ffn_.*_exps=CPU", 10, 25.38, 809.82),
    ("QAT UD-Q4_K_XL, experts of layers 21-29 on the CPU", "Q4_0", r"blk\.(2[1-9])\.ffn_.*_exps=CPU", 10,
     45.03, 1323.8),
)


def _predict(what: str, quant: str, ot: str, threads: int) -> tuple[float, float, float, int]:
    """(decode tok/s, prefill tok/s, GPU kernels per token, layers with experts on the CPU)."""
    model = resolve_model("gemma-4-26B-A4B").spec
    gpu = known_hardware().gpu("rtx-4070")
    assert gpu is not None
    gpu = replace(gpu, usable_memory_bytes=24 * GIB)  # speed only: room for the run's own placement
    plan = build_plan(model, quant)
    s = RunSettings(override_tensor=(ot,), cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on", n_batch=1024)
    est = estimate_memory(plan, s, (gpu,), model.n_layer + 1, None)
    hw = Hardware("RTX 4070 + i5-12600K", (gpu,), 64 * GIB, None, cpu_cores=threads, ram_bandwidth_gbps=96.0,
                  cpu=resolve_cpu("core-i5-12600k"))
    perf = predict_performance(plan, est, hw, 512)
    work = device_work(plan, est, 1, 512)
    return perf.decode_tokens_per_s, perf.prefill_tokens_per_s, work.nodes[0], work.cpu_expert_layers


def fit() -> None:
    rows = []
    for what, quant, ot, threads, tg, _ in RUNS:
        decode, _, kernels, layers = _predict(what, quant, ot, threads)
        gap = 1 / tg - (1 / decode - hybrid_split_s(kernels, layers))  # measured less the rest of the prediction
        rows.append((kernels, layers, gap))
    (k1, l1, g1), (k2, l2, g2) = rows
    per_kernel = (g1 * l2 - g2 * l1) / (k1 * l2 - k2 * l1)
    per_layer = (g1 - k1 * per_kernel) / l1
    # a split cannot save time: where the exact pair has a negative term, that term is 0 and the other is the
    # least-squares fit of the gaps (0 too where they are all negative)
    if per_layer < 0:
        per_layer, per_kernel = 0.0, max(0.0, (k1 * g1 + k2 * g2) / (k1 * k1 + k2 * k2))
    elif per_kernel < 0:
        per_kernel, per_layer = 0.0, max(0.0, (l1 * g1 + l2 * g2) / (l1 * l1 + l2 * l2))
    head = "".join(line for line in TABLE.read_text(encoding="utf-8").splitlines(keepends=True) if line.startswith("#"))
    body = {"source": "benchmarks/moe_offload_check.py over benchmarks/data/moe_offload_runs.csv",
            "seconds_per_gpu_kernel": float(f"{per_kernel:.3g}"),
            "seconds_per_cpu_expert_layer": float(f"{per_layer:.3g}"),
            "n_runs": len(rows)}
    TABLE.write_text(head + yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    _hybrid.cache_clear()
    clear_speed_cache()  # predictions cached before the new figures
    print(f"fitted: {per_kernel * 1e6:.2f} us per GPU kernel, {per_layer * 1e6:.0f} us per CPU-expert layer")


def main() -> None:
    if "--write" in sys.argv:
        fit()
    errors = []
    for what, quant, ot, threads, tg, pp in RUNS:
        decode, prefill, _, _ = _predict(what, quant, ot, threads)
        err = decode / tg - 1
        errors.append(abs(err))
        print(f"{what} ({quant} stands in): decode {decode:.1f} vs {tg} tok/s ({err:+.0%}), "
              f"prefill {prefill:.0f} vs {pp} tok/s ({prefill / pp - 1:+.0%})")
    print(f"median |decode error| {statistics.median(errors):.0%} over {len(errors)} runs")


if __name__ == "__main__":
    main()
