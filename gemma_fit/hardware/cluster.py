"""A cluster file: several machines (nodes) with their GPUs and the network between them.

    name: two 3090 boxes
    network: {bandwidth_gbit: 10, latency_us: 50}   # one link, one way: what iperf3 and ping (RTT / 2) measure
    nodes:
      - {name: head, host: 192.168.1.10, gpus: [rtx-3090, rtx-3090]}
      - {name: worker1, host: 192.168.1.11, gpus: [rtx-3090, rtx-3090]}

The first node is the head: it runs llama-server (the others run ggml-rpc-server) or the Ray head (the others
join it). The network has no default: its speed is the user's to state, since it sets every cross-node term.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gemma_fit.base.errors import BadInput
from gemma_fit.hardware.spec import GPUSpec

MAX_NODES = 64  # vLLM pipeline stages / llama.cpp RPC servers past any published deployment of one model


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NetworkEntry(_Strict):
    bandwidth_gbit: float = Field(gt=0, le=10_000)  # per direction, Gbit/s (10 GbE: 10, InfiniBand NDR: 400)
    latency_us: float = Field(ge=0, le=1_000_000)  # one way, microseconds


class NodeEntry(_Strict):
    name: str = Field(min_length=1, max_length=100)
    host: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9.\-:]*$")
    gpus: list[str] = Field(min_length=1, max_length=16)
    ram_gb: float | None = Field(default=None, gt=0, le=65536)


class ClusterFile(_Strict):
    name: str = Field(default="cluster", max_length=200)
    network: NetworkEntry
    nodes: list[NodeEntry] = Field(min_length=1, max_length=MAX_NODES)


@dataclass(frozen=True)
class Network:
    bytes_per_s: float  # per direction (math.inf: an ideal network)
    latency_s: float  # one way

    def seconds(self, n_bytes: float) -> float:
        return self.latency_s + (n_bytes / self.bytes_per_s if math.isfinite(self.bytes_per_s) else 0.0)


IDEAL = Network(math.inf, 0.0)


@dataclass(frozen=True)
class Node:
    name: str
    host: str
    gpus: tuple[GPUSpec, ...]
    ram_bytes: int | None


@dataclass(frozen=True)
class Cluster:
    name: str
    nodes: tuple[Node, ...]
    network: Network

    @property
    def gpus(self) -> tuple[GPUSpec, ...]:
        return tuple(g for n in self.nodes for g in n.gpus)


def is_cluster_file(data: object) -> bool:
    return isinstance(data, dict) and "nodes" in data


def parse_cluster(data: object, path: Path, gpu_of: Callable[[str], GPUSpec]) -> Cluster:
    """The cluster a file describes; BadInput names the first problem."""
    try:
        entry = ClusterFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadInput(f"{path}: {where}: {first['msg']}") from None
    if len({n.host for n in entry.nodes}) != len(entry.nodes):
        raise BadInput(f"{path}: two nodes share a host; each node is one machine")
    nodes = tuple(Node(n.name, n.host, tuple(gpu_of(g) for g in n.gpus),
                       round(n.ram_gb * 1e9) if n.ram_gb else None) for n in entry.nodes)
    net = Network(entry.network.bandwidth_gbit * 1e9 / 8, entry.network.latency_us * 1e-6)
    return Cluster(entry.name, nodes, net)


MAX_CLUSTER_BYTES = 256 * 1024  # a cluster file is a few lines per node
MAX_CLUSTER_NODES = 20_000  # YAML values after alias expansion


def load_cluster(path: Path, extra_dirs: tuple[Path, ...] = ()) -> Cluster | None:
    """The cluster in `path`, or None when the file is a machine file (no `nodes:`). Read with the machine file's
    bounds (regular file, size, unique keys, alias expansion)."""
    from gemma_fit.db.files import parse_yaml, read_text, shown
    from gemma_fit.hardware.catalog import find_gpu_entry, spec_from_entry

    data, _ = parse_yaml(read_text(path, MAX_CLUSTER_BYTES), path, unique_keys=True, max_nodes=MAX_CLUSTER_NODES)
    if not is_cluster_file(data):
        return None
    return parse_cluster(data, Path(shown(path)), lambda g: spec_from_entry(find_gpu_entry(g, extra_dirs)))
