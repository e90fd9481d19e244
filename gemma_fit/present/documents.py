"""The JSON documents of the contract, rendered from the typed results: check (gemma-fit.check/1, for
llama.cpp and for every other engine) and inspect (gemma-fit.inspect/1).

An engine other than llama.cpp keeps check_json's top-level keys where they apply; each device keeps the contract's
keys (compute_bytes = activations / compute buffer, overhead_bytes = CUDA context, non-torch memory,
engine reserves and CUDA graphs) and adds the engine's own names. "engine" and an engine-named block
carry what is specific to the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gemma_fit.base.verdict import CELL_STATES
from gemma_fit.engines import registry
from gemma_fit.engines.base import CheckResult, EngineDevice, EnginePlan
from gemma_fit.engines.llamacpp import InspectResult, LlamaCppPlan, LlamaCppResult, assumptions
from gemma_fit.memory.compute_buffer import flash_attention_on
from gemma_fit.memory.estimate import DeviceMemory, HostMemory
from gemma_fit.memory.unified import UnifiedPool
from gemma_fit.speed.predict import Performance
from gemma_fit.speed.traffic import HEADROOM, Serving

if TYPE_CHECKING:
    from gemma_fit.engines.cluster import ClusterDevice

SCHEMA = "gemma-fit.check/1"
INSPECT_SCHEMA = "gemma-fit.inspect/1"

VERDICTS = CELL_STATES  # a report's cells: a check's four verdicts and "error"
RANKING_SORT = ("verdict (go, tight, offload, no-go), then estimated decode speed where the performance model "
                "gives one, then memory bandwidth (what bounds decode speed), then headroom; price is not considered")


def device_json(d: EngineDevice) -> dict[str, Any]:
    return {"id": d.id, "name": d.name, "weights_bytes": d.weights_bytes, "kv_cache_bytes": d.kv_cache_bytes,
            "compute_bytes": d.activation_bytes, "overhead_bytes": d.overhead_bytes + d.cuda_graph_bytes,
            "total_bytes": d.total_bytes, "capacity_bytes": d.capacity_bytes, "headroom_bytes": d.headroom_bytes,
            "activation_bytes": d.activation_bytes, "cuda_graph_bytes": d.cuda_graph_bytes,
            "runtime_overhead_bytes": d.overhead_bytes, "draft_bytes": d.draft_bytes}


def _version(r: CheckResult[Any], asked: str) -> str:
    """The engine version the answer is for: as asked (--engine-version), else the one the rules are read from."""
    return asked or registry.engine_named(r.engine).version_label(None)


def _settings_json(r: CheckResult[EnginePlan]) -> dict[str, Any]:
    d = r.detail
    s = d.settings
    return {"n_ctx": r.n_ctx, "n_parallel": d.n_parallel, "n_layers_total": r.resolved.spec.n_layer + 1,
            **d.settings_terms, "engine_version": _version(r, s.engine_version),
            **({"defaults_from": s.defaults_from} if s.defaults_from else {})}


def engine_check_json(r: CheckResult[EnginePlan]) -> dict[str, Any]:
    spec, d = r.resolved.spec, r.detail
    host = d.host or {"weights_bytes": 0, "kv_cache_bytes": 0, "compute_bytes": 0, "total_bytes": 0,
                      "capacity_bytes": None}
    specific = {k: v for k, v in d.extras.items() if k != "python"}
    if "python" in d.extras:
        specific["python_snippet"] = d.extras["python"]
    return {
        "schema": SCHEMA,
        "engine": r.engine,
        "model": {"id": spec.id, "quant": r.quant, "arch": spec.arch, "n_params": d.n_params,
                  "file_size_bytes": d.weights_total_bytes, "resolved": r.resolved.how,
                  "n_ctx_train": spec.n_ctx_train},
        "hardware": {"name": r.hardware.label, "gpus": [x.id for x in d.devices]},
        "settings": _settings_json(r),
        "memory": {"devices": [device_json(x) for x in d.devices], "host": host},
        "verdict": r.verdict.value,
        "reasons": list(r.reasons),
        "max_ctx_fit": r.max_ctx_fit,
        "performance": performance_json(r.performance),
        "command": r.command,
        r.engine: specific,
        "sources": list(d.sources),
    }


def _rounded(value: float | None, digits: int, scale: float = 1.0) -> float | None:
    return None if value is None else round(value * scale, digits)


def _rates(p: Performance | None) -> dict[str, float | None]:
    """Decode and prefill tokens/s and the time to first token, as every document rounds them."""
    if p is None:
        return {"decode_tokens_per_s": None, "prefill_tokens_per_s": None, "ttft_s": None}
    return {"decode_tokens_per_s": round(p.decode_tokens_per_s, 2),
            "prefill_tokens_per_s": round(p.prefill_tokens_per_s, 1), "ttft_s": round(p.ttft_s, 3)}


def serving_json(sv: Serving | None) -> dict[str, Any] | None:
    """performance.serving: N concurrent requests, the KV-limited concurrency, and the traffic answer."""
    if sv is None:
        return None
    out: dict[str, Any] = {
        "n_parallel": sv.n_parallel, "aggregate_tokens_per_s": round(sv.aggregate_tokens_per_s, 1),
        "per_user_tokens_per_s": round(sv.per_user_tokens_per_s, 2), "bound": sv.bound,
        "prompt_tokens": sv.prompt_tokens, "output_tokens": sv.output_tokens,
        "max_concurrency": sv.max_concurrency,
        "includes_prefill": sv.output_tokens is not None,
        "scaling": [{"concurrency": b, "aggregate_tokens_per_s": round(a, 1), "per_user_tokens_per_s": round(u, 2)}
                    for b, a, u in sv.scaling],
    }
    if sv.closed is not None:
        out["closed_loop"] = {"ttft_s": round(sv.closed.ttft_s, 3), "request_s": round(sv.closed.request_s, 2),
                              "decode_tokens_per_s": round(sv.closed.decode_tokens_per_s, 1)}
    if sv.open is not None:
        o = sv.open
        out["traffic"] = {"rate_per_s": o.rate_per_s, "holds": o.holds, "utilisation": round(o.utilisation, 3),
                          "capacity_per_s": round(o.capacity_per_s, 3), "batch": o.batch,
                          "ttft_p50_s": _rounded(o.ttft_p50_s, 3), "ttft_p95_s": _rounded(o.ttft_p95_s, 3),
                          "per_user_tokens_per_s": round(o.per_user_tokens_per_s, 2),
                          "aggregate_tokens_per_s": round(o.aggregate_tokens_per_s, 1), "replicas": o.replicas,
                          "headroom": HEADROOM, "reason": o.reason}
    return out


def performance_json(p: Performance | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {**_rates(p), "load_s": round(p.load_s, 2),
            "aggregate_tokens_per_s": round(p.aggregate_tokens_per_s, 2),
            "bottleneck": p.bottleneck,
            "prompt_tokens": p.prompt_tokens,
            "decode_time_by_device_s": {k: round(v, 6) for k, v in p.decode_time_by_device_s.items()},
            "load_warm_s": _rounded(p.load_warm_s, 2),
            "per_offloaded_layer_ms": _rounded(p.per_offloaded_layer_s, 3, scale=1e3),
            "interconnect": p.interconnect,
            "load_bottleneck": p.load_bottleneck,
            "split_modes_decode_tokens_per_s": {k: round(v, 2)
                                                for k, v in (p.split_modes_decode_tokens_per_s or {}).items()},
            "serving": serving_json(p.serving),
            **({"speculative": p.speculative} if p.speculative is not None else {}),
            "notes": list(p.notes)}


def llama_device_json(d: DeviceMemory) -> dict[str, Any]:
    return {"id": d.id, "name": d.name, "weights_bytes": d.weights_bytes, "kv_cache_bytes": d.kv_cache_bytes,
            "compute_bytes": d.compute_bytes, "overhead_bytes": d.overhead_bytes, "mmproj_bytes": d.mmproj_bytes,
            "draft_bytes": d.draft_bytes, "total_bytes": d.total_bytes, "capacity_bytes": d.capacity_bytes,
            "headroom_bytes": d.headroom_bytes}


def cluster_device_json(d: ClusterDevice) -> dict[str, Any]:
    """One GPU of a cluster plan: its node and host (and vLLM's stage), then its memory as the engine counts it."""
    where: dict[str, Any] = {"node": d.node, "host": d.host}
    if d.stage is not None:
        where.update(stage=d.stage, layers=d.layers)
    memory = llama_device_json(d.memory) if isinstance(d.memory, DeviceMemory) else device_json(d.memory)
    return {**where, **memory}


def _host_json(h: HostMemory) -> dict[str, Any]:
    return {"weights_bytes": h.weights_bytes, "kv_cache_bytes": h.kv_cache_bytes, "compute_bytes": h.compute_bytes,
            "output_bytes": h.output_bytes, "total_bytes": h.total_bytes, "capacity_bytes": h.capacity_bytes}


def _pool_json(pool: UnifiedPool | None) -> dict[str, Any]:
    """memory.unified_pool: everything the process needs from the one memory (only where it is unified)."""
    if pool is None:
        return {}
    return {"unified_pool": {"capacity_bytes": pool.capacity_bytes, "gpu_limit_bytes": pool.gpu_limit_bytes,
                             "total_bytes": pool.total_bytes, "headroom_bytes": pool.headroom_bytes,
                             "gpu_bytes": pool.gpu_bytes, "host_bytes": pool.host_bytes,
                             "shared_mapped_bytes": pool.shared_bytes,
                             "platform": pool.platform.id, "os_reserve_bytes": pool.platform.reserve_bytes,
                             "os_reserve_measured": pool.platform.reserve_measured}}


def check_json(r: LlamaCppResult) -> dict[str, Any]:
    d = r.detail
    spec, s, v = r.resolved.spec, d.settings, d.fit
    est = v.estimate
    return {
        "schema": SCHEMA,
        "model": {"id": spec.id, "quant": d.plan.ftype.name, "arch": spec.arch, "n_params": d.plan.n_params,
                  "file_size_bytes": d.file_size_bytes, "resolved": r.resolved.how,
                  "n_ctx_train": spec.n_ctx_train, "tensor_types": d.plan.type_counts()},
        "hardware": {"name": r.hardware.label, "gpus": [g.id for g in r.hardware.gpus],
                     "notes": list(r.hardware.notes)},
        "settings": {"n_ctx": est.n_ctx, "n_ubatch": s.ubatch, "n_batch": s.n_batch, "n_parallel": s.n_parallel,
                     "flash_attn": "on" if flash_attention_on(s) else "off", "cache_type_k": s.cache_type_k,
                     "cache_type_v": s.cache_type_v, "n_gpu_layers": v.n_gpu_layers,
                     "n_layers_total": spec.n_layer + 1, "swa_full": s.swa_full, "kv_unified": s.kv_unified,
                     "kv_cells": est.kv.base_cells, "kv_cells_swa": est.kv.swa_cells,
                     "n_cpu_moe": s.n_cpu_moe, "cpu_moe": s.cpu_moe, "override_tensor": list(s.override_tensor),
                     "engine_version": _version(r, s.engine_version),
                     **({"defaults_from": s.defaults_from} if s.defaults_from else {})},
        "memory": {"devices": [llama_device_json(d) for d in est.devices], "host": _host_json(est.host),
                   **_pool_json(est.unified_pool)},
        "verdict": r.verdict.value,
        "reasons": list(r.reasons),
        "max_ctx_fit": r.max_ctx_fit,
        "max_ctx_fit_limit": v.max_ctx_fit_limit,  # "n_ctx_train": the trained context stops it, not memory
        "unchecked": list(v.unchecked),  # capacities not checked because unknown ("host_ram")
        "suggestion": v.suggestion,
        "performance": performance_json(r.performance),
        "speed_error": d.speed_error,
        "llama_server_command": r.command,
        "llamacpp_fit": None if d.llamacpp_fit is None else {
            "n_ctx": d.llamacpp_fit.n_ctx, "n_gpu_layers": d.llamacpp_fit.n_gpu_layers,
            "n_cpu_moe": d.llamacpp_fit.n_cpu_moe, "summary": d.llamacpp_fit.summary},
        "advice": [{"change": a.change, "flags": a.flags, "verdict": a.verdict.value, "max_ctx_fit": a.max_ctx_fit,
                    "decode_tokens_per_s": round(a.decode_tokens_per_s, 1) if a.decode_tokens_per_s else None,
                    "llama_server_command": a.command} for a in d.advice],
        "assumptions": assumptions(r),
    }


def compact_document(result: CheckResult[Any]) -> dict[str, Any]:
    """What a cell of a large report keeps of its check document: the schema, the command that runs it and, for
    llama.cpp, the assumptions (report --json gives `check --json` for a cell's full document)."""
    out: dict[str, Any] = {"schema": SCHEMA, "compact": True}
    if isinstance(result.detail, LlamaCppPlan):
        out.update(llama_server_command=result.command, assumptions=assumptions(result))
    else:
        out.update(engine=result.engine, command=result.command)
    return out


def check_document(result: CheckResult[Any]) -> dict[str, Any]:
    """The gemma-fit.check/1 document of a check on any engine: llama.cpp's plan has its own keys, the other
    engines' accounting theirs."""
    return check_json(result) if isinstance(result.detail, LlamaCppPlan) else engine_check_json(result)


def inspect_json(r: InspectResult) -> dict[str, Any]:
    """gemma-fit.inspect/1: what the header holds; with a check, the check's document under it."""
    spec, plan = r.spec, r.plan
    info = {"schema": INSPECT_SCHEMA, "file": str(r.path), "arch": spec.arch, "n_params": plan.n_params,
            "file_size_bytes": r.header.file_bytes, "tensor_types": plan.type_counts(),
            "n_ctx_train": spec.n_ctx_train, "n_layers": spec.n_layer, "n_tensors": len(plan.tensors),
            "file_type": plan.ftype.name, "shards": len(r.header.shards), "name": spec.name}
    return info if r.check is None else {**check_json(r.check), **info}


def _min_headroom(headrooms: list[int], host_capacity: int | None, host_total: int) -> int | None:
    """The smallest headroom over the devices; on a CPU-only config, the host's (None when unknown)."""
    if headrooms:
        return min(headrooms)
    return None if host_capacity is None else host_capacity - host_total


def check_figures(result: CheckResult[Any]) -> dict[str, Any]:
    """What a report's cell and a GPU ranking show of one check (the same figures its document gives)."""
    headroom, layers = _room_and_layers(result)
    return {"n_ctx": result.n_ctx, "verdict": result.verdict.value, "min_headroom_bytes": headroom,
            "max_ctx_fit": result.max_ctx_fit, "n_gpu_layers": layers,
            "n_layers_total": result.resolved.spec.n_layer + 1, **_rates(result.performance)}


def _room_and_layers(result: CheckResult[Any]) -> tuple[int | None, int]:
    d = result.detail
    if isinstance(d, LlamaCppPlan):
        est = d.estimate
        return (_min_headroom([x.headroom_bytes for x in est.devices], est.host.capacity_bytes,
                              est.host.total_bytes), d.fit.n_gpu_layers)
    host = d.host or {"capacity_bytes": None, "total_bytes": 0}
    return (_min_headroom([x.headroom_bytes for x in d.devices], host["capacity_bytes"], host["total_bytes"]),
            _settings_json(result)["n_gpu_layers"])


def serving_basis(sv: dict) -> str:
    """What a serving document's aggregate counts, for the presenters: every request running to its output length
    (vllm bench serve --ignore-eos; a burst whose outputs stop at end-of-sequence lasts as long as its longest one and
    shows less, docs/serving.md), or decode only."""
    if not sv["includes_prefill"]:
        return "decode only"
    return f"all {sv['output_tokens']} output tokens each, prefill included"
