#!/usr/bin/env python3
"""Score gemma-fit's speed model on the repo's published Gemma runs, per backend x metric x concurrency.

Rows: every published llama.cpp run of a Gemma model on a machine hardware_db knows, in
benchmarks/data/backend_published_runs.csv (llama-bench pp/tg at any depth, llama-batched-bench S_TG),
benchmarks/data/gemma_llamabench.csv (llama-bench) and benchmarks/data/serving_runs.csv (llama-batched-bench S_TG:
several sequences at once). Each test is predicted exactly as `gemma-fit bench` predicts it (jobs.bench.predicted:
the same settings llama.cpp ran, the machine's backend, its threads), with the model as shipped. The figures are
in-sample: benchmarks/fit_backends.py fits the published-run efficiencies and per-kernel costs on these rows (its
machine-left-out and source-left-out columns are the errors to expect on a new machine), and
benchmarks/fit_serving.py the batched decode term on the serving_runs.csv rows (its leave-one-setup-out error is the
one to expect); the per-machine and per-source breakdowns (--by machine, --by source) show whether one machine or one
page carries a group.

    python benchmarks/evaluate_speed.py [--by group|machine|source] [--json]
Prints median and worst |error| per group and the count; error = (predicted - published) / published.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("GEMMA_FIT_CALIBRATION", os.path.join(os.devnull, "none.json"))

from gemma_fit.base.errors import GemmaFitError  # noqa: E402
from gemma_fit.gguf.tensors import build_plan  # noqa: E402
from gemma_fit.hardware.flags import MachineFlags  # noqa: E402
from gemma_fit.hardware.select import hardware_of  # noqa: E402
from gemma_fit.jobs.bench import predicted  # noqa: E402
from gemma_fit.jobs.bench_parse import Measurement, test_name  # noqa: E402
from gemma_fit.model.catalog import resolve_model  # noqa: E402

DATA = REPO / "benchmarks" / "data"
PINNED = DATA / "speed_evaluation.json"  # tests/test_speed_evaluation.py: no group may get worse unseen
_BACKEND_LABEL = {"cuda": "CUDA", "rocm": "ROCm", "vulkan": "Vulkan", "metal": "Metal", "sycl": "SYCL", "cpu": "CPU"}
BACKENDS = {"cuda": "cuda", "rocm": "rocm", "vulkan": "vulkan", "metal": "metal", "sycl": "sycl", "cpu": "cpu"}


def _model_id(name: str) -> str:
    """'gemma-3-4b-it (QAT)' -> 'gemma-3-4b'; 'Gemma 4 12B' stays for the resolver's own matching."""
    name = re.sub(r"\(.*?\)", "", name).strip()
    name = re.sub(r"\s+(instruct|it)$", "", name, flags=re.IGNORECASE)  # "Gemma 3 1B instruct" -> "Gemma 3 1B"
    return re.sub(r"-it$", "", name)


def _quant(q: str, model: str) -> str:
    """Google's QAT Q4_0 files keep other tensor types than llama-quantize's Q4_0 (gemma-fit's QAT_Q4_0)."""
    q = q.replace(" QAT GGUF", "").strip() if "QAT" in q else q.strip()
    return "QAT_Q4_0" if q == "Q4_0" and "qat" in f"{model} {q}".lower() else q


def _int(v: str | None, default: int = 0) -> int:
    try:
        return int(float(v)) if v not in (None, "") else default
    except ValueError:
        return default


_UBATCH = re.compile(r"(?:n_ubatch|ubatch)\s*[= ]\s*(\d+)|(?:^|\s)-ub\s+(\d+)")


def _ubatch(*texts: str) -> int | None:
    """The -ub a run names in its test or notes ("pp256 (ubatch=1)", "n_ubatch 2048", "-ub 1024"); None: default."""
    for text in texts:
        m = _UBATCH.search(text or "")
        if m:
            return int(m.group(1) or m.group(2))
    return None


def _measurement(test: str, n_prompt: int, n_gen: int, depth: int, conc: int, tps: float,
                 n_ubatch: int | None = None) -> Measurement | None:
    if test in ("S_TG",):
        return Measurement(test_name("batched", n_prompt, n_gen, 0, conc), "batched", n_prompt, n_gen, 0, conc, tps)
    m = re.match(r"^(pp|tg)(\d+)", test)
    if not m:
        return None
    n = int(m.group(2))
    kind = "prefill" if m.group(1) == "pp" else "decode"
    return Measurement(test_name(kind, n if kind == "prefill" else 0, n if kind == "decode" else 0, depth, 1, ),
                       kind, n if kind == "prefill" else 0, n if kind == "decode" else 0, depth, 1, tps,
                       n_ubatch=n_ubatch)


UNFITTED = DATA / "unfitted_runs.yaml"


@cache
def _unfitted() -> frozenset[tuple[str, str, str | None]]:
    """(source, test, model or None: every model of that source and test)."""
    return frozenset((e["source_url"], t, e.get("model")) for e in yaml.safe_load(UNFITTED.read_text())
                     for t in e["tests"])


def excluded(r: dict[str, Any]) -> bool:
    """Rows no figure is fitted on (benchmarks/fit_backends.py, fit_cpu_decode.py): benchmarks/data/unfitted_runs.yaml,
    each with its reason (still scored)."""
    table = _unfitted()
    return (r["source"], r["m"].test, None) in table or (r["source"], r["m"].test, r["model"]) in table


def rows() -> list[dict[str, Any]]:
    out = []
    with (DATA / "backend_published_runs.csv").open() as f:
        for r in csv.DictReader(f):
            # "llama.cpp harness": a page's own timing of llama.cpp at llama-bench's settings (VulkanForge's wiki)
            if "gemma" not in r["model"].lower() or not r["machine_id"] or r["tool"] not in (
                    "llama-bench", "llama-batched-bench", "llama-server", "llama.cpp harness"):
                continue
            m = _measurement(r["test"], _int(r["n_prompt"]), _int(r["n_gen"]), _int(r["depth"]),
                             _int(r["concurrency"], 1), float(r["tokens_per_s"]), _ubatch(r["test"], r["notes"]))
            if m is not None:
                out.append({"machine": r["machine_id"], "machine_name": r["machine"], "backend": r["backend"],
                            "model": r["model"],
                            "quant": r["quant"], "threads": _int(r["threads"]) or None, "m": m,
                            "source": r["source_url"], "driver": r["driver"], "file": "backend_published_runs.csv"})
    with (DATA / "more_published_runs.csv").open() as f:  # CPU-only runs of Gemma models on CPUs cpus.yaml knows
        for r in csv.DictReader(f):
            if r["backend"] != "CPU" or not r["machine_id"] or "gemma" not in r["model"].lower():
                continue
            if _unwarmed(r):
                continue
            test = re.sub(r"^S_(PP|TG) \((\w+) @ N_KV\)$", r"\2", r["test"])  # llama-sweep-bench's rows
            m = _measurement(test, _int(r["n_prompt"]), _int(r["n_gen"]), _int(r["depth"]), _int(r["concurrency"], 1),
                             float(r["tokens_per_s"]), _ubatch(r["test"], r.get("notes", "")))
            if m is not None and "+" not in test:
                fork = "ik_llama" in r["tool"]  # a fork's CPU kernels (run-time repacking): scored apart
                out.append({"machine": r["machine_id"], "machine_name": r["machine"],
                            "backend": "CPU/ik_llama" if fork else "CPU", "model": r["model"], "quant": r["quant"],
                            "threads": _int(r["threads"]) or None, "sockets": _int(r["sockets"]) or None, "m": m,
                            "numa": _numa(r["tool"]), "ram": _ram(r.get("ram", "")),
                            "source": r["source_url"], "file": "more_published_runs.csv"})
    with (DATA / "serving_runs.csv").open() as f:  # llama-batched-bench S_TG: one decode step of N sequences
        for r in csv.DictReader(f):
            if r["engine"] != "llama.cpp" or r["mode"] != "decode" or "gemma" not in r["arch"]:
                continue
            n = int(r["concurrency"])
            m = Measurement(test_name("batched", int(r["input_len"]), int(r["output_len"]), 0, n), "batched",
                            int(r["input_len"]), int(r["output_len"]), 0, n, float(r["aggregate_tps"]))
            backend = _BACKEND_LABEL[r["backend"] or "cuda"]
            out.append({"machine": r["gpu"], "machine_name": r["gpu"], "backend": backend,
                        "model": r["arch"], "quant": r["quant"], "threads": None, "m": m, "source": r["source_url"],
                        "file": "serving_runs.csv"})
    with (DATA / "gemma_llamabench.csv").open() as f:
        for r in csv.DictReader(f):
            m = _measurement(r["test"].split()[0], 0, 0, 0, 1, float(r["tokens_per_s"]),
                             _ubatch(r["test"], r.get("notes", "")))
            if m is not None and r["gpu_id"]:
                out.append({"machine": r["gpu_id"], "machine_name": r["gpu"], "backend": r["backend"],
                            "model": r["model"], "quant": r["quant"],
                            "threads": None, "m": m, "source": r["source_url"], "file": "gemma_llamabench.csv"})
    return out


def _gpu_as_run(g: Any, machine: str) -> Any:
    """An Apple GPU of the bin the run names ("30-core GPU") where the database entry is another bin of that chip:
    prefill scales with the cores, decode with the memory, which the bins share."""
    m = re.search(r"(\d+)-core GPU", machine)
    if g.backend != "metal" or not m or not g.gpu_cores or int(m.group(1)) == g.gpu_cores:
        return g
    cores = int(m.group(1))
    return replace(g, gpu_cores=cores, fp32_tflops=g.fp32_tflops * cores / g.gpu_cores if g.fp32_tflops else None)


def _unwarmed(r: dict[str, str]) -> bool:
    """The first row of a llama-sweep-bench whose author says it ran without a warm-up (its notes quote that): not a
    steady-state figure (ik_llama.cpp PR #390's N_KV 0 row decodes at half the rate of every later one)."""
    return "no warm-up" in r.get("notes", "") and r["test"].startswith("S_") and _int(r["depth"]) == 0


_RAM = re.compile(r"^((?:lp)?ddr[45]x?-\d{3,5}) x(\d+)$")


def _ram(text: str) -> tuple[str, int] | None:
    """The memory a run states in --ram-type / --ram-channels terms ("ddr4-2666 x4": four channels at 2666 MT/s, a
    board running slower than the CPU's rated maximum); None where the CSV's `ram` is free text or empty."""
    m = _RAM.match(text.strip().lower())
    return (m.group(1), int(m.group(2))) if m else None


def _numa(tool: str) -> str | None:
    """How a CPU run's pages lie across sockets, as --numa would say: ik_llama.cpp's -rtr repacks every weight into
    buffers its threads on both sockets first touch, spread as `--numa distribute` spreads them (a dual Xeon Gold 6226R
    decodes Gemma 3 27B Q8_0 at 148 GB/s with it, above one socket's 141 GB/s datasheet: ik_llama.cpp PR #390)."""
    return "distribute" if re.search(r"(^|\s)-rtr(\s|$)", tool or "") else None


def hardware_for(r: dict[str, Any]) -> Any:
    """The machine of a run as gemma-fit models it: its backend, threads and (Apple) GPU bin; None if unknown."""
    if "hardware" in r:
        return r["hardware"]
    backend = BACKENDS.get(r["backend"].split("/")[0].strip().lower())
    try:
        if backend == "cpu" and not r["machine"].startswith("cpu"):  # a CPU of cpus.yaml, CPU only (-ngl 0)
            ram_type, channels = r.get("ram") or (None, None)
            hw = hardware_of(["cpu"], None, (), MachineFlags(ram_gb=64, cpu=r["machine"], threads=r["threads"],
                                                              sockets=r.get("sockets"), numa=r.get("numa"),
                                                              ram_type=ram_type, ram_channels=channels))
        else:  # an AMDVLK run on its own driver's figures (--vulkan-driver amdvlk)
            hw = hardware_of([r["machine"]], backend if backend != "cpu" else None, (),
                             MachineFlags(threads=r["threads"] or None, vulkan_driver="amdvlk" if amdvlk(r) else None))
    except (GemmaFitError, ValueError) as exc:
        r["skipped"], r["hardware"] = str(exc)[:120], None
        return None
    r["hardware"] = replace(hw, speed_calibration=None, gpus=tuple(_gpu_as_run(g, r["machine_name"]) for g in hw.gpus))
    return r["hardware"]


def predict_row(r: dict[str, Any]) -> float | None:
    hw = hardware_for(r)
    if hw is None:
        return None
    try:
        resolved = resolve_model(_model_id(r["model"]), ())
        plan = build_plan(resolved.spec, _quant(r["quant"], r["model"] + " " + r["quant"]))
        return predicted(r["m"], hw, resolved, plan, None if hw.gpus else 0)
    except (GemmaFitError, ValueError) as exc:
        r["skipped"] = str(exc)[:120]
        return None


def backend_label(r: dict[str, Any]) -> str:
    """The backend as grouped: AMD's discontinued AMDVLK Vulkan driver apart from Mesa's RADV."""
    return "Vulkan/AMDVLK" if amdvlk(r) else r["backend"]


def amdvlk(r: dict[str, Any]) -> bool:
    """A run on AMDVLK, as its row's `driver` says (from the source's file names, or its README where the
    files do not say: lhl/strix-halo-testing's 'llama.cpp-vulkan' variant)."""
    return r.get("driver") == "AMDVLK"


def group_key(r: dict[str, Any]) -> str:
    return f"{backend_label(r):13s} {metric(r['m']):15s} x{concurrency_bucket(r['m'].concurrency)}"


def concurrency_bucket(n: int) -> str:
    return "1" if n == 1 else "2-8" if n <= 8 else "9+"


def metric(m: Measurement) -> str:
    if m.kind == "batched":
        return "S_TG"
    name = "prefill" if m.kind == "prefill" else "decode"
    return f"{name} @depth" if m.depth else name


def evaluate(by: str) -> tuple[dict[str, list[float]], list[dict[str, Any]]]:
    groups: dict[str, list[float]] = defaultdict(list)
    done = []
    for r in rows():
        p = predict_row(r)
        if p is None:
            continue
        err = 100.0 * (p - r["m"].tokens_per_s) / r["m"].tokens_per_s
        r["predicted"], r["error_pct"] = p, err
        done.append(r)
        key = group_key(r)
        if by == "machine":
            key = f"{key}  {r['machine']}"
        elif by == "source":
            key = f"{key}  {r['source'].split('/blob/')[0].split('/discussions/')[0][-48:]}"
        groups[key].append(err)
    return groups, done


def summary(groups: dict[str, list[float]]) -> list[dict[str, Any]]:
    return [{"group": " ".join(k.split()), "n": len(v),
             "median_abs_error_pct": round(statistics.median(abs(e) for e in v), 1),
             "worst_abs_error_pct": round(max(abs(e) for e in v), 1),
             "median_signed_pct": round(statistics.median(v), 1)} for k, v in sorted(groups.items())]


# Issue 26's targets on published runs: single-stream decode within 10% median, prefill and many-request throughput
# within 20% median, no backend group past 25%. Printed beside the table (the held-out runs are what the targets
# are checked on; these rows are in-sample for every term fitted on them).
TARGETS = (("single-stream decode", lambda r: r["m"].kind == "decode", 10.0),
           ("prefill", lambda r: r["m"].kind == "prefill", 20.0),
           ("many requests (S_TG x2+)", lambda r: r["m"].kind == "batched" and r["m"].concurrency > 1, 20.0))
GROUP_LIMIT_PCT = 25.0


def target_lines(done: list[dict[str, Any]], table: list[dict[str, Any]]) -> list[str]:
    """Each target's median |error| over the scored rows it covers, and the groups past the group limit."""
    lines = []
    for name, keep, limit in TARGETS:
        errs = [abs(r["error_pct"]) for r in done if keep(r)]
        if errs:
            med = statistics.median(errs)
            lines.append(f"{name}: median {med:.1f}% over {len(errs)} runs (target {limit:g}%: "
                         f"{'met' if med <= limit else 'NOT met'})")
    past = [f"{g['group']} {g['median_abs_error_pct']:.1f}%" for g in table
            if g["median_abs_error_pct"] > GROUP_LIMIT_PCT]
    lines.append(f"groups past {GROUP_LIMIT_PCT:g}%: {', '.join(past) if past else 'none'}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--by", choices=("group", "machine", "source"), default="group")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--write", action="store_true", help=f"pin the figures in {PINNED.relative_to(REPO)}")
    args = ap.parse_args()
    groups, done = evaluate(args.by)
    table = summary(groups)
    if args.json or args.write:
        text = json.dumps({"groups": table, "rows": len(done)}, indent=1) + "\n"
        if args.write:
            PINNED.write_text(text)
        print(text, end="")
        return
    print(f"{'backend metric concurrency':40s} {'n':>4s} {'median':>8s} {'worst':>8s} {'signed':>8s}")
    for g in table:
        print(f"{g['group']:40s} {g['n']:4d} {g['median_abs_error_pct']:7.1f}% {g['worst_abs_error_pct']:7.1f}% "
              f"{g['median_signed_pct']:+7.1f}%")
    allerr = [abs(e) for v in groups.values() for e in v]
    print(f"all: {len(allerr)} runs, median {statistics.median(allerr):.1f}%, worst {max(allerr):.1f}%")
    if args.by == "group":
        print("\n".join(target_lines(done, table)))


if __name__ == "__main__":
    main()
