"""How many token columns llama.cpp's quantized matrix kernels compute for a ubatch, padding included.

MMQ (ggml-cuda/mmq.cuh, mul_mat_q_switch_J) multiplies tiles of J tokens, J a multiple of 8 up to 128. It picks the
smallest J that covers the columns in the fewest tiles: 20 tokens run as one tile of 24, 300 as three of 104. A
mixture of experts multiplies each expert's own tokens, but on NVIDIA GPUs J is chosen against the whole ubatch
(ggml-cuda/mmq.cu: `ncols_opt = ne12`), so with 512 tokens each expert's ~32 run in a tile of 128, a quarter of it
used. RDNA 3 and 4 (the same line's other branch) and Vulkan (ggml-vulkan.cpp: the tile chosen against
`n_per_expert`) size the tile to an expert's tokens, but a narrow tile runs at a fraction of a wide one's rate, and
the published MoE prompts on those backends are told better by the whole-ubatch tile: Strix Halo's Vulkan prompt
runs median 14% off with it against 18% with per-expert tiles (its RADV runs, after the AMDVLK ones were told
apart), its ROCm ones 16% against 16% (benchmarks/evaluate_speed.py, 2026-12-02). So those backends' quantized
experts are counted at the whole ubatch's tile; F16/BF16 experts go through GEMMs sized to each expert's tokens.
Metal is different: kernel_mul_mm_id (ggml-metal-ops.cpp) runs every expert's own tokens in tiles of 32, whatever
the ubatch, as its dense mul_mm does; on an M5 Max a 26B-A4B prompt runs 3,451 tok/s at ubatch 512 and 3,628 at
2048 (defai-digital/ax-engine's sweep), which the whole-ubatch tile (4x padding at 512) cannot give."""

from __future__ import annotations

import math
from functools import cache

MAX_TILE = 128  # the widest J in mul_mat_q_switch_J
TILE_STEP = 8
METAL_TILE = 32  # ggml-metal-ops.cpp: mul_mm and mul_mm_id dispatch (n_tokens + 31) / 32 column tiles


def tile_width(columns: float) -> int:
    """J for `columns` tokens: the fewest tiles of at most MAX_TILE, then the narrowest multiple of 8 that many
    tiles need."""
    cols = max(1, math.ceil(columns))
    tiles = math.ceil(cols / MAX_TILE)
    return min(MAX_TILE, TILE_STEP * math.ceil(cols / tiles / TILE_STEP))


def padded_columns(columns: float, width: int | None = None) -> float:
    """Columns computed for `columns` tokens in tiles of `width` (default: the width MMQ picks for them)."""
    if columns <= 0:
        return 0.0
    j = width or tile_width(columns)
    return float(j * math.ceil(columns / j))


@cache
def expected_tiles(tokens: int, share: float, width: int) -> float:
    """Tiles of `width` one expert runs on average: it receives Binomial(tokens, share) of the ubatch's tokens (each
    token routes to it with probability n_expert_used / n_expert), and a count just past a tile's width takes two."""
    if tokens <= 0 or share <= 0:
        return 0.0
    if share >= 1:
        return float(math.ceil(tokens / width))
    total, log_p, log_q, log_n = 0.0, math.log(share), math.log1p(-share), math.lgamma(tokens + 1)
    for t in range(1, tokens + 1):
        log_pmf = log_n - math.lgamma(t + 1) - math.lgamma(tokens - t + 1) + t * log_p + (tokens - t) * log_q
        if log_pmf < -40 and t > tokens * share:
            break  # the tail past the mean no longer counts
        total += math.exp(log_pmf) * math.ceil(t / width)
    return total


def expert_tile(backend: str, quantized: bool, tokens: int, per_expert: float) -> int:
    """The column tile an expert's tokens run in: Metal's fixed 32; MMQ's J chosen against the whole ubatch for
    quantized experts elsewhere; a GEMM sized to the expert's own tokens for F16/BF16 ones."""
    if backend == "metal":
        return METAL_TILE
    return tile_width(tokens) if quantized else tile_width(per_expert)


def expert_padding(tokens: int, n_expert_used: int, n_expert: int, width: int) -> float:
    """Columns computed per routed token for the experts of a ubatch of `tokens` run in tiles of `width` (>= 1: the
    tiles' unused part, each expert's own count of tokens drawn as the router draws them)."""
    per_expert = tokens * n_expert_used / n_expert
    if per_expert <= 0:
        return 1.0
    return max(1.0, expected_tiles(tokens, n_expert_used / n_expert, width) * width / per_expert)
