"""What a GPU's matrix units deliver: the rated throughput llama.cpp's kernels run at, by weight type."""

from __future__ import annotations

from functools import cache

from gemma_fit.hardware.snapshot import known_hardware
from gemma_fit.hardware.spec import GPUSpec

# Quantized types llama.cpp's Vulkan backend dequantizes to FP16 for the FP16 cooperative matrices on RDNA 4, where it
# multiplies the others as INT8 on the same units (ggml-vulkan.cpp: the matmul_*_q8_1 coopmat pipelines are built for
# RDNA 3 and 4, on RDNA 4 without Q4_1, Q5_1, Q4_K and Q5_K). RDNA 3's INT8 and FP16 rates are equal; RDNA 4's INT8
# is twice its FP16.
VULKAN_RDNA4_FP16_TYPES = ("Q4_1", "Q5_1", "Q4_K", "Q5_K")


def matmul_tops(g: GPUSpec, quantized: bool, weight_type: str = "") -> float:
    """Dense throughput llama.cpp's prompt matmuls run at: INT8 tensor cores for quantized weights
    (MMQ; FP16 for the types Vulkan dequantizes on RDNA 4), FP16 tensor cores otherwise; half that on a GeForce
    card where the GEMMs over weights of `weight_type` accumulate in FP32 (accumulates_fp32). Without tensor cores,
    from the shader
    FP32 rate: x4 for quantized weights where a 4-way int8 dot product exists (CUDA DP4A from compute capability 6.1,
    AMD's dot4 on RDNA), which MMQ uses; x2 on GP100 (compute capability 6.0), which has no DP4A and
    runs FP16 at twice its FP32 rate through cuBLAS."""
    if quantized and g.int8_tensor_tops and not _vulkan_fp16(g, weight_type):
        return g.int8_tensor_tops
    if g.fp16_tensor_tflops:
        half = g.fp32_accumulate_half_rate and accumulates_fp32(g, weight_type)
        return g.fp16_tensor_tflops / 2 if half else g.fp16_tensor_tflops
    fp32 = g.fp32_tflops or _apple_fp32_from_cores(g)
    if g.backend == "cuda" and g.compute_capability == "6.0":
        return 2 * fp32
    dot4 = quantized and g.backend in ("cuda", "rocm")
    return fp32 * (4 if dot4 else 1)


@cache
def _apple_tflops_per_core() -> float:
    """FP32 TFLOPS per Apple GPU core where the database has both figures (the M2 family: 128 ALUs x 2
    x 1398 MHz). Apple publishes no GPU clock for M3/M4 and secondary figures disagree, so those
    entries carry core counts only and take this rate: a floor, as their clocks are reported at or
    above the M2's; the prefill calibration over M3/M4 runs absorbs the difference."""
    rates = sorted(g.fp32_tflops / g.gpu_cores for g in known_hardware().gpus.values()
                   if g.backend == "metal" and g.fp32_tflops and g.gpu_cores)
    return rates[len(rates) // 2] if rates else 0.0


def _apple_fp32_from_cores(g: GPUSpec) -> float:
    return g.gpu_cores * _apple_tflops_per_core() if g.backend == "metal" and g.gpu_cores else 0.0


def _vulkan_fp16(g: GPUSpec, weight_type: str) -> bool:
    return g.backend == "vulkan" and g.arch == "rdna4" and weight_type in VULKAN_RDNA4_FP16_TYPES


def attention_tflops(g: GPUSpec) -> float:
    """Attention runs in FP16 on the tensor cores (flash attention's MMA kernels or cuBLAS)."""
    return g.fp16_tensor_tflops or g.fp32_tflops or _apple_fp32_from_cores(g)


def accumulates_fp32(g: GPUSpec, weight_type: str) -> bool:
    """Whether this GPU's prompt GEMMs over weights of this type accumulate in FP32: BF16 on CUDA (cuBLAS with
    CUBLAS_COMPUTE_32F; F16 weights accumulate in FP16)."""
    return g.backend == "cuda" and weight_type == "BF16"
