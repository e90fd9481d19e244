"""llama.cpp is the judge: llama-quantize --dry-run on gemma-fit's own BF16 zero-weight files.

For every contract model and every contract quant, llama-quantize must choose exactly the type
gemma-fit predicts for every tensor (so tensor data is exact to the byte), and see the same names
and shapes. A real (not dry-run) quantization of the smallest model checks the file layout too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import parse_dry_run, run_llama
from shared import SynthFiles
from test_model_db import CONTRACT_MODELS

from gemma_fit.gguf.layout import header_bytes, tensor_data_padded_bytes
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.gguf.types import CONTRACT_QUANTS
from gemma_fit.model.catalog import resolve_model

pytestmark = pytest.mark.llamacpp


@pytest.mark.parametrize("model", CONTRACT_MODELS)
def test_quantize_dry_run_agrees_on_every_tensor(model: str, synth: SynthFiles, llama_bin: Path) -> None:
    spec = resolve_model(model).spec
    mismatches: list[str] = []
    for quant in CONTRACT_QUANTS:
        proc = run_llama(llama_bin, "llama-quantize", "--dry-run", str(synth(model, "BF16").path), quant)
        assert proc.returncode == 0, proc.stderr[-2000:]
        seen = parse_dry_run(proc.stdout + proc.stderr)
        predicted = build_plan(spec, quant).tensors
        assert len(seen) == len(predicted), f"{quant}: llama-quantize saw {len(seen)} tensors"
        for got, want in zip(seen, predicted, strict=True):
            if (got.name, got.shape, got.target_type) != (want.name, want.shape, want.type.name):
                mismatches.append(f"{quant} {got.name} {got.shape} {got.target_type} vs "
                                  f"{want.name} {want.shape} {want.type.name}")
    assert not mismatches, "\n".join(mismatches[:20])


def test_real_quantization_writes_the_predicted_layout(tmp_path: Path, synth: SynthFiles, llama_bin: Path) -> None:
    """Quantize the 270M zero-weight file for real: the written file has exactly the predicted size
    (our own metadata as header, the plan's tensors, llama.cpp's alignment)."""
    out = tmp_path / "gemma-3-270m-Q4_K_M.gguf"
    proc = run_llama(llama_bin, "llama-quantize", str(synth("gemma-3-270m", "BF16").path), str(out), "Q4_K_M")
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = build_plan(resolve_model("gemma-3-270m").spec, "Q4_K_M")
    from gemma_fit.gguf.layout import synth_metadata

    # llama-quantize copies our KV pairs and sets general.file_type (already Q4_K_M's id in the plan)
    predicted = header_bytes(synth_metadata(plan), plan) + tensor_data_padded_bytes(plan)
    assert out.stat().st_size == predicted
