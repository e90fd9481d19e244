"""llama.cpp's loader checks every tensor name and shape: it must load every zero-weight file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import LLAMA_THREADS, run_llama
from shared import SynthFiles
from test_model_db import CONTRACT_MODELS

from gemma_fit.gguf.tensors import build_plan
from gemma_fit.model.catalog import resolve_model

pytestmark = pytest.mark.llamacpp


@pytest.mark.parametrize("model", CONTRACT_MODELS)
def test_every_model_loads_in_llamacpp(model: str, synth: SynthFiles, llama_bin: Path) -> None:
    """llama-fit-params loads the model (no_alloc: names and shapes checked, no data read) and
    creates a context. Its parameter count is our n_params."""
    path = synth(model, "Q4_K_M").path
    proc = run_llama(llama_bin, "llama-fit-params", "-m", str(path), "-c", "4096", "-v", timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    params = re.search(r"model params\s+=\s+([\d.]+) ([MBK])", log)
    assert params, log[-3000:]
    scale = {"K": 1e3, "M": 1e6, "B": 1e9}[params.group(2)]
    n_params = build_plan(resolve_model(model).spec, "Q4_K_M").n_params
    assert float(params.group(1)) * scale == pytest.approx(n_params, rel=0.0001, abs=0.006 * scale)


# One small model per architecture: gemma, gemma2, gemma3, gemma3n, gemma4.
GENERATE = [("gemma-2b", "Q4_0"), ("gemma-2-2b", "Q4_0"), ("gemma-3-270m", "Q8_0"),
            ("gemma-3n-E2B", "Q4_0"), ("gemma-4-E2B", "Q4_0")]


@pytest.mark.parametrize(("model", "quant"), GENERATE)
def test_zero_weight_model_generates_tokens(model: str, quant: str, synth: SynthFiles, llama_bin: Path) -> None:
    path = synth(model, quant).path
    proc = run_llama(llama_bin, "llama-completion", "-m", str(path), "-p", "Hello", "-n", "4", "-c", "512",
                     "-no-cnv", "--temp", "0", "-t", LLAMA_THREADS, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    evals = re.search(r"eval time =\s+[\d.]+ ms /\s+(\d+) runs", log)
    assert evals and int(evals.group(1)) >= 3, log[-3000:]
