"""Run llama.cpp's own allocator on a GGUF (tools/llama_mem_probe.cpp) and return exact bytes.

Used by the tests and benchmarks: {"n_ctx": int, "buffers": {buffer type: {model, context, compute}}}.
probe_memory_batch asks for many settings in one process: the model is loaded once (most of a probe's
time) and one context is created per settings, with the same numbers as one process each.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import build_llamacpp

from gemma_fit.gguf.types import ggml_type
from gemma_fit.memory.settings import RunSettings

_FA = {"auto": -1, "on": 1, "off": 0}
HANG_GUARD_S = 600  # only against a hang: a probe takes about a second


def _numbers(s: RunSettings) -> list[str]:
    """The ten context numbers of tools/llama_mem_probe.cpp, in its order."""
    return [str(s.n_ctx), str(s.n_batch), str(s.n_ubatch), str(s.n_parallel), str(_FA[s.flash_attn]),
            str(ggml_type(s.cache_type_k).id), str(ggml_type(s.cache_type_v).id), str(int(s.swa_full)),
            str(int(s.kv_unified)), str(s.n_outputs_max)]


def probe_memory(model_path: Path, s: RunSettings, bin_dir: Path | None = None) -> dict:
    b = bin_dir or build_llamacpp.build()
    args = [str(b / "llama-mem-probe"), str(model_path), *_numbers(s)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=HANG_GUARD_S, check=False,
                          stdin=subprocess.DEVNULL, env=dict(os.environ, LD_LIBRARY_PATH=str(b)))
    if proc.returncode != 0:
        raise RuntimeError(f"llama-mem-probe failed: {proc.stderr[-1000:]}")
    return json.loads(proc.stdout)


def probe_memory_batch(model_path: Path, settings: Sequence[RunSettings], bin_dir: Path | None = None) -> list[dict]:
    """probe_memory for each settings, in that order, from one llama-mem-probe process (--batch)."""
    b = bin_dir or build_llamacpp.build()
    lines = "".join(" ".join(_numbers(s)) + "\n" for s in settings)
    proc = subprocess.run([str(b / "llama-mem-probe"), str(model_path), "--batch"], input=lines, capture_output=True,
                          text=True, timeout=HANG_GUARD_S, check=False, env=dict(os.environ, LD_LIBRARY_PATH=str(b)))
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or len(out) != len(settings) or any("error" in o for o in out):
        failed = [f"{s}: {o['error']}" for s, o in zip(settings, out, strict=False) if "error" in o]
        raise RuntimeError(f"llama-mem-probe --batch failed (exit {proc.returncode}, {len(out)} of {len(settings)} "
                           f"answers) {failed[:3]}: {proc.stderr[-1000:]}")
    return out
