"""Run llama.cpp's own allocator on a GGUF (tools/llama_mem_probe.cpp) and return exact bytes.

Used by the tests and benchmarks: {"n_ctx": int, "buffers": {buffer type: {model, context, compute}}}.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import build_llamacpp

from gemma_fit.gguf.types import ggml_type
from gemma_fit.memory.settings import RunSettings

_FA = {"auto": -1, "on": 1, "off": 0}


def probe_memory(model_path: Path, s: RunSettings, bin_dir: Path | None = None) -> dict:
    b = bin_dir or build_llamacpp.build()
    args = [str(b / "llama-mem-probe"), str(model_path), str(s.n_ctx), str(s.n_batch), str(s.n_ubatch),
            str(s.n_parallel), str(_FA[s.flash_attn]), str(ggml_type(s.cache_type_k).id),
            str(ggml_type(s.cache_type_v).id), str(int(s.swa_full)), str(int(s.kv_unified)), str(s.n_outputs_max)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False,
                          env=dict(os.environ, LD_LIBRARY_PATH=str(b)))
    if proc.returncode != 0:
        raise RuntimeError(f"llama-mem-probe failed: {proc.stderr[-1000:]}")
    return json.loads(proc.stdout)
