"""The tensor plan against facts published from real llama.cpp files (no llama.cpp needed)."""

from __future__ import annotations

import pytest

from gemma_fit.gguf.layout import estimated_file_bytes
from gemma_fit.gguf.quantize import use_more_bits
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.model.catalog import resolve_model


def plan(model: str, quant: str):
    return build_plan(resolve_model(model).spec, quant)


def test_use_more_bits_selects_first_last_eighth_and_every_third() -> None:
    # 34 layers (Gemma 3 4B): 17 layers get more bits (llama.cpp PR #22790 type counts)
    assert sum(use_more_bits(i, 34) for i in range(34)) == 17
    assert [i for i in range(16) if use_more_bits(i, 16)] == [0, 1, 4, 7, 10, 13, 14, 15]


# Type counts printed by llama.cpp ("llama_model_loader: - type q4_K: N tensors") for published
# Q4_K_M files made with llama-quantize's default mix.
PUBLISHED_TYPE_COUNTS = [
    # llama.cpp PR #22790 log
    ("gemma-3-4b", "Q4_K_M", {"F32": 205, "Q4_K": 204, "Q6_K": 35}),
    # canonical/inference-snaps issue 275 (gemma-4-E4B-it Q4_K_M)
    ("gemma-4-E4B", "Q4_K_M", {"F32": 339, "Q4_K": 336, "Q6_K": 44, "BF16": 1}),
    # scrya-com/rotorquant issue 9 (lmstudio-community gemma-4-26B-A4B-it Q4_K_M)
    ("gemma-4-26B-A4B", "Q4_K_M", {"F32": 392, "Q5_0": 32, "Q8_0": 28, "Q4_K": 192, "Q6_K": 14}),
    # ikawrakow/ik_llama.cpp PR 1921 (gemma-4 12B Q4_K_M)
    ("gemma-4-12B", "Q4_K_M", {"F32": 338, "Q4_K": 284, "Q6_K": 45}),
]


@pytest.mark.parametrize(("model", "quant", "counts"), PUBLISHED_TYPE_COUNTS)
def test_type_counts_match_published_llamacpp_logs(model: str, quant: str, counts: dict[str, int]) -> None:
    assert plan(model, quant).type_counts() == counts


# Tensor counts printed by llama.cpp ("loaded meta data with K key-value pairs and N tensors").
PUBLISHED_TENSOR_COUNTS = [
    ("gemma-2b", 164), ("gemma-7b", 254), ("gemma-2-9b", 464), ("gemma-2-27b", 508),
    ("gemma-3n-E4B", 847), ("gemma-4-E2B", 601), ("gemma-4-E4B", 720), ("gemma-4-12B", 667),
    ("gemma-4-26B-A4B", 658), ("gemma-4-31B", 833),
]


@pytest.mark.parametrize(("model", "n_tensors"), PUBLISHED_TENSOR_COUNTS)
def test_tensor_counts_match_published_files(model: str, n_tensors: int) -> None:
    assert len(plan(model, "Q8_0").tensors) == n_tensors


# Exact sizes in bytes of published GGUFs made with llama.cpp's default mixes (sources in
# model_db/llamacpp/gguf_metadata.yaml and docs/measurements.md).
PUBLISHED_FILE_SIZES = [
    ("gemma-2-2b", "Q6_K", 2_151_393_120),
    ("gemma-2-9b", "Q4_K_M", 5_761_057_728),
    ("gemma-3-270m", "Q8_0", 291_545_600),
    ("gemma-4-E4B", "Q8_0", 8_031_240_160),
    ("gemma-4-E4B", "Q4_K_M", 5_335_289_824),
    ("gemma-4-E2B", "Q8_0", 4_967_494_592),
    ("gemma-4-26B-A4B", "Q8_0", 26_859_858_464),
    ("gemma-4-26B-A4B", "Q4_K_M", 16_796_015_136),
    ("gemma-4-31B", "Q8_0", 32_635_674_400),
    ("gemma-4-31B", "Q4_K_M", 18_687_061_792),
]


@pytest.mark.parametrize(("model", "quant", "size"), PUBLISHED_FILE_SIZES)
def test_file_size_matches_published_files(model: str, quant: str, size: int) -> None:
    assert estimated_file_bytes(plan(model, quant)) == pytest.approx(size, rel=0.005)


def test_gemma3_1b_falls_back_where_rows_do_not_fit_256_blocks() -> None:
    """n_embd 1152: K-quants fall back (Q4_K -> Q5_0, Q6_K -> Q8_0), token_embd becomes Q8_0."""
    p = plan("gemma-3-1b", "Q4_K_M").by_name()
    assert p["token_embd.weight"].type.name == "Q8_0"
    assert p["blk.0.attn_q.weight"].type.name == "Q5_0"
    assert p["blk.0.attn_v.weight"].type.name == "Q8_0"  # use_more_bits layer: Q6_K -> Q8_0
    assert p["blk.0.attn_output.weight"].type.name == "Q4_K"  # ncols = 4 x 256


def test_gemma3_1b_device_weights_match_the_published_cuda_log() -> None:
    """Published Gemma 3 1B Q4_K_M CUDA log: 762.54 MiB on the GPU (layers + duplicated output),
    306.00 MiB CPU_Mapped (token_embd); 0.05 MiB of the GPU figure is CUDA row padding."""
    p = plan("gemma-3-1b", "Q4_K_M")
    embd = p.by_name()["token_embd.weight"].n_bytes
    layers = sum(t.n_bytes for t in p.tensors if t.name != "token_embd.weight")
    assert embd / 2**20 == pytest.approx(306.00, abs=0.005)
    assert (layers + embd) / 2**20 == pytest.approx(762.54, abs=0.06)


def test_gemma4_k_eq_v_global_layers_have_no_attn_v() -> None:
    p = plan("gemma-4-31B", "Q4_K_M").by_name()
    assert "blk.5.attn_v.weight" not in p and "blk.5.attn_k.weight" in p
    assert p["blk.5.attn_k.weight"].shape == (5376, 4 * 512)
    assert p["blk.0.attn_v.weight"].shape == (5376, 16 * 256)


def test_gemma4_e2b_double_wide_mlp_on_shared_layers() -> None:
    p = plan("gemma-4-E2B", "Q4_K_M").by_name()
    assert p["blk.14.ffn_up.weight"].shape == (1536, 6144)
    assert p["blk.15.ffn_up.weight"].shape == (1536, 12288)


def test_per_layer_embeddings_follow_the_tied_output_rule() -> None:
    p = plan("gemma-3n-E2B", "Q4_K_M").by_name()
    assert p["per_layer_token_embd.weight"].type.name == "Q6_K"
    assert p["per_layer_model_proj.weight"].type.name == "BF16"  # never quantized
    assert p["blk.0.altup_router.weight"].type.name == "BF16"
    assert p["blk.0.altup_correct_coef.weight"].type.name == "F32"


@pytest.mark.parametrize("quant", ["F16", "BF16", "F32"])
def test_float_file_types_keep_norms_f32(quant: str) -> None:
    p = plan("gemma-2-2b", quant).by_name()
    assert p["blk.0.attn_norm.weight"].type.name == "F32"
    assert p["blk.0.ffn_up.weight"].type.name == quant
