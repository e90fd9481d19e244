"""What a GPU's matrix units deliver: the rated throughput llama.cpp's kernels run at, by weight type."""

from __future__ import annotations

import re
from functools import cache

from gemma_fit.hardware.snapshot import known_hardware
from gemma_fit.hardware.spec import GPUSpec

# Quantized types llama.cpp's Vulkan backend multiplies as INT8 on AMD's matrix units (ggml-vulkan.cpp: the
# matmul_*_q8_1 coopmat pipelines, built for RDNA 3 and 4, on RDNA 4 without Q4_1, Q5_1, Q4_K and Q5_K); it dequantizes
# the others to FP16 for the FP16 cooperative matrices. Those pipelines serve MUL_MAT only: a mixture-of-experts
# layer's MUL_MAT_ID goes through the dequantizing FP16 ones (matmul_id_subgroup_*) whatever the type. RDNA 3's INT8
# and FP16 rates are equal; RDNA 4's INT8 is twice its FP16.
VULKAN_INT8_MMQ_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "IQ4_XS", "MXFP4", "Q3_K", "Q4_K", "Q5_K",
                         "Q6_K", "NVFP4")
VULKAN_RDNA4_FP16_TYPES = ("Q4_1", "Q5_1", "Q4_K", "Q5_K", "NVFP4")

# GPUs on which llama.cpp's Vulkan backend multiplies prompt matrices with cooperative matrices (the matrix units), by
# ggml-vulkan.cpp ggml_vk_khr_cooperative_matrix_support and the drivers' extension lists: Intel only Xe2 (older Arc,
# the A770 among them, "has performance regressions" there), AMD from RDNA 3 (the first with WMMA; AMD's own drivers
# are refused it on older chips, Mesa's RADV exposes it only where WMMA exists), NVIDIA wherever tensor cores are.
# Elsewhere its scalar shaders run the products on the shader cores ("matrix cores: none" in its device line).
VULKAN_COOPMAT_ARCHS = {"intel": ("xe2-hpg",), "amd": ("rdna3", "rdna4")}


def matmul_tops(g: GPUSpec, quantized: bool, weight_type: str = "", experts: bool = False) -> float:
    """Dense throughput llama.cpp's prompt matmuls (`experts`: a mixture-of-experts layer's) run at: INT8 tensor cores
    for quantized weights (MMQ; FP16 where Vulkan dequantizes on AMD: VULKAN_INT8_MMQ_TYPES), FP16 tensor cores
    otherwise, the shader FP32 rate where Vulkan runs its scalar shaders (vulkan_coopmat); half that on a GeForce
    card where the GEMMs over weights of `weight_type` accumulate in FP32 (accumulates_fp32). Without tensor cores,
    from the shader FP32 rate: x4 for quantized weights where a 4-way int8 dot product exists (CUDA DP4A from compute
    capability 6.1, AMD's dot4 on RDNA), which MMQ uses; x2 on GP100 (compute capability 6.0), which has no DP4A and
    runs FP16 at twice its FP32 rate through cuBLAS."""
    if _vulkan_scalar(g):
        return g.fp32_tflops or 0.0  # the scalar shaders: the matrix units, if any, sit idle
    if quantized and g.int8_tensor_tops and not _vulkan_fp16(g, weight_type, experts):
        return g.int8_tensor_tops
    if g.fp16_tensor_tflops:
        half = g.fp32_accumulate_half_rate and accumulates_fp32(g, weight_type)
        return g.fp16_tensor_tflops / 2 if half else g.fp16_tensor_tflops
    fp32 = shader_fp32_tflops(g)
    if _gp100(g):
        return 2 * fp32
    return fp32 * (dot4_factor(g) if quantized else 1)


# AMD chips whose int8 dot product llama.cpp emulates (ggml-cuda common.cuh ggml_cuda_dp4a): six instructions (four
# 24-bit multiplies, two three-way adds) for the four products one v_dot4 does; Vega 10 (gfx900) and RDNA 1 (gfx101x).
EMULATED_DOT4_ARCHS = ("gcn5", "rdna1")
DOT4_EMULATION_INSTRUCTIONS = 6


def dot4_factor(g: GPUSpec) -> float:
    """How many times the FP32 rate MMQ's quantized products reach on shader cores: x4 with a 4-way int8 dot product
    (CUDA DP4A from compute capability 6.1; AMD's v_dot4 on gfx906, CDNA and RDNA 2 on); 4/6 where HIP emulates it
    (EMULATED_DOT4_ARCHS but gfx906); x1 below compute capability 6.1 (Maxwell), whose prompts go through cuBLAS."""
    if g.backend == "rocm":
        emulated = g.arch in EMULATED_DOT4_ARCHS and g.compute_capability != "gfx906"
        return 4 / DOT4_EMULATION_INSTRUCTIONS if emulated else 4.0
    if g.backend == "cuda":
        cc = g.compute_capability or ""
        return 4.0 if not re.fullmatch(r"\d+\.\d+", cc) or float(cc) >= 6.1 else 1.0
    return 1.0


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


def shader_fp32_tflops(g: GPUSpec) -> float:
    """The shader cores' FP32 rate: the datasheet's, else an Apple GPU's from its cores (_apple_tflops_per_core)."""
    return g.fp32_tflops or _apple_fp32_from_cores(g)


def _vulkan_scalar(g: GPUSpec) -> bool:
    """llama.cpp's Vulkan backend on a GPU it grants no cooperative matrices: its scalar shaders do the products."""
    return g.backend == "vulkan" and not vulkan_coopmat(g)


def vulkan_coopmat(g: GPUSpec) -> bool:
    """Whether llama.cpp's Vulkan backend reaches this GPU's matrix units (VULKAN_COOPMAT_ARCHS)."""
    if g.vendor == "nvidia":
        return bool(g.fp16_tensor_tflops)
    return g.arch in VULKAN_COOPMAT_ARCHS.get(g.vendor, ())


def uses_matrix_units(g: GPUSpec) -> bool:
    """Whether llama.cpp's prompt products on this GPU run on its tensor (matrix) units."""
    return bool(g.fp16_tensor_tflops) and not _vulkan_scalar(g)


def idle_matrix_units(g: GPUSpec) -> bool:
    """An Intel GPU with matrix (XMX) units that llama.cpp's Vulkan backend leaves idle (VULKAN_COOPMAT_ARCHS), which
    its SYCL backend multiplies on."""
    return _vulkan_scalar(g) and g.vendor == "intel" and bool(g.int8_tensor_tops)


def _vulkan_fp16(g: GPUSpec, weight_type: str, experts: bool) -> bool:
    """Whether Vulkan dequantizes these AMD products to FP16 rather than multiplying them as INT8."""
    if g.backend != "vulkan" or g.vendor != "amd":
        return False
    return experts or weight_type not in VULKAN_INT8_MMQ_TYPES or (
        g.arch == "rdna4" and weight_type in VULKAN_RDNA4_FP16_TYPES)


def _gp100(g: GPUSpec) -> bool:
    """GP100 (the P100, compute capability 6.0): FP16 at twice its FP32 rate, and no DP4A."""
    return g.backend == "cuda" and g.compute_capability == "6.0"


def attention_tflops(g: GPUSpec) -> float:
    """Attention runs in FP16 on the tensor cores (flash attention's MMA kernels or cuBLAS); Vulkan's scalar
    flash-attention shaders where it has no cooperative matrices. Without tensor cores CUDA's tile kernel computes in
    FP16 where the chip runs it fast (ggml-cuda common.cuh fast_fp16_available: every NVIDIA chip from compute
    capability 6.0 but 6.1's consumer Pascal), so GP100 at twice its FP32 rate."""
    if _vulkan_scalar(g):
        return g.fp32_tflops or 0.0
    if not g.fp16_tensor_tflops and _gp100(g) and g.fp32_tflops:
        return 2 * g.fp32_tflops
    if _amd_rdna(g) and g.fp16_tensor_tflops and g.fp32_tflops:
        return min(g.fp16_tensor_tflops, 2 * g.fp32_tflops)
    return g.fp16_tensor_tflops or g.fp32_tflops or _apple_fp32_from_cores(g)


def _amd_rdna(g: GPUSpec) -> bool:
    """An AMD RDNA GPU: its flash attention (WMMA tiles, then softmax and rescaling on the vector units) runs at
    RDNA 3's one FP16 matrix op per FP32 dual-issue lane a clock, not RDNA 4's doubled WMMA rate: published Gemma 3 4B
    prompts at 32,768 cached tokens run 1.55x as fast on an R9700 as on a Strix Halo, their FP32 ratio 1.61, their
    rated matrix ratio 3.2 (docs/speed.md)."""
    return g.vendor == "amd" and (g.arch or "").startswith("rdna")


def accumulates_fp32(g: GPUSpec, weight_type: str) -> bool:
    """Whether this GPU's prompt GEMMs over weights of this type accumulate in FP32: BF16 on CUDA (cuBLAS with
    CUBLAS_COMPUTE_32F; F16 weights accumulate in FP16)."""
    return g.backend == "cuda" and weight_type == "BF16"


def arithmetic_decode(gpu: GPUSpec) -> bool:
    """Whether llama.cpp's quantized matrix-vector kernels on this GPU unpack each weight to FP32 and multiply it
    there: Metal's (kernel_mul_mv_*), and CUDA's below compute capability 6.1, which lacks the DP4A int8 dot product
    its MMVQ kernels otherwise use (four weights per instruction, Maxwell and GP100 alike)."""
    if gpu.backend == "metal":
        return True
    cc = gpu.compute_capability or ""
    return gpu.backend == "cuda" and bool(re.fullmatch(r"\d+\.\d+", cc)) and float(cc) < 6.1
