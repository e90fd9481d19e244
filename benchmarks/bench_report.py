#!/usr/bin/env python3
"""How fast is `gemma-fit report`? Prints figures; it is a benchmark, not a test.

The matrix: all 17 models x 5 quants x 10 GPUs x 4 contexts = 3400 cells, each the full `check`
(verdict, max context, advice, speed) in one process. Target: under 3 s for run_report in a fresh
process, imports included.

    python benchmarks/bench_report.py                      # the 3400-cell matrix, library and CLI
    python benchmarks/bench_report.py --large --gpus 20    # --model all --quant all over the first 20
                                                           # database GPUs: time and peak RSS per cell
    python benchmarks/bench_report.py --whole              # the CLI over every GPU, model, quant and 6
                                                           # contexts (--json to /dev/null): wall, CPU, RSS

`--large` runs run_report in a fresh process on `--model all --quant all` (every model, every contract
quant) over the first `--gpus N` GPUs of the database and the `--ctx` list, then writes the report as JSON
to /dev/null the way `report --json` does; it prints the seconds and the peak RSS (ru_maxrss) per cell, the
RSS above what the imports alone take, and an extrapolation to `--extrapolate` cells. Wall and CPU seconds
are both printed: on a shared machine the CPU seconds are the steadier figure. The fixed part of the RSS
(tensor plans and caches, one per model and quant) is in each figure: the cost of one more cell is the
difference between two sizes (--gpus 20 and --gpus 94, say) divided by the difference in cells.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

GPUS = ["a4000", "rtx-3060-12gb", "rtx-4090", "rtx-3090", "l40s", "a100-80gb-sxm", "h100-sxm", "t4", "l4", "h200-sxm"]
QUANTS = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "BF16"]
CONTEXTS = [4096, 8192, 32768, 131072]
WHOLE_CONTEXTS = "4096,8192,16384,32768,131072,0"
INPROCESS = f"""
import time
t0 = time.perf_counter()
from gemma_fit.jobs.report import run_report
from gemma_fit.memory.settings import RunSettings
t1 = time.perf_counter()
report = run_report(["all"], {QUANTS!r}, {[[g] for g in GPUS]!r}, {CONTEXTS!r}, RunSettings())
t2 = time.perf_counter()
from gemma_fit.present.html import render_report_html
html = render_report_html(report)
t3 = time.perf_counter()
print(len(report["cells"]), t1 - t0, t2 - t1, t3 - t2, len(html))
"""
CLI = """
from gemma_fit.cli.entry import run
run()
"""

LARGE = """
import json, os, resource, sys, time
from gemma_fit.hardware.catalog import load_gpus
from gemma_fit.jobs.report import run_report
from gemma_fit.memory.settings import RunSettings
n_gpus, ctxs = int(sys.argv[1]), [int(c) for c in sys.argv[2].split(",")]
gpus = [[g] for g in list(load_gpus(()))[:n_gpus]]
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
def cpu():  # this process and its waited-for workers
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
t0, c0 = time.perf_counter(), cpu()
report = run_report(["all"], ["all"], gpus, ctxs, RunSettings())
t1, c1 = time.perf_counter(), cpu()
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    from gemma_fit.cli.report import dump_report_json
except ImportError:  # before the streaming writer
    def dump_report_json(doc, fp):
        fp.write(json.dumps(doc, indent=2) + "\\n")
with open("/dev/null", "w") as f:
    dump_report_json(report, f)
t2, c2 = time.perf_counter(), cpu()
rss2 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"cells": len(report["cells"]), "gpus": len(gpus), "contexts": ctxs, "summary": report["summary"],
                  "run_report_s": round(t1 - t0, 2), "json_s": round(t2 - t1, 2),
                  "run_report_cpu_s": round(c1 - c0, 2), "json_cpu_s": round(c2 - c1, 2),
                  "imports_rss_mib": round(rss0 / 1024), "peak_rss_after_run_mib": round(rss1 / 1024),
                  "peak_rss_after_json_mib": round(rss2 / 1024),
                  "workers_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)}))
"""


def large(n_gpus: int, contexts: str, extrapolate: int) -> None:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", LARGE, str(n_gpus), contexts], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        sys.exit(proc.stderr[-2000:])
    doc = json.loads(proc.stdout)
    doc["whole_process_s"] = round(time.perf_counter() - t, 2)
    cells = doc["cells"]
    doc["ms_per_cell"] = round(1e3 * doc["run_report_s"] / cells, 3)
    doc["cpu_ms_per_cell"] = round(1e3 * doc["run_report_cpu_s"] / cells, 3)  # steadier on a busy machine
    doc["json_ms_per_cell"] = round(1e3 * doc["json_s"] / cells, 3)
    above = doc["peak_rss_after_json_mib"] - doc["imports_rss_mib"]
    doc["rss_kib_per_cell"] = round(1024 * above / cells, 2)
    doc[f"extrapolated_to_{extrapolate}_cells"] = {
        "run_report_s": round(doc["run_report_s"] / cells * extrapolate),
        "run_report_cpu_s": round(doc["run_report_cpu_s"] / cells * extrapolate),
        "peak_rss_mib": round(doc["imports_rss_mib"] + above / cells * extrapolate)}
    print(json.dumps(doc, indent=2))


def whole(contexts: str) -> None:
    """The command a user runs: every database GPU x every model x every contract quant x the contexts, as JSON."""
    args = ["report", "--model", "all", "--quant", "all", "--gpu", "all",
            *[a for c in contexts.split(",") for a in ("--ctx", c)], "--json"]
    t = time.perf_counter()
    with open(os.devnull, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "gemma_fit", *args], stdout=sink, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)  # the command and its (waited-for) worker processes
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(proc.stderr.read().decode()[-2000:] if proc.stderr else "failed")
    print(json.dumps({"command": "gemma-fit " + " ".join(args) + " > /dev/null", "wall_s": round(wall, 1),
                      "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
                      "peak_rss_mib_largest_process": round(usage.ru_maxrss / 1024)}, indent=2))


def _cli(*extra: str) -> float:
    args = ["report", "--model", "all", *[a for q in QUANTS for a in ("--quant", q)],
            *[a for g in GPUS for a in ("--gpu", g)], *[a for c in CONTEXTS for a in ("--ctx", str(c))], *extra]
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", CLI, *args], check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large", action="store_true", help="time and peak RSS per cell on --model all --quant all")
    ap.add_argument("--gpus", type=int, default=20, help="with --large: the first N database GPUs (default 20)")
    ap.add_argument("--ctx", default="4096", help="with --large: contexts, comma-separated (default 4096)")
    ap.add_argument("--extrapolate", type=int, default=442_000, help="with --large: cells to extrapolate to")
    ap.add_argument("--whole", metavar="CTXS", nargs="?", const=WHOLE_CONTEXTS,
                    help="time the CLI on every GPU x model x quant at these contexts (comma-separated, default "
                         f"{WHOLE_CONTEXTS}: 416,364 cells with 157 GPUs) as JSON to /dev/null")
    opts = ap.parse_args()
    if opts.whole:
        whole(opts.whole)
        return
    if opts.large:
        large(opts.gpus, opts.ctx, opts.extrapolate)
        return
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", INPROCESS], check=True, capture_output=True, text=True).stdout.split()
    process_s = time.perf_counter() - t
    print(json.dumps({
        "cells": int(out[0]),
        "import_s": round(float(out[1]), 3),
        "run_report_s": round(float(out[2]), 3),
        "import_plus_run_report_s": round(float(out[1]) + float(out[2]), 3),
        "render_report_html_s": round(float(out[3]), 3),
        "html_bytes": int(out[4]),
        "whole_process_s": round(process_s, 3),
        "cli_quiet_s": round(_cli("--quiet"), 3),
        "cli_table_to_pipe_s": round(_cli(), 3),
        "cli_json_s": round(_cli("--json"), 3),
    }, indent=2))


if __name__ == "__main__":
    main()
