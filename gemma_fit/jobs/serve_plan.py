"""serve-plan's document (gemma-fit.serve-plan/1): one machine through `check` with the traffic, or a cluster
through jobs.cluster (llama.cpp RPC, vLLM on Ray)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.engines.base import EngineResult
from gemma_fit.engines.llamacpp import CheckResult
from gemma_fit.hardware.cluster import Cluster
from gemma_fit.jobs.check import check, check_traffic, engine_settings
from gemma_fit.memory.settings import RunSettings, is_llama_cpp, validate
from gemma_fit.model.catalog import resolve_model
from gemma_fit.present.documents import check_document, performance_json
from gemma_fit.speed.traffic import Traffic

SCHEMA = "gemma-fit.serve-plan/1"


def plan_document(*, model: str, quant: str | None, gpus: list[str], hardware: Path | None, cluster: Cluster | None,
                  engine: str, ctx: int | None, parallel: int, prompt_tokens: int, output_tokens: int | None,
                  rate: float | None, tp: int | None, pp: int | None, model_dirs: tuple[Path, ...] = (),
                  hardware_dirs: tuple[Path, ...] = ()) -> dict[str, Any]:
    traffic = Traffic(output_tokens, rate)
    check_traffic(output_tokens, rate)
    llama = is_llama_cpp(engine)
    n_ctx = ctx if ctx is not None else (parallel * (prompt_tokens + (output_tokens or 0)) if llama else 0)
    settings = RunSettings(n_ctx=max(n_ctx, 256) if llama else n_ctx, n_parallel=parallel)
    if cluster is None:
        target = hardware if hardware is not None else gpus
        if not target:
            raise BadInput("give --gpu ID (repeat for several) or --hardware FILE (a machine or a cluster file)")
        options: dict[str, Any] = {} if llama or tp is None else {"tensor_parallel_size": tp}
        result = check(model, target, quant=quant, settings=settings, engine=engine, prompt_tokens=prompt_tokens,
                       traffic=traffic, model_dirs=model_dirs, hardware_dirs=hardware_dirs, **options)
        return _one_machine(result)
    return _cluster(cluster, model, quant, settings, engine, prompt_tokens, traffic, tp, pp, model_dirs,
                    hardware_dirs)


def _one_machine(result: CheckResult | EngineResult) -> dict[str, Any]:
    doc = check_document(result)
    command = doc.get("llama_server_command") or doc.get("command")
    return {"schema": SCHEMA, "engine": doc.get("engine", "llama.cpp"), "model": doc["model"]["id"],
            "quant": doc["model"]["quant"], "hardware": doc["hardware"]["name"], "verdict": doc["verdict"],
            "settings": doc["settings"], "devices": doc["memory"]["devices"], "network": None,
            "performance": doc["performance"], "commands": [command] if command else [],
            "reasons": doc["reasons"]}


def _cluster(cluster: Cluster, model: str, quant: str | None, settings: RunSettings, engine: str,
             prompt_tokens: int, traffic: Traffic, tp: int | None, pp: int | None, model_dirs: tuple[Path, ...],
             hardware_dirs: tuple[Path, ...]) -> dict[str, Any]:
    from gemma_fit.jobs.cluster import ray_plan, rpc_plan

    resolved = resolve_model(model, model_dirs)
    validate(settings, resolved.spec)
    if is_llama_cpp(engine):
        if tp or pp:
            raise BadInput("--tensor-parallel-size / --pipeline-parallel-size are vLLM's; llama.cpp RPC splits "
                           "layers over every node's GPUs")
        plan = rpc_plan(cluster, resolved, quant or "Q4_K_M", settings, prompt_tokens, traffic, "", hardware_dirs)
    elif engine.strip().lower() == "vllm":
        es = engine_settings("vllm", quant or "bf16", settings, prompt_tokens=prompt_tokens,
                             output_tokens=traffic.output_tokens, request_rate=traffic.rate_per_s)
        plan = ray_plan(cluster, resolved, es, hardware_dirs, tp, pp)
    else:
        raise BadInput(f"a cluster file plans llama.cpp (RPC) or vLLM (Ray), not {engine}")
    return {"schema": SCHEMA, "engine": plan.engine, "model": resolved.spec.id, "quant": quant or (
        "Q4_K_M" if plan.engine == "llama.cpp" else "bf16"), "hardware": cluster.name, "verdict": plan.verdict,
        "settings": plan.settings, "devices": list(plan.devices), "network": plan.network,
        "performance": performance_json(plan.performance), "commands": list(plan.commands),
        "reasons": list(plan.reasons)}
