"""Decode's matrix-vector arithmetic: on GPUs whose quantized matrix-vector kernels unpack every weight to FP32, a
token's arithmetic can outlast its weight read (fitted per chip on published runs, benchmarks/fit_backends.py)."""

from __future__ import annotations

from gemma_fit.hardware.spec import GPUSpec
from gemma_fit.speed.calibration import chip_of, published_groups
from gemma_fit.speed.rates import arithmetic_decode, shader_fp32_tflops


def decode_flops_per_weight(gpu: GPUSpec) -> float:
    """FP32 operations at the shader rate one weight costs the chip's matrix-vector kernels in decode (unpacking its
    quantized block, the multiply-add, the reduction), where published runs show them bound by that arithmetic rather
    than by the read: an M1 Max decodes Gemma 4 12B at Q8_0 25.2 tok/s and at Q4_K_M, 41% fewer bytes, only 28.9.
    Fitted per `backend@chip` (benchmarks/fit_backends.py) on kernels that do it in FP32 (arithmetic_decode); 0 where
    none is fitted: the read binds."""
    table = published_groups().get("decode_compute") or {}
    chip = chip_of(gpu)
    own = table.get(f"{gpu.backend}@{chip}") if chip else None
    if own is None and gpu.backend == "cuda" and arithmetic_decode(gpu):  # one kernel path: GP100's figure for Maxwell
        own = next((e for k, e in sorted(table.items()) if k.startswith("cuda@")), None)
    return float(own["flops_per_weight"]) if own and shader_fp32_tflops(gpu) else 0.0


def vector_pass_s(gpu: GPUSpec, read_weights: float) -> float:
    """Seconds one token's matrix-vector arithmetic over `read_weights` weight elements takes (0: the read binds)."""
    k = decode_flops_per_weight(gpu)
    return read_weights * k / (shader_fp32_tflops(gpu) * 1e12) if k else 0.0
