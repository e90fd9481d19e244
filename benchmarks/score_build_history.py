#!/usr/bin/env python3
"""Score the speed model on every earlier version of a published log set: how far the answers for the llama.cpp
build gemma-fit models are from the same machine's runs with older builds.

kyuz0/amd-strix-halo-toolboxes re-runs llama-bench on one Strix Halo (128 GB) for each toolbox (ROCm versions, Vulkan
RADV and AMDVLK) and overwrites its logs: benchmarks/data/backend_published_runs.csv holds the newest ones, the git
history holds the rest. This script reads every version of every Gemma log in a local clone of that repository
(`git clone https://github.com/kyuz0/amd-strix-halo-toolboxes`), predicts each row as benchmarks/evaluate_speed.py
does, and prints the median signed error per driver, metric and build (thousands), leaving out the rows the CSV holds.

    python benchmarks/score_build_history.py PATH_TO_CLONE
"""

from __future__ import annotations

import csv
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import evaluate_speed as ev  # noqa: E402

MACHINE = "ryzen-ai-max-395-128gb"
LOG = re.compile(r"(gemma-\d-[\w.]+?-it)-(.+?)(?:-0000\d-of-0000\d)?__(.+)\.log$")
ROW = re.compile(r"\|\s*gemma[^|]*\|\s*[\d.]+ GiB\s*\|\s*[\d.]+ B\s*\|\s*(\w+)\s*\|.*?\|\s*(pp\d+|tg\d+)"
                 r"(?: @ d(\d+))?\s*\|\s*([\d.]+) ±")


def git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(clone), *args], capture_output=True, text=True, check=False).stdout


def known_rows() -> set[tuple[str, str, str, int, str]]:
    """(model, quant, test, depth, printed tok/s) of the kyuz0 rows the CSV already holds."""
    with (REPO / "benchmarks" / "data" / "backend_published_runs.csv").open() as f:
        return {(r["model"], r["quant"], r["test"], int(r["depth"] or 0), r["tokens_per_s"])
                for r in csv.DictReader(f) if "amd-strix-halo-toolboxes" in r["source_url"]}


def rows_of(clone: Path) -> list[dict[str, Any]]:
    known = known_rows()
    out, seen = [], set()
    paths = sorted({p for p in git(clone, "log", "--all", "--name-only", "--format=").split()
                    if p.startswith("benchmark/results") and "gemma" in p and p.endswith(".log")})
    for path in paths:
        m = LOG.match(path.rsplit("/", 1)[-1])
        if not m:
            continue
        model, quant, variant = m.groups()
        for commit in git(clone, "log", "--all", "--diff-filter=AM", "--format=%h", "--", path).split():
            text = git(clone, "show", f"{commit}:{path}")
            b = re.search(r"build: \w+ \((\d+)\)", text)
            for x in ROW.finditer(text):
                backend, test, depth, tps = x.group(1), x.group(2), int(x.group(3) or 0), x.group(4)
                key = (model, quant, test, depth, tps, variant)
                if key in seen or (model, quant, test, depth, tps) in known:
                    continue
                seen.add(key)
                n = int(test[2:])
                meas = ev._measurement(test, n if test.startswith("pp") else 0, n if test.startswith("tg") else 0,
                                       depth, 1, float(tps))
                out.append({"machine": MACHINE, "machine_name": "Framework Desktop (Strix Halo, 128 GB)",
                            "backend": backend, "model": model, "quant": quant, "threads": None, "m": meas,
                            "source": path, "driver": "AMDVLK" if "amdvlk" in variant else "",
                            "build": int(b.group(1)) if b else 0, "variant": variant})
    return out


def main() -> None:
    if len(sys.argv) != 2 or not (Path(sys.argv[1]) / ".git").exists() and not Path(sys.argv[1], "HEAD").exists():
        sys.exit("usage: score_build_history.py PATH_TO_A_CLONE_OF_kyuz0/amd-strix-halo-toolboxes")
    groups: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for r in rows_of(Path(sys.argv[1])):
        p = ev.predict_row(r)
        if not p:
            continue
        driver = "amdvlk" if r["driver"] else "radv" if r["backend"] == "Vulkan" else "rocm"
        flash = "" if "fa1" in r["variant"] or r["m"].kind != "prefill" else " (-fa 0)"
        groups[(driver, ev.metric(r["m"]) + flash, r["build"] // 1000)].append(p / r["m"].tokens_per_s - 1)
    print(f"{'driver':8s} {'metric':20s} {'builds':>8s} {'runs':>5s} {'median signed error':>20s}")
    for (driver, metric, k), errs in sorted(groups.items()):
        print(f"{driver:8s} {metric:20s} {f'b{k}xxx':>8s} {len(errs):5d} {100 * statistics.median(errs):+19.1f}%")


if __name__ == "__main__":
    main()
