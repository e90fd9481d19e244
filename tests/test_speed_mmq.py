"""MMQ tile widths and the padding they cost, as ggml-cuda/mmq.cuh (mul_mat_q_switch_J) and mmq.cu pick them."""

from hypothesis import given
from hypothesis import strategies as st

from gemma_fit.speed.mmq import expert_padding, padded_columns, tile_width


def test_tile_width_is_the_narrowest_multiple_of_8_for_the_fewest_tiles() -> None:
    assert tile_width(1) == 8
    assert tile_width(20) == 24
    assert tile_width(128) == 128
    assert tile_width(300) == 104  # three tiles either way: 104 pads less than 128
    assert tile_width(512) == 128
    assert padded_columns(300) == 312
    assert padded_columns(512) == 512


def test_experts_take_the_whole_ubatch_tile_on_batch_sized_kernels() -> None:
    # Gemma 4 26B-A4B: 8 of 128 experts; 512 tokens give each expert 32, in a tile of 128
    assert expert_padding(512, 8, 128, batch_sized_tiles=True) == 4.0
    assert expert_padding(2048, 8, 128, batch_sized_tiles=True) == 1.0
    assert expert_padding(16, 8, 128, batch_sized_tiles=True) == 16.0
    assert expert_padding(512, 8, 128, batch_sized_tiles=False) == 1.0


@given(st.integers(1, 100_000), st.integers(1, 8), st.sampled_from([8, 64, 128, 256]), st.booleans())
def test_padding_never_drops_a_column(tokens: int, used: int, n_expert: int, batch_sized: bool) -> None:
    assert padded_columns(tokens) >= tokens
    assert padded_columns(tokens) - tokens < 8 * (1 + tokens // 128)
    assert expert_padding(tokens, used, n_expert, batch_sized) >= 1.0
