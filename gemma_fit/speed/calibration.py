"""Calibrated speed terms: the efficiencies llama.cpp reaches on each kind of processor and the fixed
costs it pays, read from model_db/llamacpp/speed_calibration.yaml (written by
benchmarks/calibrate_speed.py from published llama-bench runs and measurements kept in benchmarks/data).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from functools import cache, wraps
from typing import Any, TypeVar

from gemma_fit.base.record import record
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.gguf.types import UNQUANTIZED
from gemma_fit.hardware.spec import GPUSpec
from gemma_fit.speed.rates import arithmetic_decode, uses_matrix_units, vulkan_coopmat

T = TypeVar("T")
_BY_GPU: dict[tuple[object, ...], tuple[GPUSpec, Any]] = {}
_BY_GPU_MAX = 4096


def per_gpu(fn: Callable[..., T]) -> Callable[..., T]:
    """A pure function of a GPU (and hashable arguments) over the calibration tables, cached per GPU object: a
    report asks the same GPU's figures for every cell. clear_gpu_cache() forgets them (the fit scripts change the
    tables in place)."""

    @wraps(fn)
    def cached(gpu: GPUSpec, *args: Any) -> T:
        key = (fn, id(gpu), args)
        hit = _BY_GPU.get(key)
        if hit is not None and hit[0] is gpu:  # the entry holds its GPU, so its id names no other
            return hit[1]  # type: ignore[no-any-return]
        value = fn(gpu, *args)
        if len(_BY_GPU) >= _BY_GPU_MAX:
            _BY_GPU.clear()
        _BY_GPU[key] = (gpu, value)
        return value

    return cached


def clear_gpu_cache() -> None:
    _BY_GPU.clear()


@cache
def calibration() -> dict:
    return read_packaged_yaml("llamacpp/speed_calibration.yaml")


def decode_group(gpu: GPUSpec) -> str:
    """The calibration group of a GPU for decode: backend and architecture. Pascal GP100 (compute
    capability 6.0) stands apart, and Maxwell with it: they lack the DP4A int8 dot product that llama.cpp's quantized
    matrix-vector kernels use, so their decode is bound by arithmetic, not by memory (arithmetic_decode)."""
    if gpu.backend == "cuda" and arithmetic_decode(gpu):
        return "cuda-pascal-sm60"
    return f"{gpu.backend}-{gpu.arch}"


# Data-centre tensor-core chips (GA100, GH100, GB100, and Jetson Thor's Blackwell GPU with the same tcgen05
# core: compute capability x.0). Their rated tensor throughput counts instructions llama.cpp's MMQ kernels do not
# issue (wider MMA per SM, Hopper's wgmma, Blackwell's tcgen05), so they reach a smaller share of it: A100 0.12
# against 0.25-0.29 for workstation cards, Thor 0.039 (its published runs: docs/speed.md).
DATACENTER_TENSOR_CC = ("8.0", "9.0", "10.0", "11.0")
# Turing's MMQ lacks the int8 m16n8k32 MMA of later chips and issues four m8n8k16 ones in its place (ggml-cuda/mma.cuh):
# its prompts reach about 0.6 of the share GeForce and pro cards of later generations reach, GeForce or Quadro alike.
TURING_CC = "7.5"
# AMD Instinct (CDNA) likewise: the rated MFMA throughput (MI300X 2,615 int8 TOPS) is far beyond what llama.cpp's
# MMQ reaches. PR #14624 (the MFMA path for CDNA 3) measured a Q4_0 4096x14336 product over 512 tokens at 55.6 TFLOPS
# before it (0.021 of the rate); a secondary page quotes discussion #14640's MI300X at 5,839 tok/s on Qwen3 8B Q4_K_M
# (0.034). With no llama.cpp runs of its own, the group takes the NVIDIA data-centre chips' share (NEAREST_GROUP).
INSTINCT_ARCHS = ("cdna", "cdna2", "cdna3", "cdna4")


def quantized_group(gpu: GPUSpec, weight_type: str) -> bool:
    """Whether a prompt over weights of this type takes the backend's quantized group (prefill_group): every quantized
    type, and F16 through Vulkan, whose FP16 cooperative-matrix (or scalar) pipelines are the ones its quantized types
    run through once dequantized. BF16 keeps `vulkan-fp16`: it takes BF16 matrices only where the driver offers them,
    else a scalar fallback (ggml-vulkan.cpp "BF16 fallback for coopmat devices without bf16 coopmat support"), which
    is what Strix Halo's BF16 runs, the group's data, measured."""
    return weight_type not in UNQUANTIZED or (gpu.backend == "vulkan" and weight_type == "F16")


# Chips on which llama.cpp multiplies a prompt's dense quantized weights through cuBLAS in FP16, as F16 ones
# (ggml-cuda mmq.cu ggml_cuda_should_use_mmq): GP100 (the P100) and Maxwell have no DP4A, so below compute capability
# 6.1 only a mixture's experts take MMQ; Volta (V100, Jetson Xavier) has FP16 tensor cores but not Turing's integer
# MMA, so MMQ serves only batches under MMQ_DP4A_MAX_BATCH_SIZE (64) and a prompt's ubatch goes to cuBLAS.
CUBLAS_PROMPT_CC = ("5.0", "5.2", "5.3", "6.0", "7.0", "7.2")


def prefill_group(gpu: GPUSpec, quantized: bool = True) -> str:
    """Prefill efficiency groups. F16/BF16 weights go through cuBLAS (hipBLAS, Metal's own GEMM), not
    llama.cpp's MMQ kernels: one group per backend. Quantized weights on CUDA: GeForce cards boost
    above the clock their tensor throughput is quoted at and run at higher power limits than
    workstation cards; data-centre tensor chips stand apart, and Turing (TURING_CC). AMD Instinct chips through ROCm
    stand apart as NVIDIA's data-centre chips do (INSTINCT_ARCHS). Other backends: one group each."""
    if not quantized:
        return f"{gpu.backend}-fp16"
    if gpu.backend == "cuda" and gpu.compute_capability in CUBLAS_PROMPT_CC:
        return "cuda-cublas"  # dequantized to FP16 each ubatch, then cuBLAS: its own share (nearest: cuda-fp16)
    if gpu.backend == "vulkan":  # each vendor's driver runs Vulkan's matrix kernels its own way, scalar ones apart
        return f"vulkan-{gpu.vendor}" + ("" if vulkan_coopmat(gpu) else "-scalar")
    if gpu.backend == "rocm" and gpu.arch in INSTINCT_ARCHS:
        return "rocm-datacenter"
    if gpu.backend != "cuda":
        return f"{gpu.backend}-quantized"
    if gpu.compute_capability in DATACENTER_TENSOR_CC:
        return "cuda-datacenter"
    if gpu.compute_capability == TURING_CC:
        return "cuda-turing"
    return f"cuda-{'consumer' if 'GeForce' in gpu.name else 'pro'}"


@record
class DecodeModel:
    efficiency: float  # achieved fraction of datasheet memory bandwidth
    seconds_per_node: float  # fixed cost per graph node per token, at this GPU's clock
    source: str
    kv_efficiency: float = 0.0  # the fraction its attention reads the KV cache at (0: the weights' efficiency)

    def kv_share(self) -> float:
        """The bandwidth share of decode's KV reads: its own where fitted, else the weights'."""
        return self.kv_efficiency or self.efficiency


REFERENCE_CLOCK_MHZ = 2000.0


@cache
def published_groups() -> dict:
    """model_db/llamacpp/speed_published.yaml (benchmarks/fit_backends.py --write): efficiencies fitted on published
    Gemma runs for groups, or chips (`group@compute capability`), the llama-bench fit has no or too few runs of."""
    return read_packaged_yaml("llamacpp/speed_published.yaml")


def chip_of(gpu: GPUSpec) -> str | None:
    """What names a chip generation: the compute capability (CUDA, ROCm's gfx), else an Apple or Intel GPU's
    architecture (neither vendor publishes a compute capability; an M2's GPU is one design from the M2 to the M2
    Ultra, Xe2-HPG one from the Arc B580 to the Pro B70)."""
    return gpu.compute_capability or (gpu.arch if gpu.backend == "metal" or gpu.vendor == "intel" else None)


def driver_group(group: str, gpu: GPUSpec) -> str:
    """The group of a GPU on a driver whose runs are fitted apart (AMDVLK: `vulkan-amd/amdvlk`), else the group."""
    return f"{group}/{gpu.vulkan_driver}" if gpu.vulkan_driver and gpu.backend == "vulkan" else group


def published_efficiency(kind: str, group: str, gpu: GPUSpec) -> tuple[float, str] | None:
    """The efficiency fitted on published Gemma runs of this chip, else of this group (on its own driver first, then
    the usual one's); None where there are none."""
    table = published_groups().get(kind) or {}
    own = driver_group(group, gpu)
    for key in (_figure_key(table, g, gpu) for g in ((own, group) if own != group else (group,))):
        if key:
            e = table[key]
            return float(e["efficiency"]), (f"{key}: median of {e['runs']} published Gemma runs on "
                                           f"{e['machines']} machine{'s' if e['machines'] != 1 else ''}")
    return None


def _figure_key(table: dict[str, Any], group: str, gpu: GPUSpec) -> str | None:
    """The key of `group`'s fitted figure for this GPU in a published table: its chip's, else the group's."""
    chip = chip_of(gpu)
    return next((k for k in ([f"{group}@{chip}"] if chip else []) + [group] if table.get(k)), None)


# Backends whose MUL_MAT_ID of more than one token is a host loop of one matrix product per expert, started after a
# blocking wait for the router's choices: SYCL (ggml-sycl.cpp ggml_sycl_mul_mat_id; Vulkan and Metal multiply every
# expert in one kernel).
HOST_EXPERT_LOOP = ("sycl",)
# ggml-cuda (CUDA and ROCm) multiplies quantized experts in one kernel (MMQ) and F16/BF16 ones in one (MMF) only up to
# so many tokens; past them, the same host loop of one cuBLAS/hipBLAS product per expert (ggml_cuda_mul_mat_id's
# fallback, after a cudaStreamSynchronize for the routing): speed.prefill.loops_from_host says which.
GEMM_EXPERT_LOOP = ("cuda", "rocm")


def expert_call_s(gpu: GPUSpec) -> float:
    """Seconds per expert matrix product where the backend multiplies a batch's experts one by one from the host
    (speed.prefill.expert_loop_s), fitted on published mixture-of-experts prompts of that backend; a backend that
    loops without runs of its own takes the median of those fitted (each call is a library GEMM's launch and a wait,
    SYCL's 33 us and ROCm's alike); else 0."""
    if gpu.backend not in HOST_EXPERT_LOOP + GEMM_EXPERT_LOOP:
        return 0.0
    fitted = published_groups().get("expert_loop") or {}
    entry = fitted.get(gpu.backend)
    if entry:
        return float(entry["seconds_per_expert_call"])
    calls = [float(e["seconds_per_expert_call"]) for e in fitted.values()]
    return statistics.median(calls) if calls else 0.0


@per_gpu
def prefill_efficiency(gpu: GPUSpec, quantized: bool) -> tuple[float, str]:
    """The share of the rated matrix throughput llama.cpp's prompt processing reaches on this GPU; on a driver fitted
    apart (AMDVLK) whose runs of this group's products are too few for a figure of their own, the usual driver's
    figure at driver_share."""
    group = prefill_group(gpu, quantized)
    found = published_efficiency("prefill", group, gpu)
    own = _figure_key(published_groups().get("prefill") or {}, driver_group(group, gpu), gpu)
    share = driver_share(gpu) if found is not None and own is None else None
    if found is None or share is None:
        return found or efficiency_for_group("prefill", group)
    why = f"x{share:.2f}: {gpu.vulkan_driver}'s dense products against the usual driver's"
    return found[0] * share, f"{found[1]}, {why}"


def driver_share(gpu: GPUSpec) -> float | None:
    """How a driver fitted apart runs dense products against the usual driver: the median, over the chips with
    published runs on both, of its figure for quantized weights over the usual driver's. AMDVLK offers 32 KiB of
    shared memory where RADV offers 64 (their Vulkan device lines on a Strix Halo), and ggml-vulkan builds a matrix
    shader's medium and large tiles only where they fit (ggml_vk_matmul_shmem_support), F16/BF16 fallback shaders as
    quantized ones: a Strix Halo's AMDVLK multiplies Q4-Q8 dense weights at 0.22 of RADV's share and Gemma 4
    26B-A4B's BF16 prompt at 0.21 of RADV's speed. None where no chip has both."""
    if not (gpu.vulkan_driver and gpu.backend == "vulkan"):
        return None
    table = published_groups().get("prefill") or {}
    usual = prefill_group(gpu, True)
    mine = driver_group(usual, gpu)
    ratios = [float(e["efficiency"]) / float(table[f"{usual}@{chip}"]["efficiency"])
              for key, e in table.items() if key.startswith(f"{mine}@")
              and (chip := key.split("@", 1)[1]) and f"{usual}@{chip}" in table]
    return statistics.median(ratios) if ratios else None


# Apple GPUs whose Metal backend runs the tensor API (ggml-metal-device.m enables it on M5 and later only: "~5% slower"
# on an M2 Ultra). There the dense products take the Metal 4 tensor kernel with its own tile sizes, while the experts'
# (kernel_mul_mm_id) keep 64 x 32 simdgroup tiles: an M5 Max runs Gemma 4 26B-A4B's prompts at 0.8 of the share its
# dense Gemma 4 models reach, an M2 Max (one kernel family for both) at the same share.
METAL_TENSOR_FROM = 5


def metal_tensor_api(gpu: GPUSpec) -> bool:
    m = re.fullmatch(r"apple-m(\d+)", gpu.arch or "")
    return gpu.backend == "metal" and m is not None and int(m.group(1)) >= METAL_TENSOR_FROM


def expert_group(gpu: GPUSpec, quantized: bool) -> str | None:
    """The prefill group the experts' products are fitted apart in (`...-experts`), where their kernel differs from
    the dense products': Metal's tensor API (metal_tensor_api), and Vulkan on AMD matrix cores, which multiplies
    quantized experts through its FP16 cooperative matrices and dense quantized weights through its INT8 ones
    (rates._vulkan_fp16), two paths each driver runs its own way (AMDVLK's INT8 path is 4x slower than RADV's on a
    Strix Halo, its FP16 one 1.7x); None where both share one."""
    vulkan_amd = gpu.backend == "vulkan" and gpu.vendor == "amd" and vulkan_coopmat(gpu) and quantized
    return f"{prefill_group(gpu, quantized)}-experts" if metal_tensor_api(gpu) or vulkan_amd else None


def expert_prefill_efficiency(gpu: GPUSpec, quantized: bool) -> float:
    """The share of the rated matrix throughput the experts' products reach: their own group's where fitted, else
    the dense products'."""
    group = expert_group(gpu, quantized)
    own = published_efficiency("prefill", group, gpu) if group else None
    return own[0] if own else prefill_efficiency(gpu, quantized)[0]


# The attention entry pooled over every backend and vendor whose flash attention runs on matrix units (CUDA, ROCm,
# SYCL, Vulkan's cooperative matrices; not Metal's, measured against its shader rate, nor a driver fitted apart): what
# a backend-vendor pair without published runs at depth takes. Their kernels reach a like share of the FP16 tensor rate
# (CUDA 0.14, ROCm 0.11, Strix Halo's RADV 0.15), well under what the matrix products do (0.25 to 0.45).
ATTENTION_POOL = "matrix-units"


def attention_group(gpu: GPUSpec) -> str:
    """The attention efficiency group: `backend-vendor`, Vulkan's scalar shaders apart from its cooperative matrices
    (as prefill_group keeps them): a Radeon Pro VII's scalar flash attention reaches 0.59 of its FP16 rate, a Strix
    Halo's coopmat one 0.15 of its matrix rate, and one median of the two spoke for neither."""
    scalar = gpu.backend == "vulkan" and not vulkan_coopmat(gpu)
    return f"{gpu.backend}-{gpu.vendor}" + (SCALAR_SUFFIX if scalar else "")


def matrix_unit_attention(group: str) -> bool:
    """Whether an attention group (`backend-vendor`, or `.../driver`) is one ATTENTION_POOL pools."""
    return not group.startswith("metal") and "/" not in group


@per_gpu
def attention_efficiency(gpu: GPUSpec, quantized: bool) -> float:
    """The share of the FP16 rate prompt attention (flash attention's kernels) reaches: fitted on published runs at
    depth (llama-bench -d) where there are some for this backend and vendor, else the pool over the backends that run
    it on matrix units where this GPU does too (ATTENTION_POOL), else the matrix products' share."""
    own = published_efficiency("attention", attention_group(gpu), gpu)
    if own is not None:
        return own[0]
    pool = (published_groups().get("attention") or {}).get(ATTENTION_POOL)
    group = driver_group(attention_group(gpu), gpu)
    on_units = uses_matrix_units(gpu) and matrix_unit_attention(group)
    return float(pool["efficiency"]) if pool and on_units else prefill_efficiency(gpu, quantized)[0]


@per_gpu
def decode_model(gpu: GPUSpec) -> DecodeModel:
    """Seconds per token = weight bytes / (bandwidth x efficiency) + KV bytes / (bandwidth x KV efficiency) + graph
    nodes x seconds per node. The KV efficiency is fitted on published runs at depth (llama-bench -d) where a chip or
    group has them: flash attention's decode kernels read a long cache at a share of their own (AMDVLK on a Strix Halo
    loses a quarter more at 32k than RADV on the same weights); elsewhere the weights' share.

    From the backend's fit over published llama-bench runs (benchmarks/calibrate_speed.py): the
    efficiency of the GPU's architecture where GPUs of it were measured, else the backend's median;
    the per-node cost scaled by the reference clock over the GPU's boost clock. A chip or group with
    published Gemma runs of its own (published_groups) takes the efficiency fitted on them."""
    group = decode_group(gpu)
    kv = published_efficiency("decode_kv", group, gpu)
    kv_eff = kv[0] if kv is not None else 0.0
    fit = (calibration()["decode"].get("fits") or {}).get(gpu.backend)
    if fit:
        clock = gpu.boost_clock_mhz
        ref = float(fit.get("reference_clock_mhz", REFERENCE_CLOCK_MHZ))
        per_node = node_cost(gpu, fit) * (ref / clock if clock else 1.0)
        own = published_efficiency("decode", group, gpu)
        if own is not None:
            return DecodeModel(own[0], per_node, own[1], kv_eff)
        if group in fit["groups"]:
            return DecodeModel(float(fit["groups"][group]), per_node, f"{group} in the {gpu.backend} fit", kv_eff)
        return DecodeModel(float(fit["efficiency"]), per_node, f"{gpu.backend} median (no {group} data)", kv_eff)
    own = published_efficiency("decode", group, gpu)  # a backend without llama-bench runs (SYCL): no kernel cost fit
    eff, src = own if own is not None else efficiency_for_group("decode", group)
    return DecodeModel(eff, 0.0, src, kv_eff)


def node_cost(gpu: GPUSpec, fit: dict) -> float:
    """Seconds per graph node at the reference clock: the chip's own where its published Gemma runs of several model
    sizes tell it from the efficiency and the backend's llama-bench fit borrowed CUDA's (ROCm's table is Llama 7B on
    four cards) or rests on one model size (Metal's, mostly Llama 2 7B: benchmarks/fit_backends.py), else the
    backend's from the llama-bench fit."""
    chip = chip_of(gpu)
    own = (published_groups().get("node_cost") or {}).get(f"{gpu.backend}@{chip}") if chip else None
    if own and fused_dies(gpu) and not own.get("ultra"):
        own = None  # fitted on single dies only: an Ultra keeps the llama-bench fit's figure, which Ultras are in
    return float(own["seconds_per_node"]) if own else float(fit["seconds_per_node"])


def fused_dies(gpu: GPUSpec) -> bool:
    """An Apple Ultra: two Max dies joined by UltraFusion, each kernel synchronised across both. Its per-kernel cost is
    not a single die's: an M1 Ultra decodes Llama 2 7B at 1.2x an M1 Max's speed for twice the bandwidth (llama.cpp
    discussion #4167), so a chip's cost fitted on an M1 and an M1 Max alone would put it at 1.7x."""
    return gpu.backend == "metal" and "ultra" in gpu.id


# A group without runs of its own borrows its nearest relative's before the backend-wide median.
NEAREST_GROUP = {"cuda-datacenter": "cuda-pro", "cuda-turing": "cuda-pro", "rocm-datacenter": "cuda-datacenter",
                 "rocm-fp16": "cuda-fp16", "cuda-cublas": "cuda-fp16"}


# Vulkan's scalar-shader groups (prefill_group) share their basis, the shader FP32 rate, which the other Vulkan groups
# (the matrix units' rates) do not: one without runs borrows the median of the others, not the backend's.
SCALAR_SUFFIX = "-scalar"


def scalar_peers(group: str, groups: dict[str, Any]) -> list[float]:
    """The efficiencies of the other scalar-shader groups, for a scalar-shader group without runs of its own."""
    if not group.endswith(SCALAR_SUFFIX):
        return []
    return [float(v["efficiency"]) for g, v in groups.items() if g.endswith(SCALAR_SUFFIX) and g != group]


def efficiency_for_group(kind: str, group: str) -> tuple[float, str]:
    """Calibrated median efficiency of a group ("cuda-ampere", "cuda-consumer"), and where it comes from."""
    table = calibration()[kind]
    backend = group.split("-")[0]
    for g in (group, NEAREST_GROUP.get(group)):
        if g in table["groups"]:
            return float(table["groups"][g]["efficiency"]), f"{g} median of {table['groups'][g]['n']} runs"
    peers = scalar_peers(group, table["groups"])
    if peers:
        return float(statistics.median(peers)), f"median of the other {backend} scalar-shader groups (no {group} data)"
    if backend in table["backends"]:
        return float(table["backends"][backend]["efficiency"]), f"{backend} median (no {group} data)"
    all_effs = [v["efficiency"] for v in table["backends"].values()]
    return float(sorted(all_effs)[len(all_effs) // 2]), "all-backend median (no data for this backend)"


def load_terms() -> dict[str, float]:
    """Page-cache read speed as a fraction of RAM bandwidth (measured, benchmarks/measure_load.py) and
    the fixed setup seconds (a budget: backend init, compute-buffer reservation, warm-up)."""
    load = calibration()["load"]
    return {"page_cache_fraction_of_ram": float(load["page_cache_fraction_of_ram"]),
            "setup_s": float(load["setup_s_budget"])}


def load_setup_s() -> float:
    return load_terms()["setup_s"]


def split_terms() -> dict[str, float]:
    """Multi-GPU costs measured in published runs (benchmarks/data/multigpu_llamabench.csv): the main
    GPU's gather after each row-split matrix product, one all-reduce of the tensor split, and the
    hand-over latency of a PCIe or NVLink copy."""
    links = calibration()["links"]
    return {k: float(links[k]) for k in ("row_gather_s", "tensor_allreduce_s", "pcie_latency_s", "nvlink_latency_s")}
