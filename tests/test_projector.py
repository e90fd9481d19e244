"""The vision projector without its file: Gemma 3's SigLIP mmproj plan against the published F16 files and
against llama.cpp's mtmd loading a zero-weight projector gemma-fit writes; --images for llama.cpp."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import run_llama

from gemma_fit.base.errors import BadInput
from gemma_fit.gguf.projector import compute_bytes, projector_plan, projectors
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.gguf.writer import write_synthetic_gguf, write_synthetic_projector
from gemma_fit.jobs.check import check
from gemma_fit.model.catalog import resolve_model

MIB = 1024**2
SIGLIP = projectors()["gemma3-siglip"]


@pytest.mark.parametrize(("model_id", "n_embd"), [("gemma-3-4b", 2560), ("gemma-3-27b", 5376)])
def test_plan_matches_the_published_f16_files(model_id: str, n_embd: int, tmp_path: Path) -> None:
    plan = projector_plan("gemma3-siglip", n_embd)
    size = write_synthetic_projector(plan, tmp_path / "mmproj.gguf")
    published = int(SIGLIP["published_bytes"][model_id]["bytes"])
    assert abs(size / published - 1) < 0.001  # 4B: 352 bytes of metadata apart; 27B shown as "858 MB"
    assert len(plan.tensors) == 3 + 27 * 16 + 4


def test_images_count_the_projector_and_its_context() -> None:
    r = check("gemma-3-12b", "rtx-3060-12gb", images=2)
    plan = projector_plan("gemma3-siglip", resolve_model("gemma-3-12b").spec.n_embd)
    device = r.verdict.estimate.devices[0]
    assert device.mmproj_bytes == plan.tensor_data_bytes + compute_bytes("gemma3", flash_attn=True)
    assert "--mmproj mmproj-gemma-3-12b-f16.gguf" in r.verdict.server_command
    assert any("2 image(s) per prompt take 512 tokens" in x for x in r.verdict.reasons)


def test_images_on_a_model_without_a_modelled_tower_is_one_line() -> None:
    with pytest.raises(BadInput, match="no vision tower"):
        check("gemma-3-1b", "rtx-3060-12gb", images=1)
    with pytest.raises(BadInput, match="give --mmproj FILE"):
        check("gemma-3n-E4B", "rtx-3060-12gb", images=1)


@pytest.mark.llamacpp
def test_mtmd_loads_the_zero_weight_projector(tmp_path: Path, llama_bin: Path) -> None:
    """llama.cpp's clip reads our file (names, shapes, metadata), reports our tensor bytes as its model size,
    and reserves the compute buffer the table holds for one image (within 5%)."""
    text = tmp_path / "gemma-3-4b-Q4_0.gguf"
    write_synthetic_gguf(build_plan(resolve_model("gemma-3-4b").spec, "Q4_0"), text)
    mmproj = tmp_path / "mmproj.gguf"
    plan = projector_plan("gemma3-siglip", 2560)
    write_synthetic_projector(plan, mmproj)
    proc = run_llama(llama_bin, "llama-mtmd-cli", "-m", str(text), "--mmproj", str(mmproj), "-p", "hi", "-n", "1",
                     "-c", "1024", "-t", "2", "-lv", "4", "--chat-template", "gemma", timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    size = re.search(r"load_hparams: model size:\s+([\d.]+) MiB", log)
    compute = re.search(r"reserve_compute_meta:\s+CPU compute buffer size =\s+([\d.]+) MiB", log)
    assert size and compute, log[-3000:]
    assert float(size.group(1)) == pytest.approx(plan.tensor_data_bytes / MIB, abs=0.01)
    assert float(compute.group(1)) * MIB == pytest.approx(compute_bytes("gemma3", flash_attn=True), rel=0.05)
