"""MMQ tile widths and the padding they cost, as ggml-cuda/mmq.cuh (mul_mat_q_switch_J) and mmq.cu pick them."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemma_fit.speed.mmq import METAL_TILE, expected_tiles, expert_padding, expert_tile, padded_columns, tile_width


def test_tile_width_is_the_narrowest_multiple_of_8_for_the_fewest_tiles() -> None:
    assert tile_width(1) == 8
    assert tile_width(20) == 24
    assert tile_width(128) == 128
    assert tile_width(300) == 104  # three tiles either way: 104 pads less than 128
    assert tile_width(512) == 128
    assert padded_columns(300) == 312
    assert padded_columns(512) == 512


def test_experts_take_the_whole_ubatch_tile_on_batch_sized_kernels() -> None:
    # Gemma 4 26B-A4B: 8 of 128 experts; 512 tokens give each expert about 32 (never past 128), in a tile of 128
    assert expert_tile("cuda", True, 512, 32) == 128
    assert expert_padding(512, 8, 128, 128) == pytest.approx(4.0)
    # 2048 give each about 128: half the experts get a few more and run a second tile
    assert 1.3 < expert_padding(2048, 8, 128, expert_tile("cuda", True, 2048, 128)) < 1.6
    # 16 give each one token on average; the ~36% that get none run no tile
    assert expert_padding(16, 8, 128, expert_tile("cuda", True, 16, 1)) == pytest.approx(16 * (1 - (15 / 16) ** 16),
                                                                                        rel=1e-6)
    # F16/BF16 experts: a GEMM sized to the expert's own tokens pads less
    assert expert_tile("cuda", False, 512, 32) == 32
    assert expert_padding(512, 8, 128, expert_tile("cuda", False, 512, 32)) < expert_padding(512, 8, 128, 128)


def test_metal_runs_each_experts_tokens_in_tiles_of_32() -> None:
    # kernel_mul_mm_id: (n_tokens + 31) / 32 tiles per expert, whatever the ubatch or the weight type
    assert expert_tile("metal", True, 512, 32) == expert_tile("metal", False, 4096, 256) == METAL_TILE == 32
    # ~32 tokens an expert at ubatch 512: about half the experts spill into a second tile, far from MMQ's 4x
    assert 1.3 < expert_padding(512, 8, 128, METAL_TILE) < 1.7
    assert expert_padding(2048, 8, 128, METAL_TILE) < 1.2


def test_expected_tiles_is_a_binomial_mean() -> None:
    assert expected_tiles(100, 1.0, 8) == 13.0
    assert expected_tiles(1, 0.25, 8) == pytest.approx(0.25)
    assert expected_tiles(2, 0.5, 1) == pytest.approx(1.0)  # E[T] for T ~ Binomial(2, 0.5), one column per tile


@given(st.integers(1, 100_000), st.integers(1, 8), st.sampled_from([8, 64, 128, 256]),
       st.sampled_from(["cuda", "rocm", "vulkan", "metal", "sycl"]), st.booleans())
def test_padding_never_drops_a_column(tokens: int, used: int, n_expert: int, backend: str, quantized: bool) -> None:
    assert padded_columns(tokens) >= tokens
    assert padded_columns(tokens) - tokens < 8 * (1 + tokens // 128)
    width = expert_tile(backend, quantized, tokens, tokens * used / n_expert)
    assert expert_padding(tokens, used, n_expert, width) >= 1.0
