"""serve-plan's document (gemma-fit.serve-plan/1): one machine through `check` with the traffic, or a cluster
through jobs.cluster (llama.cpp RPC, vLLM on Ray)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.base.ranges import check_optional
from gemma_fit.base.verdict import Verdict
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines import registry
from gemma_fit.engines.base import CheckRequest, CheckResult, Workload
from gemma_fit.hardware.cluster import Cluster
from gemma_fit.hardware.spec import Hardware
from gemma_fit.jobs.check import check
from gemma_fit.jobs.inputs import check_workload
from gemma_fit.memory.settings import RunSettings, validate
from gemma_fit.model.catalog import resolve_model
from gemma_fit.present.documents import check_document, cluster_device_json, performance_json
from gemma_fit.speed.traffic import Traffic

SCHEMA = "gemma-fit.serve-plan/1"


def plan_document(*, model: str, quant: str | None, gpus: list[str], hardware: Path | None, cluster: Cluster | None,
                  engine: str, ctx: int | None, parallel: int, prompt_tokens: int, output_tokens: int | None,
                  rate: float | None, tp: int | None, pp: int | None, catalog: Catalog = BUILTIN) -> dict[str, Any]:
    traffic = Traffic(output_tokens, rate)
    check_workload(Workload(prompt_tokens, traffic))
    check_optional("--ctx", ctx)
    check_optional("--tensor-parallel-size", tp)
    check_optional("--pipeline-parallel-size", pp)
    eng = registry.engine_named(engine)
    engine = eng.name
    llama = engine == registry.DEFAULT_ENGINE
    n_ctx = ctx if ctx is not None else (parallel * (prompt_tokens + (output_tokens or 0)) if llama else 0)
    settings = RunSettings(n_ctx=max(n_ctx, 256) if llama else n_ctx, n_parallel=parallel)
    if cluster is None:
        target = hardware if hardware is not None else gpus
        if not target:
            raise BadInput("give --gpu ID (repeat for several) or --hardware FILE (a machine or a cluster file)")
        options: dict[str, Any] = {} if llama or tp is None else {"tensor_parallel_size": tp}

        def at(n: int) -> dict[str, Any]:
            s = replace(settings, n_parallel=n, n_ctx=n * (prompt_tokens + (output_tokens or 0)) if llama and
                        ctx is None else settings.n_ctx)
            return _one_machine(check(model, target, quant=quant, settings=s, engine=engine,
                                      workload=Workload(prompt_tokens, traffic), options=options, catalog=catalog))

        doc = at(parallel)
        doc["more_parallel"] = _more_parallel(doc, parallel, at) if rate is not None else None
        return doc
    return _cluster(cluster, model, quant, settings, engine, prompt_tokens, traffic, tp, pp, catalog)


MAX_PARALLEL_TRIED = 512


def _holds(doc: dict[str, Any]) -> bool:
    traffic = ((doc.get("performance") or {}).get("serving") or {}).get("traffic")
    return bool(traffic and traffic["holds"])


def _more_parallel(doc: dict[str, Any], parallel: int, at: Any) -> dict[str, Any] | None:
    """When the rate is not held at --parallel N: the fewest concurrent requests (doubling N) with which the same
    hardware holds it and still fits, or None."""
    if _holds(doc):
        return None
    n = parallel * 2
    while n <= MAX_PARALLEL_TRIED:
        try:
            trial = at(n)
        except BadInput:
            return None
        if not Verdict(trial["verdict"]).runs_on_gpu:
            return None
        if _holds(trial):
            t = trial["performance"]["serving"]["traffic"]
            return {"parallel": n, "verdict": trial["verdict"], "commands": trial["commands"],
                    "ttft_p95_s": t["ttft_p95_s"], "per_user_tokens_per_s": t["per_user_tokens_per_s"]}
        n *= 2
    return None


def _with_gpus_needed(doc: dict[str, Any]) -> dict[str, Any]:
    """The traffic answer in GPUs too: replicas x the GPUs one server uses."""
    traffic = ((doc.get("performance") or {}).get("serving") or {}).get("traffic")
    if traffic is not None:
        traffic["gpus_per_server"] = len(doc["devices"])
        traffic["gpus_needed"] = traffic["replicas"] * len(doc["devices"])
    return doc


def _one_machine(result: CheckResult[Any]) -> dict[str, Any]:
    doc = check_document(result)
    command = doc.get("llama_server_command") or doc.get("command")
    return _with_gpus_needed({
        "schema": SCHEMA, "engine": doc.get("engine", "llama.cpp"), "model": doc["model"]["id"],
        "quant": doc["model"]["quant"], "hardware": doc["hardware"]["name"], "verdict": doc["verdict"],
        "settings": doc["settings"], "devices": doc["memory"]["devices"], "network": None,
        "performance": doc["performance"], "commands": [command] if command else [], "reasons": doc["reasons"]})


def _cluster(cluster: Cluster, model: str, quant: str | None, settings: RunSettings, engine: str,
             prompt_tokens: int, traffic: Traffic, tp: int | None, pp: int | None, catalog: Catalog) -> dict[str, Any]:
    from gemma_fit.engines.cluster import ray_plan, rpc_plan
    from gemma_fit.engines.vllm import ENGINE as VLLM

    resolved = resolve_model(model, catalog.model_dirs)
    validate(settings, resolved.spec)
    if engine == registry.DEFAULT_ENGINE:
        if tp or pp:
            raise BadInput("--tensor-parallel-size / --pipeline-parallel-size are vLLM's; llama.cpp RPC splits "
                           "layers over every node's GPUs")
        plan = rpc_plan(cluster, resolved, quant or "Q4_K_M", settings, prompt_tokens, traffic, catalog)
    elif engine == VLLM.name:
        head = Hardware(cluster.name, cluster.nodes[0].gpus, None)
        es = VLLM.settings(CheckRequest(resolved, quant, settings, head, Workload(prompt_tokens, traffic)))
        plan = ray_plan(cluster, resolved, es, catalog, tp, pp)
    else:
        raise BadInput(f"a cluster file plans llama.cpp (RPC) or vLLM (Ray), not {engine}")
    return _with_gpus_needed({
        "schema": SCHEMA, "engine": plan.engine, "model": resolved.spec.id,
        "quant": quant or ("Q4_K_M" if plan.engine == "llama.cpp" else "bf16"), "hardware": cluster.name,
        "verdict": plan.verdict.value, "settings": plan.settings,
        "devices": [cluster_device_json(d) for d in plan.devices], "network": plan.network,
        "performance": performance_json(plan.performance), "commands": list(plan.commands),
        "reasons": list(plan.reasons)})
