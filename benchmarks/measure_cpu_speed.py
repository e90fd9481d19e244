#!/usr/bin/env python3
"""Measure llama.cpp's CPU speed on this machine and the efficiency terms gemma-fit uses for CPU layers.

Runs llama-bench (pp128, tg32, all cores, weights loaded into real memory with -lm none so that zero
pages of a sparse file do not fake the memory traffic) on zero-weight Gemma files, and measures the
machine's memory read bandwidth with as many processes as cores. Prints the figures and stores them
in benchmarks/data/cpu_llamabench.json, which benchmarks/calibrate_speed.py folds into the table.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

OUT = REPO / "benchmarks" / "data" / "cpu_llamabench.json"
MODELS = ("gemma-3-1b", "gemma-2-2b")


def _read_bandwidth_worker(q: mp.Queue) -> None:  # type: ignore[type-arg]
    import numpy as np

    a = np.ones(512 * 1024 * 1024 // 8)
    a.sum()
    t = time.perf_counter()
    for _ in range(8):
        a.sum()
    q.put(8 * a.nbytes / (time.perf_counter() - t))


def read_bandwidth_gbps(n: int) -> float:
    q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    procs = [mp.Process(target=_read_bandwidth_worker, args=(q,)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return sum(q.get() for _ in procs) / 1e9


def main() -> None:
    import build_llamacpp

    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.gguf.writer import write_synthetic_gguf
    from gemma_fit.model.catalog import resolve_model

    b = build_llamacpp.build()
    threads = os.cpu_count() or 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            plan = build_plan(resolve_model(model).spec, "Q4_0")
            path = Path(tmp) / f"{model}.gguf"
            write_synthetic_gguf(plan, path)
            out = subprocess.run([str(b / "llama-bench"), "-m", str(path), "-p", "128", "-n", "32", "-t", str(threads),
                                  "-r", "2", "-lm", "none", "-o", "json"], capture_output=True, text=True, check=True,
                                 env=dict(os.environ, LD_LIBRARY_PATH=str(b)))
            for r in json.loads(out.stdout):
                rows.append({"model": model, "quant": "Q4_0", "n_prompt": r["n_prompt"], "n_gen": r["n_gen"],
                             "tokens_per_s": r["avg_ts"], "threads": threads})
    doc = {"machine": {"cpu": platform.processor() or platform.machine(), "logical_cores": threads,
                       "read_bandwidth_gbps": round(read_bandwidth_gbps(threads), 2)},
           "llama_cpp": "0c1e570 (llama-cpp-python 0.3.36), CPU build, GGML_NATIVE=OFF", "rows": rows}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
