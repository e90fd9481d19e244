#!/usr/bin/env python3
"""Fit decode and prefill efficiencies per backend group and chip on published Gemma runs, and print what that
changes, leaving each machine out in turn.

The llama-bench fit (benchmarks/calibrate_speed.py) has no or few runs for some backends: AMD GPUs through
Vulkan borrow the Vulkan median, which Intel's runs set (0.07 of the rated matrix rate, where Strix Halo's RADV
reaches several times that); a chip such as Strix Halo's gfx1151 under ROCm borrows discrete RDNA 3 cards'.
Here every published Gemma run of benchmarks/evaluate_speed.py's rows gives the efficiency that would make the
prediction equal the published figure (the model is linear in 1 / efficiency: t = a + b / e, solved from two
predictions); the fitted figure is the median over machines of each machine's median, per:
- chip: `group@compute capability` (e.g. `rocm-quantized@gfx1151`), with at least MIN_RUNS runs;
- group (e.g. `vulkan-amd`), where the llama-bench table has no runs of that group, from all its chips.
A backend that multiplies a batch's experts one by one from the host (SYCL; CUDA and ROCm for F16/BF16 experts past what
MMF takes: speed.prefill.loops_from_host) gets its
seconds per expert product from its mixture-of-experts prompt runs (`expert_loop`), once its dense runs have set the
matrix rate. AMDVLK runs (AMD's discontinued Vulkan driver; distributions ship Mesa's RADV) are fitted in groups of
their own (`vulkan-amd/amdvlk@gfx1151`), which only `--vulkan-driver amdvlk` reads.

    python benchmarks/fit_backends.py           # fitted figures, errors before / in-sample / leave-one-machine-out
    python benchmarks/fit_backends.py --write   # model_db/llamacpp/speed_published.yaml
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import evaluate_speed as ev  # noqa: E402
import fit_cpu_decode as fcd  # noqa: E402

from gemma_fit.gguf.tensors import build_plan  # noqa: E402
from gemma_fit.memory.settings import RunSettings  # noqa: E402
from gemma_fit.speed import calibration as cal  # noqa: E402
from gemma_fit.speed import cpu as cpu_speed  # noqa: E402
from gemma_fit.speed import prefill  # noqa: E402
from gemma_fit.speed import vector as vector_speed  # noqa: E402
from gemma_fit.speed.batch import experts_touched  # noqa: E402
from gemma_fit.speed.predict import clear_speed_cache  # noqa: E402
from gemma_fit.speed.rates import arithmetic_decode, shader_fp32_tflops, uses_matrix_units  # noqa: E402
from gemma_fit.speed.work import token_work  # noqa: E402

OUT = REPO / "model_db" / "llamacpp" / "speed_published.yaml"
MIN_RUNS = 3
# A chip that is one product (an APU, a SoC) is measured by its own runs: two of them outweigh the discrete cards'
# median it otherwise borrows (the AGX Orin's two Gemma decode runs, 35 and 11 tok/s, against 55 and 21 predicted
# from discrete Ampere; its llama-bench runs of 14B and 32B models read ~0.7 of its bandwidth, not the cards' 0.88).
MIN_CHIP_RUNS = 2
# A prompt row informs the matrix-product efficiency only where that term is at least this share of its predicted
# time (Jetson Thor's prefill is predicted bound by reading the weights, its matrix rate barely counting: solving for
# it gave 0.0005). Attention is a small share by nature and keeps every row.
MIN_SHARE = 0.2
KINDS = {"prefill": "prefill", "decode": "decode", "batched": "decode"}
# A prompt longer than this tells attention's efficiency, not the matrix products': its time grows with the square of
# its length (the Arc Pro B70's Gemma 4 31B prompts at 4,096 to 32,768 tokens, fitted as matrix products, halved the
# SYCL figure its pp512 runs give). A single ubatch's worth more (a page's 2,049-token prompts) still tells the rate.
MAX_RATE_PROMPT = 4095


UNFITTED = ev.UNFITTED
excluded = ev.excluded


def _gpu(r: dict[str, Any]) -> Any:
    hw = ev.hardware_for(r)
    return hw.gpus[0] if hw is not None and hw.gpus else None


def group_of(r: dict[str, Any]) -> tuple[str, str, str | None] | None:
    """(kind, group, chip key) the row's efficiency belongs to."""
    g = _gpu(r)
    if g is None or r["m"].kind == "batched":
        return None
    kind = KINDS[r["m"].kind]
    if kind == "prefill" and (r["m"].depth or r["m"].n_prompt > MAX_RATE_PROMPT):
        kind, group = "attention", cal.attention_group(g)
    elif kind == "prefill" and _loops_experts(r, g):
        return "expert_loop", g.backend, None  # its experts' host loop, not the matrix rate, sets it apart
    elif kind == "decode":
        group = cal.decode_group(g)
    elif (experts := cal.expert_group(g, _quantized(r))) and _moe(r):
        kind, group = "prefill_experts", experts  # fitted after the dense products' share, on the experts' time
    else:
        group = cal.prefill_group(g, _quantized(r))
    # a chip of its own where the chip is one product (an APU, a SoC), or where the llama-bench fit has no card of its
    # architecture (RDNA 4's R9700: its INT8 matrix rate is twice its FP16 one, the RDNA 3 cards' equal); otherwise a
    # discrete card's compute capability spans a whole generation, which the llama-bench fit covers card by card
    # (an Apple GPU's decode is fitted per architecture by the llama-bench fit already: its prompts are not)
    name = g.compute_capability if kind == "decode" else cal.chip_of(g)
    chip = f"{group}@{name}" if name and (g.unified_memory or not _arch_measured(g)) else None
    if g.vulkan_driver:  # a driver fitted apart: its own group and chip
        group = cal.driver_group(group, g)
        chip = f"{group}@{name}" if name else None
    if kind == "decode" and r["m"].depth and kv_time_share(r, chip or group) >= MIN_KV_SHARE:
        kind = "decode_kv"  # a long cache: its reads tell the KV cache's share of the bandwidth, not the weights'
    return kind, group, chip


# A decode run at depth tells the KV cache's share of the bandwidth only where reading the cache is at least this share
# of its predicted time; below it, it tells the weights' like a run without depth (the Jetson AGX Orin's two runs at
# 2,048 cached tokens, the cache a tenth of their bytes, would put the cache at 0.03 of the bandwidth).
MIN_KV_SHARE = 0.2


def kv_time_share(r: dict[str, Any], key: str) -> float:
    """The share of the row's predicted time its KV cache reads take, with the efficiencies installed now and the
    llama-bench fit's own per-node costs (so that a row's kind does not hang on the chips' fitted ones)."""
    live = cal.published_groups()
    saved = live.pop("node_cost", None)
    try:
        e0 = cal.decode_model(_gpu(r)).kv_share()
        _set("decode_kv", key, e0)
        p0 = ev.predict_row(r)
        _set("decode_kv", key, 2 * e0)
        p1 = ev.predict_row(r)
        _set("decode_kv", key, None)
    finally:
        if saved is not None:
            live["node_cost"] = saved
        clear_speed_cache()
    return 2 * (1 / p0 - 1 / p1) * p0 if p0 and p1 else 0.0


def _arch_measured(g: Any) -> bool:
    """Whether the llama-bench fit has runs of this GPU's architecture on its backend (its decode groups say)."""
    fits = cal.calibration()["decode"].get("fits") or {}
    return cal.decode_group(g) in (fits.get(g.backend) or {}).get("groups", {})


def _set(kind: str, key: str, e: float | None) -> None:
    clear_speed_cache()  # the predictions cached so far used the old figure
    table = cal.published_groups().setdefault(TABLE_OF.get(kind, kind), {})
    if e is None:
        table.pop(key, None)
    else:
        table[key] = {"efficiency": e, "runs": 0, "machines": 0}


# Row kinds whose figures live in another kind's table: the experts' prefill groups sit in `prefill` beside the dense
# ones (calibration.expert_group), fitted in the second turn because a row's time also holds its dense products.
TABLE_OF = {"prefill_experts": "prefill"}


def _base_efficiency(r: dict[str, Any], kind: str) -> float:
    g = _gpu(r)
    if kind == "attention":
        return cal.attention_efficiency(g, _quantized(r))
    if kind == "decode_kv":
        return cal.decode_model(g).kv_share()
    if kind == "prefill_experts":
        return cal.expert_prefill_efficiency(g, _quantized(r))
    return cal.decode_model(g).efficiency if kind == "decode" else cal.prefill_efficiency(g, _quantized(r))[0]


def _loops_experts(r: dict[str, Any], g: Any) -> bool:
    """Whether the row's prompt multiplies its experts one by one from the host: speed.prefill.loops_from_host over the
    row's own expert matrices at its ubatch (llama-bench's default where the row names none)."""
    if not _moe(r):
        return False
    plan = build_plan(ev.resolve_model(ev._model_id(r["model"]), ()).spec,
                      ev._quant(r["quant"], r["model"] + " " + r["quant"]))
    tokens = min(r["m"].n_prompt, r["m"].n_ubatch or RunSettings().n_ubatch)
    return any(prefill.loops_from_host(g.backend, g.arch or "", m, tokens)
               for ms in token_work(plan).expert_matrices for m in ms)


def _moe(r: dict[str, Any]) -> bool:
    return bool(ev.resolve_model(ev._model_id(r["model"]), ()).spec.n_expert)


def _quantized(r: dict[str, Any]) -> bool:
    """Whether the row's weights take their backend's quantized groups (calibration.quantized_group)."""
    q = r["quant"].lower()
    weight_type = "BF16" if "bf16" in q else "F16" if "f16" in q else "Q4_0"  # any quantized type
    g = _gpu(r)
    return cal.quantized_group(g, weight_type) if g is not None else weight_type == "Q4_0"


def implied(r: dict[str, Any], kind: str, key: str) -> float | None:
    """The efficiency under `key` that makes this row's prediction equal its published figure."""
    e0 = _base_efficiency(r, kind)
    _set(kind, key, e0)
    p0 = ev.predict_row(r)
    _set(kind, key, 2 * e0)
    p1 = ev.predict_row(r)
    _set(kind, key, None)
    if not p0 or not p1:
        return None
    t0, t1, t = 1 / p0, 1 / p1, 1 / r["m"].tokens_per_s
    b = 2 * (t0 - t1) * e0  # t = a + b / e
    a = t0 - b / e0
    if kind in ("prefill", "prefill_experts") and b / e0 < MIN_SHARE * t0:  # the row cannot tell the matrix rate
        return None
    e = b / (t - a) if t > a and b > 0 else None
    if kind in ("decode", "decode_kv") and vector_speed.decode_flops_per_weight(_gpu(r)):
        return _solved(r, kind, key, t, e)
    return e


def _solved(r: dict[str, Any], kind: str, key: str, t: float, guess: float | None) -> float | None:
    """The efficiency that makes the row's prediction equal its published time `t` where the time is not linear in
    1 / efficiency (a decode whose matrix-vector arithmetic binds past some share of the bandwidth): the linear guess
    where it holds, else by bisection (the time never grows with the efficiency); None where no share reaches `t`."""
    def time_at(e: float) -> float:
        _set(kind, key, e)
        p = ev.predict_row(r)
        _set(kind, key, None)
        return 1 / p if p else math.inf

    if guess is not None and 0 < guess <= 1 and abs(time_at(guess) - t) <= 0.005 * t:
        return guess
    lo, hi = 1e-3, 1.0
    if time_at(hi) > t or time_at(lo) < t:
        return None  # even the whole bandwidth is too slow, or the slowest share too fast
    for _ in range(30):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if time_at(mid) > t else (lo, mid)
    return hi if abs(time_at(hi) - t) <= 0.005 * t else None  # a time the arithmetic alone sets is not the read's


def machine_median(points: list[tuple[str, float]]) -> float:
    by: dict[str, list[float]] = defaultdict(list)
    for machine, e in points:
        by[machine].append(e)
    return statistics.median(statistics.median(v) for v in by.values())


def borrows_backend_median(base: dict[str, Any], kind: str, group: str) -> bool:
    """True where the llama-bench fit has no runs of this group, nor a near relative, so that it falls back to its
    backend's median over other vendors' chips (AMD through Vulkan takes Intel's figure)."""
    if kind not in base:
        return False  # attention: without a fit of its own it takes the matrix products' efficiency, not a median
    table = base[kind]
    fits = table.get("fits", {}).get(group.split("-")[0], {}).get("groups", {})
    return group not in table["groups"] and group not in fits and group not in cal.NEAREST_GROUP


LeaveOut = Callable[[dict[str, Any]], bool]


def source_of(r: dict[str, Any]) -> str:
    """The page or repository a row comes from (evaluate_speed's --by source key)."""
    return str(r["source"].split("/blob/")[0].split("/discussions/")[0])


def fit(rows: list[dict[str, Any]], without: LeaveOut | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """kind -> key -> {efficiency, runs, machines}, from the rows `without` does not leave out."""
    chips: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
    groups: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
    pooled: list[tuple[str, float]] = []
    base = cal.calibration()
    for r in rows:
        if (without is not None and without(r)) or excluded(r) or "implied" not in r:
            continue
        kind, group, chip = r["group"]
        if chip:
            chips[(kind, chip)].append((r["machine"], r["implied"]))
        groups[(kind, group)].append((r["machine"], r["implied"]))
        if kind == "attention" and cal.matrix_unit_attention(group) and uses_matrix_units(_gpu(r)):
            pooled.append((r["machine"], r["implied"]))  # a Pascal card's tile kernel is not the pool's kind
    out: dict[str, dict[str, dict[str, Any]]] = {"decode": {}, "prefill": {}, "attention": {}, "decode_kv": {},
                                                 "prefill_experts": {}}
    for table in (groups, chips):
        for (kind, key), points in table.items():
            machines = len({m for m, _ in points})
            if table is groups and not (borrows_backend_median(base, kind, key)
                                        or (kind not in base and machines >= 2)):
                continue  # a group the llama-bench fit covers keeps its figure; one machine speaks for its chip only
            if len(points) >= (MIN_CHIP_RUNS if table is chips else MIN_RUNS):
                out[kind][key] = {"efficiency": round(min(machine_median(points), 0.98), 4), "runs": len(points),
                                  "machines": len({m for m, _ in points})}
    if len({m for m, _ in pooled}) >= 2:  # calibration.ATTENTION_POOL: a vendor's backend without runs at depth
        out["attention"][cal.ATTENTION_POOL] = {"efficiency": round(machine_median(pooled), 4), "runs": len(pooled),
                                                "machines": len({m for m, _ in pooled})}
    return out


def fit_in_turn(rows: list[dict[str, Any]], without: LeaveOut | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """The matrix products' and decode's efficiencies first (runs at depth 0), then attention's and the decode KV
    cache's (runs at depth), whose predictions depend on the first."""
    install({})
    for r in rows:
        r.pop("implied", None)
        if r["group"] is not None and r["group"][0] in ("prefill", "decode") and not excluded(r) \
                and not (without and without(r)):
            e = implied(r, r["group"][0], r["group"][2] or r["group"][1])
            if e is not None:
                r["implied"] = e
    first = fit(rows, without)
    install(first)
    first["expert_loop"] = fit_expert_loop(rows, without)
    install(first)
    for r in rows:
        kind = r["group"][0] if r["group"] is not None else None
        if kind in SECOND_TURN and not excluded(r) and not (without and without(r)):
            e = implied(r, kind, r["group"][2] or r["group"][1])
            if e is not None:
                r["implied"] = e
    second = fit(rows, without)
    first["prefill"] = {**first["prefill"], **second["prefill_experts"]}
    first.pop("prefill_experts", None)
    return {**first, "attention": second["attention"], "decode_kv": second["decode_kv"]}


SECOND_TURN = ("attention", "decode_kv", "prefill_experts")


EXPERT_CALL_PROBE = 1e-5  # seconds per expert call the fit predicts at, besides none, to solve for it


def fit_expert_loop(rows: list[dict[str, Any]], without: LeaveOut | None = None) -> dict[str, dict[str, Any]]:
    """Seconds per expert matrix product of each host-loop backend (speed.prefill.loops_from_host): per mixture-of-
    experts prompt row, the figure that makes its prediction equal the published one (the time is linear in it),
    the median over machines of each machine's median."""
    points: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for r in rows:
        if r["group"] is None or r["group"][0] != "expert_loop" or (without and without(r)):
            continue
        backend = r["group"][1]
        _set_expert_call(backend, 0.0)
        p0 = ev.predict_row(r)
        _set_expert_call(backend, EXPERT_CALL_PROBE)
        p1 = ev.predict_row(r)
        _set_expert_call(backend, None)
        if not p0 or not p1 or p1 >= p0:
            continue
        t0, slope = 1 / p0, (1 / p1 - 1 / p0) / EXPERT_CALL_PROBE
        t = 1 / r["m"].tokens_per_s
        if t > t0:
            points[backend].append((r["machine"], (t - t0) / slope))
    for op in expert_loop_ops():
        if not (without and without({"machine": op["gpu"], "source": op["source_url"]})):
            points[op["backend"]].append((op["gpu"], op_call_s(op)))
    return {b: {"seconds_per_expert_call": round(machine_median(p), 8), "runs": len(p),
                "machines": len({m for m, _ in p})} for b, p in points.items() if len(p) >= MIN_RUNS}


EXPERT_LOOP_OPS = REPO / "benchmarks" / "data" / "expert_loop_ops.csv"


def expert_loop_ops() -> list[dict[str, str]]:
    """Published test-backend-ops timings of a MUL_MAT_ID on the host-loop path (a PR's `master` column, before MMF
    took those shapes), each with its URL: the per-expert call measured directly, for a backend without Gemma runs of
    that path."""
    with EXPERT_LOOP_OPS.open() as f:
        return list(csv.DictReader(f))


def op_call_s(op: dict[str, str]) -> float:
    """Seconds per expert product of one op timing: its whole time (2 m n k n_used FLOPs at the printed TFLOPS) over
    the experts its n tokens route to; the products' own arithmetic is under 5% of it at these shapes."""
    m, n, k, used, mats = (int(op[c]) for c in ("m", "n", "k", "n_used", "n_mats"))
    seconds = 2.0 * m * n * k * used / (float(op["tflops"]) * 1e12)
    return seconds / (mats * experts_touched(used / mats, n))


def _set_expert_call(backend: str, seconds: float | None) -> None:
    clear_speed_cache()
    table = cal.published_groups().setdefault("expert_loop", {})
    if seconds is None:
        table.pop(backend, None)
    else:
        table[backend] = {"seconds_per_expert_call": seconds}


def install(table: dict[str, dict[str, dict[str, Any]]]) -> None:
    clear_speed_cache()
    live = cal.published_groups()
    for kind in ("decode", "prefill", "attention", "decode_kv", "expert_loop"):
        live[kind] = dict(table.get(kind, {}))


# Seconds per graph node at the reference clock tried for a chip of a backend whose llama-bench fit cannot tell it.
NODE_COST_GRID = [i * 1e-6 for i in range(1, 21)]
MIN_NODE_COST_MODELS = 2  # the per-node cost is told from the efficiency by models of different sizes


def borrowed_node_cost(backend: str) -> bool:
    fit = (cal.calibration()["decode"].get("fits") or {}).get(backend) or {}
    return fit.get("seconds_per_node_from") is not None


# Backends whose llama-bench per-node cost rests on one model size: Metal's table is 20 Llama 2 7B runs of 25, which
# cannot tell a fixed cost per kernel from the efficiency (the M5 Max's published Gemma 4 runs, E2B to 31B, decode
# E2B 43% faster than its 11 us per kernel allows and 31B 9% faster).
ONE_SIZE_NODE_COST = ("metal",)


def node_cost_key(r: dict[str, Any]) -> str | None:
    """`backend@chip` of a row's GPU, where its backend's per-node cost was borrowed or rests on one model size."""
    g = _gpu(r)
    chip = cal.chip_of(g) if g is not None else None
    told = borrowed_node_cost(g.backend) or g.backend in ONE_SIZE_NODE_COST if g is not None else False
    return f"{g.backend}@{chip}" if chip and told else None


def _set_entry(kind: str, key: str, entry: dict[str, Any] | None) -> None:
    """Put (or, for None, take out) one chip's entry of a published table (`node_cost`, `decode_compute`)."""
    clear_speed_cache()
    table = cal.published_groups().setdefault(kind, {})
    if entry is None:
        table.pop(key, None)
    else:
        table[key] = entry


def _set_node_cost(key: str, entry: dict[str, Any] | None) -> None:
    _set_entry("node_cost", key, entry)


def fit_node_costs(rows: list[dict[str, Any]], without: LeaveOut | None = None,
                   keys: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """The per-node cost of each chip whose backend's llama-bench fit borrowed CUDA's (ROCm: Llama 7B only, which
    cannot tell a fixed cost per kernel from the efficiency) or rests on one model size (ONE_SIZE_NODE_COST), and
    whose published single-stream decode runs cover several models: the grid value (or the backend's own figure)
    whose fit (efficiencies refitted at each value) makes those runs' squared log error smallest; where that is the
    backend's figure, the chip keeps it without an entry of its own, as other chips of the backend do. `without`
    leaves rows out (a machine, a source); `keys` limits the chips refitted."""
    out: dict[str, dict[str, Any]] = {}
    decode = [r for r in rows if r["m"].kind == "decode" and r["m"].concurrency == 1 and not excluded(r)
              and not (without and without(r))]
    for key in sorted({k for r in decode if (k := node_cost_key(r)) and (keys is None or k in keys)}):
        mine = [r for r in decode if node_cost_key(r) == key]
        if len({r["model"] for r in mine}) < MIN_NODE_COST_MODELS:
            _set_node_cost(key, None)
            continue
        best: tuple[float, float] | None = None
        backend = float((cal.calibration()["decode"].get("fits") or {})[key.split("@")[0]]["seconds_per_node"])
        ultra = {"ultra": True} if any(cal.fused_dies(_gpu(r)) for r in mine) else {}  # calibration.node_cost
        for tau in sorted({*NODE_COST_GRID, backend}):
            _set_node_cost(key, {"seconds_per_node": tau, **ultra})
            install(fit_in_turn(rows, without))
            err = sum(math.log(p / r["m"].tokens_per_s) ** 2 for r in mine if (p := ev.predict_row(r)))
            if best is None or err < best[0]:
                best = (err, tau)
        assert best is not None
        if best[1] == backend:
            _set_node_cost(key, None)
            continue
        out[key] = {"seconds_per_node": round(best[1], 10), "runs": len(mine),
                    "machines": len({r["machine"] for r in mine}), **ultra}
        _set_node_cost(key, out[key])
    return out


# FP32 operations per weight tried for a chip's matrix-vector kernels in decode (vector.decode_flops_per_weight).
FLOPS_PER_WEIGHT_GRID = [float(k) for k in range(12, 49, 2)]
# A chip takes a figure only where it cuts its decode runs' squared log error by at least this share: a GPU whose read
# binds (nearly every discrete card) must not take one that mimics its per-node cost on its smallest models.
MIN_COMPUTE_GAIN = 0.2


def decode_compute_key(r: dict[str, Any]) -> str | None:
    """`backend@chip` of a row's GPU where its matrix-vector kernels work in FP32 (rates.arithmetic_decode) and
    its shader FP32 rate is known (the unit a figure is counted in)."""
    g = _gpu(r)
    chip = cal.chip_of(g) if g is not None else None
    told = chip and arithmetic_decode(g) and shader_fp32_tflops(g)
    return f"{g.backend}@{chip}" if told else None


def _set_decode_compute(key: str, entry: dict[str, Any] | None) -> None:
    _set_entry("decode_compute", key, entry)


def fit_decode_compute(rows: list[dict[str, Any]], without: LeaveOut | None = None,
                       keys: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """The FP32 operations per weight of each chip whose single-stream decode runs cover several models and are told
    better with their matrix-vector arithmetic binding (vector.vector_pass_s) than with the read alone: the grid
    value whose fit (efficiencies refitted at each value) makes those runs' squared log error smallest, kept where it
    cuts that error by MIN_COMPUTE_GAIN. `without` leaves rows out; `keys` limits the chips refitted."""
    out: dict[str, dict[str, Any]] = {}
    decode = [r for r in rows if r["m"].kind == "decode" and r["m"].concurrency == 1 and not r["m"].depth
              and not excluded(r) and not (without and without(r))]
    for key in sorted({k for r in decode if (k := decode_compute_key(r)) and (keys is None or k in keys)}):
        mine = [r for r in decode if decode_compute_key(r) == key]
        _set_decode_compute(key, None)
        if len({r["model"] for r in mine}) < MIN_NODE_COST_MODELS:
            continue
        scored: list[tuple[float, float]] = []
        for k in [0.0, *FLOPS_PER_WEIGHT_GRID]:
            _set_decode_compute(key, {"flops_per_weight": k} if k else None)
            install(fit_in_turn(rows, without))
            scored.append((sum(math.log(p / r["m"].tokens_per_s) ** 2 for r in mine if (p := ev.predict_row(r))), k))
        none = scored[0][0]
        err, k = min(scored)
        if not k or err > (1 - MIN_COMPUTE_GAIN) * none:
            _set_decode_compute(key, None)
            continue
        out[key] = {"flops_per_weight": k, "runs": len(mine), "machines": len({r["machine"] for r in mine})}
        _set_decode_compute(key, out[key])
    install(fit_in_turn(rows, without))
    return out


# Rounds of fitting the per-node costs and the arithmetic per weight in turn (a chip's two terms share its decode runs:
# the small models tell the first, the large K-quant ones the second). One: a second round (M2 5 us, 34 operations)
# took Metal decode in-sample 6.0% -> 5.4% but its source-left-out 11.7% -> 13.9% and S_TG x1's 17.2% -> 25.0%.
KERNEL_ROUNDS = 1


def fit_kernel_terms(rows: list[dict[str, Any]], without: LeaveOut | None = None, node_keys: set[str] | None = None,
                     compute_keys: set[str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The per-node costs (fit_node_costs) and the arithmetic per weight (fit_decode_compute), fitted in turn
    KERNEL_ROUNDS times; `node_keys` / `compute_keys` limit the chips refitted (None: all)."""
    nodes: dict[str, Any] = {}
    compute: dict[str, Any] = {}
    for _ in range(KERNEL_ROUNDS):
        nodes = fit_node_costs(rows, without, node_keys)
        compute = fit_decode_compute(rows, without, compute_keys)
    return nodes, compute


def cpu_figures(fitted: dict[str, Any], without: str | None = None) -> None:
    """The per-CPU decode figures (fit_cpu_decode.py) in force: all of `fitted` but machine `without`'s."""
    clear_speed_cache()
    live = cpu_speed.published_cpus()
    live.clear()
    live.update({k: v for k, v in fitted.items() if k != without})


CPU_SHARED = ("experts", "designs")  # CPU terms fitted across machines on evaluate_speed's rows (fit_cpu_decode.py)


def cpu_shared_terms(without: LeaveOut) -> dict[str, Any]:
    """Refit the CPU terms shared across machines (routed experts' shares, Apple's cores) without the runs left out,
    and put them in force; returns the ones they replace."""
    table = cpu_speed._terms()
    saved = {k: table.get(k) for k in CPU_SHARED}
    saved["prefill_apple"] = table["prefill"].get("apple")
    experts = fcd.cpu_expert_fits(without)
    fcd.install_shared(experts, fcd.apple_design_fit(experts, without))
    return saved


def restore_cpu_terms(saved: dict[str, Any]) -> None:
    table = cpu_speed._terms()
    for k in CPU_SHARED:
        if saved[k] is None:
            table.pop(k, None)
        else:
            table[k] = saved[k]
    table["prefill"].pop("apple", None)
    if saved["prefill_apple"] is not None:
        table["prefill"]["apple"] = saved["prefill_apple"]
    clear_speed_cache()


def errors(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        p = ev.predict_row(r)
        if p:
            out[ev.group_key(r)].append(100 * (p - r["m"].tokens_per_s) / r["m"].tokens_per_s)
    return out


def left_out(rows: list[dict[str, Any]], own_cpus: dict[str, Any], by: str) -> dict[str, list[float]]:
    """Each row predicted from fits without its machine (`by` "machine") or its source ("source"): a CPU's own
    decode figure goes too where its runs are the ones left out."""
    key = (lambda r: r["machine"]) if by == "machine" else source_of
    out: dict[str, list[float]] = defaultdict(list)
    fitted = dict(cal.published_groups().get("node_cost") or {})
    computed = dict(cal.published_groups().get("decode_compute") or {})
    for value in sorted({key(r) for r in rows}):
        group = [r for r in rows if key(r) == value]
        without: LeaveOut = lambda r, v=value: key(r) == v  # noqa: E731
        gone = {node_cost_key(r) for r in group} & set(fitted)  # a chip's per-node cost is refitted without its runs
        for k, entry in fitted.items():
            _set_node_cost(k, None if k in gone else entry)
        told = {decode_compute_key(r) for r in group} & set(computed)  # and its arithmetic per weight
        for k, entry in computed.items():
            _set_decode_compute(k, None if k in told else entry)
        if gone or told:
            fit_kernel_terms(rows, without, gone, told)
        install(fit_in_turn(rows, without=without))
        cpus = {r["machine"] for r in group}
        cpu_figures({k: v for k, v in own_cpus.items() if k not in cpus})
        shared = cpu_shared_terms(without) if any(r["backend"].startswith("CPU") for r in group) else None
        for k, errs in errors(group).items():
            out[k].extend(errs)
        if shared is not None:
            restore_cpu_terms(shared)
    for k, entry in fitted.items():
        _set_node_cost(k, entry)
    for k, entry in computed.items():
        _set_decode_compute(k, entry)
    return out


Pooled = list[tuple[str, list[list[float]]]]


def target_rows(rows: list[dict[str, Any]], tables: tuple[dict[str, list[float]], ...]) -> Pooled:
    """Issue 26's targets (evaluate_speed.TARGETS) over all groups: each target's |errors| in each of `tables` (group
    -> errors), the groups a target covers told by their rows' kind and concurrency."""
    first: dict[str, dict[str, Any]] = {}
    for r in rows:
        first.setdefault(ev.group_key(r), r)
    out: Pooled = []
    for name, keep, _ in ev.TARGETS:
        keys = [k for k in sorted(tables[0]) if keep(first[k])]
        if keys:
            out.append((name, [[abs(e) for k in keys for e in t.get(k, [])] for t in tables]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="the table docs/speed.md shows")
    args = ap.parse_args()
    install({})
    cal.published_groups().pop("node_cost", None)  # "before" is the llama-bench fit's own per-node costs
    cal.published_groups().pop("decode_compute", None)  # and no chip's decode bound by its arithmetic
    own_cpus = dict(cpu_speed.published_cpus())  # "before" is without them too; each machine left out loses its own
    cpu_figures({})
    rows = [r for r in ev.rows() if ev.predict_row(r)]
    for r in rows:
        r["group"] = group_of(r)
    before = errors(rows)
    cpu_figures(own_cpus)
    node_costs, compute = fit_kernel_terms(rows)
    table = fit_in_turn(rows)
    install(table)
    after = errors(rows)
    loo = left_out(rows, own_cpus, "machine")
    loso = left_out(rows, own_cpus, "source")
    install(table)
    cpu_figures(own_cpus)
    if args.markdown:
        print("| backend, metric, concurrency | runs | median before | median now | worst now "
              "| median, machine left out | median, source left out |")
        print("|---|---:|---:|---:|---:|---:|---:|")
    else:
        print(f"{'group':40s} {'n':>4s} {'before':>8s} {'fitted':>8s} {'worst':>8s} {'LOMO':>8s} {'LOSO':>8s}"
              "   (|error|)")
    for key in sorted(before):
        med = [statistics.median(abs(e) for e in d[key]) for d in (before, after, loo, loso)]
        worst = max(abs(e) for e in after[key])
        if args.markdown:
            print(f"| {' '.join(key.split())} | {len(before[key])} | {med[0]:.1f}% | {med[1]:.1f}% | {worst:.0f}% | "
                  f"{med[2]:.1f}% | {med[3]:.1f}% |")
        else:
            print(f"{key:40s} {len(before[key]):4d} {med[0]:7.1f}% {med[1]:7.1f}% {worst:7.0f}% {med[2]:7.1f}% "
                  f"{med[3]:7.1f}%")
    for name, pooled in target_rows(rows, (before, after, loo, loso)):
        med = [statistics.median(v) for v in pooled]
        if args.markdown:
            print(f"| **{name}, all groups** | {len(pooled[0])} | {med[0]:.1f}% | {med[1]:.1f}% "
                  f"| {max(pooled[1]):.0f}% | {med[2]:.1f}% | {med[3]:.1f}% |")
        else:
            print(f"{name + ', all groups':40s} {len(pooled[0]):4d} {med[0]:7.1f}% {med[1]:7.1f}% "
                  f"{max(pooled[1]):7.0f}% {med[2]:7.1f}% {med[3]:7.1f}%")
    if args.markdown:
        return
    for kind, entries in table.items():
        for key, e in sorted(entries.items()):
            figure = (f"{1e6 * e['seconds_per_expert_call']:.1f} us per expert" if kind == "expert_loop"
                      else f"{e['efficiency']:.4f}")
            print(f"  {kind:8s} {key:32s} {figure}  ({e['runs']} runs, {e['machines']} machines)")
    for key, e in sorted(compute.items()):
        print(f"  decode arithmetic {key:19s} {e['flops_per_weight']:.0f} FP32 operations per weight "
              f"({e['runs']} runs, {e['machines']} machines)")
    for key, e in sorted(node_costs.items()):
        print(f"  node cost {key:27s} {1e6 * e['seconds_per_node']:.1f} us at {cal.REFERENCE_CLOCK_MHZ:.0f} MHz "
              f"({e['runs']} runs, {e['machines']} machines)")
    if args.write:
        doc = {"source": "benchmarks/fit_backends.py over benchmarks/data/backend_published_runs.csv and "
                         "gemma_llamabench.csv (published Gemma llama.cpp runs, one source URL per row)",
               **table, "node_cost": node_costs, "decode_compute": compute}
        OUT.write_text("# Written by benchmarks/fit_backends.py --write; read by gemma_fit/speed/calibration.py.\n"
                       + yaml.safe_dump(doc, sort_keys=True, width=110))
        print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
