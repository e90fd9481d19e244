"""Prefill: the seconds a prompt takes on the GPUs (or the CPU), ubatch by ubatch.

Each ubatch goes through the weight matrices at the matrix rate (llama.cpp's MMQ tiles for quantized weights, speed.mmq;
GEMMs otherwise), streams the activations through the other graph nodes, and computes attention over the prompt; layers
left on the CPU run on the main GPU for large batches, their weights shipped across PCIe once per ubatch.
"""

from __future__ import annotations

from dataclasses import replace

from gemma_fit.base.record import record
from gemma_fit.gguf.tensors import TensorPlan
from gemma_fit.gguf.types import GGMLType, ggml_type
from gemma_fit.gguf.unsloth import bf16_share
from gemma_fit.hardware.spec import GPUSpec
from gemma_fit.memory.estimate import MemoryEstimate
from gemma_fit.memory.placement import CPU
from gemma_fit.model.spec import ModelSpec
from gemma_fit.speed.batch import experts_touched
from gemma_fit.speed.calibration import (
    GEMM_EXPERT_LOOP,
    HOST_EXPERT_LOOP,
    attention_efficiency,
    decode_model,
    expert_call_s,
    expert_prefill_efficiency,
    per_gpu,
    prefill_efficiency,
    quantized_group,
)
from gemma_fit.speed.cpu import CPURates, cpu_attention_s, cpu_prefill_s
from gemma_fit.speed.links import Link
from gemma_fit.speed.mmq import expert_padding, expert_tile, padded_columns
from gemma_fit.speed.rates import attention_tflops, matmul_tops
from gemma_fit.speed.work import DeviceWork, ExpertMatrix, LayerWork

# Up to 8 tokens a matrix product runs as matrix-vector kernels (ggml-cuda/mmvq.cuh MMVQ_MAX_BATCH_SIZE, mmvf.cuh
# likewise; Metal's and Vulkan's mul_mat_vec paths do the same): each weight is read once and barely reused, so a
# ubatch that small costs its weight reads, as a decoded token does (llama-bench -ub 1 runs at decode's speed).
MATVEC_MAX_TOKENS = 8
# Bytes an element-wise node moves per token: float32 activations read twice and written once.
ACTIVATION_BYTES_PER_ELEMENT = 12


@record
class _PrefillRates:
    """What one GPU reaches in prefill, looked up once per prediction."""

    matmul_flops_s: float  # matrix FLOP/s (rated x calibrated efficiency)
    expert_flops_s: float  # the same for the experts' products (Vulkan multiplies them in FP16 on AMD)
    attention_flops_s: float
    bytes_s: float  # memory bandwidth at the decode efficiency
    seconds_per_kernel: float
    quantized: bool  # llama.cpp's MMQ kernels (else cuBLAS-style GEMMs for F16/BF16 weights)
    backend: str  # which kernels tile the experts' tokens (speed.mmq.expert_tile)
    seconds_per_expert_call: float = 0.0  # a backend that multiplies the experts one by one from the host
    arch: str = ""  # the GPU's architecture (CDNA 3's MMF takes no BF16 experts)


@per_gpu
def _prefill_rates(g: GPUSpec, weight_type: GGMLType) -> _PrefillRates:
    quantized = weight_type.is_quantized
    group = quantized_group(g, weight_type.name)  # Vulkan's F16 weights share its quantized types' pipelines
    eff, _ = prefill_efficiency(g, group)
    dm = decode_model(g)
    attn = attention_tflops(g) * 1e12 * attention_efficiency(g, group)
    expert_eff = expert_prefill_efficiency(g, group)
    return _PrefillRates(matmul_tops(g, quantized, weight_type.name) * 1e12 * eff,
                         matmul_tops(g, quantized, weight_type.name, experts=True) * 1e12 * expert_eff, attn,
                         (g.memory_bandwidth_gbps or 0) * 1e9 * dm.efficiency, dm.seconds_per_node,
                         quantized, g.backend, expert_call_s(g), g.arch or "")


def _gpu_ubatch_s(r: _PrefillRates, w: LayerWork, nodes: float, matmul_nodes: float, ffn_elements: float, u: int,
                  model: ModelSpec, expert_matrices: tuple[ExpertMatrix, ...] = ()) -> float:
    """Seconds for one ubatch of u tokens through this GPU's share of the layers. A quantized dense matrix costs its
    weight read plus its tile-padded columns at the matrix rate: in MMQ the two add (a published -ub sweep of Llama 3
    8B Q4_0 on an RTX 4090, ggml-org/llama.cpp#7676's build, takes u + 84 tokens' time at every u from 16 to 512
    within 6%, the 84 being the read and the kernels); an F16/BF16 GEMM overlaps them. An expert costs the larger of
    its read and its padded columns (speed.mmq)."""
    if not r.matmul_flops_s or not r.bytes_s:
        return float("inf")
    expert_read = w.expert_bytes * experts_touched(model.n_expert_used / model.n_expert, u) / r.bytes_s \
        if model.n_expert else 0.0
    if u <= MATVEC_MAX_TOKENS:  # matrix-vector kernels: the weight reads are the cost
        dense, experts = w.dense_bytes / r.bytes_s, expert_read
    else:
        compute, read = w.dense_flops * padded_columns(u) / r.matmul_flops_s, w.dense_bytes / r.bytes_s
        dense = compute + read if r.quantized else max(compute, read)
        padding = expert_padding(u, model.n_expert_used, model.n_expert, _expert_tile(r, u, model)) \
            if model.n_expert else 1.0
        experts = max(w.expert_flops * u * padding / r.expert_flops_s, expert_read) if w.expert_flops else 0.0
    elementwise = elementwise_bytes(nodes, matmul_nodes, ffn_elements, model.n_embd, u) / r.bytes_s
    return dense + experts + elementwise + nodes * r.seconds_per_kernel + expert_loop_s(r, expert_matrices, u, model)


def _upcast_s(r: _PrefillRates | None, flops: float, u: int) -> float:
    """The BF16 products of a ubatch's upcast share (their weights' read is in the dense bytes already); none where
    the matrix-vector kernels run, which only read."""
    if r is None or not flops or u <= MATVEC_MAX_TOKENS:
        return 0.0
    return flops * u / r.matmul_flops_s if r.matmul_flops_s else float("inf")


def _expert_tile(r: _PrefillRates, u: int, model: ModelSpec) -> int:
    return expert_tile(r.backend, r.quantized, u, u * model.n_expert_used / model.n_expert)


def expert_loop_s(r: _PrefillRates, expert_matrices: tuple[ExpertMatrix, ...], u: int, model: ModelSpec) -> float:
    """Host time of the expert matrices a backend runs, for a ubatch of u tokens, as one matrix product per expert that
    any token routes to, each started from the host after a blocking wait for the routing (loops_from_host)."""
    if u <= 1 or not r.seconds_per_expert_call or not model.n_expert:
        return 0.0
    looped = sum(1 for m in expert_matrices if loops_from_host(r.backend, r.arch, m, u))
    touched = model.n_expert * experts_touched(model.n_expert_used / model.n_expert, u)
    return looped * touched * r.seconds_per_expert_call


# ggml-cuda mmf.cu ggml_cuda_should_use_mmf for MUL_MAT_ID: an expert matrix of at most MMF_NARROW_ROWS output rows
# takes MMF up to MMF_NARROW_TOKENS tokens, a wider one up to MMF_WIDE_TOKENS.
MMF_NARROW_ROWS, MMF_NARROW_TOKENS, MMF_WIDE_TOKENS = 1024, 512, 128


def loops_from_host(backend: str, arch: str, m: ExpertMatrix, u: int) -> bool:
    """Whether this expert matrix's MUL_MAT_ID over u tokens is a host loop of one product per expert. SYCL: every
    batch of more than one token (ggml_sycl_mul_mat_id). CUDA and ROCm (ggml_cuda_mul_mat_id): quantized experts take
    MMQ and up to 8 tokens the matrix-vector kernels; F16/BF16 experts take MMF while the tokens are few enough for the
    matrix's width (not BF16 on CDNA 3), else the host loop: Gemma 4 26B-A4B's BF16 experts (1,408 and 2,816 rows)
    loop at any ubatch over 128 tokens."""
    if backend in HOST_EXPERT_LOOP:
        return u > 1
    if backend not in GEMM_EXPERT_LOOP or m.quantized or u <= MATVEC_MAX_TOKENS:  # matrix-vector kernels
        return False
    if arch == "cdna3" and m.weight_type == "BF16":
        return True
    return u > (MMF_NARROW_TOKENS if m.rows <= MMF_NARROW_ROWS else MMF_WIDE_TOKENS)


def elementwise_bytes(kernels: float, matmul_nodes: float, ffn_elements: float, n_embd: int, u: int) -> float:
    """Activation traffic of one ubatch through the non-matmul kernels: each streams the hidden state
    (n_embd wide), and the gated feed-forward activation streams its own, wider, width."""
    return ACTIVATION_BYTES_PER_ELEMENT * u * (max(0.0, kernels - matmul_nodes) * n_embd + ffn_elements)


def _ubatches(prompt_tokens: int, n_ubatch: int) -> list[tuple[int, int]]:
    """(tokens, how many ubatches of that size) for a prompt: full ubatches and the rest."""
    full, rest = divmod(prompt_tokens, n_ubatch)
    return [(u, n) for u, n in ((n_ubatch, full), (rest, 1)) if u and n]


def prefill_seconds(plan: TensorPlan, est: MemoryEstimate, gpus: tuple[GPUSpec, ...], work: DeviceWork,
                     prompt_tokens: int, host: Link | None, peer: Link | None, cpu_rates: CPURates,
                     notes: list[str]) -> float:
    """With a GPU, llama.cpp also runs the CPU-resident layers on the (main) GPU for large batches,
    shipping their weights across PCIe once per ubatch."""
    ubatches = _ubatches(prompt_tokens, est.settings.ubatch)
    n_ubatches = sum(n for _, n in ubatches)
    if not gpus:
        w = work.work[CPU]
        flops = (w.dense_flops + w.expert_flops) * prompt_tokens
        per_cell = sum(4.0 * layer.n_head * layer.head_dim for layer in plan.model.layers) * prompt_tokens
        cells = work.attn_flops[CPU] / per_cell if per_cell else 0.0  # cached tokens a query attends, on average
        return (cpu_prefill_s(flops, cpu_rates, notes, plan.ftype.name, w.expert_flops * prompt_tokens)
                + cpu_attention_s(work.attn_flops[CPU], cells, cpu_rates, notes))
    total = 0.0
    share = bf16_share(plan)  # a UD-Q8_K_XL's layer matrices kept in BF16 go through the BF16 kernels
    for i, g in enumerate(gpus):
        w, nodes, mm, ffn = work.work[i], work.nodes[i], work.matmul_nodes[i], work.ffn_elements[i]
        attn, experts = work.attn_flops[i], (work.expert_matrices or {}).get(i, ())
        if i == 0:  # the main GPU also computes the CPU layers
            w, nodes, mm = w + work.work[CPU], nodes + work.nodes[CPU], mm + work.matmul_nodes[CPU]
            attn, ffn = attn + work.attn_flops[CPU], ffn + work.ffn_elements[CPU]
            experts += (work.expert_matrices or {}).get(CPU, ())
        rates = _prefill_rates(g, plan.ftype.default_type)
        quantized_w = replace(w, dense_flops=w.dense_flops * (1 - share)) if share else w
        upcast = _prefill_rates(g, ggml_type("BF16")) if share else None
        total += sum(n * (_gpu_ubatch_s(rates, quantized_w, nodes, mm, ffn, u, plan.model, experts)
                          + _upcast_s(upcast, w.dense_flops * share, u)) for u, n in ubatches)
        total += attn / rates.attention_flops_s if rates.attention_flops_s else float("inf")
    if work.read(CPU) and host is not None:
        cpu_w = work.work[CPU]  # op offload copies whole matrices (every expert: a ubatch routes to most)
        total += n_ubatches * host.seconds(cpu_w.dense_bytes + cpu_w.expert_bytes)
    if peer is not None:
        hidden = 4.0 * plan.model.n_embd * est.settings.ubatch
        boundaries = len(handovers([d for d in est.placement.layer_device if d != CPU]))
        total += n_ubatches * boundaries * peer.seconds(hidden)
    return total


def handovers(layer_device: list[int]) -> list[tuple[int, int]]:
    """(from, to) devices wherever consecutive layers sit on different devices."""
    return [(a, b) for a, b in zip(layer_device, layer_device[1:], strict=False) if a != b]
