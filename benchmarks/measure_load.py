#!/usr/bin/env python3
"""Measure what gemma-fit's load-time model needs, on this machine, and print it.

1. Page-cache read speed: a 1 GiB file of random bytes is written, read once to cache it, then read
   again by one thread in 8 MiB chunks (how llama.cpp reads a file it does not memory-map).
2. llama.cpp's CPU load time with the file cached: llama-completion (-lm none: read into buffers,
   no mmap) on zero-weight Gemma files of two sizes, best of three. Kept for reference only: on a VM
   this path is bound by first-touch page faults of the new buffers, not by the read, and a GPU
   load takes another path (mmap, then uploads over PCIe), so gemma-fit does not use these figures.
Stores benchmarks/data/load_measurements.json; benchmarks/calibrate_speed.py --write folds the
page-cache fraction of RAM bandwidth into model_db/llamacpp/speed_calibration.yaml (`load`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

OUT = REPO / "benchmarks" / "data" / "load_measurements.json"
RAM = REPO / "benchmarks" / "data" / "cpu_llamabench.json"  # the RAM read bandwidth measured beside it
MODELS = (("gemma-3-1b", "Q8_0"), ("gemma-3-4b", "Q8_0"))
CHUNK = 8 * 1024 * 1024


def page_cache_gbps(directory: Path) -> float:
    path = directory / "cached.bin"
    with path.open("wb") as f:
        for _ in range(128):
            f.write(os.urandom(CHUNK))
    buf = bytearray(CHUNK)
    best = 0.0
    for _ in range(4):  # the first pass fills the cache; keep the best of the rest
        t = time.perf_counter()
        n = 0
        with path.open("rb", buffering=0) as f:
            while (got := f.readinto(buf)) > 0:
                n += got
        best = max(best, n / (time.perf_counter() - t) / 1e9)
    path.unlink()
    return best


def llama_load_ms(binary: Path, gguf: Path) -> float:
    env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
    times = []
    for _ in range(3):
        out = subprocess.run([str(binary), "-m", str(gguf), "-n", "1", "-p", "hi", "-no-cnv", "-lm", "none"],
                             capture_output=True, text=True, env=env, timeout=600)
        m = re.search(r"load time =\s*([\d.]+) ms", out.stdout + out.stderr)
        if m:
            times.append(float(m.group(1)))
    return min(times)


def main() -> None:
    from build_llamacpp import bin_dir

    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.gguf.writer import write_synthetic_gguf
    from gemma_fit.model.catalog import resolve_model

    binary = bin_dir() / "llama-completion"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = page_cache_gbps(Path(tmp))
        print(f"page-cache read, one thread, 8 MiB chunks: {cache:.2f} GB/s")
        for model, quant in MODELS:
            plan = build_plan(resolve_model(model).spec, quant)
            gguf = Path(tmp) / f"{model}-{quant}.gguf"
            write_synthetic_gguf(plan, gguf)
            ms = llama_load_ms(binary, gguf)
            rows.append({"model": model, "quant": quant, "tensor_bytes": plan.tensor_data_bytes, "load_ms": ms})
            print(f"{model} {quant}: {plan.tensor_data_bytes / 2**30:.2f} GiB, llama.cpp load {ms:.0f} ms (cached)")
    ram = json.loads(RAM.read_text())["machine"]["read_bandwidth_gbps"]
    print(f"page-cache read = {cache / ram:.2f} x the RAM read bandwidth ({ram} GB/s, {RAM.name})")
    doc = {"machine": {"logical_cores": os.cpu_count(), "read_bandwidth_gbps": ram},
           "page_cache_gbps": round(cache, 2), "page_cache_fraction_of_ram": round(cache / ram, 3),
           "llama_cpp_cpu_rows": rows, "llama_cpp": "0c1e570 (llama-cpp-python 0.3.36), CPU build"}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
