"""Fit and check the serving model (aggregate throughput at N concurrent requests) on published runs.

    python benchmarks/fit_serving.py            # print each run's prediction and the errors
    python benchmarks/fit_serving.py --write    # also write the fitted terms into the packaged YAML

Runs: benchmarks/data/serving_runs.csv (each row with its source URL). `use` = fit (fitted on), check (predicted,
never fitted: too few or too uncertain) and variable-length (ShareGPT bursts whose duration is the longest output,
their per-request lengths not copied): printed, not scored. A row with kv_cache_gib is held to the requests that KV
cache holds, as the product caps --parallel at the KV pool.
Bursts (all requests at once, outputs ending at their own lengths) are replayed step by step: from their per-request
lengths where benchmarks/data/serving_bursts.yaml has them, else (mode burst-cap) with every request at the cap.
- vLLM (gemma_fit/engines/hf_speed.py): bandwidth efficiency, matrix efficiency (prefill the same) and a fixed
  cost per step, by grid search for the least median |log error|; non-Gemma models are described from their
  config.json (benchmarks/data/serving_archs.yaml). Written to model_db/engines/speed.yaml.
- llama.cpp (gemma_fit/speed/serve_llamacpp.py): the share of one token's weight pass each further sequence of a
  batched decode step costs, on llama-batched-bench runs of several machines and backends (`backend`: the one the
  run used); llama-server rows (mode closed) are predicted with their prompts' prefill. Written to
  model_db/llamacpp/batched_decode.yaml.
Each setup is also predicted from a fit without it (leave-one-setup-out), which is the error to expect.
"""

from __future__ import annotations

import csv
import math
import sys
from dataclasses import replace
from functools import cache
from itertools import product
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from gemma_fit.engines.hf_speed import (  # noqa: E402
    HFModelWork,
    hf_model_work,
    hf_pipeline,
    hf_prefill_tps,
    tensor_link,
)
from gemma_fit.engines.llamacpp import run_check  # noqa: E402
from gemma_fit.engines.vllm import batch_defaults  # noqa: E402
from gemma_fit.hardware.select import hardware_of, select_hardware  # noqa: E402
from gemma_fit.memory.settings import RunSettings  # noqa: E402
from gemma_fit.model.catalog import resolve_model  # noqa: E402
from gemma_fit.speed.serve_llamacpp import METAL_MV_MAX_COLUMNS, llamacpp_pipeline  # noqa: E402
from gemma_fit.speed.traffic import LoadPoint, closed_loop  # noqa: E402

RUNS = ROOT / "benchmarks" / "data" / "serving_runs.csv"
ARCHS = ROOT / "benchmarks" / "data" / "serving_archs.yaml"
VLLM_YAML = ROOT / "model_db" / "engines" / "speed.yaml"
LLAMA_YAML = ROOT / "model_db" / "llamacpp" / "batched_decode.yaml"
BURSTS = ROOT / "benchmarks" / "data" / "serving_bursts.yaml"


def runs() -> list[dict[str, str]]:
    with RUNS.open() as f:
        return list(csv.DictReader(f))


@cache
def arch_work(arch: str) -> HFModelWork:
    if arch.startswith("gemma"):
        return hf_model_work(resolve_model(arch, []).spec)
    a = yaml.safe_load(ARCHS.read_text())[arch]
    hd = a["hidden"] // a["heads"]
    attn = a["hidden"] * hd * (2 * a["heads"] + 2 * a["kv_heads"])
    linear = a["layers"] * (attn + 3 * a["hidden"] * a["ffn"])
    if not a["tied"]:
        linear += a["vocab"] * a["hidden"]  # an untied lm_head is a plain matrix the format applies to
    kv = a["layers"] * 2 * a["kv_heads"] * hd * 2
    return HFModelWork(linear, 0, 0.0, a["vocab"] * a["hidden"] if a["tied"] else 0, 0.0, a["layers"], a["hidden"],
                       kv, 0.0, 0, a["layers"] * 4.0 * a["heads"] * hd, 0.0)


@cache
def _gpu(gpu_id: str):  # noqa: ANN202 - a GPUSpec
    return select_hardware([gpu_id], None, []).gpus[0]


@cache
def bursts() -> dict[str, dict]:
    """source_url -> the burst's per-request input_lens and output_lens (benchmarks/data/serving_bursts.yaml)."""
    return {b["source_url"]: b for b in yaml.safe_load(BURSTS.read_text())["runs"]}


def predict_vllm(r: dict[str, str], terms: dict[str, float]) -> float:
    if r["source_url"] in bursts():
        return replay_burst(r, bursts()[r["source_url"]], terms)
    if r["mode"] == "burst-cap":  # every request of the burst at the cap, as the row's figure assumes
        n = int(r["concurrency"])
        return replay_burst(r, {"input_lens": [int(r["input_len"])] * n, "output_lens": [int(r["output_len"])] * n},
                            terms)
    g, tp, w = _gpu(r["gpu"]), int(r["tp"]), arch_work(r["arch"])
    p, o, n = int(r["input_len"]), int(r["output_len"]), int(r["concurrency"])
    if r.get("kv_cache_gib"):  # at most the requests the KV cache the run reported holds (the product's cap)
        per_request = (w.kv_full_bytes_per_token + w.kv_swa_bytes_per_token) * (p + o) / tp
        n = min(n, max(1, int(float(r["kv_cache_gib"]) * 2**30 // per_request)))
    tokens, seqs = batch_defaults(g.usable_memory_bytes, g.name)
    n = min(n, seqs)
    prefill = hf_prefill_tps(w, g, r["quant"], "vllm", n * p, tokens, tp, terms=terms, each_prompt=p)
    return closed_loop(_pipe(r, p + o // 2, terms), prefill, LoadPoint(p, o, n)).aggregate_tokens_per_s


def _pipe(r: dict[str, str], context: int, terms: dict[str, float]):  # noqa: ANN202 - a batch.Pipeline
    """vLLM's decode step of the row's setup at `context` tokens, its tensor-parallel ranks on their peer link."""
    gpus = (_gpu(r["gpu"]),) * int(r["tp"])
    link_gbps, link_latency = tensor_link("vllm", gpus)
    return hf_pipeline(arch_work(r["arch"]), gpus, r["quant"], "vllm", context, len(gpus), link_gbps=link_gbps,
                       link_latency_s=link_latency, terms=terms)


def replay_burst(r: dict[str, str], burst: dict, terms: dict[str, float]) -> float:
    """Output tokens/s of a burst whose requests all arrive at once and stop at their own lengths: every prompt
    prefilled in chunks of max_num_batched_tokens, then decode steps of at most max_num_seqs sequences whose batch
    thins as requests finish (decode_segments), each at the context its requests have reached. The run lasts until
    its last output ends."""
    g, tp, w = _gpu(r["gpu"]), int(r["tp"]), arch_work(r["arch"])
    prompts, outputs = burst["input_lens"], burst["output_lens"]
    mean_prompt = round(sum(prompts) / len(prompts))
    tokens, seqs = batch_defaults(g.usable_memory_bytes, g.name)
    seqs = int(burst.get("max_num_seqs", seqs))
    # multi-step scheduling pays the host's per-step cost once per scheduler_steps decode steps
    terms = terms | {"step_overhead_s": terms["step_overhead_s"] / int(burst.get("scheduler_steps", 1))}
    prefill = hf_prefill_tps(w, g, r["quant"], "vllm", sum(prompts), tokens, tp, terms=terms,
                             each_prompt=mean_prompt)
    seconds = sum(prompts) / prefill
    for batch, steps, generated in decode_segments(tuple(outputs), seqs):
        seconds += steps * _pipe(r, mean_prompt + generated + steps // 2, terms).step_s(batch)
    return sum(outputs) / seconds


@cache
def decode_segments(outputs: tuple[int, ...], seqs: int) -> tuple[tuple[int, int, int], ...]:
    """(sequences decoding, steps, tokens the average one has generated) for each stretch of a burst's decode in which
    the batch holds still: at most `seqs` requests run, in arrival order, each joining with its first token (from its
    prefill) as another finishes."""
    waiting, running, out = list(outputs), [], []  # running: [left, generated]
    while waiting or running:
        while waiting and len(running) < seqs:
            left = waiting.pop(0) - 1
            if left > 0:
                running.append([left, 1])
        if not running:
            continue
        steps = min(left for left, _ in running)
        out.append((len(running), steps, round(sum(g for _, g in running) / len(running))))
        running = [[left - steps, g + steps] for left, g in running if left > steps]
    return tuple(out)


@cache
def _llama_check(gpu: str, backend: str, arch: str, quant: str, n: int, n_ctx: int, prompt: int):  # noqa: ANN202
    hw = replace(hardware_of([gpu], backend or None, ()), speed_calibration=None)
    s = RunSettings(n_ctx=n_ctx, n_parallel=n, kv_unified=True, n_batch=2048, n_ubatch=2048, flash_attn="on")
    return hw, run_check(resolve_model(arch, []), quant, s, hw, prompt_tokens=prompt)


def predict_llamacpp(r: dict[str, str], terms: dict[str, float]) -> float:
    """llama-batched-bench's S_TG (mode decode), or a llama-server's output tokens/s with every request's prompt
    prefilled in turn (mode closed). `terms`: reread (the shared share of a weight pass per further sequence) and,
    for a Metal run, metal_reread and metal_tile (0: no tiled-kernel switch)."""
    p, o, n = int(r["input_len"]), int(r["output_len"]), int(r["concurrency"])
    hw, c = _llama_check(r["gpu"], r.get("backend", ""), r["arch"], r["quant"], n, n * (p + o), p)
    metal = r.get("backend") == "metal"
    reread = terms.get("metal_reread", terms["reread"]) if metal else terms["reread"]
    pipe = llamacpp_pipeline(c.detail.plan, c.detail.estimate, hw, p + o // 2, reread,
                             terms.get("metal_tile", 0.0) if metal else 0.0)
    if r["mode"] == "closed":
        return closed_loop(pipe, float(c.performance.prefill_tokens_per_s), LoadPoint(p, o, n)).aggregate_tokens_per_s
    return pipe.aggregate_tokens_per_s(n)


def _err(pred: float, meas: float) -> float:
    return abs(math.log(pred / meas))


VLLM_GRID = {"bandwidth_efficiency": [x / 100 for x in range(50, 100, 5)],
             "compute_efficiency": [x / 100 for x in range(20, 85, 10)],
             "step_overhead_s": [x / 1000 for x in range(0, 7)]}


def _vllm_grid(rows: list[dict[str, str]], prefill: float | None) -> dict[str, float]:
    """The grid's best bandwidth, decode matrix and per-step terms, prefill's efficiency given (None: the decode
    matrix one's)."""
    best, best_terms = float("inf"), {}
    for bw, ce, ov in product(*VLLM_GRID.values()):
        terms = {"bandwidth_efficiency": bw, "compute_efficiency": ce,
                 "prefill_efficiency": ce if prefill is None else prefill, "step_overhead_s": ov, "per_layer_s": 0.0}
        e = median(_err(predict_vllm(r, terms), float(r["aggregate_tps"])) for r in rows)
        if e < best:
            best, best_terms = e, terms
    return best_terms


def fit_vllm(rows: list[dict[str, str]]) -> dict[str, float]:
    """In turn: every term with prefill at the decode matrix efficiency; prefill's own efficiency with the rest
    held; the rest again with that prefill. A big batch's decode steps and a prompt's chunks are both matrix
    products, but of different shapes and kernels (FlashAttention's prefill path)."""
    first = _vllm_grid(rows, None)
    errs = {pe: median(_err(predict_vllm(r, first | {"prefill_efficiency": pe}), float(r["aggregate_tps"]))
                       for r in rows) for pe in VLLM_GRID["compute_efficiency"]}
    return _vllm_grid(rows, min(errs, key=lambda pe: errs[pe]))


def rounded(terms: dict[str, float]) -> dict[str, float]:
    """The fitted terms as written to model_db/engines/speed.yaml: four significant figures."""
    return {k: float(f"{float(v):.4g}") for k, v in terms.items()}


def _best(grid: list[float], rows: list[dict[str, str]], terms_of) -> float:  # noqa: ANN001
    errs = {f: median(_err(predict_llamacpp(r, terms_of(f)), float(r["aggregate_tps"])) for r in rows) for f in grid}
    return min(errs, key=lambda f: errs[f])


def fit_llamacpp(rows: list[dict[str, str]]) -> dict[str, float]:
    """The shared share of a weight pass per further sequence, on every backend's rows but Metal's; Metal's own
    share on its batches of 2-8 (ggml-metal's matrix-vector kernels) and its tiled kernel's efficiency on its larger
    ones, each where its rows exist."""
    grid = [x / 200 for x in range(0, 41)]
    other = [r for r in rows if r.get("backend") != "metal"]
    terms = {"reread": _best(grid, other, lambda f: {"reread": f})}
    metal = [r for r in rows if r.get("backend") == "metal"]
    vector = [r for r in metal if 1 < int(r["concurrency"]) <= METAL_MV_MAX_COLUMNS]
    tiled = [r for r in metal if int(r["concurrency"]) > METAL_MV_MAX_COLUMNS]
    if vector:
        terms["metal_reread"] = _best([x / 40 for x in range(0, 41)], vector, lambda f: terms | {"metal_reread": f})
    if tiled:
        terms["metal_tile"] = _best([x / 100 for x in range(5, 101)], tiled, lambda f: terms | {"metal_tile": f})
    return terms


def _report(name: str, rows: list[dict[str, str]], predict, fit) -> object:  # noqa: ANN001
    fitted = [r for r in rows if r["use"] == "fit"]
    terms = fit(fitted)
    print(f"\n{name}: fitted on {len(fitted)} runs of {len({r['setup'] for r in fitted})} setups: {terms}")
    errs, loso = [], []
    for setup in sorted({r["setup"] for r in rows}):
        mine = [r for r in rows if r["setup"] == setup]
        others = [r for r in fitted if r["setup"] != setup]
        held = fit(others) if mine[0]["use"] == "fit" and others else terms
        for r in mine:
            meas = float(r["aggregate_tps"])
            pred, pred_out = predict(r, terms), predict(r, held)
            e = (pred / meas - 1) * 100
            print(f"  {setup:48s} N={int(r['concurrency']):4d}  measured {meas:8.1f}  predicted {pred:8.1f} "
                  f"({e:+6.1f}%)  left out {pred_out:8.1f} ({(pred_out / meas - 1) * 100:+6.1f}%)  [{r['use']}]")
            if r["use"] in ("fit", "check"):
                errs.append(abs(e))
                loso.append(abs(pred_out / meas - 1) * 100)
    within = sum(1 for x in loso if x <= 25) / len(loso) * 100
    print(f"  {name} |error|: median {median(errs):.1f}% (fit); leave-one-setup-out median {median(loso):.1f}%, "
          f"{within:.0f}% within 25%, worst {max(loso):.1f}% over {len(loso)} runs")
    return terms


def main() -> None:
    all_runs = runs()
    vllm_terms = _report("vLLM", [r for r in all_runs if r["engine"] == "vllm"], predict_vllm, fit_vllm)
    llama = _report("llama.cpp", [r for r in all_runs if r["engine"] == "llama.cpp"], predict_llamacpp,
                      fit_llamacpp)
    if "--write" in sys.argv:
        doc = yaml.safe_load(VLLM_YAML.read_text())
        doc["vllm"]["default"] = rounded(vllm_terms)  # type: ignore[arg-type]
        _write(VLLM_YAML, doc)
        doc = yaml.safe_load(LLAMA_YAML.read_text())
        doc["terms"] = {"weight_pass_share_per_sequence": float(llama["reread"])}  # type: ignore[index]
        if "metal_reread" in llama or "metal_tile" in llama:
            doc["backends"] = {"metal": {"weight_pass_share_per_sequence": float(llama.get("metal_reread",
                                                                                            llama["reread"])),
                                         "matrix_tile_efficiency": float(llama.get("metal_tile", 0.0))}}
        _write(LLAMA_YAML, doc)


def _write(path: Path, doc: dict) -> None:
    head = "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))
    path.write_text(head + yaml.safe_dump(doc, sort_keys=False))
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
