"""serve-plan's document (gemma-fit.serve-plan/1): one machine through `check` with the traffic, or a cluster
through jobs.cluster (llama.cpp RPC, vLLM on Ray)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.base.ranges import MAX_TOKENS, check_optional
from gemma_fit.base.verdict import Verdict
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines import registry
from gemma_fit.engines.base import CheckRequest, CheckResult, Workload
from gemma_fit.engines.vllm import ENGINE as VLLM
from gemma_fit.hardware.cluster import Cluster
from gemma_fit.hardware.spec import Hardware
from gemma_fit.jobs.check import check
from gemma_fit.jobs.inputs import check_workload
from gemma_fit.memory.settings import RunSettings, validate, validate_shared
from gemma_fit.model.catalog import resolve_model
from gemma_fit.model.spec import ModelSpec
from gemma_fit.present.documents import check_document, cluster_device_json, performance_json
from gemma_fit.speed.traffic import Traffic

SCHEMA = "gemma-fit.serve-plan/1"


def plan_document(*, model: str, quant: str | None, gpus: list[str], hardware: Path | None, cluster: Cluster | None,
                  engine: str, ctx: int | None, parallel: int, prompt_tokens: int, output_tokens: int | None,
                  rate: float | None, tp: int | None, pp: int | None, speculative: Any = None,
                  catalog: Catalog = BUILTIN) -> dict[str, Any]:
    traffic = Traffic(output_tokens, rate)
    check_workload(Workload(prompt_tokens, traffic))
    check_optional("--ctx", ctx)
    check_optional("--tensor-parallel-size", tp)
    check_optional("--pipeline-parallel-size", pp)
    eng = registry.engine_named(engine)
    engine = eng.name
    if quant is not None:
        eng.canonical_quant(quant)  # '' or Q9_K: refused here, not read as the default
    llama = engine == registry.DEFAULT_ENGINE
    if engine in _SERVERS:
        _check_trained_context(resolve_model(model, catalog.model_dirs).spec, prompt_tokens, output_tokens, engine)
    if llama and ctx is None:
        _check_sized_context(parallel, prompt_tokens, output_tokens)
    if ctx and engine in _SERVERS:
        _check_holds_a_request(ctx, parallel if llama else 1, prompt_tokens, output_tokens, engine)
    n_ctx = ctx if ctx is not None else (parallel * (prompt_tokens + (output_tokens or 0)) if llama else 0)
    # --ctx 0 is llama.cpp's own: the trained context (-c 0), not 256 tokens
    settings = RunSettings(n_ctx=max(n_ctx, 256) if llama and n_ctx else n_ctx, n_parallel=parallel,
                           speculative=speculative)
    if speculative is not None and cluster is not None:
        raise BadInput("--mtp / --draft are modelled on one machine (llama.cpp), not on a cluster file yet")
    if cluster is None:
        target = hardware if hardware is not None else gpus
        if not target:
            raise BadInput("give --gpu ID (repeat for several) or --hardware FILE (a machine or a cluster file)")
        if pp or (tp and engine != VLLM.name):  # never dropped without a word: the printed command would lack it
            raise BadInput("--pipeline-parallel-size is planned over a cluster file's nodes (vLLM on Ray); on one "
                           "machine, vLLM splits its GPUs with --tensor-parallel-size" if pp else
                           f"--tensor-parallel-size is vLLM's; {engine} splits layers over the GPUs")
        options: dict[str, Any] = {} if tp is None else {"tensor_parallel_size": tp}

        def at(n: int) -> dict[str, Any]:
            if llama and ctx:  # --ctx stays: a slot of n_ctx / n that no longer holds a request is no plan
                _check_holds_a_request(ctx, n, prompt_tokens, output_tokens, engine)
            s = replace(settings, n_parallel=n, n_ctx=n * (prompt_tokens + (output_tokens or 0)) if llama and
                        ctx is None else settings.n_ctx)
            return _one_machine(check(model, target, quant=quant, settings=s, engine=engine,
                                      workload=Workload(prompt_tokens, traffic), options=options, catalog=catalog))

        doc = at(parallel)
        doc["more_parallel"] = _more_parallel(doc, parallel, at) if rate is not None else None
        return doc
    return _cluster(cluster, model, quant, settings, engine, prompt_tokens, traffic, tp, pp, catalog)


def _request(prompt_tokens: int, output_tokens: int | None) -> tuple[int, str]:
    """One request's tokens, and how they add up in the options' names."""
    if output_tokens is None:
        return prompt_tokens, f"--prompt-tokens {prompt_tokens:,}"
    return (prompt_tokens + output_tokens,
            f"--prompt-tokens {prompt_tokens:,} + --output-tokens {output_tokens:,}")


# What each server does with a request longer than its context: (past --ctx, past the trained context). Ollama cuts
# the prompt to num_ctx (llm/server.go: "truncating input prompt"), which answers another request than the one asked.
_SERVERS = {registry.DEFAULT_ENGINE: ("llama-server rejects", "llama-server caps each slot there"),
            "vllm": ("vLLM rejects", "vLLM's --max-model-len stops there"),
            "ollama": ("Ollama truncates to its last tokens", "Ollama's num_ctx stops there")}


def _check_trained_context(spec: ModelSpec, prompt_tokens: int, output_tokens: int | None, engine: str) -> None:
    """A request past the model's trained context is served by neither engine: llama-server caps each slot at
    n_ctx_train and rejects a longer request; vLLM refuses a --max-model-len past max_position_embeddings. Bad
    input, not a GO for a plan whose every request fails."""
    one, terms = _request(prompt_tokens, output_tokens)
    if one > spec.n_ctx_train:
        server = _SERVERS[engine][1]
        raise BadInput(f"{terms} = {one:,} tokens, more than {spec.id}'s trained context of {spec.n_ctx_train:,} "
                       f"({server}): a shorter request, or a model with a longer context")


def _check_sized_context(parallel: int, prompt_tokens: int, output_tokens: int | None) -> None:
    """Without --ctx, llama-server's -c is --parallel x one request: past llama.cpp's limit it is bad input that
    names the options given (the user gave no --ctx to blame)."""
    one, terms = _request(prompt_tokens, output_tokens)
    if parallel * one > MAX_TOKENS:
        raise BadInput(f"--parallel {parallel} x ({terms}) = {parallel * one:,} tokens of context, more than the "
                       f"{MAX_TOKENS:,} gemma-fit plans for: fewer or shorter requests")


def _check_holds_a_request(ctx: int, slots: int, prompt_tokens: int, output_tokens: int | None, engine: str) -> None:
    """A context that cannot hold one request (prompt + output) serves nothing: llama-server splits -c over its
    --parallel slots and rejects a request past its slot; vLLM rejects one past --max-model-len. Bad input, with
    the numbers, rather than a plan that says GO."""
    one, terms = _request(prompt_tokens, output_tokens)
    per_slot = ctx // slots
    if per_slot >= one:
        return
    given = f"--ctx {ctx:,} over --parallel {slots} slots leaves {per_slot:,} tokens a slot," if slots > 1 else \
        f"--ctx {ctx:,} is"
    raise BadInput(f"{given} less than one request: {terms} = {one:,} tokens, which {_SERVERS[engine][0]}; give "
                   f"--ctx {slots * one:,} or more, or leave --ctx out (serve-plan sizes it)")


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
    from gemma_fit.engines.cluster import rpc_plan
    from gemma_fit.engines.cluster_ray import ray_plan

    resolved = resolve_model(model, catalog.model_dirs)
    (validate if engine == registry.DEFAULT_ENGINE else validate_shared)(settings, resolved.spec)
    if engine == registry.DEFAULT_ENGINE:
        if tp or pp:
            raise BadInput("--tensor-parallel-size / --pipeline-parallel-size are vLLM's; llama.cpp RPC splits "
                           "layers over every node's GPUs")
        plan = rpc_plan(cluster, resolved, "Q4_K_M" if quant is None else quant, settings, prompt_tokens, traffic,
                        catalog)
    elif engine == VLLM.name:
        head = Hardware(cluster.name, cluster.nodes[0].gpus, None)
        es = VLLM.settings(CheckRequest(resolved, quant, settings, head, Workload(prompt_tokens, traffic)))
        plan = ray_plan(cluster, resolved, es, catalog, tp, pp)
    else:
        raise BadInput(f"a cluster file plans llama.cpp (RPC) or vLLM (Ray), not {engine}")
    return _with_gpus_needed({
        "schema": SCHEMA, "engine": plan.engine, "model": resolved.spec.id,
        "quant": quant if quant is not None else ("Q4_K_M" if plan.engine == "llama.cpp" else "bf16"),
        "hardware": cluster.name,
        "verdict": plan.verdict.value, "settings": plan.settings,
        "devices": [cluster_device_json(d) for d in plan.devices], "network": plan.network,
        "performance": performance_json(plan.performance), "commands": list(plan.commands),
        "reasons": list(plan.reasons)})
