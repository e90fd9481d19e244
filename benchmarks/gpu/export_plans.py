#!/usr/bin/env python3
"""Export gemma-fit's zero-weight GGUF layouts (metadata + tensor infos) as JSON, with gemma-fit's
estimate for each measured setting, so the GPU machine (no PyPI there) can write the files with the
standard library only (benchmarks/gpu/device_measure.py) and measure them with llama.cpp.

    python benchmarks/gpu/export_plans.py      # writes benchmarks/gpu/plans.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from gemma_fit.engines.llamacpp import run_check  # noqa: E402
from gemma_fit.gguf.layout import synth_metadata  # noqa: E402
from gemma_fit.gguf.tensors import build_plan  # noqa: E402
from gemma_fit.hardware.select import select_hardware  # noqa: E402
from gemma_fit.memory.settings import RunSettings  # noqa: E402
from gemma_fit.model.catalog import resolve_model  # noqa: E402
from gemma_fit.present.documents import check_json  # noqa: E402

# A spread of architectures, sizes, quants and contexts that fits one H200 in a few minutes.
RUNS = [
    ("gemma-3-1b", "Q4_K_M", [4096, 32768]),
    ("gemma-2-9b", "Q4_K_M", [4096, 8192]),
    ("gemma-3-12b", "Q4_K_M", [4096, 32768]),
    ("gemma-3-27b", "Q8_0", [8192, 65536]),
    ("gemma-3n-E4B", "Q4_K_M", [8192]),
    ("gemma-4-E4B", "Q4_K_M", [8192, 65536]),
    ("gemma-4-26B-A4B", "Q4_K_M", [8192, 65536]),
    ("gemma-4-31B", "Q4_K_M", [8192, 131072]),
]


def main() -> None:
    out = []
    hw = select_hardware(["h200-sxm"], None, ())
    for model, quant, contexts in RUNS:
        spec = resolve_model(model).spec
        plan = build_plan(spec, quant)
        kvs = []
        for kv in synth_metadata(plan):
            value = kv.value
            if kv.key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
                value = {"placeholder": len(kv.value)}  # rebuilt on the device (gguf_layout.placeholder_*)
            kvs.append({"key": kv.key, "type": int(kv.vtype), "sub": None if kv.subtype is None else int(kv.subtype),
                        "value": value})
        tensors = [{"name": t.name, "shape": list(t.shape), "type": t.type.id, "bytes": t.n_bytes}
                   for t in plan.tensors]
        estimates = {}
        for ctx in contexts:
            # llama-bench reserves logits for every ubatch token (n_outputs_max = n_batch)
            s = RunSettings(n_ctx=ctx, n_gpu_layers=spec.n_layer + 1, n_outputs_max=2048)
            doc = check_json(run_check(resolve_model(model), quant, s, hw))
            estimates[str(ctx)] = {k: doc[k] for k in ("settings", "memory", "performance")}
        out.append({"model": model, "quant": quant, "contexts": contexts, "kvs": kvs, "tensors": tensors,
                    "estimates": estimates})
    path = Path(__file__).with_name("plans.json")
    path.write_text(json.dumps(out))
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB, {len(out)} models)")


if __name__ == "__main__":
    main()
