"""vLLM's KV cache pool: how many blocks the budget buys and how many requests of a length they hold, as vLLM
0.33.0 plans them (vllm/v1/core/kv_cache_planning.py, vllm/v1/kv_cache_interface.py; engines.vllm's docstring
cites each rule)."""

from __future__ import annotations

import math
from collections import Counter

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.engines.hf_weights import kv_layers
from gemma_fit.model.spec import ModelSpec

ASYNC_CONCURRENT_BATCHES = 2  # vllm/config/vllm.py max_concurrent_batches with async scheduling


@record
class KVGroupType:
    sliding: bool
    n_layers: int
    bytes_per_token: int  # one layer's K + V per token
    block_size: int  # after page-size unification
    page_bytes: int  # one layer's page after unification


# vLLM's --kv-cache-dtype choices for these models (vllm/config/cache.py CacheDType; fp8_inc is Intel Gaudi's,
# fp8_ds_mla DeepSeek's MLA layout): the value goes into the printed `vllm serve` command as it is, so nothing else.
KV_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")


def kv_dtype_bytes(kv_cache_dtype: str, quant: str) -> int:
    if kv_cache_dtype not in KV_DTYPES:
        from gemma_fit.base.suggest import did_you_mean
        from gemma_fit.base.text import printable

        near = did_you_mean(kv_cache_dtype.replace("bf16", "bfloat16").replace("fp16", "auto"), KV_DTYPES)
        raise BadInput(f"--kv-cache-dtype {printable(kv_cache_dtype, 40)} is not one of vLLM's ({', '.join(KV_DTYPES)})"
                       + near)
    if kv_cache_dtype.startswith("fp8"):
        return 1
    return 4 if quant == "fp32" else 2  # auto = the model dtype (fp8/int4 checkpoints keep bf16 activations)


def kv_group_types(spec: ModelSpec, block_size: int, dtype_bytes: int, tp: int,
                   hybrid: bool = True) -> list[KVGroupType]:
    """One entry per KV spec (sliding / full with their head sizes), page sizes unified. Without the hybrid KV cache
    manager (`hybrid` False: releases before it), a sliding-window layer is planned as a full-attention one."""
    counts: Counter[tuple[bool, int]] = Counter()
    for layer in kv_layers(spec):
        heads = max(1, layer.n_head_kv // tp)  # KV heads are replicated when fewer than the TP ranks
        per_token = heads * 2 * layer.head_dim * dtype_bytes
        counts[(hybrid and layer.is_swa and spec.has_swa, per_token)] += 1
    max_page = max(block_size * per_token for (_, per_token) in counts)
    out = []
    for (sliding, per_token), n in counts.items():
        page = block_size * per_token
        bs = block_size * (max_page // page) if max_page % page == 0 else block_size
        out.append(KVGroupType(sliding, n, per_token, bs, max_page))
    return out


def group_layout(types: list[KVGroupType]) -> tuple[int, dict[int, int]]:
    """(group size, groups per type index) as _get_kv_cache_groups_uniform_page_size builds them."""
    counts = [t.n_layers for t in types]
    size = min(counts)
    if max(counts) < size * 1.5:
        size = max(counts)
    return size, {i: math.ceil(t.n_layers / size) for i, t in enumerate(types)}


def blocks_per_request(t: KVGroupType, max_model_len: int, window: int, in_flight: int) -> int:
    if t.sliding:
        return math.ceil(min(window - 1 + in_flight, max_model_len) / t.block_size) + 1
    return math.ceil(max_model_len / t.block_size)


@record
class KVPlan:
    bytes_per_block: int
    num_blocks: int
    blocks_per_request: int
    concurrency: float
    max_tokens: int  # "GPU KV cache size" vLLM logs: concurrency x max_model_len
    full_layer_bytes_per_token: int


def kv_plan(spec: ModelSpec, budget: int, max_model_len: int, block_size: int, dtype_bytes: int, tp: int,
            max_num_batched_tokens: int, hybrid: bool = True) -> KVPlan:
    types = kv_group_types(spec, block_size, dtype_bytes, tp, hybrid)
    size, groups = group_layout(types)
    bytes_per_block = size * types[0].page_bytes
    num_blocks = max(0, budget) // bytes_per_block
    in_flight = ASYNC_CONCURRENT_BATCHES * max_num_batched_tokens
    per_req = sum(groups[i] * blocks_per_request(t, max_model_len, spec.n_swa, in_flight)
                  for i, t in enumerate(types))
    conc = num_blocks / per_req if per_req else 0.0
    full = sum(t.n_layers * t.bytes_per_token for t in types)
    return KVPlan(bytes_per_block, num_blocks, per_req, conc, int(conc * max_model_len), full)


def layout_reasons(spec: ModelSpec, hybrid: bool, release: str, hybrid_since: str | None) -> tuple[str, ...]:
    """What the KV layout does to the pool: sliding-window layers (hybrid manager or not) and KV-shared layers."""
    out = []
    if spec.has_swa and hybrid:
        out.append(f"sliding-window layers keep only window ({spec.n_swa}) + in-flight tokens of KV per request "
                   f"(hybrid KV cache manager)")
    elif spec.has_swa:
        out.append(f"{release} plans the sliding-window layers' KV cache at the full request length, as the "
                   f"full-attention layers' (the hybrid KV cache manager that keeps only their window came in "
                   f"vLLM {hybrid_since})")
    shared = spec.n_layer - len(kv_layers(spec))
    if shared:
        out.append(f"{shared} KV-shared layers own no cache")
    return tuple(out)
