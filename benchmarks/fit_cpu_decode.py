"""CPU speed terms from published CPU-only llama.cpp runs: decode efficiency against DATASHEET memory
bandwidth, the bandwidth one thread can draw, and prefill GFLOP/s per thread by instruction set.

Reads benchmarks/data/cpu_published_runs.csv (every row has the URL where its numbers are written).

- **Decode efficiency**: the token-generation rows marked use_in_median (dense models, all cores,
  bandwidth known); effective bandwidth (model bytes x tokens/s) over datasheet bandwidth; the median per
  CPU family (x86: AVX2/AVX-512/AMX; arm: NEON/SVE).
- **Bandwidth per thread**: a core keeps only so many cache misses in flight, so a run on one or two
  threads cannot fill a memory system sized for many. The token-generation rows run on at most
  MAX_THREAD_LIMITED threads give effective bandwidth / threads; their median caps decode at
  threads x that figure.
- **Prefill**: the prompt-processing rows (use_in_median "pp") give matrix-product GFLOP/s per thread:
  2 x (parameters without the token-embedding and output matrices, which a prompt does not multiply
  per token) x tokens/s / threads; the median per instruction-set group. A core's arithmetic scales with its
  clock, so the rows of CPUs whose performance cores' boost clock is known (benchmarks/data/cpu_clocks.yaml,
  each with its source) also give GFLOP/s per thread per GHz, whose median a CPU with a known clock takes.

Prints the per-row figures and the leave-one-CPU-out errors (each CPU's rows predicted from the other
CPUs' medians), and with --write stores the medians in model_db/llamacpp/cpu_decode.yaml.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "benchmarks" / "data" / "cpu_published_runs.csv"
CLOCKS = REPO / "benchmarks" / "data" / "cpu_clocks.yaml"
TABLE = REPO / "model_db" / "llamacpp" / "cpu_decode.yaml"
GIB = 1024**3
# Decode families: Armv8.0 cores (Cortex-A72/A53: a Raspberry Pi 4) sit on memory controllers of their era, which
# deliver far less of their datasheet than the dot-product ARM cores' (a Pi 4 0.27, the arm median 0.39).
FAMILY = {"avx2": "x86", "avx512": "x86", "amx": "x86", "neon": "arm", "sve": "arm", "neon-v8.0": "arm-v8.0"}
# Prefill groups: AMX CPUs their own (a native build, -march=native, and the release builds' sapphirerapids variant
# compile llama.cpp's AMX kernels; the rows are of types they multiply: gemma_fit.speed.cpu AMX_WEIGHT_TYPES);
# NEON and SVE cores share the arm group (SVE has one CPU here). Armv8.0 cores
# (Cortex-A72/A53: a Raspberry Pi 4) lack the dot-product instructions llama.cpp's quantized NEON kernels use:
# their own group ("neon-v8.0" in the runs' isa column, `dotprod: false` in hardware_db/cpus.yaml).
PREFILL_GROUP = {"avx2": "avx2", "avx512": "avx512", "amx": "amx", "neon": "arm", "sve": "arm",
                 "neon-v8.0": "arm-v8.0"}
MAX_THREAD_LIMITED = 2
# Token-embedding plus output-matrix parameters (billions) of the benchmark models, from their
# published config.json (vocab x hidden; counted once where the two are tied).
NOT_MULTIPLIED_B = {"Llama 3.1 8B": 2 * 128256 * 4096 / 1e9, "LLaMA-3.1-8B": 2 * 128256 * 4096 / 1e9,
                    "Llama 3.2 3B": 128256 * 3072 / 1e9, "Llama 3.2 1B": 128256 * 2048 / 1e9,
                    "TinyLlama 1.1B": 2 * 32000 * 2048 / 1e9, "Mistral 7B": 2 * 32000 * 4096 / 1e9,
                    "Llama 2 7B": 2 * 32000 * 4096 / 1e9, "LLaMA 7B": 2 * 32000 * 4096 / 1e9,
                    "Gemma 3 1B": 262144 * 1152 / 1e9,
                    "Mistral Small 3.1 24B": 2 * 131072 * 5120 / 1e9,  # untied: embedding and output apart
                    "Qwen3-VL-4B": 151936 * 2560 / 1e9}  # tied, as Qwen3-4B's


def _number(text: str) -> float | None:
    m = re.match(r"\s*([\d.]+)", text or "")
    return float(m.group(1)) if m else None


def _isa(r: dict[str, str]) -> str:
    return r["isa"].split("+")[0].split()[0].strip()


def _threads(r: dict[str, str]) -> int | None:
    """Threads stated (or assumed, said so in the row) else the core count: llama.cpp's default."""
    t = _number(r["threads"]) or _number(r["cores"])
    return int(t) if t else None


def _apple(r: dict[str, str]) -> bool:
    """Apple's own cores are a design of their own (gemma_fit.speed.cpu.design, fitted on Gemma runs by
    apple_design_fit), not part of the arm family's medians."""
    return r["cpu"].startswith("Apple")


def decode_rows() -> list[dict[str, object]]:
    out = []
    for r in csv.DictReader(RUNS.open(encoding="utf-8")):
        size, bw = _number(r["model_size_gib"]), _number(r["datasheet_bandwidth_gbps"])
        if not r["test"].startswith("tg") or size is None or _apple(r):
            continue
        effective = size * GIB * float(r["tokens_per_s"]) / 1e9
        threads = int(_number(r["threads"]) or 0) if r["threads"].strip().isdigit() else None
        out.append({"cpu": r["cpu"], "family": FAMILY[_isa(r)], "effective": effective, "datasheet": bw,
                    "threads": threads, "median": r.get("use_in_median") == "yes", "source": r["source_url"]})
    return out


def prefill_rows() -> list[dict[str, object]]:
    out = []
    for r in csv.DictReader(RUNS.open(encoding="utf-8")):
        if r.get("use_in_median") != "pp" or _apple(r):
            continue
        base = next((k for k in NOT_MULTIPLIED_B if r["model"].startswith(k)), None)
        params, threads = _number(r["model_params_b"]), _threads(r)
        if base is None or params is None or threads is None:
            continue
        gflops = 2 * (params - NOT_MULTIPLIED_B[base]) * float(r["tokens_per_s"]) / threads
        clock = clocks().get(r["cpu"])
        out.append({"cpu": r["cpu"], "group": PREFILL_GROUP[_isa(r)], "per_thread": gflops, "source": r["source_url"],
                    "per_ghz": gflops / clock if clock else None})
    return out


def clocks() -> dict[str, float]:
    """The benchmark CPUs' performance-core boost clocks (GHz), by the runs' CPU name."""
    data = yaml.safe_load(CLOCKS.read_text(encoding="utf-8"))["clocks"]
    return {name: float(c["boost_clock_ghz"]) for name, c in data.items()}


def decode_terms(data: list[dict[str, object]], skip_cpu: str | None = None) -> tuple[dict[str, float], float]:
    """(efficiency per family, GB/s per thread) from every row not of skip_cpu."""
    keep = [d for d in data if d["cpu"] != skip_cpu]
    eff = {}
    for fam in sorted({str(d["family"]) for d in keep}):
        ratios = [float(d["effective"]) / float(d["datasheet"]) for d in keep  # type: ignore[arg-type]
                  if d["family"] == fam and d["median"] and d["datasheet"]]
        if ratios:
            eff[fam] = statistics.median(ratios)
    per_thread = [float(d["effective"]) / int(d["threads"]) for d in keep  # type: ignore[arg-type, call-overload]
                  if d["threads"] and int(d["threads"]) <= MAX_THREAD_LIMITED]  # type: ignore[call-overload]
    return eff, statistics.median(per_thread)


def predicted_bandwidth(d: dict[str, object], eff: dict[str, float], per_thread: float) -> float | None:
    if not d["datasheet"] or d["family"] not in eff:
        return None
    bw = float(d["datasheet"]) * eff[str(d["family"])]  # type: ignore[arg-type]
    return min(bw, per_thread * int(d["threads"])) if d["threads"] else bw  # type: ignore[call-overload]


def prefill_medians(data: list[dict[str, object]], skip_cpu: str | None = None,
                    key: str = "per_thread") -> dict[str, tuple[float, int]]:
    """Per group: the median of `key` (per_thread GFLOP/s, or per_ghz: per thread per GHz of boost) and its runs."""
    out = {}
    for group in sorted({str(d["group"]) for d in data}):
        rates = [float(d[key]) for d in data  # type: ignore[arg-type]
                 if d["group"] == group and d["cpu"] != skip_cpu and d.get(key) is not None]
        if rates:
            out[group] = (round(statistics.median(rates), 2 if key == "per_ghz" else 1), len(rates))
    return out


def decode_errors(data: list[dict[str, object]]) -> list[float]:
    """|predicted/measured - 1| for each row used, its CPU left out of the fit."""
    errors = []
    for d in data:
        if not (d["median"] or (d["threads"] and int(d["threads"]) <= MAX_THREAD_LIMITED)):  # type: ignore[call-overload]
            continue
        eff, per_thread = decode_terms(data, skip_cpu=str(d["cpu"]))
        bw = predicted_bandwidth(d, eff, per_thread)
        if bw is not None:
            errors.append(abs(bw / float(d["effective"]) - 1))  # type: ignore[arg-type]
    return errors


def prefill_errors(data: list[dict[str, object]], key: str = "per_thread") -> list[float]:
    """|predicted/measured - 1| of each row with `key`, its CPU left out: per_thread, or per_ghz (the rate a CPU of
    known clock is predicted at)."""
    errors = []
    for d in data:
        others = prefill_medians(data, skip_cpu=str(d["cpu"]), key=key)
        if d["group"] in others and d.get(key) is not None:
            errors.append(abs(others[str(d["group"])][0] / float(d[key]) - 1))  # type: ignore[arg-type]
    return errors


def _summary(name: str, errors: list[float]) -> str:
    return (f"leave-one-CPU-out {name} error: median {statistics.median(errors):.0%}, "
            f"max {max(errors):.0%} over {len(errors)} runs")


MAX_RATE_PROMPT = 1024  # a CPU's own matrix rate is read from prompts up to this long
MIN_CPU_RUNS = 3  # a CPU gets its own decode figure from at least this many published decode runs of it


def _cpu_runs(ev: Any, kind: str) -> Iterator[tuple[dict[str, Any], float, Any]]:
    """(row, prediction, hardware) of evaluate_speed's CPU runs of this kind at depth 0 on a CPU of cpus.yaml."""
    for r in ev.rows():
        m = r["m"]
        if r["backend"] != "CPU" or m.kind != kind or m.depth or ev.excluded(r):
            continue
        p = ev.predict_row(r)
        hw = r.get("hardware")
        if p is not None and hw is not None and hw.cpu is not None and hw.cpu.id:
            yield r, p, hw


def cpu_decode_fits() -> dict[str, dict[str, object]]:
    """Per CPU of hardware_db/cpus.yaml: from its published Gemma decode runs (evaluate_speed's CPU rows, mainline
    llama.cpp, no depth), where it has MIN_CPU_RUNS of a kind, the decode efficiency that makes its memory-bound runs
    come out as published, and the factor on the GB/s a thread draws that makes its thread-bound runs do so (one
    chip generation's cores keep more reads in flight than another's); each the median over its runs. CPU decode time
    is linear in 1 / bandwidth, so each run's figure is the one its prediction used x published / predicted."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import evaluate_speed as ev

    from gemma_fit.speed.cpu import cpu_of, decode_efficiency, system_bandwidth_gbps, thread_bound

    memory: dict[str, list[float]] = {}
    threads: dict[str, list[float]] = {}
    # each run against its design's or family's figures alone, so the fit is no fixed point
    with _own_figures_out("efficiency", "n", "per_thread_factor", "n_threads"):
        for r, p, hw in _cpu_runs(ev, "decode"):
            m = r["m"]
            rates = cpu_of(hw)
            if thread_bound(system_bandwidth_gbps(hw, rates, []), rates):
                threads.setdefault(hw.cpu.id, []).append(m.tokens_per_s / p)
            else:
                memory.setdefault(hw.cpu.id, []).append(decode_efficiency(hw.cpu)[0] * m.tokens_per_s / p)
    out: dict[str, dict[str, object]] = {}
    for cid, v in sorted(memory.items()):
        if len(v) >= MIN_CPU_RUNS:
            out[cid] = {"efficiency": round(statistics.median(v), 3), "n": len(v)}
    for cid, v in sorted(threads.items()):
        if len(v) >= MIN_CPU_RUNS:
            out.setdefault(cid, {}).update(per_thread_factor=round(statistics.median(v), 3), n_threads=len(v))
    return out


def cpu_prefill_fits() -> dict[str, dict[str, object]]:
    """Per CPU of hardware_db/cpus.yaml with MIN_CPU_RUNS published Gemma prompt runs of its own (evaluate_speed's CPU
    rows, mainline llama.cpp, no depth): published / predicted at its instruction-set group's rate, the median per
    file type (`by_type`) and over all its runs (`all`, for a type it has no run of). CPU prefill time is linear in
    1 / rate, so the ratio is the factor the rate needs."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import evaluate_speed as ev

    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.model.catalog import resolve_model

    per_cpu: dict[str, list[tuple[str, float]]] = {}
    with _own_figures_out("prefill"):  # the group rate alone
        for r, p, hw in _cpu_runs(ev, "prefill"):
            m = r["m"]
            if m.n_prompt > MAX_RATE_PROMPT:  # a long prompt's time is mostly attention (cpu_attention_fit)
                continue
            plan = build_plan(resolve_model(ev._model_id(r["model"]), ()).spec, ev._quant(r["quant"], r["model"]))
            per_cpu.setdefault(hw.cpu.id, []).append((plan.ftype.name, m.tokens_per_s / p))
    out: dict[str, dict[str, object]] = {}
    for cid, runs in sorted(per_cpu.items()):
        if len(runs) < MIN_CPU_RUNS:
            continue
        types = sorted({t for t, _ in runs})
        out[cid] = {"all": round(statistics.median(f for _, f in runs), 3), "n": len(runs),
                    "by_type": {t: round(statistics.median(f for u, f in runs if u == t), 3) for t in types}}
    return out


@contextmanager
def _set_terms(**entries: Any) -> Iterator[dict[str, Any]]:
    """The live CPU terms table with `entries` set (a None value removes its key) and every CPU's own figures
    (`cpus`) taken out, restored afterwards: a fit of shared terms must not read figures fitted on top of them."""
    from gemma_fit.speed.cpu import _terms
    from gemma_fit.speed.predict import clear_speed_cache

    table = _terms()
    saved = {k: table.get(k) for k in (*entries, "cpus")}
    _put_all(table, {**entries, "cpus": {}})
    clear_speed_cache()
    try:
        yield table
    finally:
        _put_all(table, saved)
        clear_speed_cache()


def _put_all(table: dict[str, Any], entries: dict[str, Any]) -> None:
    """Set each entry in the table, removing its key where the value is None."""
    for k, v in entries.items():
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v


@contextmanager
def _own_figures_out(*keys: str) -> Iterator[None]:
    """Every CPU's own figures under `keys` (cpu_decode.yaml `cpus`) taken out of the live table, restored afterwards:
    a CPU's own figure is fitted against what its design's or group's figure alone predicts."""
    from gemma_fit.speed.cpu import published_cpus
    from gemma_fit.speed.predict import clear_speed_cache

    fitted = published_cpus()
    kept = {cid: {k: entry.pop(k) for k in keys if k in entry} for cid, entry in fitted.items()}
    clear_speed_cache()
    try:
        yield
    finally:
        for cid, entry in kept.items():
            fitted[cid].update(entry)
        clear_speed_cache()


def _is_moe(r: dict[str, Any]) -> bool:
    from gemma_fit.model.catalog import resolve_model

    sys.path.insert(0, str(REPO / "benchmarks"))
    import evaluate_speed as ev

    return resolve_model(ev._model_id(r["model"]), ()).spec.n_expert > 0


def _bisect_share(r: dict[str, Any], key: str, want: float, experts: dict[str, Any]) -> float | None:
    """The `key` share (experts' decode_share or prefill_share) that makes run r's prediction `want` tokens/s, by
    bisection on its logarithm (a smaller share, a slower prediction); None where no share in 0.05-2 does."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import evaluate_speed as ev

    from gemma_fit.speed.predict import clear_speed_cache

    def predict(share: float) -> float | None:
        experts[key] = share
        clear_speed_cache()
        return ev.predict_row(r)

    lo, hi = math.log(0.05), math.log(2.0)
    p_lo, p_hi = predict(math.exp(lo)), predict(math.exp(hi))
    if p_lo is None or p_hi is None or not p_lo <= want <= p_hi:
        return None
    for _ in range(30):
        mid = (lo + hi) / 2
        p_mid = predict(math.exp(mid))
        if p_mid is None:
            return None
        lo, hi = (mid, hi) if p_mid < want else (lo, mid)
    return math.exp((lo + hi) / 2)


def cpu_expert_fits(exclude: Callable[[dict[str, Any]], bool] = lambda r: False) -> dict[str, object]:
    """The shares of the CPU's decode bandwidth and matrix rate routed experts reach (gemma_fit.speed.cpu
    expert_read_share, expert_prefill_share): for each published mixture-of-experts run (evaluate_speed's CPU rows,
    mainline llama.cpp, no depth), the share that gives it the same published / predicted ratio as the same
    machine's dense runs of the same source (of the same file type, for prompts: each type's kernels run at their
    own rate), so the machine's own speed cancels out; the median over runs. `exclude`: runs left out (a machine's,
    for the left-out figures of benchmarks/fit_backends.py)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import evaluate_speed as ev

    experts: dict[str, Any] = {"decode_share": 1.0, "prefill_share": 1.0, "n_decode": 0, "n_prefill": 0}
    out: dict[str, object] = {}
    with _set_terms(experts=experts):
        rows = [r for r in ev.rows() if r["backend"] == "CPU" and not r["m"].depth and r["m"].kind in (
            "decode", "prefill") and r["m"].n_prompt <= MAX_RATE_PROMPT and not exclude(r) and not ev.excluded(r)]
        moe = {id(r): _is_moe(r) for r in rows}
        base = {id(r): ev.predict_row(r) for r in rows}
        for kind, key in (("decode", "decode_share"), ("prefill", "prefill_share")):
            shares = []
            for r in rows:
                if r["m"].kind != kind or not moe[id(r)] or base[id(r)] is None:
                    continue
                dense = [base[id(d)] / d["m"].tokens_per_s for d in rows  # type: ignore[operator]
                         if d["m"].kind == kind and not moe[id(d)] and base[id(d)] and d["machine"] == r["machine"]
                         and d["source"] == r["source"] and (kind == "decode" or d["quant"] == r["quant"])]
                if not dense:
                    continue
                share = _bisect_share(r, key, r["m"].tokens_per_s * statistics.median(dense), experts)
                experts[key] = 1.0
                if share is not None:
                    shares.append(share)
            if shares:
                out[key] = round(statistics.median(shares), 3)
                out[f"n_{kind}"] = len(shares)
    return out


APPLE_EFFICIENCIES = [x / 100 for x in range(20, 101)]
APPLE_PER_GHZ = [x / 20 for x in range(20, 201)]  # GB/s per thread per GHz: 1 to 10


def apple_design_fit(experts: dict[str, object],
                     exclude: Callable[[dict[str, Any]], bool] = lambda r: False) -> dict[str, object] | None:
    """Apple's own cores (gemma_fit.speed.cpu.design): decode at min(efficiency x datasheet, threads x GB/s per GHz
    x boost clock): the efficiency of the pair of the grids that minimises the squared log error over their
    published Gemma decode runs, and at it the median over machines of each machine's own best GB/s per GHz (a chip
    generation's cores draw their own figure: an M5 Max's 1.6x an M1 Max's, so one machine with many runs must not
    set it for the rest; cpu_decode_fits gives a CPU with runs of its own its own factor); prefill per thread, the
    median that makes each prompt run come out as published (evaluate_speed's CPU rows on Apple CPUs, no depth,
    routed experts at their fitted shares)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import evaluate_speed as ev

    from gemma_fit.speed.cpu import cpu_of, design, prefill_gflops_per_thread, system_bandwidth_gbps
    from gemma_fit.speed.predict import clear_speed_cache

    entry: dict[str, Any] = {"efficiency": 1.0, "per_thread_gbps_per_ghz": 1.0, "n": 0}
    with _set_terms(experts=experts or None, designs={"apple": entry}) as table:
        rows = [r for r in ev.rows() if r["backend"] == "CPU" and not r["m"].depth and r["m"].kind in (
            "decode", "prefill") and r["m"].n_prompt <= MAX_RATE_PROMPT and not exclude(r) and not ev.excluded(r)]
        rows = [r for r in rows if (hw := ev.hardware_for(r)) is not None and hw.cpu and design(hw.cpu) == "apple"]
        decode = [r for r in rows if r["m"].kind == "decode"]
        if not decode:
            return None
        # CPU decode time is linear in 1 / bandwidth: each run's prediction at efficiency 1 and 1 GB/s per GHz
        # scales to any pair by the ratio of the two bandwidths (datasheet x efficiency, or threads x per GHz x clock)
        clear_speed_cache()
        runs = []
        for r in decode:
            p, hw = ev.predict_row(r), r["hardware"]
            rates = cpu_of(hw)
            datasheet, threads = system_bandwidth_gbps(hw, rates, []), rates.threads or 0
            clock = hw.cpu.boost_clock_ghz or 0.0
            if p and threads and clock:
                runs.append((r["m"].tokens_per_s, p / min(datasheet, threads * clock), datasheet, threads * clock,
                             r["machine"]))

        def loss(eff: float, per_ghz: float, machine: str | None = None) -> float:
            return sum(math.log(scale * min(eff * datasheet, per_ghz * thread_ghz) / published) ** 2
                       for published, scale, datasheet, thread_ghz, m in runs if machine in (None, m))

        best = min((loss(eff, per_ghz), eff, per_ghz) for eff in APPLE_EFFICIENCIES for per_ghz in APPLE_PER_GHZ)
        machines = sorted({run[4] for run in runs})
        own = [min(APPLE_PER_GHZ, key=partial(loss, best[1], machine=m)) for m in machines]
        best = (best[0], best[1], statistics.median(own))
        entry.update(efficiency=best[1], per_thread_gbps_per_ghz=best[2], n=len(runs))
        table["prefill"].pop("apple", None)
        clear_speed_cache()
        # each prompt run's GFLOP/s per thread, not per GHz of boost: a Mac's P-cores all busy run well below the
        # single-core boost clock Apple states on the M3 and M4, near it on the M1 (left out in turn, the Apple prompt
        # runs come out at a median 22% per thread against 37% per GHz)
        implied: list[float] = []
        for r in rows:
            p = ev.predict_row(r) if r["m"].kind == "prefill" else None
            if p:
                rate, _ = prefill_gflops_per_thread(cpu_of(r["hardware"]))
                implied.append(rate * r["m"].tokens_per_s / p)
    if not implied:
        return {"decode": dict(entry)}
    return {"decode": {"efficiency": best[1], "per_thread_gbps_per_ghz": best[2], "n": len(runs)},
            "prefill": {"gflops_per_thread": round(statistics.median(implied), 1), "n": len(implied)}}


def install_shared(experts: dict[str, object], apple: dict[str, object] | None) -> None:
    """Put the CPU terms fitted across machines (cpu_expert_fits, apple_design_fit) in force in the live table."""
    from gemma_fit.speed.cpu import _terms
    from gemma_fit.speed.predict import clear_speed_cache

    table = _terms()
    table["experts"] = experts
    table["designs"] = {"apple": apple["decode"]} if apple else {}
    table["prefill"].pop("apple", None)
    if apple and "prefill" in apple:
        table["prefill"]["apple"] = apple["prefill"]
    clear_speed_cache()


def _sweep_key(r: dict[str, Any]) -> tuple[Any, ...]:
    return r["machine"], r["model"], r["quant"], r["source"], r["m"].n_prompt


def cpu_attention_fit() -> dict[str, object] | None:
    """`full_rate_tokens` of CPU prompt attention (gemma_fit.speed.cpu.attention_share): for each published prompt
    run at depth (mainline llama.cpp, evaluate_speed's CPU rows), the value that makes the predicted slowdown from
    the same sweep's run at depth 0 equal the published one (a ratio, so the machine's own matrix rate cancels out),
    found by bisection on its logarithm; the median over machines of each machine's median."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import evaluate_speed as ev

    from gemma_fit.speed.cpu import _terms
    from gemma_fit.speed.predict import clear_speed_cache

    rows = [r for r in ev.rows() if r["backend"] == "CPU" and r["m"].kind == "prefill"]
    base = {_sweep_key(r): r for r in rows if not r["m"].depth}
    table = _terms()
    kept = table.pop("attention", None)

    def slowdown(r: dict[str, Any], zero: dict[str, Any], tokens: float) -> float | None:
        table["attention"] = {"full_rate_tokens": tokens, "n": 0}
        clear_speed_cache()
        p, p0 = ev.predict_row(r), ev.predict_row(zero)
        return p0 / p if p and p0 else None

    per_machine: dict[str, list[float]] = {}
    for r in rows:
        zero = base.get(_sweep_key(r))
        if not r["m"].depth or zero is None:
            continue
        want = zero["m"].tokens_per_s / r["m"].tokens_per_s
        lo, hi = 0.0, 7.0  # log10 of the tokens: the slowdown falls as attention gets faster
        s_lo, s_hi = slowdown(r, zero, 10**lo), slowdown(r, zero, 10**hi)
        if s_lo is None or s_hi is None or not s_hi <= want <= s_lo:
            continue  # no value reproduces it (the matrix products alone slow it more, or attention cannot)
        for _ in range(30):
            mid = (lo + hi) / 2
            s_mid = slowdown(r, zero, 10**mid)
            if s_mid is None:
                break
            lo, hi = (mid, hi) if s_mid > want else (lo, mid)
        per_machine.setdefault(r["machine"], []).append(10 ** ((lo + hi) / 2))
    table.pop("attention", None)
    if kept is not None:
        table["attention"] = kept
    clear_speed_cache()
    if not per_machine:
        return None
    tokens = statistics.median(statistics.median(v) for v in per_machine.values())
    return {"full_rate_tokens": round(tokens, 1), "n": sum(len(v) for v in per_machine.values()),
            "machines": len(per_machine)}


def main() -> None:
    dec, pre = decode_rows(), prefill_rows()
    eff, per_thread = decode_terms(dec)
    for d in dec:
        ratio = f"{float(d['effective']) / float(d['datasheet']):.2f}" if d["datasheet"] else "  - "  # type: ignore[arg-type]
        print(f"  tg {d['family']:4} {ratio} of datasheet, {float(d['effective']):6.1f} GB/s on "  # type: ignore[arg-type]
              f"{d['threads'] or '?'} threads  {d['cpu']}")
    for d in pre:
        ghz = f"{float(d['per_ghz']):5.1f} per GHz" if d["per_ghz"] else "  clock unknown"  # type: ignore[arg-type]
        print(f"  pp {d['group']:6} {float(d['per_thread']):6.1f} GFLOP/s per thread, {ghz}  {d['cpu']}")  # type: ignore[arg-type]
    n_eff = {f: sum(1 for d in dec if d["family"] == f and d["median"] and d["datasheet"]) for f in eff}
    n_thread = sum(1 for d in dec if d["threads"] and int(d["threads"]) <= MAX_THREAD_LIMITED)  # type: ignore[call-overload]
    prefill = prefill_medians(pre)
    per_ghz = prefill_medians(pre, key="per_ghz")
    for fam, e in eff.items():
        print(f"{fam}: decode efficiency {e:.3f} of datasheet bandwidth (median of {n_eff[fam]} runs)")
    print(f"decode bandwidth per thread: {per_thread:.1f} GB/s (median of {n_thread} runs on "
          f"<= {MAX_THREAD_LIMITED} threads)")
    for group, (rate, n) in prefill.items():
        ghz = f", {per_ghz[group][0]:.2f} per GHz of boost (median of {per_ghz[group][1]})" if group in per_ghz else ""
        print(f"{group}: prefill {rate:.1f} GFLOP/s per thread (median of {n} runs){ghz}")
    print(_summary("decode", decode_errors(dec)))
    print(_summary("prefill (per thread)", prefill_errors(pre)))
    print(_summary("prefill (per thread per GHz of boost)", prefill_errors(pre, "per_ghz")))

    experts = cpu_expert_fits()
    apple = apple_design_fit(experts)
    install_shared(experts, apple)  # the fits below (each CPU's own figures) read the shared terms just fitted
    if experts:
        print(f"routed experts: decode reads at x{experts.get('decode_share')} of the CPU's bandwidth "
              f"({experts.get('n_decode')} runs), prompts at x{experts.get('prefill_share')} of its matrix rate "
              f"({experts.get('n_prefill')} runs): each against its machine's dense runs")
    if apple:
        terms: Any = apple["decode"]
        print(f"apple: decode at min({terms['efficiency']} x datasheet, threads x {terms['per_thread_gbps_per_ghz']} "
              f"GB/s per GHz of boost) over {terms['n']} runs; prefill {apple.get('prefill')}")
    cpus: dict[str, dict[str, object]] = dict(cpu_decode_fits())
    for cid, fit in cpus.items():
        if "efficiency" in fit:
            print(f"{cid}: decode efficiency {fit['efficiency']} of datasheet bandwidth (its own {fit['n']} Gemma "
                  "runs, benchmarks/evaluate_speed.py's rows)")
        if "per_thread_factor" in fit:
            print(f"{cid}: a decode thread draws x{fit['per_thread_factor']} of its design's or family's GB/s (its own "
                  f"{fit['n_threads']} thread-bound Gemma runs)")
    for cid, pre_fit in cpu_prefill_fits().items():
        cpus.setdefault(cid, {})["prefill"] = pre_fit
        print(f"{cid}: prefill x{pre_fit['all']} of its group's rate over its own {pre_fit['n']} Gemma prompt runs; "
              f"per file type {pre_fit['by_type']}")
    attention = cpu_attention_fit()
    if attention:
        print(f"prompt attention: the matrix rate x sqrt({attention['full_rate_tokens']} / cached tokens per query) "
              f"(median over {attention['machines']} machines, {attention['n']} published runs at depth)")
    if "--write" in sys.argv:
        head = "".join(line for line in TABLE.read_text(encoding="utf-8").splitlines(keepends=True)
                       if line.startswith("#"))
        body = {"source": "benchmarks/fit_cpu_decode.py over benchmarks/data/cpu_published_runs.csv",
                "families": {fam: {"efficiency": round(e, 3), "n": n_eff[fam]} for fam, e in eff.items()},
                "per_thread": {"gbps": round(per_thread, 1), "n": n_thread, "max_threads": MAX_THREAD_LIMITED},
                "prefill": {g: {"gflops_per_thread": rate, "n": n,
                                **({"gflops_per_thread_per_ghz": per_ghz[g][0], "n_clocked": per_ghz[g][1]}
                                   if g in per_ghz else {})} for g, (rate, n) in prefill.items()},
                **({"attention": attention} if attention else {}),
                **({"experts": experts} if experts else {}),
                **({"designs": {"apple": apple["decode"]}} if apple else {}),
                "cpus": cpus}
        if apple and "prefill" in apple:
            body["prefill"]["apple"] = apple["prefill"]  # type: ignore[index]
        TABLE.write_text(head + yaml.safe_dump(body, sort_keys=False), encoding="utf-8")


if __name__ == "__main__":
    main()
