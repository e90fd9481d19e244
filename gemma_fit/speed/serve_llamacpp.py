"""llama.cpp (llama-server -np N, Ollama's runner) as a batched decoder: the stages of batch.Pipeline built from
the same tensor plan, placement and calibration as the single-stream prediction (speed.predict), so one
sequence gives the same seconds per token.

With several sequences llama-server decodes every busy slot in one batch per step. Batches of up to 8 go
through the quantized matrix-vector kernels (ggml-cuda mmvq.cu), larger ones through MMQ; each sequence past the
first costs its FLOPs at the prefill's calibrated matrix rate or a fitted share of one token's weight pass,
whichever is more (speed.batch). Metal's share is its own, and past 8 sequences ggml-metal's tiled mul_mm computes
whole tiles of columns at a fitted share of the prefill rate. Attention reads each slot's own KV cells; the logits of
every sequence (n_vocab float32) come back to the host.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.gguf.tensors import TensorPlan
from gemma_fit.hardware.spec import GPUSpec, Hardware
from gemma_fit.memory.estimate import MemoryEstimate
from gemma_fit.memory.placement import CPU
from gemma_fit.speed.batch import Pipeline, StageWork
from gemma_fit.speed.calibration import (
    decode_model,
    metal_tensor_api,
    prefill_efficiency,
    quantized_group,
)
from gemma_fit.speed.cpu import (
    cpu_of,
    decode_bandwidth_gbps,
    dense_equivalent_bytes,
    hybrid_split_s,
    prefill_gflops_per_thread,
    system_bandwidth_gbps,
)
from gemma_fit.speed.links import default_attachment, host_link, peer_link
from gemma_fit.speed.rates import matmul_tops
from gemma_fit.speed.traffic import Serving, serve
from gemma_fit.speed.vector import vector_pass_s
from gemma_fit.speed.work import DeviceWork, LayerWork, device_work

# ggml-metal picks its matrix kernel by the batch's columns (ggml-metal-common.cpp, ggml_metal_op_mul_mat_use_mm):
# up to 8 the matrix-vector kernels (mul_mv, mul_mv_ext), beyond that the tiled mul_mm, whose tile is 32 columns
# wide, or 128 with the Metal 4 tensor API of M5 GPUs (ggml-metal-device.cpp: nr1 = 32, or NRB = 16 x 4 x 2).
METAL_MV_MAX_COLUMNS = 8
# ggml-metal-ops.cpp (ggml_metal_op_mul_mat): a batch of 2-8 columns goes through mul_mv_ext, r1ptg columns a pass over
# the weights (2, 3, 4, 5, then 3, 4, 4 for 6, 7, 8: those take two passes), for these weight types; the K-quants from
# 4 columns, 2 and 3 through mul_mv, one column a pass; every other type always through mul_mv. On an M1 Max, Gemma 4
# 12B Q8_0 decodes 8 sequences in a step 2.1x as long as 4 (daScript's llama-batched-bench), Q4_K_M 2 in 1.8x one's.
METAL_MV_EXT_TYPES = frozenset({"F32", "F16", "BF16", "Q1_0", "Q2_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4",
                                "IQ4_NL"})
METAL_MV_EXT_K_TYPES = frozenset({"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"})
METAL_MV_EXT_COLUMNS = (2, 3, 4, 5, 3, 4, 4)  # r1ptg for 2 ... 8 columns


def metal_columns_per_pass(type_name: str) -> tuple[int, ...]:
    """Columns one matrix-vector pass takes, for batches of 2 ... METAL_MV_MAX_COLUMNS on Metal."""
    if type_name in METAL_MV_EXT_TYPES:
        return METAL_MV_EXT_COLUMNS
    if type_name in METAL_MV_EXT_K_TYPES:
        return (1, 1) + METAL_MV_EXT_COLUMNS[2:]
    return (1,) * len(METAL_MV_EXT_COLUMNS)


def metal_tile(g: GPUSpec) -> int:
    return 128 if metal_tensor_api(g) else 32  # the tensor API's tiles (calibration.metal_tensor_api)


@cache
def batched_terms(backend: str | None = None) -> dict[str, float]:
    """model_db/llamacpp/batched_decode.yaml (benchmarks/fit_serving.py --write): the share of one token's weight
    pass each further sequence of a batched decode step costs, fitted on published llama-batched-bench runs, with a
    backend's own terms over the shared ones (Metal: its matrix-vector share and its tiled kernel's efficiency)."""
    doc = read_packaged_yaml("llamacpp/batched_decode.yaml")
    terms = {k: float(v) for k, v in doc["terms"].items()}
    return terms | {k: float(v) for k, v in (doc.get("backends") or {}).get(backend or "", {}).items()}


def _output_flops(plan: TensorPlan) -> float:
    """The logits of one token: 2 x n_vocab x n_embd (prefill skips them for all but the last token)."""
    return 2.0 * plan.model.n_vocab * plan.model.n_embd


def _stage(name: str, w: LayerWork, kv: float, flops: float, bytes_s: float, flops_s: float, fixed_s: float,
           share: float, reread: float) -> StageWork:
    routed = w.expert_bytes * share
    return StageWork(name, w.read_bytes - routed, w.expert_bytes, share, kv, flops, bytes_s, flops_s, fixed_s,
                     overlap=False, reread=reread)


def _gpu_stage(g: GPUSpec, i: int, work: DeviceWork, plan: TensorPlan, est: MemoryEstimate, share: float,
               reread: float | None, tile_efficiency: float | None) -> StageWork:
    m = decode_model(g)
    weights = plan.ftype.default_type
    eff, _ = prefill_efficiency(g, quantized_group(g, weights.name))
    w = work.work[i]
    flops = w.dense_flops + w.expert_flops + (_output_flops(plan) if est.placement.output_device == i else 0.0)
    terms = batched_terms(g.backend)
    flops_s = matmul_tops(g, weights.is_quantized, weights.name) * 1e12 * eff
    kv = work.kv_read[i] * m.efficiency / m.kv_share()  # at the KV cache's own share of the bandwidth
    stage = _stage(g.id, w, kv, flops, (g.memory_bandwidth_gbps or 0) * 1e9 * m.efficiency, flops_s,
                   work.nodes[i] * m.seconds_per_node, share,
                   terms["weight_pass_share_per_sequence"] if reread is None else reread)
    stage = replace(stage, vector_s=vector_pass_s(g, w.read_weights))
    tile_eff = terms.get("matrix_tile_efficiency") if tile_efficiency is None else tile_efficiency
    if g.backend != "metal" or not tile_eff:
        return stage
    return replace(stage, tile_from=METAL_MV_MAX_COLUMNS, tile=metal_tile(g), tile_flops_s=flops_s * tile_eff,
                   columns_per_pass=metal_columns_per_pass(weights.name))


def llamacpp_pipeline(plan: TensorPlan, est: MemoryEstimate, hardware: Hardware, position: int,
                      reread: float | None = None, tile_efficiency: float | None = None) -> Pipeline:
    """The decode step of this plan, with each sequence at `position` tokens of context. `reread`: the share of one
    token's weight pass each further sequence costs at least (None: the fitted one of each GPU's backend; 0: its
    FLOPs alone); `tile_efficiency`: Metal's tiled matrix kernel's share of the prefill rate (None: the fitted one)."""
    gpus = hardware.gpus
    model = plan.model
    share = model.n_expert_used / model.n_expert if model.n_expert else 0.0
    work = device_work(plan, est, len(gpus), max(1, min(position, est.n_ctx)))
    stages = [_gpu_stage(g, i, work, plan, est, share, reread, tile_efficiency) for i, g in enumerate(gpus)]
    cpu_reread = batched_terms()["weight_pass_share_per_sequence"] if reread is None else reread
    notes: list[str] = []
    if work.read(CPU) > 0 or not gpus:
        rates = cpu_of(hardware)
        bw, _ = decode_bandwidth_gbps(system_bandwidth_gbps(hardware, rates, notes), rates)
        per_thread, _ = prefill_gflops_per_thread(rates, plan.ftype.name, amx=False)  # a step's rows: no AMX tiles
        w = work.work[CPU]
        flops = w.dense_flops + w.expert_flops + (_output_flops(plan) if est.placement.output_device == CPU else 0.0)
        if not gpus and w.read_bytes:  # a CPU-only build reads its repacked experts slower (expert_read_share)
            bw *= w.read_bytes / dense_equivalent_bytes(w.read_bytes, w.expert_bytes * share)
        stages.append(_stage("cpu", w, work.kv_read[CPU], flops, bw * 1e9,  # the CPU runs prefill's kernels
                             per_thread * (rates.threads or 8) * 1e9, 0.0, share, cpu_reread))
    factors = hardware.speed_calibration.decode_points() if hardware.speed_calibration else ()
    if not gpus:
        return Pipeline(tuple(stages), speed_factors=factors)
    attachments = hardware.attachments or tuple(default_attachment(g) for g in gpus)
    peer = peer_link(gpus, attachments)
    fixed, per_seq = 0.0, 0.0
    hidden = 4.0 * model.n_embd
    layer_device = list(est.placement.layer_device)
    for a, b in zip(layer_device, layer_device[1:], strict=False):
        if a != b:
            link = host_link(attachments[0]) if CPU in (a, b) or peer is None else peer
            fixed += link.latency_s
            per_seq += hidden / (link.per_direction_gbps * 1e9)
    out = est.placement.output_device
    if out != CPU and not gpus[out].unified_memory:
        link = host_link(attachments[out])
        fixed += link.latency_s
        per_seq += 4.0 * model.n_vocab / (link.per_direction_gbps * 1e9)
    split = hybrid_split_s(sum(work.nodes[i] for i in range(len(gpus))), work.cpu_expert_layers)
    return Pipeline(tuple(stages), handover_fixed_s=fixed, handover_s_per_seq=per_seq, split_s=split,
                    speed_factors=factors)


def slots_holding(est: MemoryEstimate, tokens: int) -> int:
    """Requests of `tokens` (prompt + output) the server's KV cache holds at once: each of -np N slots owns
    n_ctx / N cells, or with --kv-unified they share all n_ctx."""
    n = max(1, est.settings.n_parallel)
    if est.settings.kv_unified:
        return min(n, est.n_ctx // max(1, tokens))
    return n if est.n_ctx // n >= tokens else 0


def llamacpp_serving(plan: TensorPlan, est: MemoryEstimate, hardware: Hardware, prefill_tps: float,
                     prompt_tokens: int, output_tokens: int | None, rate_per_s: float | None) -> Serving:
    """llama-server with -np N slots: N concurrent requests at most; more wait for a free slot."""
    need = prompt_tokens + (output_tokens or 0)
    n = max(1, est.settings.n_parallel)
    slot = est.n_ctx if est.settings.kv_unified else est.n_ctx // n
    # each slot's context grows to its request's length, or to the slot's size where the request does not fit
    pipe = llamacpp_pipeline(plan, est, hardware, min(prompt_tokens + (output_tokens or 0) // 2, max(1, slot)))
    held = slots_holding(est, need)
    return serve(pipe, prefill_tps, n, prompt_tokens, output_tokens, rate_per_s, max(1, held or n), held)
