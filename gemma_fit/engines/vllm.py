"""vLLM: the KV cache pool left after weights, activations and CUDA graphs, and what it holds.

Rules read from the vLLM 0.33.0 sdist (PyPI), file by file:
- vllm/v1/worker/gpu_worker.py determine_available_memory: available KV memory = requested_memory -
  non_kv_cache_memory - cudagraph_memory_estimate, where vllm/v1/worker/utils.py request_memory: requested_memory =
  ceil(total_memory x gpu_memory_utilization) and vllm/utils/mem_utils.py memory_profiling: non_kv_cache_memory =
  total_consumed + transient_peak_headroom, total_consumed = free memory at the start-up snapshot - free memory
  after the profile run (weights, other persistent torch tensors, and non-torch memory allocated AFTER the
  snapshot), transient_peak_headroom = torch peak - torch allocated after the profile run. The snapshot
  (gpu_worker.py init_device) is taken after the CUDA context, NCCL and the cuBLAS/cuBLASLt handles exist, so those
  sit in the (1 - gpu_memory_utilization) slack, not in the KV budget; request_memory refuses to start when the free
  memory at the snapshot is below ceil(total x gpu_memory_utilization).
- CUDA graphs: gpu_model_runner.py profile_cudagraph_memory captures the first two graphs of each mode
  and estimates first_capture + (n_graphs - 1) x max(second_capture, 1 MiB), the max over modes (FULL and
  PIECEWISE share one pool) plus encoder graphs; determine_available_memory subtracts it when
  VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (vllm/envs.py default "1"; the log calls it "default since
  v0.21.0"); 0 with --enforce-eager (cudagraph_mode NONE). Both amounts are measured at start-up only:
  NON_TORCH_BYTES and CUDA_GRAPH_BYTES below are budgets, not vLLM values.
- vllm/config/cache.py: gpu_memory_utilization default 0.92 (Field(default=0.92)), DEFAULT_BLOCK_SIZE 16.
- vllm/engine/arg_utils.py get_batch_defaults (OPENAI_API_SERVER, i.e. `vllm serve`): >= 160 GiB GPUs
  16384 tokens / 1024 seqs; >= 70 GiB and not A100 and not GB10 (compute capability 12.1): 8192 / 1024;
  otherwise 2048 / 256 (LLM class offline: 16384 / 8192 tokens instead; --performance-mode throughput
  doubles both).
- vllm/v1/core/kv_cache_planning.py _get_kv_cache_groups_uniform_page_size: layers grouped by spec
  (full / sliding, head sizes); group size = the smallest type's layer count (the largest when
  max < 1.5 x min); each type padded to whole groups. unify_kv_cache_spec_page_size: smaller pages get a
  proportionally larger block_size so every page has the same bytes. get_kv_cache_config_from_groups:
  num_blocks = available_memory // bytes_per_block, bytes_per_block = group size x page bytes.
- vllm/v1/kv_cache_interface.py: page bytes = block_size x kv_heads x (head_size + head_size_v) x dtype
  bytes; FullAttentionSpec.max_memory_usage_bytes = cdiv(max_model_len, block_size) pages;
  SlidingWindowSpec.max_admission_blocks_per_request = cdiv(min(window - 1 + max_in_flight_tokens,
  max_model_len), block_size) + 1 (the hybrid allocator frees blocks that leave the window).
- vllm/config/vllm.py: max_in_flight_tokens = max_concurrent_batches (2, async scheduling) x max_num_batched_tokens.
- vllm/v1/core/kv_cache_utils.py get_max_concurrency_for_kv_cache_config: concurrency = num_blocks /
  sum over groups of blocks per request; get_kv_cache_capacity: tokens = concurrency x max_model_len.
- vllm/model_executor/models/gemma4.py: KV-shared layers (num_kv_shared_layers) set
  kv_sharing_target_layer_name and own no cache; attention_k_eq_v layers load K into both K and V (V is
  still stored).
- vllm/v1/worker/gpu_model_runner.py _dummy_sampler_run: the profile run computes logits for
  min(max_num_seqs, max_num_batched_tokens) rows over the full vocabulary (fp32) and samples.
- vllm/model_executor/layers/quantization/__init__.py: no bitsandbytes in 0.33.0. vLLM never offloads layers (but
  --cpu-offload-gb); kv_cache_planning.py _check_enough_kv_cache_memory: no start if one max_model_len cannot fit.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import replace

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.units import GIB, MIB
from gemma_fit.base.verdict import Verdict
from gemma_fit.engines.base import (
    CheckRequest,
    CheckResult,
    EngineDevice,
    EnginePlan,
    EngineSettings,
    engine_options,
    engine_settings,
    hf_kv_dtype,
    validate_numbers,
)
from gemma_fit.engines.hf_speed import HFLayout, Requests, hf_model_work, hf_performance, tensor_link
from gemma_fit.engines.hf_weights import (
    PRE_QUANTIZED,
    canonical_hf_quant,
    checkpoint,
    hf_repo,
    hf_weight_bytes,
    param_breakdown,
    require_checkpoint,
    tower_params,
    vision_activation_bytes,
)
from gemma_fit.engines.versions import changed_in, defaults_of, release_label
from gemma_fit.engines.vllm_dtype import model_dtype
from gemma_fit.engines.vllm_kv import kv_dtype_bytes, kv_plan, layout_reasons
from gemma_fit.engines.vllm_mtp import (
    drafter_bytes,
    drafter_reason,
    speculative_flag,
    vllm_drafter,
    with_vllm_speculation,
)
from gemma_fit.engines.vllm_runs_on import check_devices
from gemma_fit.hardware.spec import GPUSpec, Hardware
from gemma_fit.memory.search import largest_fitting
from gemma_fit.memory.settings import validate_shared
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.model.spec import ModelSpec
from gemma_fit.speed.predict import Performance

NAME = "vllm"
VERSION = "vLLM 0.33.0"
# BUDGET, not a vLLM value: non-torch memory allocated after the start-up snapshot (attention-backend and
# cuBLAS workspaces, NCCL growth) plus allocator slack, which vLLM 0.33.0 measures at start-up inside
# total_consumed (vllm/utils/mem_utils.py memory_profiling). The CUDA context / NCCL / cuBLAS handles
# themselves predate the snapshot (vllm/v1/worker/gpu_worker.py init_device) and are NOT in it.
NON_TORCH_BYTES = 1 * GIB
# BUDGET, not a vLLM value: vLLM 0.33.0 measures the CUDA graph pool at start-up
# (vllm/v1/worker/gpu_model_runner.py profile_cudagraph_memory: first capture + (n - 1) x per-graph, >= 1 MiB
# per graph) and subtracts it (vllm/envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 1).
CUDA_GRAPH_BYTES = 512 * MIB
SAMPLER_COPIES = 2  # fp32 logits + probabilities in the dummy sampler run
UNSUPPORTED = {"bnb-8bit": "vLLM 0.33.0 has no bitsandbytes quantization; use awq-int4, gptq-int4, fp8 or nvfp4",
               "bnb-4bit": "vLLM 0.33.0 has no bitsandbytes quantization; use awq-int4, gptq-int4, fp8 or nvfp4"}


@record
class VllmOptions:
    """vLLM's own options (`vllm serve` flags), with vLLM 0.33.0's defaults."""

    gpu_memory_utilization: float = 0.92  # vllm/config/cache.py CacheConfig default
    max_num_batched_tokens: int | None = None  # None: vLLM's default for the GPU (engine/arg_utils.py)
    tensor_parallel_size: int = 1
    block_size: int = 16  # vllm/config/cache.py DEFAULT_BLOCK_SIZE
    enforce_eager: bool = False  # no CUDA graphs
    kv_cache_dtype: str | None = None  # auto | fp8; None: from --cache-type-k (f16 -> auto, q8_0 -> fp8)


def batch_defaults(total_memory: int, device_name: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of `vllm serve` (engine/arg_utils.py get_batch_defaults)."""
    if total_memory >= 160 * GIB:
        return 16384, 1024
    name = device_name.lower()
    # arg_utils.py also keeps GB10 (DGX Spark, compute capability 12.1) on the small tier; matched by name here.
    if total_memory >= 70 * GIB and "a100" not in name and "gb10" not in name:
        return 8192, 1024
    return 2048, 256


def activation_peak(spec: ModelSpec, tokens: int, seqs: int, tp: int, act_bytes: int = 2) -> int:
    """Transient torch peak of the profile run (max_num_batched_tokens tokens through the model, then the
    sampler): per token the residual + normed hidden (2 x n_embd), qkv, and the MLP gate_up output plus its
    activation (3 x n_ff / tp) of the widest layer, plus routed-expert intermediates (top-k x 3 x n_ff_exp);
    or the sampler's fp32 logits and probabilities for min(seqs, tokens) rows, whichever is larger."""
    widest = max(spec.layers, key=lambda la: la.n_ff)
    qkv = max((la.n_head + 2 * la.n_head_kv) * la.head_dim for la in spec.layers) // tp
    per_token = 2 * spec.n_embd + qkv + 3 * widest.n_ff // tp
    if spec.n_expert:
        per_token += spec.n_expert_used * (3 * spec.n_ff_exp // tp + spec.n_embd)
    forward = tokens * per_token * act_bytes
    sampler = min(seqs, tokens) * spec.n_vocab * 4 * SAMPLER_COPIES
    return max(forward, sampler)


def _command(resolved: ResolvedModel, s: EngineSettings[VllmOptions], quant: str, max_model_len: int, tokens: int,
             seqs: int) -> str:
    repo = checkpoint(resolved, quant)  # a pre-quantized checkpoint carries its own quantization config
    parts = [f"vllm serve {shlex.quote(repo or hf_repo(resolved))}", f"--max-model-len {max_model_len}",
             f"--gpu-memory-utilization {s.options.gpu_memory_utilization:g}", f"--max-num-seqs {seqs}",
             f"--max-num-batched-tokens {tokens}"]
    if quant in ("fp16", "fp32"):  # explicit: what --dtype auto falls back to on a GPU without bfloat16
        parts.append("--dtype float16" if quant == "fp16" else "--dtype float32")
    if repo is None and quant == "fp8":
        parts.append("--quantization fp8")  # BF16 weights quantized at load
    if s.options.tensor_parallel_size > 1:
        parts.append(f"--tensor-parallel-size {s.options.tensor_parallel_size}")
    if s.kv_cache_dtype != "auto":
        parts.append(f"--kv-cache-dtype {s.kv_cache_dtype}")
    if s.options.block_size != 16:
        parts.append(f"--block-size {s.options.block_size}")
    if s.options.enforce_eager:
        parts.append("--enforce-eager")
    if not s.mmproj and s.images_per_prompt == 0 and tower_params(resolved):
        parts.append("--limit-mm-per-prompt '{\"image\": 0}'")
    return " ".join(parts)


def estimate_vllm(resolved: ResolvedModel, spec: ModelSpec, settings: EngineSettings[VllmOptions],
                  hardware: Hardware, with_speed: bool = True) -> CheckResult[EnginePlan]:
    s, o = settings, settings.options
    quant = canonical_hf_quant(s.quant, "vLLM", UNSUPPORTED)
    if quant in UNSUPPORTED:
        raise BadInput(f"--quant {quant} on --engine vllm: {UNSUPPORTED[quant]}")
    devices = tuple(hardware.gpus)
    asked = quant
    defaults = defaults_of(NAME, s.engine_version)
    quant = model_dtype(spec.arch, quant, devices, defaults["no_float16_fallback"]) if devices else quant
    check_devices(devices, s.engine_version or release_label(NAME, "vLLM", None), defaults)
    require_checkpoint(resolved, asked, "vLLM")
    tp = o.tensor_parallel_size
    if tp < 1 or tp > len(devices):
        raise BadInput(f"--tensor-parallel-size {tp} needs {tp} GPUs; {len(devices)} given")
    if not 0 < o.gpu_memory_utilization <= 1:
        raise BadInput(f"--gpu-memory-utilization {o.gpu_memory_utilization} must be in (0, 1]")
    heads = spec.layers[0].n_head
    if heads % tp:
        raise BadInput(f"--tensor-parallel-size {tp} does not divide the {heads} attention heads")
    devices = devices[:tp]
    max_model_len = s.max_model_len or spec.n_ctx_train
    if max_model_len > spec.n_ctx_train:
        raise BadInput(f"--ctx {max_model_len} is beyond the model's {spec.n_ctx_train} tokens (vLLM refuses it)")
    dev0 = min(devices, key=lambda d: d.usable_memory_bytes)
    d_tokens, d_seqs = batch_defaults(dev0.usable_memory_bytes, dev0.name)
    seqs = s.max_num_seqs or d_seqs  # vLLM refuses to start with fewer batched tokens than sequences (scheduler.py)
    tokens = o.max_num_batched_tokens or max(d_tokens, seqs)
    if tokens < seqs:
        raise BadInput(f"--max-num-batched-tokens {tokens:,} is below max_num_seqs {seqs:,}: vLLM refuses to start")
    dtype_bytes = kv_dtype_bytes(s.kv_cache_dtype, quant)

    towers = tower_params(resolved) if (s.mmproj or s.images_per_prompt) else 0
    sp, drafter = vllm_drafter(s.speculative, s.engine_version, spec.id) if s.speculative else (None, None)
    weights = (hf_weight_bytes(spec, quant) + 2 * towers) // tp
    draft = drafter_bytes(drafter, tp) if drafter else 0
    act_bytes = 4 if quant == "fp32" else 2
    act = (activation_peak(spec, tokens, seqs, tp, act_bytes)
           + vision_activation_bytes(resolved, s.images_per_prompt, act_bytes))
    graphs = 0 if o.enforce_eager else CUDA_GRAPH_BYTES

    def budget_for(cap: int) -> int:
        requested = math.ceil(cap * o.gpu_memory_utilization)
        return requested - weights - draft - act - NON_TORCH_BYTES - graphs

    budget = min(budget_for(d.usable_memory_bytes) for d in devices)
    hybrid = bool(defaults["hybrid_kv_cache"])
    plan = kv_plan(spec, budget, max_model_len, o.block_size, dtype_bytes, tp, tokens, hybrid)
    pool = plan.num_blocks * plan.bytes_per_block
    out_devices = tuple(
        EngineDevice(d.id, d.name, weights, pool, act, graphs, NON_TORCH_BYTES, d.usable_memory_bytes, draft)
        for d in devices)

    def fits(n: int) -> bool:
        return kv_plan(spec, budget, n, o.block_size, dtype_bytes, tp, tokens, hybrid).concurrency >= 1

    max_fit = 0
    if budget > 0 and fits(o.block_size):
        blocks = largest_fitting(1, spec.n_ctx_train // o.block_size, lambda n: fits(n * o.block_size))
        max_fit = blocks * o.block_size

    reasons: list[str] = []
    util = f"--gpu-memory-utilization {o.gpu_memory_utilization:g}"
    budgets = (f"non-torch {NON_TORCH_BYTES / GIB:g} GiB" + (f" and CUDA graphs {graphs / MIB:g} MiB" if graphs else "")
               + " are budgets: vLLM measures them at start-up (memory_profiling, profile_cudagraph_memory)")
    requested_gib = math.ceil(dev0.usable_memory_bytes * o.gpu_memory_utilization) / GIB
    if budget <= 0:
        verdict = Verdict.NO_GO
        reasons.append(f"no memory left for the KV cache at {util}: weights {weights / GIB:.1f} GiB + peak "
                       f"activations {act / GIB:.1f} GiB + non-torch {NON_TORCH_BYTES / GIB:.1f} GiB + CUDA graphs "
                       f"{graphs / GIB:.1f} GiB exceed {requested_gib:.1f}"
                       f" GiB; vLLM does not offload layers to the CPU by default (--cpu-offload-gb does, slowly)")
    elif plan.concurrency < 1:
        verdict = Verdict.NO_GO
        reasons.append(f"one {max_model_len}-token request needs {plan.blocks_per_request} KV blocks, the pool has "
                       f"{plan.num_blocks}: vLLM refuses to start; --max-model-len {max_fit} fits")
    elif plan.concurrency < 2:
        verdict = Verdict.TIGHT
        reasons.append(f"only {plan.concurrency:.2f} requests of {max_model_len} tokens fit in the KV pool at once")
    else:
        verdict = Verdict.GO
        reasons.append(f"KV pool of {pool / GIB:.1f} GiB: {plan.max_tokens:,} tokens, {plan.concurrency:.1f} "
                       f"concurrent requests at {max_model_len} tokens (max_num_seqs {seqs})")
    if verdict == Verdict.GO and plan.concurrency < seqs:
        reasons.append(f"max_num_seqs {seqs} is more than the {int(plan.concurrency)} full-length requests the pool "
                       f"holds; shorter requests share it")
    reasons.extend(layout_reasons(spec, hybrid, s.engine_version or release_label(NAME, 'vLLM', None),
                                  changed_in(NAME, 'hybrid_kv_cache')))
    reasons.append(budgets)
    if (n_gpus := len(hardware.gpus)) > tp:  # vLLM takes the first --tensor-parallel-size GPUs (1 by default)
        reasons.append(f"vLLM uses {tp} of the {n_gpus} GPUs given (--tensor-parallel-size {n_gpus} uses all)")
    if quant == "fp32" and asked == "bf16":
        reasons.insert(1, f"{devices[0].name} has no bfloat16 and vLLM refuses float16 for {spec.arch}: it loads "
                          f"float32, {hf_weight_bytes(spec, quant) / GIB:.1f} GiB of weights instead of "
                          f"{hf_weight_bytes(spec, asked) / GIB:.1f} GiB in bf16")
    elif quant != asked:
        reasons.insert(1, f"{devices[0].name} has no bfloat16: vLLM loads {spec.arch} in float16 (the same size)")
    repo = checkpoint(resolved, quant)
    if quant in PRE_QUANTIZED:  # a model without one is refused (require_checkpoint); a user's own folder has its own
        reasons.append(f"{quant} loads the pre-quantized checkpoint {repo} (vLLM does not quantize {quant} at "
                       "load time)" if repo else f"{quant} loads from {hf_repo(resolved)}, taken to hold a {quant} "
                       "checkpoint")
    if not s.mmproj and s.images_per_prompt == 0 and tower_params(resolved):
        reasons.append("vision off: --limit-mm-per-prompt '{\"image\": 0}' keeps the vision tower out of memory "
                       "(give --images N to serve images)")

    perf = _performance(spec, s, quant, devices, budget, dtype_bytes, tokens, seqs, max_model_len, weights * tp) \
        if verdict != Verdict.NO_GO and with_speed else None  # a cluster's stage: the layout's own speed counts
    if drafter is not None and sp is not None:
        reasons.append(drafter_reason(drafter, tp))
        perf = with_vllm_speculation(perf, sp, drafter, spec, quant, devices, tp, dtype_bytes, s) if perf else None
    p = param_breakdown(spec)
    extras = {
        "vllm_version": VERSION,
        "gpu_memory_utilization": o.gpu_memory_utilization,
        "requested_memory_bytes": math.ceil(dev0.usable_memory_bytes * o.gpu_memory_utilization),
        "kv_cache_budget_bytes": max(0, budget),
        "kv_block_bytes": plan.bytes_per_block,
        "kv_num_blocks": plan.num_blocks,
        "kv_blocks_per_request": plan.blocks_per_request,
        "max_concurrency": round(plan.concurrency, 2),
        "max_concurrent_tokens": plan.max_tokens,
        "max_num_batched_tokens": tokens,
        "max_num_seqs": seqs,
        "block_size": o.block_size,
        "hybrid_kv_cache": hybrid,  # sliding-window layers keep only their window (vLLM 0.9.1 and later)
        "tensor_parallel_size": tp,
        "kv_cache_dtype": s.kv_cache_dtype,
        "non_torch_bytes": NON_TORCH_BYTES,
        "non_torch_bytes_is_budget": True,  # measured by vLLM at start-up (memory_profiling), not modelled
        "cuda_graph_bytes": graphs,
        "cuda_graph_bytes_is_budget": bool(graphs),  # measured by profile_cudagraph_memory at start-up
        "tower_params": towers,
        "n_params_active": p.active,
        "offloads_layers": False,
    }
    detail = EnginePlan(
        s, out_devices, p.total + towers, weights * tp, None, extras,
        sources=(f"{VERSION} vllm/v1/worker/gpu_worker.py determine_available_memory",
                 f"{VERSION} vllm/v1/core/kv_cache_planning.py get_kv_cache_config_from_groups",
                 f"{VERSION} vllm/v1/kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request",
                 f"{VERSION} vllm/engine/arg_utils.py get_batch_defaults",
                 f"{VERSION} vllm/utils/mem_utils.py memory_profiling, vllm/v1/worker/gpu_model_runner.py "
                 "profile_cudagraph_memory (measured at start-up; budgets here)"),
        settings_terms={"n_batch": tokens, "cache_type_k": s.kv_cache_dtype, "cache_type_v": s.kv_cache_dtype,
                        "n_gpu_layers": spec.n_layer + 1})
    return CheckResult(NAME, resolved, quant, hardware, verdict, tuple(reasons), max_fit, max_model_len,
                       _command(resolved, s, quant, max_model_len, tokens, seqs)
                       + (f" {speculative_flag(drafter, sp.draft_max)}" if drafter and sp else ""), perf, detail)


def _performance(spec: ModelSpec, s: EngineSettings[VllmOptions], quant: str, devices: tuple[GPUSpec, ...], budget: int,
                 dtype_bytes: int, tokens: int, seqs: int, max_model_len: int,
                 weights_bytes: int) -> Performance | None:
    """Speed at --parallel N concurrent requests (max_num_seqs); the KV pool caps how many of prompt + output
    tokens run at once (vLLM queues the rest)."""
    if any(not d.memory_bandwidth_gbps for d in devices):
        return None
    tp = s.options.tensor_parallel_size
    need = min(max_model_len, s.prompt_tokens + (s.output_tokens or 0))
    hybrid = bool(defaults_of(NAME, s.engine_version)["hybrid_kv_cache"])
    held = int(kv_plan(spec, budget, max(need, 1), s.options.block_size, dtype_bytes, tp, tokens, hybrid).concurrency)
    n = s.max_num_seqs or 1
    link_gbps, link_latency = tensor_link(NAME, devices) if tp > 1 else (0.0, 0.0)
    notes = (f"the KV pool holds {held} requests of {need} tokens at once (max_num_seqs {seqs})",)
    layout = HFLayout(devices, quant, tp, 1, tokens, link_gbps, link_latency)
    req = Requests(s.prompt_tokens, s.output_tokens, s.request_rate, n, min(seqs, max(1, held)), held)
    return hf_performance("vllm", hf_model_work(spec, dtype_bytes), layout, req, weights_bytes, extra_notes=notes)


class VllmEngine:
    """`vllm serve`: the engine object of engines.registry."""

    name = NAME
    aliases: tuple[str, ...] = ()
    default_quant = "bf16"
    options = VllmOptions
    ranks_plans = False

    def version_label(self, version: str | None) -> str:
        return release_label(NAME, "vLLM", version)

    def with_defaults(self, request: CheckRequest) -> CheckRequest:
        s = request.settings
        return replace(request, settings=replace(s, n_ctx=self.default_n_ctx(), defaults_from=s.engine_version))

    def default_n_ctx(self) -> int:
        return 0  # --max-model-len unset: the model's trained context

    def canonical_quant(self, quant: str) -> str:
        return canonical_hf_quant(quant, "vLLM", UNSUPPORTED)

    def settings(self, request: CheckRequest) -> EngineSettings[VllmOptions]:
        o = engine_options(VllmOptions, request.options)
        s = request.settings
        if request.options.get("gpu_memory_utilization") is None:  # unset: the release's own default
            o = replace(o, gpu_memory_utilization=float(defaults_of(NAME, s.engine_version)["gpu_memory_utilization"]))
        quant = self.default_quant if request.quant is None else request.quant  # '' is a quant to refuse
        return engine_settings(NAME, quant, s, request.workload, o,
                               max_num_seqs=s.n_parallel if s.n_parallel != 1 or request.parallel_given else None,
                               kv_cache_dtype=o.kv_cache_dtype or hf_kv_dtype(s.cache_type_k))

    def validate(self, request: CheckRequest) -> None:
        validate_numbers(self.settings(request))

    def estimate(self, request: CheckRequest) -> CheckResult[EnginePlan]:
        validate_shared(request.settings, request.resolved.spec)  # --ctx, --batch ...: llama.cpp's meaning
        s = self.settings(request)
        validate_numbers(s)
        return estimate_vllm(request.resolved, request.resolved.spec, s, request.hardware)

    def check(self, request: CheckRequest) -> CheckResult[EnginePlan]:
        return self.estimate(request)


ENGINE = VllmEngine()
