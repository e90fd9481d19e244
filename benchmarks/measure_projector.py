#!/usr/bin/env python3
"""What llama.cpp's clip allocates for each Gemma vision tower, beside model_db/llamacpp/projectors.yaml.

For each model (default: one per tower) it writes a zero-weight text GGUF and a zero-weight F16 mmproj of
gemma-fit's plan into a temporary folder, loads them with llama-mtmd-cli (-lv 4), and prints clip's "model
size" and its load-time CPU compute buffer (the warmup image) with and without flash attention, beside the
plan's tensor bytes and the table's compute rule at the warmup tokens. Needs a llama.cpp build: --llama-bin
DIR (default: the test cache, ~/.cache/gemma-fit/llama.cpp-0.3.36/build/bin).

    python benchmarks/measure_projector.py [--model gemma-4-E2B ...] [--llama-bin DIR]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gemma_fit.gguf.projector import image_compute_bytes, projector_plan, tower_for  # noqa: E402
from gemma_fit.gguf.tensors import build_plan  # noqa: E402
from gemma_fit.gguf.writer import write_synthetic_gguf, write_synthetic_projector  # noqa: E402
from gemma_fit.model.catalog import resolve_model  # noqa: E402

DEFAULT_MODELS = ("gemma-3-4b", "gemma-4-E2B", "gemma-4-12B", "gemma-3n-E2B")
WARMUP_TOKENS = 256  # every tower's warmup image takes 256 tokens (896, 768 or 768 px)
MIB = 2**20


def measure(model_id: str, llama_bin: Path, work: Path) -> None:
    r = resolve_model(model_id)
    vision = r.entry.towers.vision.type if r.entry and r.entry.towers and r.entry.towers.vision else None
    tower = tower_for(vision, model_id)
    if tower is None:
        print(f"{model_id}: no modelled vision tower")
        return
    text, mmproj = work / f"{model_id}-Q4_0.gguf", work / f"{model_id}-mmproj.gguf"
    write_synthetic_gguf(build_plan(r.spec, "Q4_0"), text)
    plan = projector_plan(tower, r.spec.n_embd)
    write_synthetic_projector(plan, mmproj)
    for fa in ("on", "off"):
        proc = subprocess.run([str(llama_bin / "llama-mtmd-cli"), "-m", str(text), "--mmproj", str(mmproj), "-p", "hi",
                               "-n", "1", "-c", "1024", "-t", "2", "-lv", "4", "-fa", fa, "--chat-template", "gemma"],
                              capture_output=True, text=True, timeout=900, check=False)
        log = proc.stdout + proc.stderr
        size = re.search(r"load_hparams: model size:\s+([\d.]+) MiB", log)
        compute = re.search(r"reserve_compute_meta:\s+CPU compute buffer size =\s+([\d.]+) MiB", log)
        table = image_compute_bytes(plan.config, fa == "on", WARMUP_TOKENS) / MIB
        print(f"{model_id:16} {tower:22} fa {fa:3}  model size {size.group(1) if size else '?':>8} MiB "
              f"(plan {plan.tensor_data_bytes / MIB:.2f})  compute {compute.group(1) if compute else '?':>8} MiB "
              f"(table {table:.2f})  rc {proc.returncode}")
    text.unlink()
    mmproj.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", help="a model id (repeatable)")
    ap.add_argument("--llama-bin", type=Path, default=Path.home() / ".cache/gemma-fit/llama.cpp-0.3.36/build/bin")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for m in a.model or DEFAULT_MODELS:
            measure(m, a.llama_bin, Path(tmp))


if __name__ == "__main__":
    main()
