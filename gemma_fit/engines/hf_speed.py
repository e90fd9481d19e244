"""Speed of the Hugging Face engines (vLLM, transformers) from the same bandwidth/compute model as llama.cpp's
(speed.batch), with each engine's kernels and precision:

- vLLM runs cuBLAS/CUTLASS GEMMs under CUDA graphs: a decode step is a roofline (the slower of reading the
  weights and multiplying them) plus the KV reads and a fixed per-step cost. Matrix throughput by weight
  format (vllm/model_executor/layers/quantization, 0.33.0): bf16/fp16 on the FP16 tensor cores; fp8 W8A8 at
  the FP8 rate where CUTLASS FP8 runs (compute capability 8.9 and up, fp8.py), else Marlin W8A16 at FP16;
  AWQ/GPTQ int4 through Marlin (W4A16: FP16 tensor cores, int4 weights); NVFP4 at the FP4 rate on
  Blackwell (10.0 and up), else Marlin W4A16. The FP8 rate is the INT8 tensor rate hardware_db records (the
  two are equal on Ada, Hopper and Blackwell), FP4 twice that.
- transformers `generate` runs eagerly: every layer pays Python dispatch and kernel launches on top of the
  bytes, and bitsandbytes dequantizes its weights on every step.
Efficiencies and fixed costs are fitted on published runs (model_db/engines/speed.yaml, written by
benchmarks/fit_serving.py; the runs and their sources in benchmarks/data/).
"""

from __future__ import annotations

from functools import cache

from gemma_fit.base.record import record
from gemma_fit.engines.hf_weights import LINEAR_BYTES_PER_PARAM, kv_layers, param_breakdown
from gemma_fit.hardware.spec import GPUSpec
from gemma_fit.model.spec import ModelSpec
from gemma_fit.speed.batch import Pipeline, StageWork, stage_step_s
from gemma_fit.speed.calibration import split_terms
from gemma_fit.speed.links import Link, default_attachment, peer_link
from gemma_fit.speed.load import DEFAULT_DISK_READ_GBPS
from gemma_fit.speed.predict import Performance
from gemma_fit.speed.traffic import serve


@cache
def speed_terms() -> dict:
    from gemma_fit.db.rules import read_packaged_yaml

    return dict(read_packaged_yaml("engines/speed.yaml"))


@record
class HFModelWork:
    """What a decode step of an HF checkpoint reads and computes, per token, before any split."""

    linear_params: int  # dense matrices (attention, MLP) the weight format applies to
    expert_params: int  # all routed experts
    expert_share: float  # n_expert_used / n_expert
    output_params: int  # the output projection (Gemma: the tied embedding, kept in bf16)
    other_bytes: float  # norms and the like, read every step
    n_layers: int
    n_embd: int
    kv_full_bytes_per_token: float  # K + V per token, full-attention layers together
    kv_swa_bytes_per_token: float  # K + V per token, sliding-window layers together
    window: int  # sliding window (0: none)
    attn_full_per_cell: float  # 4 x heads x head_dim over full-attention layers: per (token, attended cell)
    attn_swa_per_cell: float  # the same over sliding-window layers

    def attention_flops(self, cells: float) -> float:
        """FLOPs of one token's attention over `cells` earlier tokens (sliding layers stop at the window)."""
        swa = min(cells, self.window) if self.window else cells
        return self.attn_full_per_cell * cells + self.attn_swa_per_cell * swa


def hf_model_work(spec: ModelSpec, kv_dtype_bytes: int = 2) -> HFModelWork:
    p = param_breakdown(spec)
    full = sum(2 * la.n_embd_k_gqa * kv_dtype_bytes for la in kv_layers(spec) if not (la.is_swa and spec.has_swa))
    swa = sum(2 * la.n_embd_k_gqa * kv_dtype_bytes for la in kv_layers(spec) if la.is_swa and spec.has_swa)
    attn_full = sum(4.0 * la.n_head * la.head_dim for la in spec.layers if not (la.is_swa and spec.has_swa))
    attn_swa = sum(4.0 * la.n_head * la.head_dim for la in spec.layers if la.is_swa and spec.has_swa)
    return HFModelWork(p.linear, p.experts, spec.n_expert_used / spec.n_expert if spec.n_expert else 0.0,
                       spec.n_vocab * spec.n_embd, 2.0 * p.other, spec.n_layer, spec.n_embd, full, swa,
                       spec.n_swa if spec.has_swa else 0, attn_full, attn_swa)


def kv_read_bytes(w: HFModelWork, context: int) -> float:
    """KV one sequence reads per step at `context` tokens (sliding layers stop at their window)."""
    swa_cells = min(context, w.window) if w.window else context
    return w.kv_full_bytes_per_token * context + w.kv_swa_bytes_per_token * swa_cells


def matrix_tflops(g: GPUSpec, quant: str, engine: str) -> float:
    """Dense matrix TFLOPS the engine's kernels for this weight format run at (module docstring)."""
    fp16 = g.fp16_tensor_tflops or g.fp32_tflops or 0.0
    if quant == "fp32":  # no tensor cores for float32 matrices before TF32 (Ampere); vLLM does not enable TF32
        return g.fp32_tflops or fp16
    if engine == "vllm" and g.backend == "cuda":
        cc = g.cuda_capability or 0.0
        if quant == "fp8" and cc >= 8.9 and g.int8_tensor_tops:
            return g.int8_tensor_tops
        if quant == "nvfp4" and cc >= 10.0 and g.int8_tensor_tops:
            return 2 * g.int8_tensor_tops
    return fp16


def allreduce_latency_s(engine: str, link: Link) -> float:
    """Seconds one tensor-parallel all-reduce of a decode step waits, beyond its bytes: over NVLink, inside the CUDA
    graph vLLM captures, a one-kernel all-reduce through peer memory (the engine's `nvlink_allreduce_s`,
    model_db/engines/speed.yaml); elsewhere the NCCL figure measured for llama.cpp's tensor split."""
    own = speed_terms()[engine].get("nvlink_allreduce_s")
    return float(own) if link.nvlink and own is not None else split_terms()["tensor_allreduce_s"]


def tensor_link(engine: str, gpus: tuple[GPUSpec, ...]) -> tuple[float, float]:
    """(GB/s per direction, seconds per all-reduce) of a tensor-parallel group's peer link; (0, 0) for one GPU."""
    link = peer_link(gpus, tuple(default_attachment(g) for g in gpus)) if len(gpus) > 1 else None
    return (link.per_direction_gbps, allreduce_latency_s(engine, link)) if link is not None else (0.0, 0.0)


def _terms(engine: str, quant: str, given: dict[str, float] | None = None) -> dict[str, float]:
    if given is not None:  # a fit trying its own (benchmarks/fit_serving.py)
        return given
    t = speed_terms()[engine]
    out = {k: float(v) for k, v in t["default"].items()}
    out.update({k: float(v) for k, v in (t.get("formats", {}).get(quant) or {}).items()})
    return out


def hf_stage(w: HFModelWork, g: GPUSpec, quant: str, engine: str, context: int, tp: int = 1,
             layer_share: float = 1.0, link_gbps: float = 0.0, link_latency_s: float = 0.0,
             has_output: bool = True, terms: dict[str, float] | None = None) -> StageWork:
    """One GPU (a tensor-parallel rank) holding `layer_share` of the layers."""
    t = _terms(engine, quant, terms)
    per = LINEAR_BYTES_PER_PARAM[quant]
    shared = (w.linear_params * per + w.other_bytes) * layer_share / tp
    out_bytes = 2.0 * w.output_params / tp if has_output else 0.0
    experts = w.expert_params * per * layer_share / tp
    flops = 2.0 * (w.linear_params + w.expert_params * w.expert_share) * layer_share / tp
    flops += 2.0 * w.output_params / tp if has_output else 0.0
    attn_flops = w.attention_flops(context) * layer_share / tp
    layers = w.n_layers * layer_share
    bytes_s = (g.memory_bandwidth_gbps or 0.0) * 1e9 * t["bandwidth_efficiency"]
    flops_s = matrix_tflops(g, quant, engine) * 1e12 * t["compute_efficiency"]
    fixed = t["step_overhead_s"] + layers * t["per_layer_s"]
    allreduce = int(2 * layers) if tp > 1 else 0
    kv = kv_read_bytes(w, context) * layer_share / tp
    # attention FLOPs ride on the KV read (memory-bound at decode); counted for the compute-bound side
    return StageWork(g.id, shared + out_bytes, experts, w.expert_share, kv, flops + attn_flops, bytes_s, flops_s,
                     fixed, allreduce, link_latency_s, 2.0 * w.n_embd * 2 * (tp - 1) / tp if tp > 1 else 0.0,
                     link_gbps * 1e9)


def hf_pipeline(w: HFModelWork, gpus: tuple[GPUSpec, ...], quant: str, engine: str, context: int, tp: int = 1,
                pp: int = 1, link_gbps: float = 0.0, link_latency_s: float = 0.0, hop_latency_s: float = 0.0,
                hop_gbps: float = 0.0, terms: dict[str, float] | None = None) -> Pipeline:
    """tp ranks per stage (the slowest GPU of each stage sets its pace), pp stages, layers split evenly."""
    stages = []
    for k in range(pp):
        ranks = gpus[k * tp:(k + 1) * tp] or gpus[:tp]
        slowest = min(ranks, key=lambda g: g.memory_bandwidth_gbps or 0.0)
        stages.append(hf_stage(w, slowest, quant, engine, context, tp, 1.0 / pp, link_gbps, link_latency_s,
                               has_output=k == pp - 1, terms=terms))
    hidden = 2.0 * w.n_embd  # bf16 activations between stages
    per_seq = (pp - 1) * hidden / (hop_gbps * 1e9) if pp > 1 and hop_gbps else 0.0
    return Pipeline(tuple(stages), pp=pp, handover_fixed_s=(pp - 1) * hop_latency_s, handover_s_per_seq=per_seq)


def hf_prefill_tps(w: HFModelWork, g: GPUSpec, quant: str, engine: str, prompt: int, chunk: int, tp: int = 1,
                   terms: dict[str, float] | None = None, each_prompt: int = 0) -> float:
    """Prompt tokens/s: each chunk of up to `chunk` tokens multiplies through the weights at the engine's matrix
    rate and attends over the prompt so far; a chunk pays at least one read of the weights. `each_prompt`: the
    `prompt` tokens are many prompts of this length batched together (a burst of requests), each token attending
    only its own prompt."""
    t = _terms(engine, quant, terms)
    rate = matrix_tflops(g, quant, engine) * 1e12 * t["prefill_efficiency"] / tp
    bytes_s = (g.memory_bandwidth_gbps or 0.0) * 1e9 * t["bandwidth_efficiency"]
    weights = (w.linear_params + w.expert_params) * LINEAR_BYTES_PER_PARAM[quant] / tp
    per_token = 2.0 * (w.linear_params + w.expert_params * w.expert_share) / tp
    seconds, done = 0.0, 0
    chunk = max(1, chunk)
    while done < prompt:
        u = min(chunk, prompt - done)
        before = each_prompt / 2 if each_prompt else done + u / 2  # each token attends the prompt before it (causal)
        attn = u * w.attention_flops(before) / tp
        compute = (u * per_token + attn) / rate if rate else float("inf")
        seconds += max(compute, weights / bytes_s if bytes_s else float("inf")) + t["step_overhead_s"]
        done += u
    return prompt / seconds if seconds else 0.0


@record
class HFLayout:
    """How an HF engine spreads the model: tp ranks per stage, pp stages, and the links between them."""

    gpus: tuple[GPUSpec, ...]
    quant: str
    tp: int = 1
    pp: int = 1
    chunk: int = 2048  # prefill tokens per step (vLLM max_num_batched_tokens; transformers: the prompt)
    link_gbps: float = 0.0  # inside a stage (tensor-parallel all-reduce)
    link_latency_s: float = 0.0
    hop_latency_s: float = 0.0  # between stages (pipeline parallel: the network across nodes)
    hop_gbps: float = 0.0


@record
class Requests:
    """The requests the speed is for: their lengths, how many at once, the batch cap and what the KV holds."""

    prompt_tokens: int
    output_tokens: int | None = None
    rate: float | None = None
    n_parallel: int = 1
    max_batch: int = 1
    max_concurrency: int | None = None


def hf_performance(engine: str, w: HFModelWork, lay: HFLayout, req: Requests, weights_bytes: int,
                   extra_notes: tuple[str, ...] = ()) -> Performance | None:
    """Decode, prefill, time to first token, load and the serving answer of an HF engine's plan; None where a GPU
    lacks the bandwidth or matrix-rate figure the model needs (no speed model for it)."""
    gpus, quant, tp, pp = lay.gpus, lay.quant, lay.tp, lay.pp
    if any(not g.memory_bandwidth_gbps or not matrix_tflops(g, quant, engine) for g in gpus):
        return None
    prompt_tokens, output_tokens, n_parallel = req.prompt_tokens, req.output_tokens, req.n_parallel
    t = _terms(engine, quant)

    def pipeline(context: int) -> Pipeline:
        return hf_pipeline(w, gpus, quant, engine, context, tp, pp, lay.link_gbps, lay.link_latency_s,
                           lay.hop_latency_s, lay.hop_gbps)

    pipe, single = pipeline(prompt_tokens + (output_tokens or 0) // 2), pipeline(prompt_tokens)
    prefill = hf_prefill_tps(w, gpus[0], quant, engine, prompt_tokens, lay.chunk, tp)  # pp stages take turns
    step1 = single.step_s(1)
    # concurrent requests' prompts share the prefill chunks (vLLM packs them up to max_num_batched_tokens; a
    # transformers batch pads them together): short prompts no longer pay a weight read each
    n = min(n_parallel, req.max_concurrency or n_parallel)
    together = hf_prefill_tps(w, gpus[0], quant, engine, n * prompt_tokens, lay.chunk, tp, each_prompt=prompt_tokens) \
        if n > 1 else prefill
    serving = serve(pipe, prefill, n_parallel, prompt_tokens, output_tokens, req.rate, max(1, req.max_batch),
                    req.max_concurrency, together)
    disk_s = weights_bytes / (DEFAULT_DISK_READ_GBPS * 1e9)
    startup = float(speed_terms()[engine].get("startup_s_budget", 0.0))
    g = gpus[0]
    bound = serving.bound
    what = (f"memory bandwidth ({g.memory_bandwidth_gbps:g} GB/s): a smaller weight format or more bandwidth moves it"
            if bound == "memory" else f"tensor throughput at {n_parallel} sequences: fewer sequences per GPU or more "
            "GPUs (--tensor-parallel-size) move it")
    notes = (f"{engine} kernels: {t['bandwidth_efficiency']:g} of datasheet bandwidth, {t['compute_efficiency']:g} of "
             f"the {quant} matrix rate ({matrix_tflops(g, quant, engine):g} TFLOPS), {t['step_overhead_s'] * 1e3:g} ms "
             f"per step + {t['per_layer_s'] * 1e3:g} ms per layer (model_db/engines/speed.yaml)",
             f"load: {weights_bytes / 1e9:.1f} GB from an NVMe Gen4 disk ({DEFAULT_DISK_READ_GBPS:g} GB/s) + "
             f"{startup:g} s of {engine} start-up (a budget, not measured)", *extra_notes)
    return Performance(
        decode_tokens_per_s=1.0 / step1, prefill_tokens_per_s=prefill, ttft_s=prompt_tokens / prefill + step1,
        load_s=disk_s + startup, bottleneck=f"decode is bound by {g.name} {what}", prompt_tokens=prompt_tokens,
        decode_time_by_device_s={st.name if i == 0 else f"{st.name}#{i}": stage_step_s(st, 1)
                                 for i, st in enumerate(single.stages)},
        notes=notes, serving=serving, load_bottleneck=f"the load reads {weights_bytes / 1e9:.1f} GB and starts "
        f"{engine} ({startup:g} s budget)")
