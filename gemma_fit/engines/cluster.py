"""Plans beyond one machine, on the engines people run: llama.cpp RPC and vLLM on Ray.

llama.cpp RPC: every node but the head runs `ggml-rpc-server` (built with -DGGML_RPC=ON), the head runs
llama-server with `--rpc host:port,...`. llama.cpp puts the RPC devices at the front of its device list
(src/llama.cpp: "add RPC servers at the front of the list to minimize network transfers"), so the remote GPUs
take the first layers and the head's GPUs the last ones and the output; the layer split is llama.cpp's own,
exactly as for the same GPUs in one machine. Per token each RPC device costs one round trip and its inputs and
output (engines/rpc_traffic.py: the activation, masks and indices up; the activation, or the logits where it holds
the output layer, down).

vLLM on Ray: engines/cluster_ray.py (every layout vLLM accepts, and the fastest).
With an ideal network (infinite bandwidth, no latency) either plan equals the one-machine plan of its GPUs.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.text import printable
from gemma_fit.base.verdict import Verdict
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines.base import CheckResult, EngineDevice, EnginePlan
from gemma_fit.engines.llamacpp import LlamaCppResult, run_check
from gemma_fit.engines.rpc_traffic import RpcTraffic, rpc_traffic
from gemma_fit.hardware.cluster import Cluster, Node
from gemma_fit.hardware.select import select_hardware
from gemma_fit.hardware.spec import MAX_GPUS, Hardware, as_seen_by_software
from gemma_fit.memory.estimate import DeviceMemory
from gemma_fit.memory.placement import CPU
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.model.spec import ModelSpec
from gemma_fit.speed.batch import Pipeline
from gemma_fit.speed.predict import Performance
from gemma_fit.speed.serve_llamacpp import llamacpp_pipeline
from gemma_fit.speed.traffic import Traffic, serve

RPC_PORT = 50052  # ggml-rpc-server's default port (tools/rpc/rpc-server.cpp)
RAY_PORT = 6379  # ray start --head's default GCS port


@record
class ClusterDevice:
    """One GPU of a cluster plan: where it is, and its memory as the engine counts it."""

    node: str
    host: str
    memory: DeviceMemory | EngineDevice  # llama.cpp's buffers (RPC) or vLLM's accounting (Ray)
    stage: int | None = None  # vLLM's pipeline stage
    layers: int | None = None  # the layers of that stage


def is_ipv6(host: str) -> bool:
    import ipaddress

    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address)
    except ValueError:
        return False


def endpoint(host: str, port: int) -> str:
    """host:port as Ray parses it: an IPv6 address in brackets ([fe80::1]:6379, Ray's build_address)."""
    return f"[{host}]:{port}" if is_ipv6(host) else f"{host}:{port}"


def _ipv4_only(cluster: Cluster) -> None:
    """llama.cpp's RPC client connects over IPv4 only (ggml-rpc transport.cpp: AF_INET sockets, gethostbyname;
    parse_endpoint splits at the first ':'), so an IPv6 address cannot be a worker."""
    for n in cluster.nodes[1:]:
        if is_ipv6(n.host):
            raise BadInput(f"node {printable(n.name, 60)}: {n.host} is an IPv6 address, and llama.cpp's RPC connects "
                           "over IPv4 only (ggml-rpc's transport); give the worker's IPv4 address or host name")


@record
class ClusterPlan:
    engine: str
    verdict: Verdict
    devices: tuple[ClusterDevice, ...]
    network: dict[str, Any]  # what crosses the network per token and what it costs
    performance: Performance | None
    commands: tuple[str, ...]
    reasons: tuple[str, ...]
    settings: dict[str, Any]


def _hardware(ids: list[str], catalog: Catalog) -> Hardware:
    return select_hardware(ids, None, catalog.hardware_dirs)


def rpc_plan(cluster: Cluster, resolved: ResolvedModel, quant: str, settings: RunSettings, prompt_tokens: int,
             traffic: Traffic, catalog: Catalog = BUILTIN) -> ClusterPlan:
    """llama-server on the head with every other node's GPUs as RPC devices (in front of the head's own)."""
    _ipv4_only(cluster)
    order = (*cluster.nodes[1:], cluster.nodes[0])  # the RPC devices first, then the head's own
    cards = [g for n in order for g in n.gpus]
    # one owner per llama.cpp device, as the placement counts them: a card that is several devices to software
    # (an MI250X: two) owns each of them
    owners = [n for n in order for g in n.gpus for _ in as_seen_by_software(g)]
    if len(owners) > MAX_GPUS:
        what = f"{len(cards)} GPUs" + ("" if len(owners) == len(cards) else
                                       f" ({len(owners)} devices to software: an MI250X is two)")
        raise BadInput(f"the cluster file's {what} on {len(cluster.nodes)} nodes: llama.cpp uses at most "
                       f"{MAX_GPUS} devices, its RPC servers' included (llama_max_devices()); list {MAX_GPUS} or "
                       "fewer, or plan it with --engine vllm")
    hw = _hardware([g.id for g in cards], catalog)
    r: LlamaCppResult = run_check(resolved, quant, settings, hw, prompt_tokens=prompt_tokens,
                                  output_tokens=traffic.output_tokens, request_rate=traffic.rate_per_s)
    est = r.detail.estimate
    crossings = _node_crossings(list(est.placement.layer_device), owners)
    net = cluster.network
    remote = frozenset(i for i, o in enumerate(owners) if o is not cluster.nodes[0])
    position = prompt_tokens + (traffic.output_tokens or 0) // 2
    exchange = rpc_traffic(resolved.spec, est, remote, position)
    at_prompt = rpc_traffic(resolved.spec, est, remote, prompt_tokens)
    perf = r.performance
    if perf is not None and perf.serving is not None:
        def over_network(at: int, x: RpcTraffic) -> Pipeline:
            p = llamacpp_pipeline(r.detail.plan, est, hw, at)
            return replace(p, handover_fixed_s=p.handover_fixed_s + x.seconds(net.latency_s, net.bytes_per_s, 0),
                           handover_s_per_seq=p.handover_s_per_seq + x.seconds(0.0, net.bytes_per_s))

        pipe = over_network(position, exchange)
        ubatches = -(-prompt_tokens // est.settings.ubatch)
        prefill_s = prompt_tokens / perf.prefill_tokens_per_s + ubatches * at_prompt.prefill_seconds(
            net.latency_s, net.bytes_per_s, min(prompt_tokens, est.settings.ubatch))
        prefill = prompt_tokens / prefill_s
        sv = serve(pipe, prefill, est.settings.n_parallel, prompt_tokens, traffic.output_tokens, traffic.rate_per_s,
                   perf.serving.n_parallel, perf.serving.max_concurrency)
        single = 1.0 / over_network(prompt_tokens, at_prompt).step_s(1)
        perf = replace(perf, decode_tokens_per_s=single, prefill_tokens_per_s=prefill,
                       ttft_s=prefill_s + 1.0 / single, serving=sv,
                       notes=(*perf.notes, f"{exchange.round_trips} network round trips per token (one per RPC "
                                           f"device), {(exchange.up_bytes + exchange.down_bytes) / 1024:,.0f} KiB "
                                           "per sequence"))
    devices = tuple(ClusterDevice(o.name, o.host, d) for o, d in zip(owners, est.devices, strict=True))
    workers = [f"ssh {shlex.quote(n.host)} ggml-rpc-server -H 0.0.0.0 -p {RPC_PORT}" for n in cluster.nodes[1:]]
    rpc = ",".join(f"{n.host}:{RPC_PORT}" for n in cluster.nodes[1:])
    server = r.command
    commands = (*workers, f"{server} --rpc {shlex.quote(rpc)}" if rpc else server)
    network = {"bandwidth_gbit": round(net.bytes_per_s * 8 / 1e9, 6), "latency_us": round(net.latency_s * 1e6, 3),
               "boundaries_crossing_network": crossings, "round_trips_per_token": exchange.round_trips,
               "bytes_per_token_per_sequence": exchange.up_bytes + exchange.down_bytes,
               "seconds_per_token": exchange.seconds(net.latency_s, net.bytes_per_s)}
    reasons = (*r.reasons, "workers run ggml-rpc-server from a llama.cpp build with -DGGML_RPC=ON (the "
               "head's llama-server needs it too); the GGUF stays on the head, which sends each RPC device its "
               "share of the weights at load")
    settings_doc = {"n_ctx": est.n_ctx, "n_parallel": est.settings.n_parallel,
                    "n_gpu_layers": r.detail.fit.n_gpu_layers}
    return ClusterPlan("llama.cpp", r.verdict, devices, network, perf, commands, reasons, settings_doc)


def _node_crossings(layer_device: list[int], owners: list[Node]) -> int:
    """Layer boundaries whose two devices sit in different nodes (CPU layers are on the head)."""
    def node(d: int) -> str:
        return owners[-1].host if d == CPU else owners[d].host

    return sum(1 for a, b in zip(layer_device, layer_device[1:], strict=False) if node(a) != node(b))


def _held(r: CheckResult[EnginePlan], spec: ModelSpec, tokens: int) -> int:
    """Requests of `tokens` one stage's KV pool holds at once (vLLM's concurrency at that length)."""
    from gemma_fit.engines.vllm_kv import kv_dtype_bytes, kv_plan

    x = r.detail.extras
    plan = kv_plan(spec, int(x["kv_cache_budget_bytes"]), max(1, tokens), int(x["block_size"]),
                   kv_dtype_bytes(str(x["kv_cache_dtype"]), r.quant), int(x["tensor_parallel_size"]),
                   int(x["max_num_batched_tokens"]), bool(x.get("hybrid_kv_cache", True)))
    return int(plan.concurrency)
