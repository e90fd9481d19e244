#!/usr/bin/env python3
"""How fast is `gemma-fit report`? Prints figures; it is a benchmark, not a test.

The matrix: all 17 models x 5 quants x 10 GPUs x 4 contexts = 3400 cells, each the full `check`
(verdict, max context, advice, speed) in one process. Target: under 3 s for run_report in a fresh
process, imports included.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

GPUS = ["a4000", "rtx-3060-12gb", "rtx-4090", "rtx-3090", "l40s", "a100-80gb-sxm", "h100-sxm", "t4", "l4", "h200-sxm"]
QUANTS = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "BF16"]
CONTEXTS = [4096, 8192, 32768, 131072]
INPROCESS = f"""
import time
t0 = time.perf_counter()
from gemma_fit.report import run_report
from gemma_fit.settings import RunSettings
t1 = time.perf_counter()
report = run_report(["all"], {QUANTS!r}, {[[g] for g in GPUS]!r}, {CONTEXTS!r}, RunSettings())
t2 = time.perf_counter()
from gemma_fit.html_report import render_report_html
html = render_report_html(report)
t3 = time.perf_counter()
print(len(report["cells"]), t1 - t0, t2 - t1, t3 - t2, len(html))
"""
CLI = """
import gemma_fit.cli as c
from gemma_fit.cli_report import report_command
if not any(getattr(x, "name", None) == "report" for x in c.app.registered_commands):
    c.app.command("report")(report_command)
c.main()
"""


def _cli(*extra: str) -> float:
    args = ["report", "--model", "all", *[a for q in QUANTS for a in ("--quant", q)],
            *[a for g in GPUS for a in ("--gpu", g)], *[a for c in CONTEXTS for a in ("--ctx", str(c))], *extra]
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", CLI, *args], check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
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
