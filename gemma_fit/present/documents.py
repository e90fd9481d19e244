"""The check JSON document (contract schema gemma-fit.check/1) for an engine other than llama.cpp.

Same top-level keys as gemma_fit.engines.llamacpp.check_json where they apply; each device keeps the contract's
keys (compute_bytes = activations / compute buffer, overhead_bytes = CUDA context, non-torch memory,
engine reserves and CUDA graphs) and adds the engine's own names. "engine" and an engine-named block
carry what is specific to the engine.
"""

from __future__ import annotations

from typing import Any

from gemma_fit.engines import EngineDevice, EngineResult
from gemma_fit.engines.llamacpp import SCHEMA


def _device_json(d: EngineDevice) -> dict[str, Any]:
    return {"id": d.id, "name": d.name, "weights_bytes": d.weights_bytes, "kv_cache_bytes": d.kv_cache_bytes,
            "compute_bytes": d.activation_bytes, "overhead_bytes": d.overhead_bytes + d.cuda_graph_bytes,
            "total_bytes": d.total_bytes, "capacity_bytes": d.capacity_bytes, "headroom_bytes": d.headroom_bytes,
            "activation_bytes": d.activation_bytes, "cuda_graph_bytes": d.cuda_graph_bytes,
            "runtime_overhead_bytes": d.overhead_bytes}


def _settings_json(r: EngineResult) -> dict[str, Any]:
    s, x = r.settings, r.extras
    spec = r.resolved.spec
    out: dict[str, Any] = {"n_ctx": r.n_ctx, "n_parallel": x.get("max_num_seqs") or x.get("OLLAMA_NUM_PARALLEL")
                           or s.batch_size, "n_layers_total": spec.n_layer + 1}
    if r.engine == "ollama":
        out.update({"n_ubatch": x["num_batch"], "n_batch": x["num_batch"],
                    "flash_attn": "on" if x["OLLAMA_FLASH_ATTENTION"] else "off",
                    "cache_type_k": x["OLLAMA_KV_CACHE_TYPE"], "cache_type_v": x["OLLAMA_KV_CACHE_TYPE"],
                    "n_gpu_layers": x["n_gpu_layers"]})
    else:
        out.update({"n_batch": x.get("max_num_batched_tokens", s.prompt_tokens), "cache_type_k": s.kv_cache_dtype,
                    "cache_type_v": s.kv_cache_dtype, "n_gpu_layers": spec.n_layer + 1})
    return out


def engine_check_json(r: EngineResult) -> dict[str, Any]:
    spec = r.resolved.spec
    host = r.host or {"weights_bytes": 0, "kv_cache_bytes": 0, "compute_bytes": 0, "total_bytes": 0,
                      "capacity_bytes": None}
    specific = {k: v for k, v in r.extras.items() if k != "python"}
    if "python" in r.extras:
        specific["python_snippet"] = r.extras["python"]
    return {
        "schema": SCHEMA,
        "engine": r.engine,
        "model": {"id": spec.id, "quant": r.quant, "arch": spec.arch, "n_params": r.n_params,
                  "file_size_bytes": r.weights_total_bytes, "resolved": r.resolved.how,
                  "n_ctx_train": spec.n_ctx_train},
        "hardware": {"name": r.hardware_label, "gpus": [d.id for d in r.devices]},
        "settings": _settings_json(r),
        "memory": {"devices": [_device_json(d) for d in r.devices], "host": host},
        "verdict": r.verdict,
        "reasons": list(r.reasons),
        "max_ctx_fit": r.max_ctx_fit,
        "performance": None,
        "command": r.command,
        r.engine: specific,
        "sources": list(r.sources),
    }
