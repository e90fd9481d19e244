"""The vision projector without its file: every Gemma vision tower's mmproj plan against the published F16
files and against llama.cpp's mtmd loading a zero-weight projector gemma-fit writes; --images for llama.cpp."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import LLAMA_THREADS, run_llama
from shared import SynthFiles

from gemma_fit.base.errors import BadInput
from gemma_fit.engines.base import Workload
from gemma_fit.gguf.projector import compute_bytes, image_compute_bytes, projector_plan, projectors, tower_for
from gemma_fit.gguf.writer import write_synthetic_projector
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
    r = check("gemma-3-12b", "rtx-3060-12gb", workload=Workload(images=2))
    plan = projector_plan("gemma3-siglip", resolve_model("gemma-3-12b").spec.n_embd)
    device = r.detail.estimate.devices[0]
    assert device.mmproj_bytes == plan.tensor_data_bytes + compute_bytes("gemma3", flash_attn=True)
    assert "--mmproj mmproj-gemma-3-12b-f16.gguf" in r.command
    assert any("2 image(s) per prompt take 512 tokens" in x for x in r.reasons)


def test_images_on_a_model_without_a_vision_tower_is_one_line() -> None:
    with pytest.raises(BadInput, match="no vision tower"):
        check("gemma-3-1b", "rtx-3060-12gb", workload=Workload(images=1))


# Every Gemma model with a vision tower, its tower, and that tower's tensor count and F16 tensor bytes (what
# llama.cpp's clip printed as "model size" for the zero-weight files, llama.cpp 0c1e570).
TOWERS = [("gemma-3-4b", "gemma3-siglip", 439, 851226048), ("gemma-4-E2B", "gemma4-vit-768", 659, 368649984),
          ("gemma-4-E4B", "gemma4-vit-768", 659, 370222848), ("gemma-4-26B-A4B", "gemma4-vit-1152", 356, 1193035968),
          ("gemma-4-31B", "gemma4-vit-1152", 356, 1198934208), ("gemma-4-12B", "gemma4-unified-3840", 10, 117113856),
          ("gemma-3n-E2B", "gemma3n-mobilenet-v5", 552, 597757440)]


@pytest.mark.parametrize(("model_id", "tower", "n_tensors", "n_bytes"), TOWERS)
def test_each_vision_tower_has_its_plan(model_id: str, tower: str, n_tensors: int, n_bytes: int) -> None:
    r = resolve_model(model_id)
    assert r.entry is not None and r.entry.towers is not None and r.entry.towers.vision is not None
    assert tower_for(r.entry.towers.vision.type, model_id) == tower
    plan = projector_plan(tower, r.spec.n_embd)
    assert (len(plan.tensors), plan.tensor_data_bytes) == (n_tensors, n_bytes)


def test_gemma_4s_1152_wide_tower_matches_the_published_26b_and_31b_files() -> None:
    published = projectors()["gemma4-vit-1152"]["published_bytes"]
    for model_id, n_embd in (("gemma-4-31B", 5376), ("gemma-4-26B-A4B", 2816)):
        ours = projector_plan("gemma4-vit-1152", n_embd).tensor_data_bytes
        assert abs(ours / int(published[model_id]["bytes"]) - 1) < 0.005  # shown as "1.12" GiB and "1.19 GB"


def test_gemma_4_images_take_up_to_1120_tokens_and_their_compute_grows_with_the_image() -> None:
    c = projectors()["gemma4-vit-768"]
    assert image_compute_bytes(c, True, 256) == 46088 * 9 * 256  # the load-time reservation, 101.27 MiB
    assert image_compute_bytes(c, True) == 46088 * 9 * 1120  # a photo: 443.05 MiB
    assert image_compute_bytes(c, False) == 48 * (9 * 1120) ** 2 + 15368 * 9 * 1120  # 4.69 GiB of scores
    r = check("gemma-4-E4B", "rtx-4090", workload=Workload(images=1))
    assert any("1 image(s) per prompt take 1,120 tokens" in x for x in r.reasons)
    assert r.detail.estimate.devices[0].mmproj_bytes == 370222848 + image_compute_bytes(c, True)


# (model, the tokens clip reserves its compute buffer for at load: its warmup image)
MTMD = [("gemma-3-4b", 256), ("gemma-4-E2B", 256), ("gemma-4-12B", 256), ("gemma-3n-E2B", 256)]


@pytest.mark.llamacpp
@pytest.mark.parametrize(("model_id", "warmup_tokens"), MTMD)
def test_mtmd_loads_the_zero_weight_projector(model_id: str, warmup_tokens: int, tmp_path: Path, synth: SynthFiles,
                                             llama_bin: Path) -> None:
    """llama.cpp's clip reads our file (names, shapes, metadata), reports our tensor bytes as its model size,
    and reserves the compute buffer the table holds for its warmup image (within 5%). The text model is loaded
    without repacking its weights (--no-repack): the projector's numbers do not depend on it, and repacking
    copies every weight of the text model (70 s of the 12B's run on two cores, 6 GiB of memory)."""
    r = resolve_model(model_id)
    assert r.entry is not None and r.entry.towers is not None and r.entry.towers.vision is not None
    text = synth(model_id, "Q4_0").path
    mmproj = tmp_path / "mmproj.gguf"
    plan = projector_plan(str(tower_for(r.entry.towers.vision.type, model_id)), r.spec.n_embd)
    write_synthetic_projector(plan, mmproj)
    proc = run_llama(llama_bin, "llama-mtmd-cli", "-m", str(text), "--mmproj", str(mmproj), "-p", "hi", "-n", "1",
                     "-c", "1024", "-t", LLAMA_THREADS, "-lv", "4", "--chat-template", "gemma", "--no-repack",
                     timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    size = re.search(r"load_hparams: model size:\s+([\d.]+) MiB", log)
    compute = re.search(r"reserve_compute_meta:\s+CPU compute buffer size =\s+([\d.]+) MiB", log)
    assert size and compute, log[-3000:]
    assert float(size.group(1)) == pytest.approx(plan.tensor_data_bytes / MIB, abs=0.01)
    expected = image_compute_bytes(plan.config, flash_attn=True, tokens=warmup_tokens)
    assert float(compute.group(1)) * MIB == pytest.approx(expected, rel=0.05)
