"""A cluster file: several machines (nodes) with their GPUs and the network between them.

    name: two 3090 boxes
    network: {bandwidth_gbit: 10, latency_us: 50}   # one link, one way: what iperf3 and ping (RTT / 2) measure
    nodes:
      - {name: head, host: 192.168.1.10, gpus: [rtx-3090, rtx-3090]}
      - {name: worker1, host: 192.168.1.11, gpus: [rtx-3090, rtx-3090]}

The network has no default: its speed is the user's to state, since it sets every cross-node term. Read with the
machine file's bounds (a regular file, its size, unique keys, alias expansion) and strictly: numbers are numbers
(`true` is not a bandwidth) inside base.ranges' limits, names are short text, hosts are host names or IP
addresses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path

from pydantic import Field, StrictFloat, StrictInt, ValidationError

from gemma_fit.base.errors import BadInput
from gemma_fit.base.ranges import check_range
from gemma_fit.base.text import printable
from gemma_fit.db.schema import StrictInput
from gemma_fit.hardware.cluster import MAX_NODES, Cluster, Network, Node
from gemma_fit.hardware.spec import GPUSpec

MAX_CLUSTER_BYTES = 256 * 1024  # a cluster file is a few lines per node
MAX_CLUSTER_NODES = 20_000  # YAML values after alias expansion
_HOST_NAME = r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*\.?$"


Number = StrictInt | StrictFloat


class NetworkEntry(StrictInput):
    bandwidth_gbit: Number  # per direction, Gbit/s (10 GbE: 10, InfiniBand NDR: 400)
    latency_us: Number  # one way, microseconds


class NodeEntry(StrictInput):
    name: str = Field(min_length=1, max_length=100)
    host: str = Field(min_length=1, max_length=253)
    gpus: list[str] = Field(min_length=1, max_length=16)
    ram_gb: Number | None = None


class ClusterFile(StrictInput):
    name: str = Field(default="cluster", max_length=200)
    network: NetworkEntry
    nodes: list[NodeEntry] = Field(min_length=1, max_length=MAX_NODES)


def is_cluster_file(data: object) -> bool:
    return isinstance(data, dict) and "nodes" in data


def _host(host: str, where: str) -> str:
    """A host name (RFC 1123) or an IPv4/IPv6 address; anything else (spaces, a port, a URL) is bad input."""
    import re

    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        zone = getattr(address, "scope_id", None)  # fe80::1%eth0: an interface name, which Python does not check
        if zone is not None and re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", zone) is None:
            raise BadInput(f"{where}: host {printable(host, 80)!r}: the zone after % must be an interface name or "
                           "number (fe80::1%eth0)")
        if address.is_unspecified or address.is_multicast or address == ipaddress.ip_address("255.255.255.255"):
            raise BadInput(f"{where}: host {printable(host, 80)!r} is no one machine's address (unspecified, "
                           "broadcast or multicast)")
        return str(address)
    if re.fullmatch(r"[0-9]+|.*\.[0-9]+\.?", host) or host.lower().startswith("0x"):
        # RFC 1123 2.1: a name's last label is not all digits; 1.2.3 or 167772162 are IPv4 in inet_aton's old forms
        raise BadInput(f"{where}: host {printable(host, 80)!r} is neither a host name nor a dotted IPv4 address "
                       "(a.b.c.d)")
    if re.fullmatch(_HOST_NAME, host) is None:
        raise BadInput(f"{where}: host {printable(host, 80)!r} is not a host name or an IP address (no port: the "
                       "plan chooses them)")
    return host


def _numbers(entry: ClusterFile, path: Path) -> None:
    check_range("bandwidth_gbit", entry.network.bandwidth_gbit, f"{path}: network.bandwidth_gbit")
    check_range("latency_us", entry.network.latency_us, f"{path}: network.latency_us")
    for i, n in enumerate(entry.nodes):
        if n.ram_gb is not None:
            check_range("ram_gb", n.ram_gb, f"{path}: nodes.{i}.ram_gb")


def parse_cluster(data: object, path: Path, gpu_of: Callable[[str], GPUSpec]) -> Cluster:
    """The cluster a file describes; BadInput names the first problem."""
    try:
        entry = ClusterFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadInput(f"{path}: {where}: {first['msg']}") from None
    _numbers(entry, path)
    hosts = [_host(n.host, f"{path}: nodes.{i}.host") for i, n in enumerate(entry.nodes)]
    seen: dict[str, int] = {}
    for i, host in enumerate(hosts):
        # DNS names ignore letter case and a trailing dot: "Node1", "node1" and "node1." are one machine
        j = seen.setdefault(host.lower().rstrip("."), i)
        if j != i:
            raise BadInput(f"{path}: nodes.{j} and nodes.{i} share a host ({printable(hosts[j], 80)!r} and "
                           f"{printable(host, 80)!r}); each node is one machine")
    nodes = tuple(Node(n.name, host, tuple(gpu_of(g) for g in n.gpus), round(n.ram_gb * 1e9) if n.ram_gb else None)
                  for n, host in zip(entry.nodes, hosts, strict=True))
    net = Network(entry.network.bandwidth_gbit * 1e9 / 8, entry.network.latency_us * 1e-6)
    return Cluster(entry.name, nodes, net)


def load_cluster(path: Path, extra_dirs: tuple[Path, ...] = ()) -> Cluster | None:
    """The cluster in `path`, or None when the file is a machine file (no `nodes:`)."""
    from gemma_fit.db.files import read_text, shown
    from gemma_fit.db.yaml_files import parse_yaml
    from gemma_fit.hardware.catalog import find_gpu_entry, spec_from_entry

    data, _ = parse_yaml(read_text(path, MAX_CLUSTER_BYTES), path, unique_keys=True, max_nodes=MAX_CLUSTER_NODES)
    if not is_cluster_file(data):
        return None
    return parse_cluster(data, Path(shown(path)), lambda g: spec_from_entry(find_gpu_entry(g, extra_dirs)))
