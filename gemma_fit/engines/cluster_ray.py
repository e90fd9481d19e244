"""vLLM on Ray across machines: every layout vLLM accepts, and the fastest.

vLLM numbers its workers rank by rank over the Ray placement group, filling each node's GPUs in turn; a tensor-
parallel group is tp consecutive ranks and pipeline stage k holds ranks k x tp ... (k + 1) x tp - 1 (vllm/
distributed/parallel_state.py). So a stage may sit inside one node (its all-reduces on NVLink or PCIe) or span nodes
(its all-reduces cross the network), and a boundary between stages crosses the network only where the two stages are
on different nodes. vLLM accepts any tp x pp up to the GPUs Ray has, with the attention heads divisible by tp
(ModelConfig.verify_with_parallel_config) and a layer for every stage (get_pp_indices: layers split evenly, the
remainder to the stages before the last; with tied embeddings the last stage holds its own copy of the embedding for
the logits, and the stages between hold neither). Each stage's memory is vLLM's rule for its layers on its GPUs; the
KV pool serves as many requests as the smallest stage's holds. Without --tensor-parallel-size and
--pipeline-parallel-size the planner tries every accepted layout and keeps the fastest at the requested concurrency.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from functools import cache

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.verdict import Verdict
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines.base import CheckResult, EnginePlan, EngineSettings
from gemma_fit.engines.cluster import RAY_PORT, ClusterDevice, ClusterPlan, _held, endpoint
from gemma_fit.engines.hf_speed import HFLayout, Requests, hf_model_work, hf_performance, tensor_link
from gemma_fit.engines.vllm import VllmOptions, estimate_vllm
from gemma_fit.hardware.cluster import Cluster, Node
from gemma_fit.hardware.spec import GPUSpec, Hardware
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.model.spec import ModelSpec
from gemma_fit.speed.links import default_attachment, peer_link


def pp_partition(n_layers: int, pp: int) -> list[int]:
    """vLLM's get_pp_indices: even shares, the remainder to the stages before the last."""
    parts = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        parts[-i] += 1
    return parts


def stage_spec(spec: ModelSpec, start: int, count: int) -> ModelSpec:
    layers = tuple(replace(layer, index=i) for i, layer in enumerate(spec.layers[start:start + count]))
    return replace(spec, layers=layers)


@record
class Rank:
    node: Node
    gpu: GPUSpec


def ranks(cluster: Cluster) -> list[Rank]:
    """Ray's order: the head's GPUs first, then each node's (worked out once per cluster: the planner asks it for
    every layout)."""
    return list(_ranks(cluster))


@cache
def _ranks(cluster: Cluster) -> tuple[Rank, ...]:
    return tuple(Rank(n, g) for n in cluster.nodes for g in n.gpus)


def accepted_layouts(cluster: Cluster, spec: ModelSpec) -> list[tuple[int, int]]:
    """Every (tp, pp) vLLM starts on this cluster: tp x pp GPUs at most, the heads divisible by tp, a layer a stage."""
    total = len(ranks(cluster))
    heads = spec.layers[0].n_head
    return [(tp, pp) for tp in range(1, total + 1) if heads % tp == 0
            for pp in range(1, min(spec.n_layer, total // tp) + 1)]


def check_layout(cluster: Cluster, spec: ModelSpec, tp: int, pp: int) -> None:
    total = len(ranks(cluster))
    if tp < 1 or pp < 1 or tp * pp > total:
        raise BadInput(f"--tensor-parallel-size {tp} x --pipeline-parallel-size {pp} needs {tp * pp} GPUs; the "
                       f"cluster has {total} on {len(cluster.nodes)} nodes")
    heads = spec.layers[0].n_head
    if heads % tp:
        raise BadInput(f"--tensor-parallel-size {tp} does not divide {spec.id}'s {heads} attention heads (vLLM "
                       "refuses it); give a divisor of the heads")
    if pp > spec.n_layer:
        raise BadInput(f"--pipeline-parallel-size {pp} for the {spec.n_layer} layers of {spec.id}: each stage needs a "
                       f"layer; give {spec.n_layer} or fewer")


def _stage_links(stages: list[list[Rank]], cluster: Cluster) -> tuple[float, float, float, float]:
    """(all-reduce GB/s and latency inside the slowest stage, hand-over latency and GB/s averaged over the
    boundaries): the network wherever a stage or a boundary spans two nodes."""
    net = cluster.network
    net_gbps = net.bytes_per_s / 1e9 if net.bytes_per_s != float("inf") else 0.0
    link_gbps, link_lat = 0.0, 0.0
    if len(stages[0]) > 1:
        if any(len({r.node.host for r in s}) > 1 for s in stages):
            # a ring all-reduce (NCCL's across nodes) passes 2 (tp - 1) messages one after the other, each waiting
            # on the network's latency
            link_gbps, link_lat = net_gbps, 2 * (len(stages[0]) - 1) * net.latency_s
        else:
            link_gbps, link_lat = tensor_link("vllm", tuple(r.gpu for r in stages[0]))
    hops = [(a[-1].node.host != b[0].node.host) for a, b in zip(stages, stages[1:], strict=False)]
    if not hops:
        return link_gbps, link_lat, 0.0, 0.0
    local_hop = peer_link(tuple(r.gpu for r in stages[0][:1] + stages[1][:1]),
                          tuple(default_attachment(r.gpu) for r in stages[0][:1] + stages[1][:1]))
    lat = [net.latency_s if h else (local_hop.latency_s if local_hop else 0.0) for h in hops]
    inv = [(1 / net_gbps if net_gbps else 0.0) if h else (1 / local_hop.per_direction_gbps if local_hop else 0.0)
           for h in hops]
    mean_inv = sum(inv) / len(inv)
    return link_gbps, link_lat, sum(lat) / len(lat), 1 / mean_inv if mean_inv else 0.0


def layout_plan(cluster: Cluster, resolved: ResolvedModel, es: EngineSettings[VllmOptions], tp: int, pp: int,
                catalog: Catalog = BUILTIN) -> ClusterPlan:
    """vLLM with tp x pp ranks placed as Ray places them."""
    spec = resolved.spec
    check_layout(cluster, spec, tp, pp)
    placed = ranks(cluster)[:tp * pp]
    stages = [placed[k * tp:(k + 1) * tp] for k in range(pp)]
    parts = pp_partition(spec.n_layer, pp)
    results: list[CheckResult[EnginePlan]] = []
    subs: list[ModelSpec] = []
    start = 0
    for k, n_layers in enumerate(parts):
        sub = stage_spec(spec, start, n_layers)
        if 0 < k < pp - 1:  # a middle stage holds neither the embedding nor the logits (vLLM's PPMissingLayer)
            sub = replace(sub, n_vocab=0)
        subs.append(sub)
        # the stage's GPUs as Ray places them: llama.cpp's 16-device limit is not vLLM's (TP across nodes)
        hw = Hardware(" + ".join(r.gpu.name for r in stages[k]), tuple(r.gpu for r in stages[k]), None)
        results.append(estimate_vllm(resolved, sub, replace(es, options=replace(es.options, tensor_parallel_size=tp)),
                                     hw, with_speed=False))
        start += n_layers
    verdict = Verdict.worst([x.verdict for x in results])
    first = results[0]
    need = min(first.n_ctx, es.prompt_tokens + (es.output_tokens or 0))
    held = min(_held(x, sub, need) for x, sub in zip(results, subs, strict=True))
    link_gbps, link_lat, hop_lat, hop_gbps = _stage_links(stages, cluster)
    crossings = sum(1 for a, b in zip(stages, stages[1:], strict=False) if a[-1].node.host != b[0].node.host)
    spanning = sum(1 for s in stages if len({r.node.host for r in s}) > 1)
    perf = None
    if verdict != Verdict.NO_GO:
        layout = HFLayout(tuple(r.gpu for r in placed), first.quant, tp, pp,
                          int(first.detail.extras["max_num_batched_tokens"]), link_gbps, link_lat, hop_lat, hop_gbps)
        req = Requests(es.prompt_tokens, es.output_tokens, es.request_rate, es.max_num_seqs or 1,
                       min(int(first.detail.extras["max_num_seqs"]), max(1, held)), held)
        perf = hf_performance("vllm", hf_model_work(spec), layout, req,
                              sum(x.detail.weights_total_bytes for x in results))
    devices = tuple(ClusterDevice(stages[k][i].node.name, stages[k][i].node.host, d, k, parts[k])
                    for k, x in enumerate(results) for i, d in enumerate(x.detail.devices))
    nodes = list(dict.fromkeys(r.node.host for r in placed))
    head = cluster.nodes[0].host
    serve_cmd = re.sub(r" --tensor-parallel-size \d+(?= |$)", "", first.command)
    serve_cmd += f" --tensor-parallel-size {tp} --pipeline-parallel-size {pp}"
    if len(nodes) > 1:
        serve_cmd += " --distributed-executor-backend ray"
    commands = (*((f"ray start --head --port {RAY_PORT}",) if len(nodes) > 1 else ()),
                *(f"ssh {shlex.quote(h)} ray start --address {shlex.quote(endpoint(head, RAY_PORT))}"
                  for h in nodes[1:]), serve_cmd)
    hidden = 2.0 * spec.n_embd
    net = cluster.network
    network = {"bandwidth_gbit": round(net.bytes_per_s * 8 / 1e9, 6), "latency_us": round(net.latency_s * 1e6, 3),
               "boundaries_crossing_network": crossings, "stages_spanning_nodes": spanning,
               "bytes_per_token_per_sequence": crossings * hidden,
               "seconds_per_token": crossings * net.seconds(hidden)}
    where = (f"tensor parallel {tp} in each stage" + (f", {spanning} of them across nodes (all-reduces over the "
             "network)" if spanning else ""))
    reasons = (f"{pp} pipeline stage{'s' if pp > 1 else ''} of {', '.join(map(str, parts))} layers, {where}, "
               f"on {len(nodes)} of {len(cluster.nodes)} nodes",
               f"the KV pool of the smallest stage holds {held} requests of {need} tokens (prompt + output) at once",
               *first.reasons[:1], "every node needs the same vLLM, the model files (or access to the Hub) and "
               "a Ray version of its own; the head serves the API")
    settings_doc = {"n_ctx": first.n_ctx, "tensor_parallel_size": tp, "pipeline_parallel_size": pp,
                    "max_num_seqs": first.detail.extras["max_num_seqs"], "n_parallel": es.max_num_seqs or 1}
    return ClusterPlan("vllm", verdict, devices, network, perf, commands, reasons, settings_doc)


def _speed(plan: ClusterPlan) -> float:
    return plan.performance.aggregate_tokens_per_s if plan.performance is not None else 0.0


def ray_plan(cluster: Cluster, resolved: ResolvedModel, es: EngineSettings[VllmOptions],
             catalog: Catalog = BUILTIN, tp: int | None = None, pp: int | None = None) -> ClusterPlan:
    """The layout asked for (a missing size fills the GPUs), or the fastest that holds the requests."""
    total = len(ranks(cluster))
    if tp is not None or pp is not None:
        tp = tp or max(1, total // (pp or 1))
        pp = pp or max(1, total // tp)
        return layout_plan(cluster, resolved, es, tp, pp, catalog)
    plans = [layout_plan(cluster, resolved, es, t, p, catalog) for t, p in accepted_layouts(cluster, resolved.spec)]
    fitting = [p for p in plans if p.verdict != Verdict.NO_GO]
    if not fitting:  # nothing fits: the layout that uses every GPU, whose reasons say what is short
        return max(plans, key=lambda p: (p.settings["tensor_parallel_size"] * p.settings["pipeline_parallel_size"],
                                         p.settings["tensor_parallel_size"]))
    best = max(fitting, key=lambda p: (round(_speed(p), 6), p.verdict == Verdict.GO,
                                       -p.settings["tensor_parallel_size"] * p.settings["pipeline_parallel_size"]))
    runners = sorted(fitting, key=_speed, reverse=True)[1:3]
    also = "; ".join(f"TP{p.settings['tensor_parallel_size']} x PP{p.settings['pipeline_parallel_size']} "
                     f"{_speed(p):,.0f} tok/s" for p in runners)
    why = (f"the fastest of {len(fitting)} layouts vLLM accepts that hold the requests: "
           f"TP{best.settings['tensor_parallel_size']} x PP{best.settings['pipeline_parallel_size']} at "
           f"{_speed(best):,.0f} tok/s in total" + (f" (next: {also})" if also else ""))
    used = best.settings["tensor_parallel_size"] * best.settings["pipeline_parallel_size"]
    if total // used > 1:
        why += (f"; it uses {used} of the {total} GPUs: {total // used} replicas of it (one `vllm serve` each, behind "
                f"a load balancer) serve {total // used}x the requests at the same speed each")
    return replace(best, reasons=(why, *best.reasons))
