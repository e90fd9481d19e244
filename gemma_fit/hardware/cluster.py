"""A cluster: several machines (nodes) with their GPUs and the network between them, as plain data
(hardware.cluster_file reads it from a cluster file). The first node is the head: it runs llama-server (the others
run ggml-rpc-server) or the Ray head (the others join it)."""

from __future__ import annotations

import math

from gemma_fit.base.record import record
from gemma_fit.hardware.spec import GPUSpec

MAX_NODES = 64  # vLLM pipeline stages / llama.cpp RPC servers past any published deployment of one model


@record
class Network:
    bytes_per_s: float  # per direction (math.inf: an ideal network)
    latency_s: float  # one way

    def seconds(self, n_bytes: float) -> float:
        return self.latency_s + (n_bytes / self.bytes_per_s if math.isfinite(self.bytes_per_s) else 0.0)


IDEAL = Network(math.inf, 0.0)


@record
class Node:
    name: str
    host: str
    gpus: tuple[GPUSpec, ...]
    ram_bytes: int | None


@record
class Cluster:
    name: str
    nodes: tuple[Node, ...]
    network: Network

    @property
    def gpus(self) -> tuple[GPUSpec, ...]:
        return tuple(g for n in self.nodes for g in n.gpus)
