#!/usr/bin/env python3
"""How fast is `gemma-fit check`? Prints figures; it is a benchmark, not a test.

- cold: a fresh `gemma-fit check --gpu a4000 --model 9b --quant q5_k_m --json` process, median of 7
  (target: under 0.3 s on a 2-core cloud VM);
- matrix: every model x every contract quant x 5 contexts through the same code path as `check`
  (verdict, max context, advice) in one process, including its start (target: under 2 s).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

CONTEXTS = (4096, 8192, 32768, 65536, 131072)
COLD = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()", "check", "--gpu", "a4000",
        "--model", "9b", "--quant", "q5_k_m", "--json"]
MATRIX = f"""
import time
t0 = time.perf_counter()
from gemma_fit.engines.llamacpp import run_check
from gemma_fit.present.documents import check_json
from gemma_fit.gguf.types import CONTRACT_QUANTS
from gemma_fit.hardware.select import select_hardware
from gemma_fit.model.catalog import load_model_db, resolve_model
from gemma_fit.memory.settings import RunSettings
hw = select_hardware(["rtx-4090"], None, ())
n = 0
for entry in load_model_db().values():
    model = resolve_model(entry.id)
    for quant in CONTRACT_QUANTS:
        for ctx in {CONTEXTS!r}:
            check_json(run_check(model, quant, RunSettings(n_ctx=ctx), hw))
            n += 1
print(n, time.perf_counter() - t0)
"""


def main() -> None:
    cold = []
    for _ in range(7):
        t = time.perf_counter()
        subprocess.run(COLD, check=True, capture_output=True)
        cold.append(time.perf_counter() - t)
    out = subprocess.run([sys.executable, "-c", MATRIX], check=True, capture_output=True, text=True).stdout.split()
    print(json.dumps({
        "cold_check_median_s": round(statistics.median(cold), 3),
        "cold_check_min_s": round(min(cold), 3),
        "matrix_checks": int(out[0]),
        "matrix_total_s": round(float(out[1]), 3),
    }, indent=2))


if __name__ == "__main__":
    main()
